/* Making a plan: the arcs of the iteration in next packed by the replanner (inline, or on the
 * optmem-plan thread) and placed over the arena. */
#include "pool_internal.h"

#include "guard.h"
#include "log.h"
#include "plan_dump.h"
#include "replanner.h"
#include "tracer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

/* The search stops as soon as a plan meets its lower bound; the budget bounds the work of
 * a plan that cannot, which runs beside the program on a core it may be using. It is the
 * time one iteration took, within these bounds: one iteration's time is little beside a
 * training run, where a fixed budget cut large ones short (the transformer at 8 x the
 * bundled batch, 12635 arcs and 1.4 s an iteration, needed 355 ms); a floor well above a
 * short iteration made a program of short iterations pay many of them for each plan of a few
 * MiB (its OpenMP threads wait for the core the search holds). The floor leaves greedy by
 * size and a first improvement their time. */
#define PLAN_BUDGET_MIN_MS 20
#define SEARCH_BUDGET_MAX_MS 2000
/* Packing around live blocks rarely meets its bound, and the plan packed alone is the
 * fallback: a shorter search. */
#define OBSTACLE_BUDGET_MS 50
/* The optmem-plan thread's stack: the search recurses once per block placed (a few hundred
 * bytes a level); only what a search touches is resident. A MiB of it is left to the
 * thread's start and the search's callers. */
#define PLAN_THREAD_STACK ((size_t)64 << 20)
/* The replanner's working memory, carved from the arena's free pages above every live block:
 * they are resident already and the plan reuses them next, where fresh mappings would add
 * the replanner's memory to the peak. Released in the order taken; beyond it, mappings. A
 * device arena's pages are not the CPU's to touch: its scratch is all mappings. */
struct scratch {
    unsigned char *start, *next, *end;
};

static void *scratch_alloc(void *ctx, size_t n)
{
    struct scratch *s = ctx;
    size_t len = (n + 63) & ~(size_t)63;
    if ((size_t)(s->end - s->next) < len)
        return om_sys_map(n);
    void *p = s->next;
    s->next += len;
    return p;
}

static void scratch_release(void *ctx, void *p, size_t n)
{
    struct scratch *s = ctx;
    unsigned char *c = p;
    if (c < s->start || c >= s->end)
        om_sys_unmap(p, n);
    else if (c + ((n + 63) & ~(size_t)63) == s->next)
        s->next = c;
}

/* The holes among the blocks live now, bottom up, ending where the free tail begins. */
static const struct om_extent *holes(const struct om_arena *a, size_t *n)
{
    *n = a->free.n;
    if (*n && a->free.v[*n - 1].off + a->free.v[*n - 1].len == a->top)
        (*n)--;
    return a->free.v;
}

/* The blocks live in [from, taken end), as runs of bytes taken (at most one more than the
 * free extents), into in: fixed for the whole period. *bytes: what they hold. */
static size_t live_obstacles(const struct om_arena *a, size_t from, uint64_t period,
                             om_rp_block *in, size_t *bytes)
{
    size_t n = 0, end = om_arena_taken_end(a);
    *bytes = 0;
    ptrdiff_t i = om_extents_at_or_below(&a->free, from);
    for (size_t k = i < 0 ? 0 : (size_t)i; k < a->free.n; k++) {
        size_t lo = a->free.v[k].off + a->free.v[k].len;
        size_t hi = k + 1 < a->free.n ? a->free.v[k + 1].off : a->top;
        if (lo < from || lo >= end)
            continue;
        in[n] = (om_rp_block){.id = UINT64_MAX,
                              .lower = 0,
                              .upper = period,
                              .size = hi - lo,
                              .offset = lo - from,
                              .fixed = 1};
        *bytes += hi - lo;
        n++;
    }
    return n;
}

/* The bytes the slots of a plan cover (a plan packed around obstacles may spread). */
static size_t covered_bytes(const om_rp_block *in, const uint64_t *offsets, size_t n)
{
    struct om_extents covered;
    size_t bytes = SIZE_MAX;
    if (om_extents_init(&covered) != 0)
        return bytes;
    for (size_t i = 0; i < n; i++)
        if (om_extents_add(&covered, offsets[i], in[i].size) != 0)
            goto out;
    bytes = covered.bytes;
out:
    om_extents_destroy(&covered);
    return bytes;
}

