/* The tracer's state and API: births and deaths of managed blocks per memory domain,
 * iterations, fork, exit. */
#include "log.h"
#include "tracer_internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct om_tracer_config cfg;
/* Domains are mapped when opened and never unmapped: a pointer read once stays valid, so
 * the API finds a domain without the lock (the lock then guards its contents). */
static struct om_domain *doms[OM_TRACER_DOMAINS];
static unsigned ndoms;
static int tracer_on;
/* Order: dump_lock, then lock, then the sysmem lock (fork takes all three). */
static struct om_lock lock;
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned fork_gen = 1;
/* Set by the report written at exit: no checkpoint replaces it afterwards. */
static int report_final;
static struct om_claim claim;
/* What the last checkpoint (or report) saw: activity since, and the time it was written. */
static uint64_t ckpt_events, ckpt_plans, ckpt_ns;
/* The rank (RANK, else LOCAL_RANK) of reports and their paths. The environment is read on the
 * program's threads only: getenv on the optmem-report thread while a program thread adds a
 * variable (setenv moves the array and frees the old one) reads freed memory. A checkpoint
 * shows the rank that the program's first managed request after the last poll read; a
 * report at exit or on request reads it itself. */
static long env_rank;
int om_tracer_rank_wanted;
static __thread unsigned tls_gen;
static __thread uint32_t tls_tid;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* gettid is a system call: it is asked once per thread (and again after fork), out of line
 * so that the callers on every request keep no registers for it. */
__attribute__((noinline)) static uint32_t ask_tid(void)
{
    tls_tid = (uint32_t)syscall(SYS_gettid);
    tls_gen = fork_gen;
    return tls_tid;
}

static uint32_t current_tid(void)
{
    return tls_gen == fork_gen ? tls_tid : ask_tid();
}

/* Whose requests a domain's iterations are found in. A device orders work by its streams,
 * not by the CPU thread that asks for memory: PyTorch makes a step's forward requests on
 * the main thread and its backward's on the autograd engine's thread for the device, one
 * after the other. A device domain's requests are therefore one sequence, whichever
 * thread makes them (OM_ALL_THREADS); the host's follow the busiest thread, since helper
 * threads interleave their requests with the loop's differently every time. */
static uint32_t sequence_of(unsigned domain)
{
    return domain == OM_TRACER_HOST ? current_tid() : OM_ALL_THREADS;
}

/* A request's token: its call site's stack (the hash of it, not the site's id, which changes
 * when a site is folded and its stack seen again) and its size. */
