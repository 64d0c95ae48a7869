/* Plan mode: a domain's arena, the iteration recorder, the plan and the cursor that serves
 * it. */
#include "pool.h"
#include "arena.h"
#include "blockmap.h"
#include "log.h"
#include "pending.h"
#include "replanner.h"
#include "saved_plan.h"
#include "slots.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define REDZONE 64 /* OPTMEM_VERIFY=1: bytes after each block, checked at free */
#define REDZONE_BYTE 0xa5
#define MAX_PERIOD (1u << 20) /* longer iterations are served by best fit only */
/* While serving, freed blocks this large that were not planned give their pages back at
 * once, as glibc unmaps its mmap'd chunks; blocks at planned offsets keep their pages,
 * which the next iteration reuses. */
#define RELEASE_BLOCK_MIN ((size_t)64 << 10)
/* Before a plan: the last freed blocks of that size, oldest first, whose pages go back
 * when the arena holds more than 1/RESIDENT_SLACK above the most bytes ever live. */
#define FREED_RANGES 4096
#define RESIDENT_SLACK 128
/* The search stops as soon as a plan meets its lower bound; the budget bounds the one-off
 * pause of a plan that cannot (the transformer's 1883-slot iteration needs 30 to 50 ms to
 * reach its bound, and stopped at 1.09 of it with the replanner's 20 ms default). */
#define PLAN_BUDGET_MS 200
#define NO_DEATH UINT64_MAX
#define LOG_CAPACITY ((size_t)1 << 20) /* main-thread requests logged for a saved plan */
/* A saved plan whose prologue misses more than half of its first requests is another
 * run's: it is dropped and the program is learnt as usual. */
#define PROLOGUE_PROBE 64
#define MIN_PERIOD 3 /* shorter "iterations" are runs of equal requests, not a training step */
#define FAILED_PERIODS 8
/* A plan that serves this many iterations proves the program steady again. */
#define STEADY_ITERATIONS 3
/* While learning, the iteration-defining thread's last requests: once a period is known, the
 * plan is made from an iteration already past whose next one is past too, rather than from
 * one recorded and one observed from then on, two iterations later. Periods up to a third
 * of it are planned at once, up to half of it at the end of an iteration; longer ones
 * (detected ones reach 32767) are recorded as they come. Its pages are touched only as far
 * as it is used. */
#define RING (1u << 15)

/* Learn: waiting for the tracer to find a period, the ring keeping the requests. Record:
 * one iteration's requests, for a period too long for the ring. Observe: the next
 * iteration, to see when the last blocks die. Serve. Prologue: a saved plan serves the
 * main thread's requests before the iteration. */
enum phase { LEARN, RECORD, OBSERVE, SERVE, PROLOGUE };

struct record {
    uint64_t token, lower, upper; /* in the ring: indices among the requests learnt */
    size_t size, len, alignment;
    uint32_t log; /* in the ring: the request's index + 1 in the request log, 0 for none */
};

struct om_pool {
    pthread_mutex_t lock;
    struct om_arena arena;
    struct om_blockmap blocks;
    struct om_pending pending; /* stream-ordered frees; empty on the host */
    unsigned domain;
    int host; /* the host domain: zeroing, red zones, saved plans */
    /* Before a plan: a ring of freed blocks whose pages may still be resident. */
    struct om_extent *freed;
    size_t freed_head, nfreed;
    size_t peak_used;   /* the most bytes the arena had taken at once */
    size_t max_request; /* larger requests go to the real allocator */
    size_t redzone;
    enum phase phase;
    uint32_t generation; /* bumped whenever recording starts again */
    uint64_t period, cursor, observed;
    struct record *records;
    size_t nrecords;
    struct record *ring;
    uint64_t learnt;       /* requests put in the ring: the index of the next */
    uint64_t ring_first;   /* the first of the current learning; those before are stale */
    uint64_t steady_from;  /* the first known to repeat with period; UINT64_MAX: none */
    struct om_slot *slots; /* the plan: one per request of the iteration */
    struct om_slot_index plan_index;
    size_t plan_end; /* the plan's region ends here; fallbacks go above */
    struct om_serving_stats stats;
    uint64_t iteration_misses, served_iterations;
    /* Periods whose plans missed: sub-periods (a layer repeated inside a step) that the
     * detector locks onto before the whole step. Not planned again until a plan holds, or
     * until the period has repeated over twice the requests it had when it was planned. */
    struct {
        uint64_t period, evidence; /* planned again once it repeats over this many requests */
    } failed[FAILED_PERIODS];
    unsigned nfailed;
    uint64_t evidence; /* requests the period was seen to repeat over when it was planned */
    /* OPTMEM_PLAN_FILE */
    char plan_file[PATH_MAX];
    struct om_saved_plan saved; /* loaded: its prologue is being served */
    uint64_t prologue_cursor, prologue_misses;
    int grace;                 /* the iteration after the prologue: its misses do not count */
    struct om_request_log log; /* not loaded: this run's main-thread requests */
    uint64_t main_requests, log_cycle_start;
};