static size_t align_to(size_t x, size_t alignment)
{
    return (x + alignment - 1) & ~(alignment - 1);
}

/* A plan's place in the arena: its offsets from base, and its blocks fixed there. */
struct placement {
    size_t base, peak, nfixed;
    uint64_t *offsets;
    om_rp_result res;
};

/* Where the plan goes. The pages that warm-up left free are mostly resident, so a plan laid
 * over them faults little in: the lowest hole among the live blocks that holds the arcs
 * packed alone; else, where pages do not move (a device, huge pages), the lowest hole with
 * few live bytes above it (1/64 of the plan), the arcs packed around those, when that
 * spreads them by no more than 1/128; else above every live block. Where pages move, they
 * move onto the plan's wherever it lies, and the arcs packed alone ran faster: the CNN
 * packed around one live block made 0.96 of tcmalloc's steps/s, above it 0.99, with the
 * same peak and faults. `in` has room for the live blocks after the arcs, `spare` for a
 * plan. */
static void place_plan(const struct om_pool *pool, om_rp_block *in, size_t narcs,
                       const om_rp_options *dense_opt, struct placement *pl, uint64_t *spare)
{
    const struct om_arena *a = &pool->arena;
    size_t nholes, max_align = 1, end = om_arena_taken_end(a);
    const struct om_extent *h = holes(a, &nholes), *low = NULL;
    for (size_t i = 0; i < narcs; i++)
        if (in[i].align > max_align)
            max_align = in[i].align;
    /* A plan kept unserved (searched for a phase the program left) holds its region: that
     * phase's blocks that outlive it (gradients, live through evaluation) will lie there. */
    for (size_t i = 0; i < nholes; i++) {
        size_t base = align_to(h[i].off, max_align);
        if (base < h[i].off + h[i].len && h[i].off + h[i].len - base >= pl->peak &&
            !om_pool_kept_clash(pool, base, pl->peak, 0)) {
            pl->base = base;
            return;
        }
    }
    size_t kept_end = om_pool_kept_clash(pool, 0, SIZE_MAX, 0);
    pl->base = align_to(end > kept_end ? end : kept_end, max_align);
    if (om_pool_pages_move(pool) || !spare) /* onto the plan, wherever it lies */
        return;
    size_t free_above = 0;
    for (size_t i = nholes; i-- > 0;) {
        if (end - (h[i].off + h[i].len) - free_above > pl->peak / 64)
            break;
        if (h[i].len >= OM_ARENA_RELEASE_MIN && align_to(h[i].off, max_align) < h[i].off + h[i].len)
            low = &h[i];
        free_above += h[i].len;
    }
    if (!low)
        return;
    size_t base = align_to(low->off, max_align), fixed_bytes;
    size_t nfixed = live_obstacles(a, base, pool->next.period, in + narcs, &fixed_bytes);
    om_rp_options opt = *dense_opt;
    opt.budget_ms = OBSTACLE_BUDGET_MS;
    opt.stack_bytes = om_stack_room(); /* on the program's thread, whoever made the plan */
    opt.goal = pl->peak + fixed_bytes;
    om_rp_result res;
    om_plan_dump(pool->domain, in, narcs + nfixed, pool->period,
                 "the arcs packed around the live blocks (fixed) for up to %u ms", opt.budget_ms);
    if (om_rp_plan(in, narcs + nfixed, &opt, spare, &res) != 0 ||
        covered_bytes(in, spare, narcs) > pl->peak + pl->peak / 128)
        return;
    pl->base = base;
    pl->peak = res.peak;
    pl->nfixed = nfixed;
    pl->res = res;
    memcpy(pl->offsets, spare, narcs * sizeof *spare);
}

uint32_t om_pool_search_budget_ms(const struct om_pool *pool, uint32_t least_ms)
{
    uint64_t ms = pool->iteration_ns / 1000000;
    if (ms < least_ms)
        return least_ms;
    return ms > SEARCH_BUDGET_MAX_MS ? SEARCH_BUDGET_MAX_MS : (uint32_t)ms;
}