static uint64_t token_of(uint64_t site_hash, uint64_t size)
{
    uint64_t h = site_hash ^ (size * 0xc4ceb9fe1a85ec53ull);
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static struct om_domain *domain_at(unsigned domain)
{
    if (!tracer_on || domain >= OM_TRACER_DOMAINS)
        return NULL;
    return __atomic_load_n(&doms[domain], __ATOMIC_ACQUIRE);
}

/* ---- live blocks: open addressing with linear probing, deletion by backward shift ---- */

static uint64_t slot_of(uintptr_t ptr, uint64_t cap)
{
    return ((uint64_t)(ptr >> 4) * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
}

static struct om_live *live_find(struct om_domain *d, uintptr_t ptr)
{
    uint64_t i = slot_of(ptr, d->live_cap);
    for (;;) {
        struct om_live *e = &d->live[i];
        if (e->ptr == ptr)
            return e;
        if (e->ptr == 0)
            return NULL;
        i = (i + 1) & (d->live_cap - 1);
    }
}

static struct om_live *live_slot(struct om_live *table, uint64_t cap, uintptr_t ptr)
{
    uint64_t i = slot_of(ptr, cap);
    while (table[i].ptr != 0 && table[i].ptr != ptr)
        i = (i + 1) & (cap - 1);
    return &table[i];
}

static int live_grow(struct om_domain *d)
{
    uint64_t cap = d->live_cap * 2;
    struct om_live *fresh = om_sys_map(cap * sizeof *fresh);
    if (!fresh)
        return -ENOMEM;
    for (uint64_t i = 0; i < d->live_cap; i++)
        if (d->live[i].ptr)
            *live_slot(fresh, cap, d->live[i].ptr) = d->live[i];
    om_sys_unmap(d->live, d->live_cap * sizeof *d->live);
    d->live = fresh;
    d->live_cap = cap;
    return 0;
}

static void live_remove(struct om_domain *d, struct om_live *e)
{
    uint64_t mask = d->live_cap - 1, i = (uint64_t)(e - d->live), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (d->live[j].ptr == 0)
            break;
        uint64_t home = slot_of(d->live[j].ptr, d->live_cap);
        /* Move j back into the hole unless its home lies cyclically in (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            d->live[i] = d->live[j];
            i = j;
        }
    }
    d->live[i].ptr = 0;
    d->live_used--;
}

/* ---- call-site totals and the live set at the peak ---- */

/* A site's live bytes at the peak are its current ones if it has not changed since; the
 * first change after a peak saves them, so keeping the peak's live set is O(1). */
static void site_change(struct om_domain *d, struct om_site *s, int64_t bytes, int64_t blocks)
{
    if (s->mod_event <= d->peak_event && s->snap_for != d->peak_event + 1) {
        s->snap_bytes = s->live_bytes;
        s->snap_blocks = s->live_blocks;
        s->snap_for = d->peak_event + 1;
    }
    s->live_bytes += (uint64_t)bytes;
    s->live_blocks += (uint64_t)blocks;
    s->mod_event = d->events;
}

static void timeline_add(struct om_domain *d, uint64_t seq, uint64_t live)
{
    struct om_timeline *t = &d->timeline;
    uint64_t idx = (seq - d->fork_seq) / t->width;
    while (idx >= OM_TIMELINE) {
        for (uint32_t k = 0; k < OM_TIMELINE / 2; k++) {
            uint64_t a = t->max[2 * k], b = t->max[2 * k + 1];
            t->max[k] = a > b ? a : b;
        }
        memset(t->max + OM_TIMELINE / 2, 0, sizeof t->max / 2);
        t->width *= 2;
        idx = (seq - d->fork_seq) / t->width;
    }
    if (live > t->max[idx])
        t->max[idx] = live;
    if (idx + 1 > t->used)
        t->used = (uint32_t)idx + 1;
}

/* ---- iterations ---- */

static void push_start(struct om_domain *d, uint64_t seq)
{
    d->starts[d->nstarts % OM_STARTS] = seq;
    d->nstarts++;
}

static void on_period_start(void *ctx, uint64_t tag, int kind)
{
    struct om_domain *d = ctx;
    if (kind == OM_START_LOCK) {
        while (d->nstarts && d->starts[(d->nstarts - 1) % OM_STARTS] >= tag)
            d->nstarts--;
        om_acct_restart(&d->acct, d->seq);
        d->lock_first = tag;
        d->lock_starts = 0;
        d->lock_period = 0;
    } else {
        d->lock_period = tag - d->starts[(d->nstarts - 1) % OM_STARTS];
    }
    push_start(d, tag);
    d->lock_starts++;
    if (tag == d->seq)
        d->start_now = 1;
    if (kind == OM_START_LIVE)
        om_acct_boundary(&d->acct, tag);
    else if (tag == d->seq)
        d->acct.partial = 0; /* the start found after the fact is this very request */
    /* Requests covered, not iterations: a run of equal requests at start-up locks a tiny
     * period for a few dozen "iterations" that the steady period outweighs at once. */
    uint64_t covered = tag + d->lock_period - d->lock_first;
    if (covered >= d->best_covered) {
        d->best_covered = covered;
        d->best_first = d->lock_first;
        d->best_starts = d->lock_starts;
        d->best_period = d->lock_period;
        d->best_acct = d->acct;
        d->first_steady_seq = d->lock_first;
        d->have_steady = 1;
    }
}

/* A forked child's record restarts from its parent's request count: it keeps the live
 * blocks it inherited (it may free them) and the call sites. */
static void domain_restart(struct om_domain *d)
{
    d->fork_seq = d->seq;
    d->frees = 0;
    d->lower_bound = d->live_bytes;
    d->lower_bound_seq = d->seq;
    d->peak_usable = d->live_usable;
    d->peak_event = d->events;
    memset(&d->timeline, 0, sizeof d->timeline);
    d->timeline.width = 1;
    for (uint32_t i = 0; i < d->sites.count; i++) {
        struct om_site *s = d->sites.by_id[i];
        s->count = s->total_bytes = s->freed = 0;
        s->nfolded = 0; /* a fold of the parent's holds nothing of the child's */
        s->life_req_sum = s->life_req_max = s->life_ns_sum = s->life_ns_max = 0;
        s->life_req_min = s->life_ns_min = s->min_size = UINT64_MAX;
        s->max_size = 0;
        memset(s->cat_bytes, 0, sizeof s->cat_bytes);
        s->mod_event = d->events;
    }
    struct om_iter_acct fresh = {.iter_no = d->acct.iter_no,
                                 .live_bytes = d->acct.live_bytes,
                                 .live_blocks = d->acct.live_blocks};
    d->acct = fresh;
    om_acct_restart(&d->acct, d->seq);
    if (cfg.warmup == 0)
        d->acct.iter_no = 0; /* no category before the child finds its own iterations */
    om_period_reset(&d->det);
    memset(&d->threads, 0, sizeof d->threads);
    d->log.word &= ~0xffffffffull; /* the log is empty: recorded before the fork */
    d->nstarts = d->nmarks = 0;
    d->have_steady = 0;
    d->first_steady_seq = d->period_fixed = 0;
    d->lock_first = d->lock_starts = d->lock_period = 0;
    d->best_first = d->best_starts = d->best_period = d->best_covered = 0;
    if (cfg.warmup)
        push_start(d, d->seq);
}

static void domain_unmap(struct om_domain *d)
{
    om_period_unmap(&d->det);
    om_sys_unmap(d->records, OM_SAMPLE_RECORDS * sizeof *d->records);
    om_sys_unmap(d->old_deaths, OM_OLD_DEATHS * sizeof *d->old_deaths);
    om_sys_unmap(d->live, d->live_cap * sizeof *d->live);
    om_sys_unmap(d->log.entries, OM_LOG_ENTRIES * sizeof *d->log.entries);
    om_sys_unmap(d, sizeof *d);
}

static int domain_new(const char *name, size_t len, struct om_domain **out)
{
    struct om_domain *d = om_sys_map(sizeof *d);
    if (!d)
        return -ENOMEM;
    memcpy(d->name, name, len);
    d->name[len] = '\0';
    d->live_cap = 1u << 8; /* grows by doubling: most programs keep few blocks live */
    d->live = om_sys_map(d->live_cap * sizeof *d->live);
    d->records = om_sys_map(OM_SAMPLE_RECORDS * sizeof *d->records);
    d->old_deaths = om_sys_map(OM_OLD_DEATHS * sizeof *d->old_deaths);
    d->log.entries = om_sys_map(OM_LOG_ENTRIES * sizeof *d->log.entries);
    d->log.limit = OM_LOG_ENTRIES;
    int rc = om_period_init(&d->det);
    if (!d->live || !d->records || !d->old_deaths || !d->log.entries || rc != 0)
        goto fail;
    d->timeline.width = 1;
    if (cfg.warmup)
        push_start(d, 0); /* marked iterations: the first one begins with the domain */
    *out = d;
    return 0;
fail:
    domain_unmap(d);
    return -ENOMEM;
}

/* A name is written into the report and given to `optmem report --domain`: printable
 * ASCII without spaces, so that it needs no quoting anywhere. */
static int name_check(const char *name, size_t *len)
{
    if (!name)
        return -EINVAL;
    size_t n = strnlen(name, OM_DOMAIN_NAME);
    if (n == 0 || n >= OM_DOMAIN_NAME)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] <= 0x20 || (unsigned char)name[i] >= 0x7f)
            return -EINVAL;
    *len = n;
    return 0;
}

/* ---- the API ---- */

void om_tracer_rank_refresh(void)
{
    __atomic_store_n(&om_tracer_rank_wanted, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&env_rank, om_env_rank(), __ATOMIC_RELAXED);
}

int om_tracer_init(const struct om_tracer_options *options)
{
    memset(&cfg, 0, sizeof cfg);
    cfg.min_bytes = options->min_bytes;
    cfg.stack_depth = options->stack_depth;
    cfg.warmup = options->warmup;
    cfg.mode_name = options->mode_name ? options->mode_name : "?";
    if (options->report_template) {
        size_t len = strlen(options->report_template);
        if (len >= sizeof cfg.report_template)
            return -ENAMETOOLONG;
        memcpy(cfg.report_template, options->report_template, len + 1);
    }
    cfg.t0_ns = mono_ns();
    report_final = 0;
    claim = (struct om_claim){0};
    ckpt_events = ckpt_plans = 0;
    ckpt_ns = cfg.t0_ns;
    om_tracer_rank_refresh();
    om_lineage_init(&cfg.lineage);
    struct om_domain *host;
    int rc = domain_new("cpu", 3, &host);
    if (rc != 0)
        return rc;
    __atomic_store_n(&doms[OM_TRACER_HOST], host, __ATOMIC_RELEASE);
    for (unsigned i = 1; i < OM_TRACER_DOMAINS; i++)
        __atomic_store_n(&doms[i], NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&ndoms, 1, __ATOMIC_RELEASE);
    om_stack_init((const void *)om_tracer_init);
    om_py_init();
    tracer_on = 1;
    om_debug("tracer: min_bytes %zu, stack depth %u, %s iterations", cfg.min_bytes, cfg.stack_depth,
             cfg.warmup ? "marked" : "detected");
    return 0;
}

int om_tracer_domain_open(const char *name)
{
    size_t len;
    int rc = name_check(name, &len);
    if (rc != 0)
        return rc;
    if (!tracer_on)
        return -ENOTSUP;
    om_lock(&lock);
    unsigned n = ndoms;
    for (unsigned i = 0; i < n; i++) {
        if (strcmp(doms[i]->name, name) == 0) {
            om_unlock(&lock);
            return (int)i;
        }
    }
    struct om_domain *d = NULL;
    rc = n == OM_TRACER_DOMAINS ? -ENOSPC : domain_new(name, len, &d);
    if (rc == 0) {
        __atomic_store_n(&doms[n], d, __ATOMIC_RELEASE);
        __atomic_store_n(&ndoms, n + 1, __ATOMIC_RELEASE);
        rc = (int)n;
    }
    om_unlock(&lock);
    if (rc >= 0)
        om_debug("tracer: domain %s is %d", name, rc);
    return rc;
}

int om_tracer_on_cycle_thread(unsigned domain)
{
    const struct om_domain *d = domain_at(domain);
    return d && (cfg.warmup || sequence_of(domain) == d->threads.det_tid);
}

void om_tracer_set_serving(unsigned domain, const struct om_serving_stats *stats)
{
    struct om_domain *d = domain_at(domain);
    if (!d)
        return;
    om_lock(&lock);
    d->serving = *stats;
    d->have_serving = 1;
    om_unlock(&lock);
}

void om_tracer_set_arena(unsigned domain, const void *base, size_t size)
{
    struct om_domain *d = domain_at(domain);
    if (!d)
        return;
    om_lock(&lock);
    d->arena_base = (uintptr_t)base;
    d->arena_size = size;
    om_unlock(&lock);
}

/* ---- the served path's log: counting births ---- */

#define LOG_MASK (OM_LOG_ENTRIES - 1)
#define LOW32 0xffffffffull

/* A birth counted for om_threads_note that did not reach it (the live table could not grow). */
static void uncount_birth(struct om_domain *d)
{
    uint64_t w = __atomic_load_n(&d->log.word, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&d->log.word, &w, (w & ~LOW32) | (uint32_t)(w - 1), 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* Under the lock: the birth of a block from site, of id (a folded site's id names its fold,
 * site). 0, or -ENOMEM (not recorded). */
static int birth(struct om_domain *d, struct om_site *site, uint32_t id, void *ptr, size_t size,
                 size_t usable, size_t alignment, uint64_t now, uint32_t tid, uint32_t seq_tid,
                 struct om_alloc_info *info)
{
    if ((d->live_used + 1) * 2 > d->live_cap && live_grow(d) != 0) {
        if (cfg.warmup == 0)
            uncount_birth(d);
        return -ENOMEM; /* out of memory: the block is simply not recorded */
    }
    uint64_t seq = d->seq;
    if (cfg.warmup == 0) {
        if (om_threads_note(&d->threads, seq_tid)) {
            om_debug("%s: iterations are now detected on thread %u", d->name, d->threads.det_tid);
            om_period_reset(&d->det);
        }
        if (seq_tid == d->threads.det_tid) {
            d->start_now = 0;
            d->det_live += size;
            om_period_push(&d->det, token_of(d->sites.hashes[id], size), seq, d->det_live, size,
                           on_period_start, d);
            if (info) {
                info->iteration_start = d->start_now;
                info->period = d->det.p;
                info->periodic = om_period_covered(&d->det);
            }
        }
    } else if (info && d->nmarks >= cfg.warmup) {
        info->iteration_start = d->marks[(d->nmarks - 1) % OM_MARKS] == seq;
        info->period = d->period_fixed;
        info->periodic = seq - d->marks[(d->nmarks - 1) % OM_MARKS] + 1;
    }
    if (info) {
        info->seq = seq;
        info->ns = now;
        info->site = id + 1;
    }
    d->seq++;
    d->events++;
    om_acct_birth(&d->acct, size);

    struct om_live *e = live_slot(d->live, d->live_cap, (uintptr_t)ptr);
    if (e->ptr == 0) {
        d->live_used++;
    } else { /* a block we missed the free of: its memory is being handed out again */
        site_change(d, e->site, -(int64_t)e->size, -1);
        if (e->tid == d->threads.det_tid)
            d->det_live -= e->size;
    }
    *e = (struct om_live){(uintptr_t)ptr,  size, usable, alignment, seq, now,
                          d->acct.iter_no, site, seq_tid};

    site_change(d, site, (int64_t)size, 1);
    site->count++;
    site->last_seq = seq;
    site->total_bytes += size;
    if (size < site->min_size)
        site->min_size = size;
    if (size > site->max_size)
        site->max_size = size;
    d->live_bytes += size;
    d->live_blocks++;
    d->live_usable += usable;
    if (d->live_bytes > d->lower_bound) {
        d->lower_bound = d->live_bytes;
        d->lower_bound_seq = seq;
        d->peak_event = d->events;
    }
    if (d->live_usable > d->peak_usable)
        d->peak_usable = d->live_usable;

    struct om_record *r = &d->records[seq % OM_SAMPLE_RECORDS];
    *r = (struct om_record){seq,           size,           OM_NO_DEATH, now, 0,
                            d->live_bytes, (uintptr_t)ptr, site->id,    tid};
    timeline_add(d, seq, d->live_bytes);
    return 0;
}

/* Under the lock: the death of the live block at ptr, at now. 1, or 0 when it is none. */
static int death(struct om_domain *d, uintptr_t ptr, uint64_t now)
{
    struct om_live *e = live_find(d, ptr);
    if (!e)
        return 0;
    struct om_live b = *e;
    live_remove(d, e);
    d->events++;
    d->frees++;
    d->live_bytes -= b.size;
    d->live_blocks--;
    d->live_usable -= b.usable;
    if (b.tid == d->threads.det_tid)
        d->det_live -= b.size;
    int cat = om_acct_death(&d->acct, b.size, b.birth_iter);

    struct om_site *s = b.site;
    site_change(d, s, -(int64_t)b.size, -1);
    if (d->acct.iter_no > 0) /* before any iteration is known, a lifetime has no category */
        s->cat_bytes[cat] += b.size;
    uint64_t life = d->seq - b.birth_seq, life_ns = now - b.birth_ns;
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

    struct om_record *r = &d->records[b.birth_seq % OM_SAMPLE_RECORDS];
    if (r->birth_seq == b.birth_seq && d->seq - b.birth_seq <= OM_SAMPLE_RECORDS) {
        r->death_seq = d->seq;
        r->death_ns = now;
    } else {
        d->old_deaths[d->nold_deaths++ % OM_OLD_DEATHS] =
            (struct om_old_death){b.birth_seq, d->seq, b.size, s->id};
    }
    return 1;
}

/* ---- the served path's log: recording it ---- */

static void replay(struct om_domain *d, unsigned domain, const struct om_log_entry *e)
{
    if (!e->site) {
        death(d, e->ptr, e->ns);
        return;
    }
    size_t size = (size_t)(e->shape & ((1ull << 48) - 1));
    size_t usable = size + (size_t)((e->shape >> 48) & 15);
    unsigned a = (unsigned)(e->shape >> 52) & 63;
    size_t alignment = a ? (size_t)1 << (a - 1) : 0;
    uint32_t id = e->site - 1, seq_tid = domain == OM_TRACER_HOST ? e->tid : OM_ALL_THREADS;
    struct om_alloc_info info = {0};
    if (id < d->sites.count)
        birth(d, d->sites.by_id[id], id, (void *)e->ptr, size, usable, alignment, e->ns, e->tid,
              seq_tid, &info);
    else if (cfg.warmup == 0)
        uncount_birth(d);
    d->log.last_period = info.period;
    d->log.last_periodic = info.periodic;
}

/* Under the lock: records what the domain's log holds, in its order. */
static void settle(unsigned domain)
{
    struct om_domain *d = doms[domain];
    struct om_log *l = &d->log;
    uint32_t tail = (uint32_t)(__atomic_load_n(&l->word, __ATOMIC_ACQUIRE) >> 32);
    if (l->head == tail)
        return;
    for (uint32_t h = l->head; h != tail; h++)
        replay(d, domain, &l->entries[h & LOG_MASK]);
    __atomic_store_n(&l->head, tail, __ATOMIC_RELEASE);
}

static void settle_all(void)
{
    for (unsigned i = 0; i < ndoms; i++)
        settle(i);
}

/* Under the lock, the log recorded: counts a birth recorded at once for om_threads_note,
 * after every birth logged before it (an append between the recording and the count is
 * recorded first). */
static void count_birth(unsigned domain)
{
    struct om_log *l = &doms[domain]->log;
    uint64_t w = __atomic_load_n(&l->word, __ATOMIC_ACQUIRE);
    for (;;) {
        if ((uint32_t)(w >> 32) != l->head) {
            settle(domain);
            w = __atomic_load_n(&l->word, __ATOMIC_ACQUIRE);
            continue;
        }
        if (__atomic_compare_exchange_n(&l->word, &w, (w & ~LOW32) | (uint32_t)(w + 1), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;
    }
}

/* Appends e (a birth when counted); -EAGAIN where the birth must be recorded at once: the
 * detector's thread test looks at it. A full log is recorded first. */
static int log_append(unsigned domain, struct om_domain *d, const struct om_log_entry *e,
                      int counted)
{
    struct om_log *l = &d->log;
    uint64_t w = __atomic_load_n(&l->word, __ATOMIC_RELAXED);
    uint32_t tail = (uint32_t)(w >> 32);
    if (counted && (uint32_t)(w + 1) % OM_THREADS_CHECK == 0)
        return -EAGAIN;
    if (tail == l->limit) {
        l->limit = __atomic_load_n(&l->head, __ATOMIC_ACQUIRE) + OM_LOG_ENTRIES;
        if (tail == l->limit) {
            om_lock(&lock);
            settle(domain);
            om_unlock(&lock);
            l->limit = tail + OM_LOG_ENTRIES;
        }
    }
    l->entries[tail & LOG_MASK] = *e;
    for (;;) {
        uint32_t births = (uint32_t)w + (uint32_t)counted;
        if (counted && births % OM_THREADS_CHECK == 0)
            return -EAGAIN; /* a birth recorded at once came between */
        uint64_t next = (uint64_t)(tail + 1) << 32 | births;
        if (__atomic_compare_exchange_n(&l->word, &w, next, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            return 0;
    }
}

/* Where the log can hold the request's shape: sizes below 2^48, usable within 15 bytes
 * above, power-of-two alignments below 2^62. */
static int shape_of(size_t size, size_t usable, size_t alignment, uint64_t *shape)
{
    if ((uint64_t)size >> 48 || usable < size || usable - size > 15 ||
        (alignment & (alignment - 1)) || (uint64_t)alignment >> 62)
        return -ERANGE;
    unsigned a = alignment ? (unsigned)__builtin_ctzll(alignment) + 1 : 0;
    *shape = (uint64_t)size | (uint64_t)(usable - size) << 48 | (uint64_t)a << 52;
    return 0;
}

/* A request of the call site stack names, or (stack NULL) of the site of id + 1 site_id. */
static void on_alloc(unsigned domain, void *ptr, size_t size, size_t usable, size_t alignment,
                     const struct om_stack *stack, uint32_t site_id, struct om_alloc_info *info)
{
    if (info)
        *info = (struct om_alloc_info){0};
    struct om_domain *d = domain_at(domain);
    if (!d)
        return;
    uint64_t now = mono_ns() - cfg.t0_ns;
    uint32_t tid = current_tid(), seq_tid = sequence_of(domain);
    int new_site = 0;
    struct om_site *site = NULL;
    uint32_t id = 0;
    om_lock(&lock);
    settle(domain);
    if (stack) {
        uint32_t known_sites = d->sites.count;
        site = om_sites_intern(&d->sites, stack);
        new_site = d->sites.count != known_sites;
        id = site ? site->id : 0;
    } else if (site_id && site_id - 1 < d->sites.count) {
        /* An id once given stays valid (a fork child keeps the sites; a folded site's names
         * its fold). */
        id = site_id - 1;
        site = d->sites.by_id[id];
    }
    if (site && cfg.warmup == 0)
        count_birth(domain);
    if (site)
        birth(d, site, id, ptr, size, usable, alignment, now, tid, seq_tid, info);
    om_unlock(&lock);
    /* A new site found by the fast walk (a known native stack under other Python frames)
     * read no unwind tables: nothing to give back. */
    if (stack && ((new_site && stack->full) || stack->walked))
        om_unwind_pages_drop(stack);
}

void om_tracer_on_alloc(unsigned domain, void *ptr, size_t size, size_t usable, size_t alignment,
                        const struct om_stack *stack, struct om_alloc_info *info)
{
    on_alloc(domain, ptr, size, usable, alignment, stack, 0, info);
}

void om_tracer_on_alloc_site(unsigned domain, void *ptr, size_t size, size_t usable,
                             size_t alignment, uint32_t site, struct om_alloc_info *info)
{
    on_alloc(domain, ptr, size, usable, alignment, NULL, site, info);
}

void om_tracer_log_alloc(unsigned domain, void *ptr, size_t size, size_t usable, size_t alignment,
                         uint32_t site, struct om_alloc_info *info)
{
    *info = (struct om_alloc_info){0};
    struct om_domain *d = domain_at(domain);
    uint64_t shape;
    if (!d || !site || shape_of(size, usable, alignment, &shape) != 0)
        goto now;
    struct om_log_entry e = {(uintptr_t)ptr, mono_ns() - cfg.t0_ns, shape, site, current_tid()};
    if (log_append(domain, d, &e, cfg.warmup == 0) != 0)
        goto now;
    info->ns = e.ns;
    info->site = site;
    info->deferred = 1;
    return;
now:
    om_tracer_on_alloc_site(domain, ptr, size, usable, alignment, site, info);
}

void om_tracer_log_free(unsigned domain, void *ptr)
{
    struct om_domain *d = domain_at(domain);
    if (!d)
        return;
    struct om_log_entry e = {(uintptr_t)ptr, mono_ns() - cfg.t0_ns, 0, 0, 0};
    log_append(domain, d, &e, 0);
}

const struct om_domain *om_tracer_domain(unsigned domain)
{
    struct om_domain *d = domain_at(domain);
    if (d) {
        om_lock(&lock);
        settle(domain);
        om_unlock(&lock);
    }
    return d;
}

void om_tracer_settle(unsigned domain, uint64_t *period, uint64_t *periodic)
{
    struct om_domain *d = domain_at(domain);
    *period = *periodic = 0;
    if (!d)
        return;
    om_lock(&lock);
    settle(domain);
    *period = d->log.last_period;
    *periodic = d->log.last_periodic;
    om_unlock(&lock);
}

int om_tracer_on_free(unsigned domain, void *ptr)
{
    struct om_domain *d = domain_at(domain);
    if (!d)
        return 0;
    uint64_t now = mono_ns() - cfg.t0_ns;
    om_lock(&lock);
    settle(domain);
    int found = death(d, (uintptr_t)ptr, now);
    om_unlock(&lock);
    return found;
}

size_t om_tracer_block_size(unsigned domain, const void *ptr)
{
    struct om_domain *d = domain_at(domain);
    if (!d)
        return 0;
    om_lock(&lock);
    settle(domain);
    struct om_live *e = live_find(d, (uintptr_t)ptr);
    size_t size = e ? e->size : 0;
    om_unlock(&lock);
    return size;
}

static void step_domain(struct om_domain *d)
{
    uint64_t prev = d->nmarks ? d->marks[(d->nmarks - 1) % OM_MARKS] : d->fork_seq;
    d->marks[d->nmarks % OM_MARKS] = d->seq;
    d->nmarks++;
    if (cfg.warmup) {
        push_start(d, d->seq);
        om_acct_boundary(&d->acct, d->seq);
        if (d->nmarks == cfg.warmup) {
            d->period_fixed = d->seq - prev;
            d->first_steady_seq = d->seq;
            d->have_steady = 1;
        }
    }
}

void om_tracer_step(void)
{
    if (!tracer_on)
        return;
    om_lock(&lock);
    settle_all();
    for (unsigned i = 0; i < ndoms; i++)
        step_domain(doms[i]);
    om_unlock(&lock);
}

static uint64_t plans_made(void)
{
    uint64_t plans = 0;
    for (unsigned i = 0; i < ndoms; i++)
        plans += doms[i]->serving.plans;
    return plans;
}

static uint64_t events_seen(void)
{
    uint64_t events = 0;
    for (unsigned i = 0; i < ndoms; i++)
        events += doms[i]->events;
    return events;
}

enum dump_kind { DUMP_ASKED, DUMP_CHECKPOINT, DUMP_FINAL };

/* ---- folds: what a call site seen once costs ---- */

/* A program's imports make most of its call sites (PyTorch's, well over a hundred thousand),
 * each requested once. Such a site is folded (stacks.c) once it tells nothing the report
 * shows of its own: one request, freed, no bytes at the peak (whose contributors stay
 * named), and its block dead before the sample's first request (before the first steady
 * iteration, or before the ring's oldest record), so that neither the sample nor the
 * resident blocks name it. The detector's tokens are the stacks' hashes: a folded site seen
 * again is a new site with the same token. */
static int foldable(const struct om_site *s, void *ctx)
{
    const struct om_domain *d = ctx;
    if (s->count != 1 || s->live_blocks || s->freed != 1)
        return 0;
    uint64_t death = s->last_seq + s->life_req_max;
    if (!(d->have_steady && death <= d->first_steady_seq) &&
        !(d->seq >= death && d->seq - death >= OM_SAMPLE_RECORDS))
        return 0;
    /* Its bytes at the peak: its live bytes (none now) when it has not changed since, else
     * what its first change after the peak saved (site_change). */
    return s->mod_event <= d->peak_event || s->snap_for != d->peak_event + 1 || s->snap_bytes == 0;
}

/* The sites' records moved: the live blocks' point at them. */
static void relink_live(void *ctx)
{
    struct om_domain *d = ctx;
    for (uint64_t k = 0; k < d->live_cap; k++)
        if (d->live[k].ptr)
            d->live[k].site = d->sites.by_id[d->live[k].site->id];
}

/* ---- a report's holds of the tracer's lock ---- */

/* A report takes the tracer's lock several times, each for a bounded piece of work (a fold
 * slice, a slice of the sites' move, the copy), so that a program thread that needs the lock
 * meanwhile waits for one piece, never for the whole. Under dump_lock. */
static struct om_dump_holds holds;
static uint64_t hold_since, hold_cpu_since;

/* The calling thread's CPU time: a hold's wall clock counts the holder's preemptions too. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The holds are timed for the debug line alone: two clock reads a hold, one a system call. */
static void dump_hold(void)
{
    om_lock(&lock);
    if (om_log_level >= OM_LOG_DEBUG) {
        hold_since = mono_ns();
        hold_cpu_since = thread_cpu_ns();
    }
    holds.holds++;
}

static void dump_release(void)
{
    if (om_log_level >= OM_LOG_DEBUG) {
        uint64_t ns = mono_ns() - hold_since, cpu = thread_cpu_ns() - hold_cpu_since;
        if (ns > holds.longest_ns)
            holds.longest_ns = ns;
        if (cpu > holds.most_cpu_ns)
            holds.most_cpu_ns = cpu;
    }
    om_unlock(&lock);
}

/* Lets the program's threads in between two pieces. */
static void dump_yield(void)
{
    dump_release();
    dump_hold();
}

static void most(uint32_t *at, uint32_t v)
{
    if (v > *at)
        *at = v;
}

void om_tracer_dump_holds(struct om_dump_holds *out)
{
    pthread_mutex_lock(&dump_lock);
    *out = holds;
    pthread_mutex_unlock(&dump_lock);
}

/* Under the dump lock (a report being written reads sites without the tracer's lock), in
 * the tracer's: folds the domain's sites a slice a hold, then moves the records still named
 * where folding left them half dead, a slice a hold, mapping and unmapping outside the lock. */
static void fold_domain(struct om_domain *d)
{
    struct om_fold_pass pass;
    int rc, folded = 0;
    dump_hold();
    om_fold_pass_begin(&d->sites, &pass);
    for (;;) {
        uint32_t from = pass.next;
        rc = om_sites_fold_slice(&d->sites, &pass, foldable, d);
        most(&holds.most_examined, pass.next - from);
        most(&holds.most_folded, pass.folded);
        folded += (int)pass.folded;
        if (rc != 0)
            break;
        dump_yield();
    }
    struct om_sites_move m;
    int move = rc >= 0 && om_sites_move_begin(&d->sites, &m);
    if (move) {
        dump_release();
        rc = om_sites_move_map(&m);
        dump_hold();
        while (rc == 0 && om_sites_move_slice(&d->sites, &m) == 0) {
            most(&holds.most_moved, m.copied);
            dump_yield();
        }
        most(&holds.most_moved, m.copied);
        dump_yield(); /* the last slice's hold ends before the relink's */
        (void)om_sites_move_finish(&d->sites, &m, relink_live, d);
        most(&holds.most_recopied, m.copied);
    }
    dump_release();
    if (move)
        om_sites_move_end(&m);
    if (folded > 0)
        om_debug("%s: %d call sites folded", d->name, folded);
}

static void fold_sites(void)
{
    unsigned n = __atomic_load_n(&ndoms, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        fold_domain(doms[i]);
}

/* Under the dump lock, in the tracer's: the sites copied ahead of the report's copy, a slice
 * a hold, room made outside the lock. */
static void precopy_sites(void)
{
    unsigned n = __atomic_load_n(&ndoms, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++) {
        struct om_precopy pc = {0};
        int rc, refused = 0;
        dump_hold();
        while ((rc = om_report_precopy(i, doms[i], &pc)) <= 0) {
            most(&holds.most_precopied, pc.copied);
            if (rc == -EAGAIN) {
                if (++refused > 2)
                    break; /* no room to be had: the copy copies them all */
                dump_release();
                om_report_reserve();
                dump_hold();
            } else if (rc < 0) {
                break;
            } else {
                refused = 0;
                dump_yield();
            }
        }
        most(&holds.most_precopied, pc.copied);
        dump_release();
    }
}

/* Under dump_lock. A report the program asked for is always written; one optmem writes by
 * itself (checkpoints, exit) only by a process that made managed requests, and, where the
 * template has no %p, to a path no other process of the run holds (lineage.c). */
static int dump_locked(const char *tmpl, enum dump_kind kind, char *expanded, size_t len)
{
    if (kind != DUMP_CHECKPOINT)
        om_tracer_rank_refresh(); /* on a thread of the program's */
    cfg.rank = __atomic_load_n(&env_rank, __ATOMIC_RELAXED);
    int rc = om_path_expand(tmpl, (long)getpid(), cfg.rank, expanded, len);
    if (rc != 0)
        return rc;
    holds = (struct om_dump_holds){0};
    dump_hold();
    settle_all();
    uint64_t requests = om_report_requests(doms, ndoms);
    int iterations = om_report_iterations(doms, ndoms);
    dump_release();
    if (kind != DUMP_ASKED && requests == 0)
        return -ENODATA;
    /* A device or a pipe (/dev/null, /dev/stderr, a FIFO) gets one report, at the end or
     * when asked: no checkpoints, and no claim, which would read it. */
    int special = om_file_is_special(expanded);
    if (special && kind == DUMP_CHECKPOINT)
        return -ENODATA;
    char path[4096];
    if (kind != DUMP_ASKED && !special && !strstr(tmpl, "%p")) {
        rc = om_report_claim(&claim, &cfg.lineage, requests, iterations, expanded, path,
                             sizeof path);
        if (rc != 0)
            return rc;
        memcpy(expanded, path, strlen(path) + 1);
    }
    struct om_domain *copies[OM_TRACER_DOMAINS];
    fold_sites();
    precopy_sites();
    /* The copy is of one moment: one hold. What it needs mapped is mapped outside it. */
    dump_hold();
    settle_all();
    unsigned n = ndoms;
    rc = om_report_snapshot(doms, n, copies, 0);
    if (rc == -EAGAIN) {
        dump_release();
        om_report_reserve();
        dump_hold();
        settle_all();
        n = ndoms;
        rc = om_report_snapshot(doms, n, copies, 1);
    }
    ckpt_events = events_seen();
    ckpt_plans = plans_made();
    ckpt_ns = mono_ns();
    dump_release();
    om_debug("report: %u holds of the tracer's lock, the longest %llu us, the most CPU in "
             "one %llu us",
             holds.holds, (unsigned long long)(holds.longest_ns / 1000),
             (unsigned long long)(holds.most_cpu_ns / 1000));
    /* Frames are resolved as the report is written, outside the tracer's lock. */
    return rc == 0 ? om_report_write(&cfg, copies, n, expanded, kind != DUMP_CHECKPOINT) : rc;
}

static int dump(const char *tmpl, enum dump_kind kind)
{
    char expanded[4096] = "";
    pthread_mutex_lock(&dump_lock);
    int rc = report_final && kind != DUMP_ASKED
                 ? -EALREADY
                 : dump_locked(tmpl, kind, expanded, sizeof expanded);
    if (kind == DUMP_FINAL)
        report_final = 1;
    pthread_mutex_unlock(&dump_lock);
    if (rc == 0)
        om_debug("report written to %s", expanded);
    else if (rc != -ENODATA && rc != -EALREADY)
        om_warn("could not write the report %s: %s", *expanded ? expanded : tmpl, strerror(-rc));
    return rc == -ENODATA || rc == -EALREADY ? 0 : rc;
}

int om_tracer_dump(const char *path)
{
    if (!tracer_on)
        return -ENOTSUP;
    const char *tmpl = path ? path : cfg.report_template;
    if (!*tmpl)
        return -EINVAL;
    return dump(tmpl, DUMP_ASKED);
}

void om_tracer_report_prepare(void)
{
    if (!tracer_on || !cfg.report_template[0])
        return;
    pthread_mutex_lock(&dump_lock);
    om_report_prepare();
    pthread_mutex_unlock(&dump_lock);
}

int om_tracer_checkpoint(uint64_t interval_ns)
{
    if (!tracer_on || !cfg.report_template[0])
        return 0;
    om_lock(&lock);
    settle_all();
    int due = plans_made() != ckpt_plans ||
              (events_seen() != ckpt_events && mono_ns() - ckpt_ns >= interval_ns);
    om_unlock(&lock);
    int rc = due ? dump(cfg.report_template, DUMP_CHECKPOINT) : 0;
    __atomic_store_n(&om_tracer_rank_wanted, 1, __ATOMIC_RELAXED);
    return rc;
}

void om_tracer_atfork_prepare(void)
{
    if (!tracer_on)
        return;
    pthread_mutex_lock(&dump_lock);
    om_lock(&lock);
    settle_all(); /* the child starts with the parent's record, and no log */
    om_py_atfork_prepare();
    om_sys_lock();
}

void om_tracer_atfork_parent(void)
{
    if (!tracer_on)
        return;
    om_sys_unlock();
    om_py_atfork_parent();
    om_unlock(&lock);
    pthread_mutex_unlock(&dump_lock);
}

/* The child keeps the live blocks it inherited (it may free them) and the call sites,
 * and starts its own lifetimes, iterations and report, in every domain. */
void om_tracer_atfork_child(void)
{
    if (!tracer_on)
        return;
    om_sys_reset_lock();
    om_py_atfork_child();
    lock = (struct om_lock){0};
    pthread_mutex_init(&dump_lock, NULL);
    fork_gen++;
    for (unsigned i = 0; i < ndoms; i++)
        domain_restart(doms[i]);
    om_lineage_fork(&cfg.lineage);
    claim = (struct om_claim){0};
    ckpt_events = ckpt_plans = 0;
    ckpt_ns = mono_ns();
    /* The child's first request reads its rank: a fork that came while a thread of the
     * parent's was in setenv leaves the child's environment as the program's own code finds it. */
    __atomic_store_n(&om_tracer_rank_wanted, 1, __ATOMIC_RELAXED);
}

void om_tracer_at_exit(void)
{
    if (tracer_on && cfg.report_template[0])
        dump(cfg.report_template, DUMP_FINAL);
}
