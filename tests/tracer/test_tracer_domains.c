/* Unit tests of the tracer's memory domains: opening, separate records interleaved, marks,
 * fork, serving, the report's domain sections, a report's bounded holds of the lock, and
 * checkpoints that read no environment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tracer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int init_tracer(unsigned warmup)
{
    struct om_tracer_options opt = {.min_bytes = 4096,
                                    .stack_depth = 4,
                                    .warmup = warmup,
                                    .report_template = "",
                                    .mode_name = "trace"};
    return om_tracer_init(&opt);
}

static struct om_stack stack_of(unsigned site)
{
    struct om_stack s = {.depth = 2,
                         .frames = {(void *)(uintptr_t)(0x10000 + 16 * site), (void *)0x4242}};
    return s;
}

static uint64_t rnd_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* ---- opening ---- */

static void test_open_idempotent_and_bounded(void **state)
{
    assert_int_equal(om_tracer_domain_open("cuda:0"), -ENOTSUP); /* before init */
    assert_int_equal(init_tracer(0), 0);
    assert_int_equal(om_tracer_domain_open("cpu"), OM_TRACER_HOST);
    assert_int_equal(om_tracer_domain_open("cuda:0"), 1);
    assert_int_equal(om_tracer_domain_open("cuda:0"), 1);
    assert_string_equal(om_tracer_domain(1)->name, "cuda:0");
    assert_int_equal(om_tracer_domain_open("0123456789abcdef"), -EINVAL); /* 16 characters */
    assert_int_equal(om_tracer_domain_open(""), -EINVAL);
    assert_int_equal(om_tracer_domain_open(NULL), -EINVAL);
    assert_int_equal(om_tracer_domain_open("cuda 1"), -EINVAL);
    assert_int_equal(om_tracer_domain_open("cuda\n1"), -EINVAL);
    assert_int_equal(om_tracer_domain_open("0123456789abcde"), 2); /* 15: the longest */
    char name[16];
    for (unsigned i = 3; i < OM_TRACER_DOMAINS; i++) {
        snprintf(name, sizeof name, "cuda:%u", i);
        assert_int_equal(om_tracer_domain_open(name), (int)i);
    }
    /* All 17 are open: a new name has no room, an open one is still found. */
    assert_int_equal(om_tracer_domain_open("cuda:99"), -ENOSPC);
    assert_int_equal(om_tracer_domain_open("cuda:16"), 16);
    assert_int_equal(om_tracer_domain_open("cuda:0"), 1);
    assert_int_equal(om_tracer_domain_open("cpu"), 0);
    for (unsigned i = 0; i < OM_TRACER_DOMAINS; i++)
        assert_non_null(om_tracer_domain(i));
    assert_null(om_tracer_domain(OM_TRACER_DOMAINS));
}

/* Indices of domains that are not open are ignored, whatever the caller passes. */
static void test_closed_domain_ignored(void **state)
{
    assert_int_equal(init_tracer(0), 0);
    struct om_stack s = stack_of(1);
    struct om_alloc_info info = {.seq = 99};
    char block[16];
    for (unsigned d = 1; d <= OM_TRACER_DOMAINS; d += OM_TRACER_DOMAINS - 1) {
        om_tracer_on_alloc(d, block, 8192, 8192, 0, &s, &info);
        assert_int_equal(info.seq, 0);
        assert_int_equal(om_tracer_block_size(d, block), 0);
        assert_int_equal(om_tracer_on_free(d, block), 0);
        assert_false(om_tracer_on_cycle_thread(d));
        om_tracer_set_arena(d, block, sizeof block);
    }
    assert_int_equal(om_tracer_domain(OM_TRACER_HOST)->seq, 0);
    assert_null(om_tracer_domain(1));
}

/* ---- two domains recorded interleaved ---- */

/* A model of one domain's iteration: NSITES requests, freed in order after `hold`. */
struct stream {
    unsigned domain, nsites, site_base;
    size_t sizes[8];
    size_t slack; /* usable minus size */
    uintptr_t base;
    unsigned pos; /* requests made */
    /* The model. */
    uint64_t live, lower_bound, live_usable, peak_usable, frees;
    uintptr_t held[8];
    size_t held_size[8];
};