/* The arcs of the iteration in next into in (room for its records): their count. */
static size_t gather_arcs(const struct om_pool *pool, om_rp_block *in)
{
    const struct om_plan *next = &pool->next;
    size_t n = 0;
    for (size_t r = 0; r < next->nrecords; r++) {
        const struct record *rec = &next->records[r];
        if (om_record_periods(rec, next->period) != 0)
            continue;
        in[n++] = (om_rp_block){.id = r,
                                .lower = rec->lower,
                                .upper = rec->upper,
                                .size = rec->len,
                                .align = rec->alignment};
    }
    return n;
}

/* The arcs' offsets, packed alone, placed over the arena as it is now: next's slots, end and
 * figures set. With spare (room for a plan), a placement around live blocks may be searched
 * for as well; without, the plan goes where it fits as packed. Kept (a plan for a phase the
 * program left), it goes above every live block, the plan serving and the plans kept: the
 * holes now are another phase's, whose blocks (a training step's gradients, live through
 * evaluation) may take them again while the plan serves. */
static int place_arcs(struct om_pool *pool, om_rp_block *in, size_t n, uint64_t *offsets,
                      uint64_t *spare, const om_rp_options *opt, const om_rp_result *res,
                      int on_thread, int kept)
{
    struct om_plan *next = &pool->next;
    struct om_arena *a = &pool->arena;
    struct placement pl = {.offsets = offsets, .res = *res, .peak = res->peak};
    if (kept) {
        size_t floor = om_arena_taken_end(a), max_align = 1;
        size_t kept_end = om_pool_kept_clash(pool, 0, SIZE_MAX, 1);
        if (pool->phase == SERVE && pool->plan.end > floor)
            floor = pool->plan.end;
        if (kept_end > floor)
            floor = kept_end;
        for (size_t i = 0; i < n; i++)
            if (in[i].align > max_align)
                max_align = in[i].align;
        pl.base = align_to(floor, max_align);
    } else if (spare) {
        place_plan(pool, in, n, opt, &pl, spare);
    } else {
        place_plan(pool, in, n, NULL, &pl, NULL);
    }
    size_t base = pl.base;
    if (base > a->reserved || a->reserved - base < pl.peak) {
        om_warn("the arena has no room left for a plan of %.1f MiB", pl.peak / 1048576.0);
        return -ENOMEM;
    }
    memset(next->slots, 0, next->period * sizeof *next->slots);
    for (size_t i = 0; i < n; i++) {
        struct record *rec = &next->records[in[i].id];
        next->slots[in[i].id] = (struct om_slot){.token = rec->token,
                                                 .offset = base + offsets[i],
                                                 .len = rec->len,
                                                 .alignment = rec->alignment,
                                                 .cheap = rec->cheap,
                                                 .site = rec->site,
                                                 .confirmed = rec->confirmed,
                                                 .ambiguous = rec->ambiguous};
    }
    next->end = base + pl.peak;
    om_pool_advise_huge(pool, base, base + pl.peak);
    next->peak = pl.peak;
    next->lower_bound = pl.res.lower_bound;
    next->greedy = pl.res.greedy_peak;
    next->proven_bound = pl.res.proven_bound;
    next->time_us = pl.res.elapsed_ns / 1000;
    next->on_thread = (uint64_t)on_thread;
    next->nslots = n;
    double lb = pl.res.lower_bound ? (double)pl.res.lower_bound : 1.0;
    om_info("plan: %zu slots of a %llu-request iteration (packed around %zu live blocks), "
            "peak %.1f MiB (%.3f x the live-bytes bound, proven bound %.3f, greedy by size "
            "%.3f%s; %s) in %.1f ms (%s), budget %u ms",
            n, (unsigned long long)next->period, pl.nfixed, pl.peak / 1048576.0,
            pl.res.lower_bound ? (double)pl.peak / lb : 1.0,
            pl.res.lower_bound ? (double)pl.res.proven_bound / lb : 1.0,
            pl.res.lower_bound ? (double)pl.res.greedy_peak / lb : 1.0,
            pl.res.greedy_cut ? " cut at the deadline" : "",
            om_rp_gap_owner(pl.res.peak, pl.res.lower_bound, pl.res.proven_bound),
            pl.res.elapsed_ns / 1e6, on_thread ? "on the optmem-plan thread" : "inline",
            opt->budget_ms);
    return 0;
}