/* The process's first thread: a saved plan's prologue is its requests. */
static unsigned fork_generation = 1;
static __thread unsigned tls_generation;
static __thread int tls_main;

static int on_main_thread(void)
{
    if (tls_generation != fork_generation) {
        tls_main = gettid() == getpid();
        tls_generation = fork_generation;
    }
    return tls_main;
}

/* Serves the saved plan from the first request: its iteration's slots are the plan, its
 * prologue is walked by a cursor of its own. */
static int install_saved_plan(struct om_pool *pool)
{
    const struct om_saved_plan *sp = &pool->saved;
    pool->period = sp->period;
    memcpy(pool->slots, sp->slots + sp->nprologue, sp->period * sizeof *pool->slots);
    if (om_slot_index_build(&pool->plan_index, pool->slots, pool->period) != 0)
        return -ENOMEM;
    pool->plan_end = sp->peak;
    pool->stats.plan_peak_bytes = sp->peak;
    pool->stats.plan_lower_bound_bytes = sp->lower_bound;
    pool->stats.plan_slots = sp->period;
    pool->stats.saved_plan = 1;
    pool->phase = sp->nprologue ? PROLOGUE : SERVE;
    return 0;
}

static void open_plan_file(struct om_pool *pool, const struct om_config *cfg)
{
    if (om_path_expand(cfg->plan_file, (long)getpid(), om_env_rank(), pool->plan_file,
                       sizeof pool->plan_file) != 0) {
        om_warn("OPTMEM_PLAN_FILE=%s: the path is too long; no plan is saved", cfg->plan_file);
        pool->plan_file[0] = '\0';
        return;
    }
    char err[128] = "";
    int rc = om_saved_plan_read(pool->plan_file, om_saved_plan_program(), pool->arena.reserved,
                                &pool->saved, err, sizeof err);
    if (rc == 0 && pool->saved.period <= MAX_PERIOD && install_saved_plan(pool) == 0) {
        om_info("serving the saved plan %s (%llu prologue requests, an iteration of %llu)",
                pool->plan_file, (unsigned long long)pool->saved.nprologue,
                (unsigned long long)pool->saved.period);
        return;
    }
    om_saved_plan_free(&pool->saved);
    if (rc == -EINVAL)
        om_warn("OPTMEM_PLAN_FILE %s is ignored: %s; a new plan is written at exit",
                pool->plan_file, err);
    else if (rc != 0 && rc != -ENOENT)
        om_warn("OPTMEM_PLAN_FILE %s cannot be read (%s); a new plan is written at exit",
                pool->plan_file, strerror(-rc));
    if (om_request_log_init(&pool->log, LOG_CAPACITY) != 0)
        pool->plan_file[0] = '\0';
}