/* One step of a stream: frees the block of the same slot one iteration ago, then
 * allocates. Each iteration thus holds nsites blocks at most, a period of nsites. */
static void stream_step(struct stream *s, uint64_t *period)
{
    unsigned k = s->pos % s->nsites;
    if (s->held[k]) {
        assert_int_equal(om_tracer_block_size(s->domain, (void *)s->held[k]), s->held_size[k]);
        assert_int_equal(om_tracer_on_free(s->domain, (void *)s->held[k]), 1);
        s->live -= s->held_size[k];
        s->live_usable -= s->held_size[k] + s->slack;
        s->frees++;
    }
    uintptr_t p = s->base + 0x100000 * (uintptr_t)(s->pos % (2 * s->nsites));
    struct om_stack st = stack_of(s->site_base + k);
    struct om_alloc_info info;
    om_tracer_on_alloc(s->domain, (void *)p, s->sizes[k], s->sizes[k] + s->slack, 0, &st, &info);
    assert_int_equal(info.seq, s->pos);
    if (info.period)
        *period = info.period;
    s->held[k] = p;
    s->held_size[k] = s->sizes[k];
    s->live += s->sizes[k];
    s->live_usable += s->sizes[k] + s->slack;
    if (s->live > s->lower_bound)
        s->lower_bound = s->live;
    if (s->live_usable > s->peak_usable)
        s->peak_usable = s->live_usable;
    s->pos++;
}

static void test_two_domains_interleaved(void **state)
{
    assert_int_equal(init_tracer(0), 0);
    int dev = om_tracer_domain_open("cuda:0");
    assert_int_equal(dev, 1);
    /* The same addresses in both domains: a device pointer may equal a host one. */
    struct stream host = {.domain = OM_TRACER_HOST,
                          .nsites = 7,
                          .site_base = 0,
                          .sizes = {4096, 8192, 12288, 4096, 65536, 20480, 8192},
                          .slack = 16,
                          .base = 0x7f0000000000};
    struct stream gpu = {.domain = (unsigned)dev,
                         .nsites = 5,
                         .site_base = 3, /* sites 3..7: stacks the host uses too */
                         .sizes = {1 << 20, 2 << 20, 1 << 20, 512 << 10, 3 << 20},
                         .slack = 512,
                         .base = 0x7f0000000000};
    uint64_t host_period = 0, gpu_period = 0;
    /* Random interleaving: the merged stream has no period, each domain's has. */
    while (host.pos < 7 * 40 || gpu.pos < 5 * 40) {
        if (gpu.pos >= 5 * 40 || (host.pos < 7 * 40 && rnd() % 2))
            stream_step(&host, &host_period);
        else
            stream_step(&gpu, &gpu_period);
    }
    assert_int_equal(host_period, 7);
    assert_int_equal(gpu_period, 5);
    const struct om_domain *h = om_tracer_domain(OM_TRACER_HOST), *g = om_tracer_domain(1);
    const struct stream *want[2] = {&host, &gpu};
    const struct om_domain *got[2] = {h, g};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(got[i]->seq, want[i]->pos);
        assert_int_equal(got[i]->frees, want[i]->frees);
        assert_int_equal(got[i]->live_bytes, want[i]->live);
        assert_int_equal(got[i]->live_blocks, want[i]->nsites);
        assert_int_equal(got[i]->lower_bound, want[i]->lower_bound);
        assert_int_equal(got[i]->peak_usable, want[i]->peak_usable);
        assert_int_equal(got[i]->sites.count, want[i]->nsites);
        assert_true(got[i]->have_steady);
        assert_int_equal(got[i]->best_period, want[i]->nsites);
        assert_true(got[i]->nstarts >= 30);
        for (uint32_t k = 0; k < got[i]->sites.count; k++)
            assert_int_equal(got[i]->sites.by_id[k]->count, want[i]->pos / want[i]->nsites);
    }
    /* Shared stacks are separate sites in each domain, numbered from 0 in each. */
    assert_ptr_equal(g->sites.by_id[0]->frames[0], h->sites.by_id[3]->frames[0]);
    assert_int_equal(g->sites.by_id[0]->total_bytes, (gpu.pos / 5) * gpu.sizes[0]);
    /* A pointer live in one domain is not a block of the other. */
    uintptr_t only_gpu = 0;
    for (unsigned k = 0; k < 5; k++) {
        int in_host = 0;
        for (unsigned j = 0; j < 7; j++)
            in_host |= host.held[j] == gpu.held[k];
        if (!in_host)
            only_gpu = gpu.held[k];
    }
    assert_true(only_gpu != 0);
    /* Blocks at the same address in both domains keep their own sizes. */
    assert_int_equal(host.held[0], gpu.held[2]);
    assert_int_equal(om_tracer_block_size(OM_TRACER_HOST, (void *)host.held[0]), host.held_size[0]);
    assert_int_equal(om_tracer_block_size((unsigned)dev, (void *)gpu.held[2]), gpu.held_size[2]);
    assert_int_equal(om_tracer_block_size(OM_TRACER_HOST, (void *)only_gpu), 0);
    assert_int_equal(om_tracer_on_free(OM_TRACER_HOST, (void *)only_gpu), 0);
    assert_int_equal(g->live_blocks, 5);
    assert_true(om_tracer_on_cycle_thread(OM_TRACER_HOST));
    assert_true(om_tracer_on_cycle_thread((unsigned)dev));
}