static int build_plan(struct om_pool *pool, size_t scratch_from, size_t scratch_to)
{
    struct om_arena *a = &pool->arena;
    size_t page = a->page;
    struct scratch scratch = {a->base + align_to(scratch_from, page), NULL,
                              a->base + (scratch_to & ~(page - 1))};
    if (scratch.end < scratch.start || !pool->host)
        scratch.end = scratch.start;
    scratch.next = scratch.start;
    om_rp_allocator alloc = {scratch_alloc, scratch_release, &scratch};
    size_t n = 0, cap = pool->next.nrecords + a->free.n + 1;
    om_rp_block *in = alloc.alloc(&scratch, cap * sizeof *in);
    uint64_t *offsets = alloc.alloc(&scratch, cap * sizeof *offsets);
    uint64_t *spare = alloc.alloc(&scratch, cap * sizeof *spare);
    int rc = -ENOMEM;
    if (!in || !offsets || !spare)
        goto out;
    n = gather_arcs(pool, in);
    if (n == 0) { /* every block outlives the period: nothing to serve */
        om_debug("plan: none of the %llu-request iteration's blocks dies within it",
                 (unsigned long long)pool->next.period);
        rc = -ENOENT;
        goto out;
    }
    char err[256] = "";
    om_rp_options opt = {.period = pool->next.period,
                         .budget_ms = om_pool_search_budget_ms(pool, PLAN_BUDGET_MIN_MS),
                         .stack_bytes = om_stack_room(),
                         .alloc = alloc,
                         .err = err,
                         .errlen = sizeof err};
    om_rp_result res;
    om_plan_dump(pool->domain, in, n, pool->period,
                 "the iteration's arcs, searched inline for up to %u ms", opt.budget_ms);
    rc = om_rp_plan(in, n, &opt, offsets, &res);
    if (rc != 0) {
        om_info("plan of %zu blocks failed: %s", n, err);
        goto out;
    }
    rc = place_arcs(pool, in, n, offsets, spare, &opt, &res, 0, 0);
out:
    if (spare)
        alloc.release(&scratch, spare, cap * sizeof *spare);
    if (offsets)
        alloc.release(&scratch, offsets, cap * sizeof *offsets);
    if (in)
        alloc.release(&scratch, in, cap * sizeof *in);
    return rc;
}

int om_pool_plan(struct om_pool *pool)
{
    /* The replanner's memory lies on the free pages above every live block (the host's):
     * resident, and given back after unless the plan lies there too. */
    struct om_arena *a = &pool->arena;
    size_t touched = om_arena_touched_end(a);
    return build_plan(pool, om_arena_taken_end(a), touched < a->top ? touched : a->top);
}

/* ---- the search on a thread of optmem's ---- */

enum { JOB_RUNNING, JOB_DONE, JOB_ABANDONED };

/* A search handed to the optmem-plan thread: its input and its result, values in one
 * mapping of their own. The thread owns it while it runs; whoever comes second (the pool
 * taking or abandoning it, the thread finishing) unmaps it. */
struct om_plan_job {
    int state;
    size_t bytes, n;
    int rc;
    om_rp_options opt;
    om_rp_result res;
    char err[256];
    om_rp_block *in;
    uint64_t *offsets;
};

static void *plan_thread(void *arg)
{
    struct om_plan_job *job = arg;
    om_guard_enter(); /* what this thread allocates is none of the program's */
    om_guard_own_thread("optmem-plan", 1);
    struct scratch none = {NULL, NULL, NULL};
    job->opt.alloc = (om_rp_allocator){scratch_alloc, scratch_release, &none};
    job->opt.err = job->err;
    job->opt.errlen = sizeof job->err;
    job->rc = om_rp_plan(job->in, job->n, &job->opt, job->offsets, &job->res);
    int running = JOB_RUNNING;
    if (!__atomic_compare_exchange_n(&job->state, &running, JOB_DONE, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        om_sys_unmap(job, job->bytes); /* abandoned while it ran */
    return NULL;
}

/* Detached, every signal blocked (none meant for the program is delivered to it). It ends
 * when the search does, within its budget: the process outlives its own threads by that at
 * most. It names itself: a detached thread's handle may be gone as soon as it is made. */
static int start_thread(struct om_plan_job *job)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Where the larger stack cannot be had, the search keeps the default depth. */
    if (pthread_attr_setstacksize(&attr, PLAN_THREAD_STACK) == 0)
        job->opt.stack_bytes = PLAN_THREAD_STACK - ((size_t)1 << 20);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    rc = pthread_create(&thread, &attr, plan_thread, job);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        job->opt.stack_bytes = 0;
        return -rc;
    }
    return 0;
}