int om_pool_create(struct om_pool **out, const struct om_backend *backend, unsigned domain,
                   size_t reserve, const struct om_config *cfg)
{
    struct om_pool *pool = om_sys_map(sizeof *pool);
    if (!pool)
        return -ENOMEM;
    pthread_mutex_init(&pool->lock, NULL);
    int rc = om_arena_init(&pool->arena, backend, reserve);
    if (rc == 0)
        rc = om_blockmap_init(&pool->blocks);
    if (rc == 0) {
        pool->records = om_sys_map(MAX_PERIOD * sizeof *pool->records);
        pool->slots = om_sys_map(MAX_PERIOD * sizeof *pool->slots);
        pool->freed = om_sys_map(FREED_RANGES * sizeof *pool->freed);
        pool->ring = om_sys_map(RING * sizeof *pool->ring);
        if (!pool->records || !pool->slots || !pool->freed || !pool->ring)
            rc = -ENOMEM;
    }
    if (rc != 0)
        return rc; /* what was mapped stays: address space of a process that goes on */
    pool->domain = domain;
    pool->host = backend->host_addressable;
    /* Host requests beyond a quarter of the reservation are the real allocator's; a device
     * arena may be one fixed block, and all of it serves. */
    pool->max_request = pool->host ? pool->arena.reserved / 4 : pool->arena.reserved;
    pool->redzone = cfg->verify && pool->host ? REDZONE : 0;
    pool->log_cycle_start = UINT64_MAX;
    pool->steady_from = UINT64_MAX;
    if (cfg->plan_file[0] && pool->host)
        open_plan_file(pool, cfg);
    om_tracer_set_arena(domain, pool->arena.base, pool->arena.reserved);
    *out = pool;
    return 0;
}

void om_pool_range(const struct om_pool *pool, uintptr_t *lo, size_t *len)
{
    *lo = (uintptr_t)pool->arena.base;
    *len = pool->arena.reserved;
}

int om_pool_contains(const struct om_pool *pool, const void *p)
{
    return om_arena_contains(&pool->arena, p);
}

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

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

/* Learning starts over: what the ring holds was before a gap (served, or recorded). */
static void learn(struct om_pool *pool)
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