/* optmem_step() marks an iteration in every open domain; each fixes its own period. */
static void test_step_marks_every_domain(void **state)
{
    assert_int_equal(init_tracer(2), 0);
    int dev = om_tracer_domain_open("cuda:0");
    assert_true(dev > 0);
    char a[4], b[4];
    struct om_stack s = stack_of(0);
    struct om_alloc_info info;
    for (int it = 0; it < 3; it++) {
        for (int k = 0; k < 3; k++) {
            om_tracer_on_alloc(OM_TRACER_HOST, a + k, 4096, 4096, 0, &s, &info);
            om_tracer_on_free(OM_TRACER_HOST, a + k);
        }
        om_tracer_on_alloc((unsigned)dev, b, 1 << 20, 1 << 20, 0, &s, &info);
        assert_int_equal(info.seq, 2 * (uint64_t)it);
        assert_int_equal(info.iteration_start, it == 2);
        assert_int_equal(info.period, it == 2 ? 2 : 0);
        om_tracer_on_alloc((unsigned)dev, b + 1, 1 << 20, 1 << 20, 0, &s, NULL);
        om_tracer_on_free((unsigned)dev, b);
        om_tracer_on_free((unsigned)dev, b + 1);
        if (it < 2)
            om_tracer_step();
    }
    const struct om_domain *h = om_tracer_domain(OM_TRACER_HOST), *g = om_tracer_domain(1);
    assert_int_equal(h->nmarks, 2);
    assert_int_equal(g->nmarks, 2);
    assert_int_equal(h->period_fixed, 3);
    assert_int_equal(g->period_fixed, 2);
    assert_int_equal(h->first_steady_seq, 6);
    assert_int_equal(g->first_steady_seq, 4);
    assert_true(h->have_steady && g->have_steady);
    assert_int_equal(g->acct.last_start, 2);
    assert_int_equal(g->acct.last_end, 4);
    assert_int_equal(g->acct.last_peak, 2 << 20);
    assert_int_equal(h->acct.last_peak, 4096);
    assert_true(om_tracer_on_cycle_thread((unsigned)dev)); /* marked: every thread */
}

