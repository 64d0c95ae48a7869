/* The tracer's state and API: births and deaths of managed blocks, iterations, fork, exit. */
#include "log.h"
#include "tracer_internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct om_tracer_state st;
static int tracer_on;
/* Order: dump_lock, then lock, then the sysmem lock (fork takes all three). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned fork_gen = 1;
static __thread unsigned tls_gen;
static __thread uint32_t tls_tid;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* gettid is a system call: it is asked once per thread (and again after fork). */
static uint32_t current_tid(void)
{
    if (tls_gen != fork_gen) {
        tls_tid = (uint32_t)syscall(SYS_gettid);
        tls_gen = fork_gen;
    }
    return tls_tid;
}

static uint64_t token_of(uint32_t site, uint64_t size)
{
    uint64_t h = ((uint64_t)site << 40) ^ size;
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* ---- live blocks: open addressing with linear probing, deletion by backward shift ---- */

static uint64_t slot_of(uintptr_t ptr, uint64_t cap)
{
    return ((uint64_t)(ptr >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
}

static struct om_live *live_find(uintptr_t ptr)
{
    uint64_t i = slot_of(ptr, st.live_cap);
    for (;;) {
        struct om_live *e = &st.live[i];
        if (e->ptr == ptr)
            return e;
        if (e->ptr == 0)
            return NULL;
        i = (i + 1) & (st.live_cap - 1);
    }
}

static struct om_live *live_slot(struct om_live *table, uint64_t cap, uintptr_t ptr)
{
    uint64_t i = slot_of(ptr, cap);
    while (table[i].ptr != 0 && table[i].ptr != ptr)
        i = (i + 1) & (cap - 1);
    return &table[i];
}

static int live_grow(void)
{
    uint64_t cap = st.live_cap * 2;
    struct om_live *fresh = om_sys_map(cap * sizeof *fresh);
    if (!fresh)
        return -ENOMEM;
    for (uint64_t i = 0; i < st.live_cap; i++)
        if (st.live[i].ptr)
            *live_slot(fresh, cap, st.live[i].ptr) = st.live[i];
    om_sys_unmap(st.live, st.live_cap * sizeof *st.live);
    st.live = fresh;
    st.live_cap = cap;
    return 0;
}

static void live_remove(struct om_live *e)
{
    uint64_t mask = st.live_cap - 1, i = (uint64_t)(e - st.live), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (st.live[j].ptr == 0)
            break;
        uint64_t home = slot_of(st.live[j].ptr, st.live_cap);
        /* Move j back into the hole unless its home lies cyclically in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            st.live[i] = st.live[j];
            i = j;
        }
    }
    st.live[i].ptr = 0;
    st.live_used--;
}

/* ---- call-site totals and the live set at the peak ---- */

/* A site's live bytes at the peak are its current ones if it has not changed since; the
 * first change after a peak saves them, so keeping the peak's live set is O(1). */
static void site_change(struct om_site *s, int64_t bytes, int64_t blocks)
{
    if (s->mod_event <= st.peak_event && s->snap_for != st.peak_event + 1) {
        s->snap_bytes = s->live_bytes;
        s->snap_blocks = s->live_blocks;
        s->snap_for = st.peak_event + 1;
    }
    s->live_bytes += (uint64_t)bytes;
    s->live_blocks += (uint64_t)blocks;
    s->mod_event = st.events;
}

static void timeline_add(uint64_t seq, uint64_t live)
{
    struct om_timeline *t = &st.timeline;
    uint64_t idx = (seq - st.fork_seq) / t->width;
    while (idx >= OM_TIMELINE) {
        for (uint32_t k = 0; k < OM_TIMELINE / 2; k++) {
            uint64_t a = t->max[2 * k], b = t->max[2 * k + 1];
            t->max[k] = a > b ? a : b;
        }
        memset(t->max + OM_TIMELINE / 2, 0, sizeof t->max / 2);
        t->width *= 2;
        idx = (seq - st.fork_seq) / t->width;
    }
    if (live > t->max[idx])
        t->max[idx] = live;
    if (idx + 1 > t->used)
        t->used = (uint32_t)idx + 1;
}

/* ---- iterations ---- */

static void push_start(uint64_t seq)
{
    st.starts[st.nstarts % OM_STARTS] = seq;
    st.nstarts++;
}

static void on_period_start(void *ctx, uint64_t tag, int kind)
{
    if (kind == OM_START_LOCK) {
        while (st.nstarts && st.starts[(st.nstarts - 1) % OM_STARTS] >= tag)
            st.nstarts--;
        om_acct_restart(&st.acct, st.seq);
        st.lock_first = tag;
        st.lock_starts = 0;
        st.lock_period = 0;
    } else {
        st.lock_period = tag - st.starts[(st.nstarts - 1) % OM_STARTS];
    }
    push_start(tag);
    st.lock_starts++;
    if (tag == st.seq)
        st.start_now = 1;
    if (kind == OM_START_LIVE)
        om_acct_boundary(&st.acct, tag);
    else if (tag == st.seq)
        st.acct.partial = 0; /* the start found after the fact is this very request */
    /* Requests covered, not iterations: a run of equal requests at start-up locks a tiny
     * period for a few dozen "iterations" that the steady period outweighs at once. */
    uint64_t covered = tag + st.lock_period - st.lock_first;
    if (covered >= st.best_covered) {
        st.best_covered = covered;
        st.best_first = st.lock_first;
        st.best_starts = st.lock_starts;
        st.best_period = st.lock_period;
        st.best_acct = st.acct;
        st.first_steady_seq = st.lock_first;
        st.have_steady = 1;
    }
}

/* ---- the API ---- */

int om_tracer_init(const struct om_tracer_options *options)
{
    memset(&st, 0, sizeof st);
    st.min_bytes = options->min_bytes;
    st.stack_depth = options->stack_depth;
    st.warmup = options->warmup;
    st.mode_name = options->mode_name ? options->mode_name : "?";
    if (options->report_template) {
        size_t len = strlen(options->report_template);
        if (len >= sizeof st.report_template)
            return -ENAMETOOLONG;
        memcpy(st.report_template, options->report_template, len + 1);
    }
    st.t0_ns = mono_ns();
    st.pid = getpid();
    st.timeline.width = 1;
    st.live_cap = 1u << 12; /* grows by doubling: most programs keep few blocks live */
    st.live = om_sys_map(st.live_cap * sizeof *st.live);
    st.records = om_sys_map(OM_SAMPLE_RECORDS * sizeof *st.records);
    if (!st.live || !st.records || om_period_init(&st.det) != 0)
        return -ENOMEM;
    if (st.warmup)
        push_start(0); /* marked iterations: the first one begins with the program */
    om_stack_set_self((const void *)om_tracer_init);
    tracer_on = 1;
    om_debug("tracer: min_bytes %zu, stack depth %u, %s iterations", st.min_bytes, st.stack_depth,
             st.warmup ? "marked" : "detected");
    return 0;
}

int om_tracer_on_cycle_thread(void)
{
    return tracer_on && (st.warmup || current_tid() == st.threads.det_tid);
}

void om_tracer_set_serving(const struct om_serving_stats *stats)
{
    pthread_mutex_lock(&lock);
    st.serving = *stats;
    st.have_serving = 1;
    pthread_mutex_unlock(&lock);
}

void om_tracer_set_arena(const void *base, size_t size)
{
    pthread_mutex_lock(&lock);
    st.arena_base = (uintptr_t)base;
    st.arena_size = size;
    pthread_mutex_unlock(&lock);
}

void om_tracer_on_alloc(void *ptr, size_t size, size_t usable, size_t alignment,
                        const struct om_stack *stack, struct om_alloc_info *info)
{
    if (info)
        *info = (struct om_alloc_info){0};
    if (!tracer_on)
        return;
    uint64_t now = mono_ns() - st.t0_ns;
    uint32_t tid = current_tid();
    pthread_mutex_lock(&lock);
    struct om_site *site = om_sites_intern(&st.sites, stack);
    if (!site || (st.live_used + 1) * 2 > st.live_cap) {
        if (!site || live_grow() != 0) {
            pthread_mutex_unlock(&lock);
            return; /* out of memory: the block is simply not recorded */
        }
    }
    uint64_t seq = st.seq;
    if (st.warmup == 0) {
        if (om_threads_note(&st.threads, tid)) {
            om_debug("iterations are now detected on thread %u", st.threads.det_tid);
            om_period_reset(&st.det);
        }
        if (tid == st.threads.det_tid) {
            st.start_now = 0;
            om_period_push(&st.det, token_of(site->id, size), seq, on_period_start, NULL);
            if (info) {
                info->iteration_start = st.start_now;
                info->period = st.det.p;
            }
        }
    } else if (info && st.nmarks >= st.warmup) {
        info->iteration_start = st.marks[(st.nmarks - 1) % OM_MARKS] == seq;
        info->period = st.period_fixed;
    }
    if (info)
        info->seq = seq;
    st.seq++;
    st.events++;
    om_acct_birth(&st.acct, size);

    struct om_live *e = live_slot(st.live, st.live_cap, (uintptr_t)ptr);
    if (e->ptr == 0)
        st.live_used++;
    else /* a block we missed the free of: its memory is being handed out again */
        site_change(e->site, -(int64_t)e->size, -1);
    *e = (struct om_live){(uintptr_t)ptr,  size, usable, alignment, seq, now,
                          st.acct.iter_no, site, tid};

    site_change(site, (int64_t)size, 1);
    site->count++;
    site->total_bytes += size;
    if (size < site->min_size)
        site->min_size = size;
    if (size > site->max_size)
        site->max_size = size;
    st.live_bytes += size;
    st.live_blocks++;
    st.live_usable += usable;
    if (st.live_bytes > st.lower_bound) {
        st.lower_bound = st.live_bytes;
        st.lower_bound_seq = seq;
        st.peak_event = st.events;
    }
    if (st.live_usable > st.peak_usable)
        st.peak_usable = st.live_usable;

    struct om_record *r = &st.records[seq % OM_SAMPLE_RECORDS];
    *r = (struct om_record){seq,           size,           OM_NO_DEATH, now, 0,
                            st.live_bytes, (uintptr_t)ptr, site->id,    tid};
    timeline_add(seq, st.live_bytes);
    pthread_mutex_unlock(&lock);
}

int om_tracer_on_free(void *ptr)
{
    if (!tracer_on)
        return 0;
    uint64_t now = mono_ns() - st.t0_ns;
    pthread_mutex_lock(&lock);
    struct om_live *e = live_find((uintptr_t)ptr);
    if (!e) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    struct om_live b = *e;
    live_remove(e);
    st.events++;
    st.frees++;
    st.live_bytes -= b.size;
    st.live_blocks--;
    st.live_usable -= b.usable;
    int cat = om_acct_death(&st.acct, b.size, b.birth_iter);

    struct om_site *s = b.site;
    site_change(s, -(int64_t)b.size, -1);
    if (st.acct.iter_no > 0) /* before any iteration is known, a lifetime has no category */
        s->cat_bytes[cat] += b.size;
    uint64_t life = st.seq - b.birth_seq, life_ns = now - b.birth_ns;
    s->freed++;
    s->life_req_sum += life;
    s->life_ns_sum += life_ns;
    if (life < s->life_req_min)
        s->life_req_min = life;
    if (life > s->life_req_max)
        s->life_req_max = life;
    if (life_ns < s->life_ns_min)
        s->life_ns_min = life_ns;
    if (life_ns > s->life_ns_max)
        s->life_ns_max = life_ns;

    struct om_record *r = &st.records[b.birth_seq % OM_SAMPLE_RECORDS];
    if (r->birth_seq == b.birth_seq && st.seq - b.birth_seq <= OM_SAMPLE_RECORDS) {
        r->death_seq = st.seq;
        r->death_ns = now;
    }
    pthread_mutex_unlock(&lock);
    return 1;
}

size_t om_tracer_block_size(const void *ptr)
{
    if (!tracer_on)
        return 0;
    pthread_mutex_lock(&lock);
    struct om_live *e = live_find((uintptr_t)ptr);
    size_t size = e ? e->size : 0;
    pthread_mutex_unlock(&lock);
    return size;
}

void om_tracer_step(void)
{
    if (!tracer_on)
        return;
    pthread_mutex_lock(&lock);
    uint64_t prev = st.nmarks ? st.marks[(st.nmarks - 1) % OM_MARKS] : 0;
    st.marks[st.nmarks % OM_MARKS] = st.seq;
    st.nmarks++;
    if (st.warmup) {
        push_start(st.seq);
        om_acct_boundary(&st.acct, st.seq);
        if (st.nmarks == st.warmup) {
            st.period_fixed = st.seq - prev;
            st.first_steady_seq = st.seq;
            st.have_steady = 1;
        }
    }
    pthread_mutex_unlock(&lock);
}

int om_tracer_dump(const char *path)
{
    if (!tracer_on)
        return -ENOTSUP;
    char expanded[4096];
    const char *tmpl = path ? path : st.report_template;
    if (!*tmpl)
        return -EINVAL;
    pthread_mutex_lock(&dump_lock);
    /* %p is read now: after fork the child writes its own report. */
    int rc = om_path_expand(tmpl, (long)getpid(), om_env_rank(), expanded, sizeof expanded);
    if (rc == 0) {
        uint32_t n = __atomic_load_n(&st.sites.count, __ATOMIC_ACQUIRE);
        om_sites_symbolize(&st.sites, 0, n);
        pthread_mutex_lock(&lock);
        rc = om_report_write(&st, expanded);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_unlock(&dump_lock);
    if (rc != 0)
        om_warn("could not write the report %s: %s", expanded, strerror(-rc));
    else
        om_debug("report written to %s", expanded);
    return rc;
}

void om_tracer_atfork_prepare(void)
{
    if (!tracer_on)
        return;
    pthread_mutex_lock(&dump_lock);
    pthread_mutex_lock(&lock);
    om_sys_lock();
}

void om_tracer_atfork_parent(void)
{
    if (!tracer_on)
        return;
    om_sys_unlock();
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&dump_lock);
}

/* The child keeps the live blocks it inherited (it may free them) and the call sites,
 * and starts its own lifetimes, iterations and report. */
void om_tracer_atfork_child(void)
{
    if (!tracer_on)
        return;
    om_sys_reset_lock();
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&dump_lock, NULL);
    fork_gen++;
    st.pid = getpid();
    st.fork_seq = st.seq;
    st.frees = 0;
    st.lower_bound = st.live_bytes;
    st.lower_bound_seq = st.seq;
    st.peak_usable = st.live_usable;
    st.peak_event = st.events;
    memset(&st.timeline, 0, sizeof st.timeline);
    st.timeline.width = 1;
    for (uint32_t i = 0; i < st.sites.count; i++) {
        struct om_site *s = st.sites.by_id[i];
        s->count = s->total_bytes = s->freed = 0;
        s->life_req_sum = s->life_req_max = s->life_ns_sum = s->life_ns_max = 0;
        s->life_req_min = s->life_ns_min = s->min_size = UINT64_MAX;
        s->max_size = 0;
        memset(s->cat_bytes, 0, sizeof s->cat_bytes);
        s->mod_event = st.events;
    }
    struct om_iter_acct fresh = {.iter_no = st.acct.iter_no,
                                 .live_bytes = st.acct.live_bytes,
                                 .live_blocks = st.acct.live_blocks};
    st.acct = fresh;
    om_acct_restart(&st.acct, st.seq);
    if (st.warmup == 0)
        st.acct.iter_no = 0; /* no category before the child finds its own iterations */
    om_period_reset(&st.det);
    memset(&st.threads, 0, sizeof st.threads);
    st.nstarts = st.nmarks = 0;
    st.have_steady = 0;
    st.first_steady_seq = st.period_fixed = 0;
    st.lock_first = st.lock_starts = st.lock_period = 0;
    st.best_first = st.best_starts = st.best_period = st.best_covered = 0;
    if (st.warmup)
        push_start(st.seq);
}

int om_tracer_dump_in_signal(const struct om_serving_stats *serving)
{
    char expanded[4096];
    if (!tracer_on || !st.report_template[0] ||
        om_path_expand(st.report_template, (long)getpid(), om_env_rank(), expanded,
                       sizeof expanded) != 0)
        return -ENOTSUP;
    if (pthread_mutex_trylock(&dump_lock) != 0)
        return -EBUSY;
    int rc = -EBUSY;
    if (pthread_mutex_trylock(&lock) == 0) {
        if (serving) {
            st.serving = *serving;
            st.have_serving = 1;
        }
        rc = om_report_write(&st, expanded);
        pthread_mutex_unlock(&lock);
    }
    pthread_mutex_unlock(&dump_lock);
    return rc;
}

void om_tracer_at_exit(void)
{
    if (tracer_on && st.report_template[0])
        om_tracer_dump(NULL);
}