void om_pool_plan_abandon(struct om_pool *pool)
{
    struct om_plan_job *job = pool->job;
    if (!job)
        return;
    pool->job = NULL;
    pool->job_detached = 0;
    int running = JOB_RUNNING;
    if (!__atomic_compare_exchange_n(&job->state, &running, JOB_ABANDONED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        om_sys_unmap(job, job->bytes); /* done: nobody else holds it */
}

void om_pool_plan_atfork_child(struct om_pool *pool)
{
    /* The thread did not come along: the child's copy of the search is nobody's. */
    if (pool->job) {
        om_sys_unmap(pool->job, pool->job->bytes);
        pool->job = NULL;
        om_debug("plan: the search under way at fork stays the parent's; learning again");
        /* A detached search's phase was left already: the child goes on as it was. */
        if (!pool->job_detached)
            om_pool_learn(pool);
        pool->job_detached = 0;
    }
}

int om_pool_plan_done(const struct om_pool *pool)
{
    return pool->job && __atomic_load_n(&pool->job->state, __ATOMIC_ACQUIRE) == JOB_DONE;
}

int om_pool_plan_start(struct om_pool *pool)
{
    /* Where a plan may be packed around live blocks (pages that do not move: a device, huge
     * pages), that search needs the arena as it is: it stays inline. */
    if (!pool->host || !om_pool_pages_move(pool))
        return -ENOTSUP;
    size_t cap = pool->next.nrecords;
    size_t bytes = align_to(sizeof(struct om_plan_job), 64) + cap * sizeof(om_rp_block) +
                   cap * sizeof(uint64_t);
    struct om_plan_job *job = om_sys_map(bytes);
    if (!job)
        return -ENOMEM;
    *job = (struct om_plan_job){.state = JOB_RUNNING, .bytes = bytes};
    job->in = (om_rp_block *)((unsigned char *)job + align_to(sizeof *job, 64));
    job->offsets = (uint64_t *)(job->in + cap);
    job->n = gather_arcs(pool, job->in);
    if (job->n == 0) {
        om_sys_unmap(job, bytes);
        om_debug("plan: none of the %llu-request iteration's blocks dies within it",
                 (unsigned long long)pool->next.period);
        return -ENOENT;
    }
    job->opt = (om_rp_options){.period = pool->next.period,
                               .budget_ms = om_pool_search_budget_ms(pool, PLAN_BUDGET_MIN_MS)};
    om_plan_dump(pool->domain, job->in, job->n, pool->period,
                 "the iteration's arcs, searched on the optmem-plan thread for up to %u ms",
                 job->opt.budget_ms);
    int rc = start_thread(job);
    if (rc != 0) {
        om_sys_unmap(job, bytes);
        om_info("plan: no optmem-plan thread (%s): planning inline", strerror(-rc));
        return -EAGAIN;
    }
    pool->job = job;
    om_debug("plan: the search for a plan of %zu blocks runs on the optmem-plan thread", job->n);
    return 0;
}

int om_pool_plan_take(struct om_pool *pool, int kept)
{
    struct om_plan_job *job = pool->job;
    if (!job)
        return -ENOENT;
    if (__atomic_load_n(&job->state, __ATOMIC_ACQUIRE) != JOB_DONE)
        return -EINPROGRESS;
    pool->job = NULL;
    pool->job_detached = 0;
    int rc = job->rc;
    if (rc != 0)
        om_info("plan of %zu blocks failed: %s", job->n, job->err);
    else
        rc = place_arcs(pool, job->in, job->n, job->offsets, NULL, &job->opt, &job->res, 1, kept);
    om_sys_unmap(job, job->bytes);
    return rc;
}