static void end_of_served_iteration(struct om_pool *pool)
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
        pool->stats.released_bytes += om_arena_release_free(&pool->arena);
        pool->nfreed = 0;
        learn(pool);
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
    pool->stats.released_bytes += om_arena_release_free(&pool->arena);
    pool->nfreed = 0;
    if (build_plan(pool) != 0) {
        learn(pool);
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

/* Advances the phase after a request of the iteration-defining thread was placed. */
static void after_cycle_request(struct om_pool *pool, struct om_block *b, uint64_t token,
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

/* The guard: a planned offset is handed out only when the slot holds the request and no
 * live block overlaps it. */
static int take_planned(struct om_pool *pool, size_t offset, size_t slot_len, size_t len,
                        size_t alignment, uintptr_t stream)
{
    if (slot_len < len || (offset & (alignment - 1)))
        return 0;
    int rc = stream != OM_STREAM_NONE && pool->pending.live
                 ? om_pending_take(&pool->pending, &pool->arena, offset, len, stream)
                 : om_arena_take(&pool->arena, offset, len);
    if (rc != 0) {
        pool->stats.guard_rejections++;
        return 0;
    }
    pool->stats.served_from_plan++;
    return 1;
}

/* A main-thread request while a saved plan's prologue is served: the next slot of its
 * token, whatever the order the tokens come in. */
static int place_in_prologue(struct om_pool *pool, size_t len, size_t alignment, uint64_t token,
                             size_t *off)
{
    uint64_t s = om_slot_index_take(&pool->saved.prologue, pool->saved.slots, token);
    if (s == UINT64_MAX) {
        pool->stats.misses++;
        pool->prologue_misses++;
    } else {
        pool->stats.hits++;
    }
    const struct om_slot *slot = &pool->saved.slots[s == UINT64_MAX ? 0 : s];
    int served = s != UINT64_MAX &&
                 take_planned(pool, slot->offset, slot->len, len, alignment, OM_STREAM_NONE);
    if (served)
        *off = slot->offset;
    if (++pool->prologue_cursor >= pool->saved.nprologue) {
        /* The iteration's cursor finds its place by token: one iteration's grace. */
        pool->phase = SERVE;
        pool->cursor = pool->iteration_misses = pool->served_iterations = 0;
        pool->grace = 1;
    } else if (pool->prologue_cursor == PROLOGUE_PROBE &&
               pool->prologue_misses * 2 > PROLOGUE_PROBE) {
        om_warn("the saved plan %s does not fit this run (%llu of its first %d requests "
                "differ); learning as usual, no plan is saved",
                pool->plan_file, (unsigned long long)pool->prologue_misses, PROLOGUE_PROBE);
        pool->stats.saved_plan = 0;
        learn(pool);
    }
    return served;
}

/* Picks the offset of a request: the expected slot, a slot found by token, or best fit. */
static int place(struct om_pool *pool, size_t len, size_t alignment, uintptr_t stream,
                 uint64_t token, int cycle_thread, int main_thread, size_t *off, int *planned)
{
    *planned = 0;
    pool->stats.serving_requests += pool->phase == SERVE || pool->phase == PROLOGUE;
    if (pool->phase == PROLOGUE && main_thread) {
        if ((*planned = place_in_prologue(pool, len, alignment, token, off)))
            return 0;
    } else if (pool->phase == SERVE && cycle_thread) {
        uint64_t s = pool->cursor;
        if (pool->slots[s].token != token) {
            s = om_slot_index_find(&pool->plan_index, pool->slots, token, pool->cursor);
            pool->stats.misses++;
            pool->iteration_misses++;
        } else {
            pool->stats.hits++;
        }
        uint64_t next = s == UINT64_MAX ? pool->cursor + 1 : s + 1;
        *planned = s != UINT64_MAX && take_planned(pool, pool->slots[s].offset, pool->slots[s].len,
                                                   len, alignment, stream);
        if (*planned)
            *off = pool->slots[s].offset;
        if (s != UINT64_MAX && s < pool->cursor) /* the iteration began anew */
            end_of_served_iteration(pool);
        pool->cursor = next;
        if (pool->cursor >= pool->period)
            end_of_served_iteration(pool);
        if (*planned)
            return 0;
    }
    size_t floor = pool->phase == SERVE || pool->phase == PROLOGUE ? pool->plan_end : 0;
    int rc = om_arena_best_fit(&pool->arena, len, alignment, floor, off);
    if (rc == 0)
        rc = om_arena_take(&pool->arena, *off, len);
    if (rc == 0)
        pool->stats.fallbacks += pool->phase == SERVE || pool->phase == PROLOGUE;
    return rc;
}

/* ---- the entry points ---- */

/* Best fit before a plan holds pages that no live block uses; once they exceed a small
 * share of the peak of live bytes, the holes freed longest ago, where still free, give
 * theirs back. A program whose holes fit its next requests keeps its pages and faults
 * nothing in again, where releasing every hole would refault each iteration. */
static void release_idle(struct om_pool *pool)
{
    size_t used = pool->arena.used_bytes, released = 0;
    if (used > pool->peak_used)
        pool->peak_used = used;
    size_t limit = pool->peak_used + pool->peak_used / RESIDENT_SLACK;
    while (pool->nfreed && om_arena_resident(&pool->arena) > limit) {
        struct om_extent e = pool->freed[pool->freed_head];
        pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
        pool->nfreed--;
        released += om_arena_release_range(&pool->arena, e.off, e.len);
    }
    pool->stats.released_bytes += released;
}

void *om_pool_alloc(struct om_pool *pool, size_t size, size_t alignment, int zero, uintptr_t stream,
                    const struct om_stack *stack)
{
    if (size > pool->max_request || alignment > OM_ARENA_ALIGNMENT)
        return NULL; /* the real allocator says what happens to such a request */
    uint64_t token = om_token_of(stack, size);
    size_t len = round16(size) + pool->redzone;
    if (alignment < 16)
        alignment = 16;
    int cycle_thread = om_tracer_on_cycle_thread(pool->domain), main_thread = on_main_thread();
    pthread_mutex_lock(&pool->lock);
    if (pool->pending.live)
        om_pending_settle(&pool->pending, &pool->arena);
    size_t touched = pool->arena.touched, resident = om_arena_resident(&pool->arena), off;
    int planned;
    if (place(pool, len, alignment, stream, token, cycle_thread, main_thread, &off, &planned) != 0)
        goto fail;
    if (pool->phase != SERVE && om_arena_resident(&pool->arena) > resident)
        release_idle(pool);
    struct om_block b = {off, len, size, 0, 0, 0, planned ? OM_BLOCK_PLANNED : 0};
    /* A saved plan needs the run's main-thread requests from the start until a plan has
     * held (a plan for a wrong period may serve an iteration or two before it misses):
     * logged by index, so logging stops for good at the first gap. */
    if (main_thread) {
        if (pool->log.n == pool->main_requests &&
            (pool->phase != SERVE || pool->served_iterations < STEADY_ITERATIONS))
            b.log = om_request_log_add(&pool->log, token, len, alignment);
        pool->main_requests++;
    }
    if (om_blockmap_put(&pool->blocks, &b) != 0) {
        om_arena_give(&pool->arena, off, len);
        goto fail;
    }
    unsigned char *p = pool->arena.base + off;
    if (zero && pool->host && off < touched) /* above `touched`: fresh pages, zero */
        memset(p, 0, touched - off < size ? touched - off : size);
    if (pool->redzone)
        memset(p + round16(size), REDZONE_BYTE, pool->redzone);
    struct om_alloc_info info;
    om_tracer_on_alloc(pool->domain, p, size, round16(size), alignment, stack, &info);
    if (cycle_thread)
        after_cycle_request(pool, om_blockmap_get(&pool->blocks, off), token, alignment, &info);
    pthread_mutex_unlock(&pool->lock);
    return p;
fail:
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static void check_redzone(struct om_pool *pool, const struct om_block *b)
{
    const unsigned char *z = pool->arena.base + b->off + round16(b->size);
    for (size_t i = 0; i < pool->redzone; i++) {
        if (z[i] != REDZONE_BYTE) {
            pool->stats.verify_violations++;
            om_warn("verify: a block of %zu bytes at %p was written past its end (byte %zu)",
                    b->size, (void *)(pool->arena.base + b->off), round16(b->size) + i);
            return;
        }
    }
}

/* Takes the live block at p out of the map and the recording; *found says if p was one. */
static struct om_block take_block(struct om_pool *pool, void *p, int *found)
{
    size_t off = (size_t)((unsigned char *)p - pool->arena.base);
    struct om_block *b = om_blockmap_get(&pool->blocks, off), gone = {0};
    *found = b != NULL;
    if (!b) {
        pool->stats.invalid_frees++;
        om_warn("free(%p): not a live block of the pool (double free?); ignored", p);
        return gone;
    }
    if (pool->redzone)
        check_redzone(pool, b);
    om_tracer_on_free(pool->domain, p);
    if (b->record && b->generation == pool->generation) {
        if (pool->phase == RECORD || pool->phase == OBSERVE) {
            pool->records[b->record - 1].upper =
                pool->phase == RECORD ? pool->nrecords : pool->period + pool->observed;
        } else if (pool->phase == LEARN) {
            /* Unless a later request took its place in the ring. */
            struct record *e = &pool->ring[(b->record - 1) % RING];
            if ((uint32_t)e->lower == b->record - 1 && e->upper == NO_DEATH)
                e->upper = pool->learnt;
        }
    }
    gone = *b;
    if (gone.log)
        pool->log.entries[gone.log - 1].death = pool->main_requests;
    om_blockmap_remove(&pool->blocks, b);
    return gone;
}

/* A block freed on a stream: pending behind a fence; where none can be recorded, out of
 * use for good rather than reused too early. */
static int free_in_stream_order(struct om_pool *pool, const struct om_block *b, uintptr_t stream)
{
    const struct om_backend *be = pool->arena.backend;
    uintptr_t fence;
    if (be->fence_record(be->ctx, stream, &fence) != 0)
        return -EIO;
    if (om_pending_add(&pool->pending, b->off, b->len, stream, fence) != 0) {
        be->fence_drop(be->ctx, fence);
        return -ENOMEM;
    }
    return 0;
}

/* Before a plan, best fit leaves holes whose pages stay resident. Freed blocks are
 * remembered, oldest dropped first when the ring is full. */
static void remember_freed(struct om_pool *pool, size_t off, size_t len)
{
    if (len < RELEASE_BLOCK_MIN || !pool->freed)
        return;
    if (pool->nfreed == FREED_RANGES) {
        pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
        pool->nfreed--;
    }
    pool->freed[(pool->freed_head + pool->nfreed++) % FREED_RANGES] = (struct om_extent){off, len};
}

void om_pool_free(struct om_pool *pool, void *p, uintptr_t stream)
{
    int found;
    pthread_mutex_lock(&pool->lock);
    struct om_block gone = take_block(pool, p, &found);
    if (!found)
        goto out;
    if (stream != OM_STREAM_NONE && pool->arena.backend->fence_record) {
        if (free_in_stream_order(pool, &gone, stream) != 0)
            pool->stats.retired_blocks++;
        goto out;
    }
    om_arena_give(&pool->arena, gone.off, gone.len);
    /* A planned block's pages serve its slot again (a saved plan's prologue's too). */
    int planned = gone.flags & OM_BLOCK_PLANNED;
    if (!planned && pool->phase == SERVE && gone.len >= RELEASE_BLOCK_MIN)
        pool->stats.released_bytes += om_arena_release_range(&pool->arena, gone.off, gone.len);
    else if (!planned && pool->phase != SERVE && pool->host)
        remember_freed(pool, gone.off, gone.len);
    if (pool->redzone && om_arena_check(&pool->arena) != 0) {
        pool->stats.verify_violations++;
        om_warn("verify: the arena's free extents are inconsistent");
    }
out:
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_retire(struct om_pool *pool, void *p)
{
    int found;
    pthread_mutex_lock(&pool->lock);
    take_block(pool, p, &found);
    pool->stats.retired_blocks += found;
    pthread_mutex_unlock(&pool->lock);
}

size_t om_pool_usable_size(struct om_pool *pool, const void *p)
{
    size_t off = (size_t)((const unsigned char *)p - pool->arena.base);
    pthread_mutex_lock(&pool->lock);
    struct om_block *b = om_blockmap_get(&pool->blocks, off);
    size_t usable = b ? round16(b->size) : 0;
    pthread_mutex_unlock(&pool->lock);
    return usable;
}

int om_pool_try_stats(struct om_pool *pool, struct om_serving_stats *stats)
{
    if (pthread_mutex_trylock(&pool->lock) != 0)
        return -EBUSY;
    pool->stats.arena_top_bytes = pool->arena.top;
    *stats = pool->stats;
    pthread_mutex_unlock(&pool->lock);
    return 0;
}

void om_pool_publish(struct om_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stats.arena_top_bytes = pool->arena.top;
    om_tracer_set_serving(pool->domain, &pool->stats);
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_save_plan(struct om_pool *pool)
{
    if (!pool->plan_file[0] || !pool->log.entries)
        return;
    pthread_mutex_lock(&pool->lock);
    uint64_t n0 = pool->log_cycle_start;
    struct om_cycle_arc *arcs = NULL;
    size_t narcs = 0, bytes = (pool->nrecords ? pool->nrecords : 1) * sizeof *arcs;
    struct om_saved_plan plan = {0};
    char err[256] = "";
    int rc = -ENOENT;
    if (pool->phase != SERVE || n0 == UINT64_MAX || n0 >= pool->log.n) {
        snprintf(err, sizeof err, "no steady iteration of the main thread was learnt");
        goto out;
    }
    rc = -ENOMEM;
    if (!(arcs = om_sys_map(bytes)))
        goto out;
    for (size_t r = 0; r < pool->nrecords; r++) {
        const struct record *rec = &pool->records[r];
        if (rec->upper != NO_DEATH && rec->upper <= rec->lower + pool->period)
            arcs[narcs++] = (struct om_cycle_arc){r,          rec->token, rec->lower,
                                                  rec->upper, rec->len,   rec->alignment};
    }
    rc = om_saved_plan_build(&pool->log, n0, arcs, narcs, pool->period, &plan, err, sizeof err);
    if (rc == 0 && (rc = om_saved_plan_write(pool->plan_file, om_saved_plan_program(), &plan)))
        snprintf(err, sizeof err, "%s", strerror(-rc));
out:
    if (rc == 0)
        om_info("plan saved to %s: %llu prologue requests and an iteration of %llu, peak %.1f "
                "MiB (%.3f of its lower bound)",
                pool->plan_file, (unsigned long long)n0, (unsigned long long)pool->period,
                plan.peak / 1048576.0,
                plan.lower_bound ? (double)plan.peak / (double)plan.lower_bound : 1.0);
    else
        om_warn("no plan saved to %s: %s", pool->plan_file, err);
    om_saved_plan_free(&plan);
    om_sys_unmap(arcs, bytes);
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_lock(struct om_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
}

void om_pool_unlock(struct om_pool *pool)
{
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_atfork_child(struct om_pool *pool)
{
    fork_generation++;
    pool->plan_file[0] = '\0'; /* the parent saves the plan; a child's run is another */
    pthread_mutex_unlock(&pool->lock);
}