/* A forked child starts its own record in every domain and keeps the blocks it inherited. */
static void test_fork_child_restarts_every_domain(void **state)
{
    assert_int_equal(init_tracer(0), 0);
    int dev = om_tracer_domain_open("cuda:0");
    char a[2], b[2];
    struct om_stack s = stack_of(0);
    om_tracer_on_alloc(OM_TRACER_HOST, a, 4096, 4096, 0, &s, NULL);
    om_tracer_on_alloc(OM_TRACER_HOST, a + 1, 4096, 4096, 0, &s, NULL);
    om_tracer_on_free(OM_TRACER_HOST, a + 1);
    om_tracer_on_alloc((unsigned)dev, b, 1 << 20, 1 << 20, 0, &s, NULL);
    om_tracer_atfork_prepare();
    om_tracer_atfork_child();
    const struct om_domain *h = om_tracer_domain(OM_TRACER_HOST), *g = om_tracer_domain(1);
    assert_int_equal(h->fork_seq, 2);
    assert_int_equal(g->fork_seq, 1);
    assert_int_equal(h->frees, 0);
    assert_int_equal(h->lower_bound, 4096);
    assert_int_equal(g->lower_bound, 1 << 20);
    assert_int_equal(g->sites.by_id[0]->count, 0);
    assert_int_equal(om_tracer_block_size((unsigned)dev, b), 1 << 20);
    assert_int_equal(om_tracer_on_free((unsigned)dev, b), 1);
    assert_int_equal(g->frees, 1);
    assert_int_equal(om_tracer_domain_open("cuda:0"), dev); /* the locks work again */
}

