/* Plan mode's phases: learning a period, picking an iteration and planning it, judging the
 * iterations served. */
#include "pool_internal.h"

#include "log.h"
#include "replanner.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/* The search stops as soon as a plan meets its lower bound; the budget bounds the one-off
 * pause of a plan that cannot (the transformer's 1883-slot iteration needs 30 to 50 ms to
 * reach its bound, and stopped at 1.09 of it with the replanner's 20 ms default). */
#define PLAN_BUDGET_MS 200

/* ---- plan ---- */

/* The recorded iteration's arcs, placed in a fresh region above everything the arena
 * has handed out: no live block can be in the way, so the plan packs the arcs alone,
 * and the pages of the old region's holes can all go back to the kernel. Address space
 * is what this costs, and the reservation has plenty. */
static int build_plan(struct om_pool *pool)
{
    size_t n = 0, cap = pool->nrecords ? pool->nrecords : 1;
    om_rp_block *in = om_sys_map(cap * sizeof *in);
    uint64_t *offsets = om_sys_map(cap * sizeof *offsets);
    int rc = -ENOMEM;
    if (!in || !offsets)
        goto out;
    for (size_t r = 0; r < pool->nrecords; r++) {
        struct record *rec = &pool->records[r];
        if (rec->upper == NO_DEATH || rec->upper > rec->lower + pool->period)
            continue;
        in[n++] = (om_rp_block){.id = r,
                                .lower = rec->lower,
                                .upper = rec->upper,
                                .size = rec->len,
                                .align = rec->alignment};
    }
    char err[256] = "";
    om_rp_options opt = {.period = pool->period,
                         .budget_ms = PLAN_BUDGET_MS,
                         .alloc = om_rp_mmap,
                         .err = err,
                         .errlen = sizeof err};
    om_rp_result res;
    rc = om_rp_plan(in, n, &opt, offsets, &res);
    if (rc != 0) {
        om_warn("plan of %zu blocks failed: %s", n, err);
        goto out;
    }
    size_t base = (pool->arena.top + OM_ARENA_ALIGNMENT - 1) & ~(OM_ARENA_ALIGNMENT - 1);
    if (base > pool->arena.reserved || pool->arena.reserved - base < res.peak) {
        om_warn("the arena has no room left for a plan of %.1f MiB", res.peak / 1048576.0);
        rc = -ENOMEM;
        goto out;
    }
    memset(pool->slots, 0, pool->period * sizeof *pool->slots);
    for (size_t i = 0; i < n; i++) {
        struct record *rec = &pool->records[in[i].id];
        pool->slots[in[i].id] =
            (struct om_slot){rec->token, base + offsets[i], rec->len, rec->alignment};
    }
    rc = om_slot_index_build(&pool->plan_index, pool->slots, pool->period);
    if (rc != 0)
        goto out;
    pool->plan_end = base + res.peak;
    /* The region is dense and every iteration reuses it: huge pages make its first touch
     * a few hundred faults instead of one per page, and cost at most one partly used huge
     * page. Opt-in: with the kernel's default defrag=madvise, a huge page fault may wait
     * for compaction when memory is fragmented. A refusal leaves small pages. */
    if (pool->hugepages) {
        size_t len = (res.peak + OM_ARENA_ALIGNMENT - 1) & ~(OM_ARENA_ALIGNMENT - 1);
        if (len > pool->arena.reserved - base) /* never beyond the arena's own mapping */
            len = pool->arena.reserved - base;
        (void)madvise(pool->arena.base + base, len, MADV_HUGEPAGE);
    }
    pool->stats.plan_peak_bytes = res.peak;
    pool->stats.plan_lower_bound_bytes = res.lower_bound;
    pool->stats.plan_slots = n;
    pool->stats.plans++;
    om_info("plan: %zu slots of a %llu-request iteration, peak %.1f MiB (%.3f of its lower "
            "bound) in %.1f ms",
            n, (unsigned long long)pool->period, res.peak / 1048576.0,
            res.lower_bound ? (double)res.peak / (double)res.lower_bound : 1.0,
            res.elapsed_ns / 1e6);
out:
    om_sys_unmap(in, cap * sizeof *in);
    om_sys_unmap(offsets, cap * sizeof *offsets);
    return rc;
}

/* ---- the phases ---- */

void om_pool_learn(struct om_pool *pool)
{
    pool->phase = LEARN;
    pool->generation++;
    pool->ring_first = pool->learnt;
    pool->period = 0;
    pool->steady_from = UINT64_MAX;
}

static void start_recording(struct om_pool *pool, const struct om_block *b)
{
    pool->log_cycle_start = b->log ? b->log - 1 : UINT64_MAX;
    pool->phase = RECORD;
    pool->generation++;
    pool->nrecords = 0;
    pool->cursor = 0;
}

static int period_failed(const struct om_pool *pool, uint64_t period, uint64_t evidence)
{
    for (unsigned i = 0; i < pool->nfailed && i < FAILED_PERIODS; i++)
        if (pool->failed[i].period == period && evidence < pool->failed[i].evidence)
            return 1;
    return 0;
}

/* Every free page goes back; the ring of freed blocks waiting for release empties with it. */
static void release_all_free(struct om_pool *pool)
{
    pool->stats.released_bytes += om_arena_release_free(&pool->arena);
    pool->nfreed = 0;
}

void om_pool_end_of_served_iteration(struct om_pool *pool)
{
    if (pool->grace) {
        pool->grace = 0;
    } else if (pool->iteration_misses * 8 > pool->period) {
        om_debug("%llu misses in an iteration of %llu requests: learning again",
                 (unsigned long long)pool->iteration_misses, (unsigned long long)pool->period);
        pool->stats.replans++;
        /* A plan that missed at once was for a wrong period, or for the right one while
         * the program still changed (Python's interpreter specializes its calls over the
         * first steps, and the call sites of numpy's requests change with them): the
         * period is planned again once it has repeated over twice as many requests, which
         * a run of layers inside a step soon cannot. One that held a while was right until
         * the program changed, and its period may well come back. */
        if (pool->served_iterations < STEADY_ITERATIONS) {
            pool->failed[pool->nfailed % FAILED_PERIODS].period = pool->period;
            pool->failed[pool->nfailed++ % FAILED_PERIODS].evidence = 2 * pool->evidence;
        }
        /* The plan's pages would stay resident beside the holes best fit fills again. */
        release_all_free(pool);
        om_pool_learn(pool);
    } else {
        pool->stats.released_bytes += om_arena_release_tail(&pool->arena, pool->plan_end);
        if (++pool->served_iterations == STEADY_ITERATIONS)
            pool->nfailed = 0;
    }
    pool->iteration_misses = 0;
    pool->cursor = 0;
}

/* Plans the iteration in records; serving goes on at the slot of the next request. */
static void plan_now(struct om_pool *pool, uint64_t cursor)
{
    /* The plan goes above everything handed out, so the free pages below will not
     * serve it: they go back first, and the replanner's working memory takes
     * their place instead of adding to the peak. */
    release_all_free(pool);
    if (build_plan(pool) != 0) {
        om_pool_learn(pool);
        return;
    }
    pool->phase = SERVE;
    pool->cursor = cursor;
    pool->iteration_misses = pool->served_iterations = 0;
}

/* Of the iterations in the ring, the latest in which fewest blocks outlived a period: a
 * block that lingers now and then (freed an iteration late) gets no slot in a plan made
 * from an iteration where it lingered, and every later iteration misses it; from one
 * where it did not, it gets its slot, and the guard turns it away when it lingers. */
static uint64_t pick_iteration(const struct om_pool *pool, uint64_t latest, uint64_t p,
                               uint64_t now)
{
    uint64_t best = latest, best_long = UINT64_MAX;
    for (uint64_t first = latest;; first -= p) {
        uint64_t lived_long = 0;
        for (uint64_t r = 0; r < p; r++) {
            const struct record *e = &pool->ring[(first + r) % RING];
            lived_long += e->upper == NO_DEATH || e->upper > e->lower + p;
        }
        if (lived_long < best_long) {
            best = first;
            best_long = lived_long;
        }
        if (lived_long == 0 || first < pool->ring_first + p || first < pool->steady_from + p ||
            now - first + p >= RING)
            return best;
    }
}

/* A request learnt: into the ring. Where the tracer knows the requests to repeat with a
 * period far enough back, the last iteration whose next one is past as well is planned:
 * every block it made has died, or lives longer than a period. */
static void learn_request(struct om_pool *pool, struct om_block *b, uint64_t token,
                          size_t alignment, const struct om_alloc_info *info)
{
    uint64_t now = pool->learnt++;
    pool->ring[now % RING] =
        (struct record){token, now, NO_DEATH, b->size, b->len, alignment, b->log};
    b->record = (uint32_t)now + 1;
    b->generation = pool->generation;
    uint64_t p = info->period;
    if (p < MIN_PERIOD || p > MAX_PERIOD || !info->periodic ||
        period_failed(pool, p, info->periodic)) {
        pool->period = 0;
        return;
    }
    if (p != pool->period) {
        pool->period = p;
        pool->steady_from = UINT64_MAX;
    }
    uint64_t from = info->periodic > now ? 0 : now + 1 - info->periodic;
    if (from < pool->steady_from)
        pool->steady_from = from;
    if (2 * p > RING) { /* recorded as it comes, from the next iteration start */
        if (info->iteration_start)
            start_recording(pool, b);
        return;
    }
    uint64_t place = (now - pool->steady_from) % p;
    uint64_t back = place + (place == p - 1 ? p : 2 * p); /* to the latest iteration planned */
    if (back >= RING || back > now - pool->ring_first)
        return;
    uint64_t first = pick_iteration(pool, now - back, p, now);
    for (uint64_t r = 0; r < p; r++) {
        const struct record *e = &pool->ring[(first + r) % RING];
        uint64_t upper = e->upper == NO_DEATH ? NO_DEATH : e->upper - first;
        pool->records[r] = (struct record){e->token, r, upper, e->size, e->len, e->alignment, 0};
    }
    pool->nrecords = p;
    uint32_t log = pool->ring[first % RING].log;
    pool->log_cycle_start = log ? log - 1 : UINT64_MAX;
    pool->evidence = info->periodic;
    plan_now(pool, (back + 1) % p);
}

void om_pool_after_cycle_request(struct om_pool *pool, struct om_block *b, uint64_t token,
                                 size_t alignment, const struct om_alloc_info *info)
{
    if (pool->phase == LEARN) {
        learn_request(pool, b, token, alignment, info);
        if (pool->phase != RECORD)
            return;
    }
    if (pool->phase == RECORD) {
        pool->records[pool->nrecords] =
            (struct record){token, pool->nrecords, NO_DEATH, b->size, b->len, alignment, 0};
        b->record = (uint32_t)++pool->nrecords;
        b->generation = pool->generation;
        if (pool->nrecords == pool->period) {
            pool->phase = OBSERVE;
            pool->observed = 0;
        }
    } else if (pool->phase == OBSERVE) {
        if (++pool->observed == pool->period) {
            pool->evidence = info->periodic;
            plan_now(pool, 0);
        }
    }
}