/* ---- the report ---- */

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_report_sections(void **state)
{
    assert_int_equal(init_tracer(0), 0);
    char path[] = "/tmp/optmem-domains-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char a[1];
    struct om_stack s = stack_of(0);
    om_tracer_on_alloc(OM_TRACER_HOST, a, 5000, 5008, 0, &s, NULL);
    assert_int_equal(om_tracer_dump(path), 0);
    char *r = read_all(path);
    assert_non_null(strstr(r, "\"domains\":[\"cpu\"],"));
    assert_non_null(strstr(r, "\"device_domains\":[]}"));

    int dev = om_tracer_domain_open("cuda:0");
    om_tracer_on_alloc((unsigned)dev, a, 3 << 20, 3 << 20, 0, &s, NULL);
    struct om_serving_stats gpu = {
        .serving_requests = 77, .retired_blocks = 5, .iteration_served = 9};
    om_tracer_set_serving((unsigned)dev, &gpu);
    assert_int_equal(om_tracer_dump(path), 0);
    r = read_all(path);
    assert_non_null(strstr(r, "\"domains\":[\"cpu\",\"cuda:0\"],"));
    assert_non_null(strstr(r, "\"device_domains\":[{\"name\":\"cuda:0\",\"counters\":{"
                              "\"managed_requests\":1,"));
    assert_non_null(strstr(r, "\"lower_bound_bytes\":3145728,"));
    /* The host's section has no serving (none was set); the device's has its own. */
    char *dd = strstr(r, "\"device_domains\"");
    char *serving = strstr(r, "\"serving\":{\"serving_requests\":77,");
    assert_non_null(serving);
    assert_true(serving > dd);
    assert_non_null(strstr(serving, "\"retired_blocks\":5,"));
    assert_non_null(strstr(serving, "\"iteration_served\":9,"));

    /* A checkpoint: written when a plan was made since the last one, not again without
     * news, and again once requests came and the interval passed. */
    struct om_tracer_options opt = {.min_bytes = 4096, .stack_depth = 4, .mode_name = "plan"};
    opt.report_template = path;
    assert_int_equal(om_tracer_init(&opt), 0);
    om_tracer_on_alloc(OM_TRACER_HOST, a, 5000, 5008, 0, &s, NULL);
    struct om_serving_stats host = {.serving_requests = 11, .plans = 1};
    om_tracer_set_serving(OM_TRACER_HOST, &host);
    unlink(path);
    assert_int_equal(om_tracer_checkpoint(UINT64_MAX), 0);
    r = read_all(path);
    assert_non_null(strstr(r, "\"serving\":{\"serving_requests\":11,"));
    assert_non_null(strstr(r, "\"managed_requests\":1,"));
    unlink(path);
    assert_int_equal(om_tracer_checkpoint(UINT64_MAX), 0);
    assert_int_equal(access(path, F_OK), -1);
    char b[1];
    om_tracer_on_alloc(OM_TRACER_HOST, b, 6000, 6000, 0, &s, NULL);
    assert_int_equal(om_tracer_checkpoint(UINT64_MAX), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(om_tracer_checkpoint(0), 0);
    r = read_all(path);
    assert_non_null(strstr(r, "\"managed_requests\":2,"));
    /* The report written at exit is the last: no checkpoint replaces it. */
    om_tracer_at_exit();
    unlink(path);
    om_tracer_on_alloc(OM_TRACER_HOST, a + 0, 7000, 7000, 0, &s, NULL);
    assert_int_equal(om_tracer_checkpoint(0), 0);
    assert_int_equal(access(path, F_OK), -1);
    unlink(path);
}

/* ---- a report is written outside the tracer's lock ---- */

struct dumper {
    const char *path;
    int rc, done;
};

static void *dump_thread(void *arg)
{
    struct dumper *d = arg;
    d->rc = om_tracer_dump(d->path);
    __atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *request_thread(void *arg)
{
    int *done = arg;
    struct om_stack s = stack_of(3);
    om_tracer_on_alloc(OM_TRACER_HOST, (void *)(uintptr_t)0x7000000, 5000, 5008, 0, &s, NULL);
    om_tracer_on_free(OM_TRACER_HOST, (void *)(uintptr_t)0x7000000);
    __atomic_store_n(done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* While a report is being written (into a pipe nobody reads yet, so its writer waits with
 * the report half written), requests are recorded: they do not wait for the report, which
 * shows the domains as they were when it began. */
static void test_report_written_outside_the_lock(void **state)
{
    assert_int_equal(init_tracer(0), 0);
    struct om_stack s = stack_of(2);
    enum { REQUESTS = 8000 }; /* a report of several pipes' worth */
    for (uintptr_t i = 0; i < REQUESTS; i++) {
        om_tracer_on_alloc(OM_TRACER_HOST, (void *)(0x1000000 + i * 8192), 5000, 5008, 0, &s, NULL);
        if (i % 2)
            om_tracer_on_free(OM_TRACER_HOST, (void *)(0x1000000 + (i - 1) * 8192));
    }
    char dir[] = "/tmp/optmem-fifo-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/report", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    int rd = open(path, O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    int cap = fcntl(rd, F_GETPIPE_SZ), queued = 0;
    struct dumper d = {path, -1, 0};
    pthread_t dumper, requester;
    assert_int_equal(pthread_create(&dumper, NULL, dump_thread, &d), 0);
    for (int t = 0; t < 10000 && queued < cap; t += 10) { /* the pipe fills: the writer waits */
        sleep_ms(10);
        assert_int_equal(ioctl(rd, FIONREAD, &queued), 0);
    }
    int requested = 0;
    assert_int_equal(pthread_create(&requester, NULL, request_thread, &requested), 0);
    for (int t = 0; t < 5000 && !__atomic_load_n(&requested, __ATOMIC_ACQUIRE); t += 10)
        sleep_ms(10);
    int recorded_meanwhile = __atomic_load_n(&requested, __ATOMIC_ACQUIRE);
    int written_already = __atomic_load_n(&d.done, __ATOMIC_ACQUIRE);
    /* Whatever happened, the report is read to its end, and both threads end. */
    assert_int_equal(fcntl(rd, F_SETFL, 0), 0);
    size_t cap_all = 16 << 20, len = 0;
    char *all = malloc(cap_all);
    assert_non_null(all);
    for (ssize_t n; (n = read(rd, all + len, cap_all - 1 - len)) > 0;)
        len += (size_t)n;
    all[len] = '\0';
    pthread_join(dumper, NULL);
    pthread_join(requester, NULL);
    close(rd);
    unlink(path);
    rmdir(dir);
    assert_true(queued >= cap);      /* the writer did wait on the pipe */
    assert_false(written_already);   /* ... while the request came */
    assert_true(recorded_meanwhile); /* which it did not hold up */
    assert_int_equal(d.rc, 0);
    char want[64];
    snprintf(want, sizeof want, "\"managed_requests\":%d,", REQUESTS); /* not REQUESTS + 1 */
    assert_non_null(strstr(all, want));
    assert_non_null(strstr(all, "\"device_domains\":[]}\n"));
    free(all);
}

/* A report copies a site's counters only when they changed since the last copy: what it
 * writes is the same as a full copy, and a record started anew is copied in full. */
static void test_report_copies_changed_sites(void **state)
{
    (void)state;
    assert_int_equal(init_tracer(0), 0);
    char path[] = "/tmp/optmem-domains-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char a[3];
    struct om_stack sa = stack_of(1), sb = stack_of(2);
    om_tracer_on_alloc(OM_TRACER_HOST, &a[0], 5000, 5000, 0, &sa, NULL);
    om_tracer_on_alloc(OM_TRACER_HOST, &a[1], 6000, 6000, 0, &sb, NULL);
    assert_int_equal(om_tracer_dump(path), 0);
    char *r = read_all(path);
    assert_non_null(strstr(r, "\"count\":1,\"total_bytes\":5000,"));
    assert_non_null(strstr(r, "\"count\":1,\"total_bytes\":6000,"));
    om_tracer_on_alloc(OM_TRACER_HOST, &a[2], 8000, 8000, 0, &sa, NULL);
    om_tracer_on_free(OM_TRACER_HOST, &a[1]);
    assert_int_equal(om_tracer_dump(path), 0);
    r = read_all(path);
    assert_non_null(strstr(r, "\"count\":2,\"total_bytes\":13000,\"min_size\":5000,"
                              "\"max_size\":8000,\"live_blocks\":2,\"live_bytes\":13000,"));
    assert_non_null(strstr(r, "\"count\":1,\"total_bytes\":6000,\"min_size\":6000,"
                              "\"max_size\":6000,\"live_blocks\":0,\"live_bytes\":0,\"freed\":1,"));
    /* A new record: its first site is another stack, and nothing of the old one shows. */
    assert_int_equal(init_tracer(0), 0);
    om_tracer_on_alloc(OM_TRACER_HOST, &a[0], 7000, 7000, 0, &sb, NULL);
    assert_int_equal(om_tracer_dump(path), 0);
    r = read_all(path);
    assert_non_null(strstr(r, "\"count\":1,\"total_bytes\":7000,"));
    assert_null(strstr(r, "\"total_bytes\":13000,"));
    unlink(path);
}

/* A report holds the tracer's lock a bounded piece at a time, however many call sites it
 * folds, moves and copies: a thread that needs the lock meanwhile waits for one piece. Many
 * sites seen once, long ago, are folded (into one fold: they share their innermost frames)
 * in slices; the records still named, more than a slice of them, are moved in slices; and
 * the report still counts every request. */
static void test_report_holds_bounded(void **state)
{
    (void)state;
    assert_int_equal(init_tracer(0), 0);
    enum { SITES = 20000, KEPT_EVERY = 32, KEPT = SITES / KEPT_EVERY }; /* a report under 1 MiB */
    struct om_stack s = {.depth = 10};
    for (unsigned k = 0; k < 8; k++)
        s.frames[k] = (void *)(uintptr_t)(0x20000 + 16 * k);
    char *base = (char *)(uintptr_t)0x10000000;
    uint64_t requests = 0;
    for (unsigned i = 0; i < SITES; i++) {
        s.frames[8] = (void *)(uintptr_t)(0x900000 + 16 * i);
        s.frames[9] = (void *)(uintptr_t)(0xa00000 + 16 * i);
        int times = i % KEPT_EVERY == 0 ? 2 : 1;
        for (int t = 0; t < times; t++, requests++) {
            om_tracer_on_alloc(OM_TRACER_HOST, base, 5000, 5000, 0, &s, NULL);
            om_tracer_on_free(OM_TRACER_HOST, base);
        }
    }
    /* A sample's worth of requests later, the sites seen once are foldable. */
    struct om_stack loop = stack_of(7);
    for (unsigned i = 0; i < OM_SAMPLE_RECORDS + 16; i++, requests++) {
        om_tracer_on_alloc(OM_TRACER_HOST, base, 4096, 4096, 0, &loop, NULL);
        om_tracer_on_free(OM_TRACER_HOST, base);
    }
    char path[] = "/tmp/optmem-holds-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(om_tracer_dump(path), 0);
    struct om_dump_holds h;
    om_tracer_dump_holds(&h);
    assert_true(h.most_folded > 0 && h.most_folded <= OM_FOLD_SLICE);
    assert_true(h.most_examined <= OM_FOLD_EXAMINE);
    assert_true(h.most_moved > 0 && h.most_moved <= OM_MOVE_SLICE);
    assert_int_equal(h.most_recopied, 0); /* nothing changed between the move's holds */
    assert_true(h.most_precopied > 0 && h.most_precopied <= OM_PRECOPY_SLICE);
    assert_true(h.holds >= (SITES - KEPT) / OM_FOLD_SLICE + KEPT / OM_MOVE_SLICE);
    const struct om_domain *d = om_tracer_domain(OM_TRACER_HOST);
    assert_int_equal(d->sites.moves, 1);
    for (uint32_t i = 0; i < d->sites.count; i++) /* every id names a record that was moved */
        assert_true(d->sites.by_id[d->sites.by_id[i]->id] == d->sites.by_id[i]);
    char *r = read_all(path);
    char want[64];
    snprintf(want, sizeof want, "\"managed_requests\":%llu,", (unsigned long long)requests);
    assert_non_null(strstr(r, want));
    snprintf(want, sizeof want, "\"count\":%d,\"total_bytes\":%llu,", SITES - KEPT,
             (unsigned long long)(SITES - KEPT) * 5000);
    assert_non_null(strstr(r, want));
    snprintf(want, sizeof want, "\"folded\":%d", SITES - KEPT);
    assert_non_null(strstr(r, want));
    assert_non_null(strstr(r, "\"count\":2,\"total_bytes\":10000,"));
    /* A second report finds nothing more to fold or move, and copies again only the fold
     * (folding stamps no record: a fold is copied at every report). */
    assert_int_equal(om_tracer_dump(path), 0);
    om_tracer_dump_holds(&h);
    assert_int_equal(h.most_folded, 0);
    assert_int_equal(h.most_moved, 0);
    assert_int_equal(h.most_precopied, 1);
    unlink(path);
}

/* ---- the environment is read on the program's threads only ---- */

static unsigned getenv_calls;
char *__real_getenv(const char *name);
char *__wrap_getenv(const char *name);
char *__wrap_getenv(const char *name)
{
    getenv_calls++;
    return __real_getenv(name);
}

/* A checkpoint runs on the optmem-report thread, where getenv while the program adds a
 * variable (setenv frees the array it moves) reads freed memory: the checkpoint reads no
 * variable and shows the rank that a request of the program's read since the last poll. */
static void test_checkpoint_reads_no_environment(void **state)
{
    (void)state;
    char dir[] = "/tmp/optmem-rank-XXXXXX", tmpl[64], path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(tmpl, sizeof tmpl, "%s/r.%%r.json", dir);
    setenv("RANK", "3", 1);
    struct om_tracer_options opt = {
        .min_bytes = 4096, .stack_depth = 4, .mode_name = "plan", .report_template = tmpl};
    assert_int_equal(om_tracer_init(&opt), 0);
    struct om_stack s = stack_of(1);
    char a[2];
    om_tracer_on_alloc(OM_TRACER_HOST, &a[0], 5000, 5000, 0, &s, NULL);
    setenv("RANK", "5", 1);
    getenv_calls = 0;
    assert_int_equal(om_tracer_checkpoint(0), 0);
    assert_int_equal(getenv_calls, 0);
    snprintf(path, sizeof path, "%s/r.3.json", dir);
    assert_non_null(strstr(read_all(path), "\"rank\":3,"));
    assert_int_equal(unlink(path), 0);
    /* The program's next request reads the rank once; the next checkpoint shows it. */
    om_tracer_rank_poll();
    om_tracer_rank_poll();
    assert_int_equal(getenv_calls, 1);
    om_tracer_on_alloc(OM_TRACER_HOST, &a[1], 6000, 6000, 0, &s, NULL);
    assert_int_equal(om_tracer_checkpoint(0), 0);
    assert_int_equal(getenv_calls, 1);
    snprintf(path, sizeof path, "%s/r.5.json", dir);
    assert_non_null(strstr(read_all(path), "\"rank\":5,"));
    assert_int_equal(unlink(path), 0);
    unsetenv("RANK");
    assert_int_equal(rmdir(dir), 0);
}

/* ---- the served path's log ---- */

static void *births_thread(void *arg)
{
    unsigned n = *(const unsigned *)arg;
    struct om_stack s = stack_of(7);
    for (unsigned i = 0; i < n; i++) {
        void *p = (void *)(uintptr_t)(0x40000000 + 4096 * (uintptr_t)i);
        om_tracer_on_alloc(OM_TRACER_HOST, p, 4096, 4096, 16, &s, NULL);
        om_tracer_on_free(OM_TRACER_HOST, p);
    }
    return NULL;
}

/* Logged requests and frees are recorded in their order among those recorded at once, and a
 * logged request that changes the detector's thread is recorded at once, so that the next
 * call sees the change. */
static void test_log_in_order(void **state)
{
    (void)state;
    assert_int_equal(init_tracer(0), 0);
    struct om_stack a = stack_of(1), b = stack_of(2);
    struct om_alloc_info info;
    om_tracer_on_alloc(OM_TRACER_HOST, (void *)0x100000, 8192, 8192, 16, &a, &info);
    uint32_t site = info.site;
    assert_true(site != 0);
    assert_true(om_tracer_on_cycle_thread(OM_TRACER_HOST));

    om_tracer_log_alloc(OM_TRACER_HOST, (void *)0x200000, 4096, 4096, 64, site, &info);
    assert_true(info.deferred);
    assert_int_equal(info.site, site);
    om_tracer_on_alloc(OM_TRACER_HOST, (void *)0x300000, 4096, 4096, 16, &b, NULL);
    om_tracer_log_free(OM_TRACER_HOST, (void *)0x200000);
    const struct om_domain *d = om_tracer_domain(OM_TRACER_HOST);
    assert_int_equal(d->seq, 3);
    assert_int_equal(d->frees, 1);
    assert_int_equal(d->live_blocks, 2);
    const struct om_site *s = d->sites.by_id[site - 1];
    assert_int_equal(s->count, 2);
    assert_int_equal(s->freed, 1);
    assert_int_equal(s->life_req_max, 2); /* born at 1, freed after the request at 2 */

    /* Another thread makes the domain's births up to one short of the thread test; the
     * main thread's next is that test's, and finds the other thread busier. */
    unsigned n = OM_THREADS_CHECK - 4;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, births_thread, &n), 0);
    pthread_join(t, NULL);
    assert_true(om_tracer_on_cycle_thread(OM_TRACER_HOST));
    om_tracer_log_alloc(OM_TRACER_HOST, (void *)0x400000, 4096, 4096, 16, site, &info);
    assert_false(info.deferred);
    assert_false(om_tracer_on_cycle_thread(OM_TRACER_HOST));

    /* More than a log's entries: recorded when it fills, none lost. */
    for (unsigned i = 0; i < 3 * OM_LOG_ENTRIES; i++) {
        void *p = (void *)(uintptr_t)(0x80000000 + 4096 * (uintptr_t)i);
        om_tracer_log_alloc(OM_TRACER_HOST, p, 4096, 4096, 16, site, &info);
        assert_true(info.deferred);
        om_tracer_log_free(OM_TRACER_HOST, p);
    }
    d = om_tracer_domain(OM_TRACER_HOST);
    assert_int_equal(d->seq, OM_THREADS_CHECK + 3 * OM_LOG_ENTRIES);
    assert_int_equal(d->frees, 1 + n + 3 * OM_LOG_ENTRIES);
    assert_int_equal(d->live_blocks, 3);
    assert_int_equal(d->sites.by_id[site - 1]->count, 3 + 3 * OM_LOG_ENTRIES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_idempotent_and_bounded),
        cmocka_unit_test(test_closed_domain_ignored),
        cmocka_unit_test(test_two_domains_interleaved),
        cmocka_unit_test(test_step_marks_every_domain),
        cmocka_unit_test(test_fork_child_restarts_every_domain),
        cmocka_unit_test(test_report_sections),
        cmocka_unit_test(test_report_written_outside_the_lock),
        cmocka_unit_test(test_report_copies_changed_sites),
        cmocka_unit_test(test_report_holds_bounded),
        cmocka_unit_test(test_checkpoint_reads_no_environment),
        cmocka_unit_test(test_log_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
