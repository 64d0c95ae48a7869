/* Unit tests of plan mode's pool through its module interface (pool.h): best fit while
 * learning, a plan served from slots, fallbacks, the guard, replans, kept plans, idle pages
 * given back in slices before a plan, frees of unknown pointers, calloc, alignment,
 * OPTMEM_PLAN_DUMP and the optmem-plan thread, with no two live blocks ever overlapping. */
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "engine.h"
#include "log.h"
#include "pool.h"
#include "pool_internal.h"
#include "replanner.h"
#include "saved_plan.h"
#include "slots.h"
#include "tracer.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define ARENA_BYTES ((size_t)1 << 30)
#define MAX_LIVE 256
#define DIRT 0xab

static struct om_pool *pool;
static unsigned char *base;

/* The guard's model: every live block, checked against each new one. */
static struct {
    unsigned char *p;
    size_t len;
} live[MAX_LIVE];
static size_t nlive;

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static struct om_stack site(unsigned id)
{
    struct om_stack s = {
        .depth = 3,
        .frames = {(void *)(uintptr_t)(0x400000 + 64 * id), (void *)0x7000, (void *)0x7100}};
    return s;
}

static const char *no_env(const char *name)
{
    return NULL;
}

/* A fresh tracer and pool; plan_thread as OPTMEM_PLAN_THREAD (0: inline, deterministic),
 * hugepages as OPTMEM_HUGEPAGES (pages do not move), dump as OPTMEM_PLAN_DUMP. */
static void start_on(const struct om_backend *backend, int plan_thread, int hugepages,
                     const char *dump)
{
    assert_int_equal(om_config_load(&om_cfg, no_env), 0);
    om_cfg.plan_thread = plan_thread;
    om_cfg.hugepages = hugepages;
    snprintf(om_cfg.plan_dump, sizeof om_cfg.plan_dump, "%s", dump);
    om_log_level = OM_LOG_QUIET;
    struct om_tracer_options opt = {
        .min_bytes = 4096, .stack_depth = 3, .report_template = "", .mode_name = "plan"};
    assert_int_equal(om_tracer_init(&opt), 0);
    assert_int_equal(om_pool_create(&pool, backend, OM_TRACER_HOST, ARENA_BYTES, &om_cfg), 0);
    uintptr_t lo;
    size_t len;
    om_pool_range(pool, &lo, &len);
    base = (unsigned char *)lo;
    assert_true(len >= ARENA_BYTES);
    nlive = 0;
}

static void start_with(int plan_thread, int hugepages, const char *dump)
{
    start_on(&om_host_backend, plan_thread, hugepages, dump);
}

static void start(int plan_thread)
{
    start_with(plan_thread, 0, "");
}

static int setup_inline(void **state)
{
    start(0);
    return 0;
}

static struct om_serving_stats stats(void)
{
    struct om_serving_stats s;
    om_pool_stats(pool, &s);
    return s;
}

static size_t offset_of(const void *p)
{
    return (size_t)((const unsigned char *)p - base);
}

static void *take(unsigned id, size_t size, size_t alignment, int zero)
{
    struct om_stack s = site(id);
    unsigned char *p = om_pool_alloc(pool, size, alignment, zero, OM_STREAM_NONE, &s);
    assert_non_null(p);
    assert_true(om_pool_contains(pool, p));
    assert_int_equal((uintptr_t)p % (alignment > 16 ? alignment : 16), 0);
    assert_int_equal(om_pool_usable_size(pool, p), round16(size));
    size_t len = round16(size);
    for (size_t k = 0; k < nlive; k++)
        assert_false(live[k].p < p + len && p < live[k].p + live[k].len);
    assert_true(nlive < MAX_LIVE);
    live[nlive].p = p;
    live[nlive++].len = len;
    if (zero)
        for (size_t i = 0; i < size; i++)
            assert_int_equal(p[i], 0);
    return p;
}

/* Dirties the block, so that a later calloc over its bytes must zero them. */
static void give(void *p)
{
    for (size_t k = 0; k < nlive; k++) {
        if (live[k].p == p) {
            memset(p, DIRT, live[k].len);
            live[k] = live[--nlive];
            om_pool_free(pool, p, OM_STREAM_NONE);
            return;
        }
    }
    fail_msg("freeing %p, which the test does not hold", p);
}

/* A training step as a list of requests and frees: allocs number the step's blocks in
 * order, a free names one of them. */
enum { ALLOC, FREE };
struct op {
    int kind;
    unsigned id; /* ALLOC: call site; FREE: the block's number in the step */
    size_t size, alignment;
    int zero;
};

#define STEP_MAX 32

/* Phase A: 18 requests, sizes in multiples of 64 KiB (any packing is aligned), two aligned
 * and two zeroed, lifetimes that cross. */
static const struct op step_a[] = {
    {ALLOC, 1, 320 * KIB, 0, 0},
    {ALLOC, 2, 192 * KIB, 0, 1},
    {ALLOC, 3, 64 * KIB, 0, 0},
    {FREE, 2, 0, 0, 0},
    {ALLOC, 4, 128 * KIB, 4096, 0},
    {FREE, 0, 0, 0, 0},
    {ALLOC, 5, 512 * KIB, 65536, 0},
    {ALLOC, 6, 64 * KIB, 0, 0},
    {FREE, 1, 0, 0, 0},
    {ALLOC, 7, 256 * KIB, 0, 0},
    {FREE, 5, 0, 0, 0},
    {ALLOC, 8, 128 * KIB, 0, 1},
    {FREE, 3, 0, 0, 0},
    {ALLOC, 9, 64 * KIB, 0, 0},
    {FREE, 8, 0, 0, 0},
    {ALLOC, 10, 384 * KIB, 0, 0},
    {FREE, 4, 0, 0, 0},
    {FREE, 6, 0, 0, 0},
    {ALLOC, 11, 192 * KIB, 0, 0},
    {FREE, 7, 0, 0, 0},
    {FREE, 9, 0, 0, 0},
    {ALLOC, 12, 64 * KIB, 0, 0},
    {FREE, 10, 0, 0, 0},
    {FREE, 11, 0, 0, 0},
    {ALLOC, 13, 64 * KIB, 0, 0},
    {ALLOC, 14, 128 * KIB, 0, 0},
    {FREE, 12, 0, 0, 0},
    {ALLOC, 15, 64 * KIB, 0, 0},
    {FREE, 13, 0, 0, 0},
    {ALLOC, 16, 192 * KIB, 0, 0},
    {FREE, 14, 0, 0, 0},
    {ALLOC, 17, 64 * KIB, 0, 0},
    {FREE, 15, 0, 0, 0},
    {ALLOC, 18, 128 * KIB, 0, 0},
    {FREE, 16, 0, 0, 0},
    {FREE, 17, 0, 0, 0},
};
#define STEP_A_REQUESTS 18

/* Phase B: other call sites and sizes (an evaluation step). */
static const struct op step_b[] = {
    {ALLOC, 21, 448 * KIB, 0, 0}, {ALLOC, 22, 128 * KIB, 0, 0}, {FREE, 0, 0, 0, 0},
    {ALLOC, 23, 64 * KIB, 0, 0},  {ALLOC, 24, 640 * KIB, 0, 0}, {FREE, 1, 0, 0, 0},
    {ALLOC, 25, 192 * KIB, 0, 1}, {FREE, 2, 0, 0, 0},           {ALLOC, 26, 320 * KIB, 0, 0},
    {FREE, 3, 0, 0, 0},           {ALLOC, 27, 128 * KIB, 0, 0}, {FREE, 4, 0, 0, 0},
    {ALLOC, 28, 64 * KIB, 0, 0},  {FREE, 5, 0, 0, 0},           {FREE, 6, 0, 0, 0},
    {ALLOC, 29, 256 * KIB, 0, 0}, {FREE, 7, 0, 0, 0},           {FREE, 8, 0, 0, 0},
    {ALLOC, 30, 64 * KIB, 0, 0},  {FREE, 9, 0, 0, 0},
};
#define STEP_B_REQUESTS 10

#define NOPS(step) (sizeof(step) / sizeof(step)[0])

/* Runs ops [from, to) of a step whose blocks so far are blocks[0, *made). */
static void run_ops(const struct op *ops, size_t from, size_t to, void **blocks, unsigned *made)
{
    for (size_t i = from; i < to; i++) {
        if (ops[i].kind == ALLOC) {
            blocks[*made] = take(ops[i].id, ops[i].size, ops[i].alignment, ops[i].zero);
            ++*made;
        } else {
            assert_true(ops[i].id < *made);
            give(blocks[ops[i].id]);
        }
    }
}

/* Runs one step; offsets (when not NULL) receive each request's offset in the arena. */
static void run_step(const struct op *ops, size_t n, size_t *offsets)
{
    void *blocks[STEP_MAX];
    unsigned made = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == ALLOC) {
            blocks[made] = take(ops[i].id, ops[i].size, ops[i].alignment, ops[i].zero);
            if (offsets)
                offsets[made] = offset_of(blocks[made]);
            made++;
        } else {
            assert_true(ops[i].id < made);
            give(blocks[ops[i].id]);
        }
    }
}

/* The most bytes of a step's blocks live at once. */
static size_t step_lower_bound(const struct op *ops, size_t n)
{
    size_t sizes[STEP_MAX], live_bytes = 0, most = 0;
    unsigned made = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == ALLOC) {
            sizes[made] = round16(ops[i].size);
            live_bytes += sizes[made++];
            most = live_bytes > most ? live_bytes : most;
        } else {
            live_bytes -= sizes[ops[i].id];
        }
    }
    return most;
}

/* Steps until a plan serves a whole step from its slots; the number of steps run. */
static unsigned run_until_served(const struct op *ops, size_t n, unsigned requests,
                                 unsigned max_steps)
{
    for (unsigned s = 1; s <= max_steps; s++) {
        uint64_t before = stats().served_from_plan;
        run_step(ops, n, NULL);
        if (stats().served_from_plan - before == requests)
            return s;
    }
    fail_msg("no step was served from a plan within %u steps", max_steps);
    return 0;
}

/* (a) Learning: best fit, compact, the smallest hole that holds a request. */
static void test_learning_best_fit(void **state)
{
    void *a = take(1, 256 * KIB, 0, 0);
    void *b = take(2, 64 * KIB, 0, 0);
    void *c = take(3, 128 * KIB, 0, 0);
    void *d = take(4, 32 * KIB, 0, 0);
    void *e = take(5, 16 * KIB, 0, 0);
    /* Each above the last, with no gap. */
    assert_int_equal(offset_of(b), offset_of(a) + 256 * KIB);
    assert_int_equal(offset_of(c), offset_of(b) + 64 * KIB);
    assert_int_equal(offset_of(d), offset_of(c) + 128 * KIB);
    assert_int_equal(offset_of(e), offset_of(d) + 32 * KIB);
    give(a);
    give(d);
    /* Holes of 256 and 32 KiB: 24 KiB goes to the smaller, 100 KiB to the larger. */
    void *f = take(6, 24 * KIB, 0, 0);
    assert_int_equal(offset_of(f), offset_of(d));
    void *g = take(7, 100 * KIB, 0, 0);
    assert_int_equal(offset_of(g), offset_of(a));
    /* Nothing fits 400 KiB below the top: it goes above e. */
    void *h = take(8, 400 * KIB, 0, 0);
    assert_int_equal(offset_of(h), offset_of(e) + 16 * KIB);
    struct om_serving_stats s = stats();
    assert_int_equal(s.plans, 0);
    assert_int_equal(s.serving_requests, 0);
    give(b), give(c), give(e), give(f), give(g), give(h);
    /* A learning loop of steps is placed by best fit without overlap (take() checks). */
    for (int i = 0; i < 2; i++)
        run_step(step_a, NOPS(step_a), NULL);
}

/* (b) A plan serves: the same request of each step at the same offset, every request from
 * its slot, the plan at its lower bound, the arena's top still. */
static void test_plan_serves_slots(void **state)
{
    void *weights = take(100, MIB, 0, 0);
    unsigned steps = run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    struct om_serving_stats s0 = stats();
    assert_int_equal(s0.plans, 1);
    assert_int_equal(s0.plan_slots, STEP_A_REQUESTS);
    size_t lb = step_lower_bound(step_a, NOPS(step_a));
    assert_int_equal(s0.plan_lower_bound_bytes, lb);
    assert_int_equal(s0.plan_peak_bytes, lb); /* a simple instance: optimal */
    size_t first[STEP_A_REQUESTS], now[STEP_A_REQUESTS];
    run_step(step_a, NOPS(step_a), first);
    struct om_serving_stats s1 = stats();
    size_t lo = SIZE_MAX, hi = 0;
    for (unsigned i = 0; i < STEP_A_REQUESTS; i++)
        lo = first[i] < lo ? first[i] : lo;
    for (unsigned r = 0, i = 0; r < NOPS(step_a); r++)
        if (step_a[r].kind == ALLOC) {
            size_t end = first[i++] + round16(step_a[r].size);
            hi = end > hi ? end : hi;
        }
    /* The slots lie within one region of the plan's peak, clear of the weights. */
    assert_true(hi - lo <= s0.plan_peak_bytes);
    assert_true(lo >= offset_of(weights) + MIB || hi <= offset_of(weights));
    for (int k = 0; k < 10; k++) {
        run_step(step_a, NOPS(step_a), now);
        assert_memory_equal(now, first, sizeof first);
    }
    struct om_serving_stats s2 = stats();
    assert_int_equal(s2.served_from_plan - s1.served_from_plan, 10 * STEP_A_REQUESTS);
    assert_int_equal(s2.hits - s1.hits, 10 * STEP_A_REQUESTS);
    assert_int_equal(s2.misses, s1.misses);
    assert_int_equal(s2.fallbacks, s1.fallbacks);
    assert_int_equal(s2.guard_rejections, 0);
    assert_int_equal(s2.replans, 0);
    assert_int_equal(s2.plans, 1);
    /* The free tail above the plan went back: the top is the plan's end, and stays. */
    assert_int_equal(s2.arena_top_bytes, s1.arena_top_bytes);
    assert_true(s2.arena_top_bytes <= hi + MIB);
    assert_true(steps <= 12); /* planned within a few steps of the period's detection */
    give(weights);
}

/* (c) A request the plan has no slot for falls back above the plan's region, overlaps
 * nothing, and the plan goes on serving. */
static void test_unknown_request_falls_back(void **state)
{
    void *weights = take(100, MIB, 0, 0);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    size_t slots[STEP_A_REQUESTS];
    run_step(step_a, NOPS(step_a), slots);
    size_t plan_hi = 0;
    for (unsigned r = 0, i = 0; r < NOPS(step_a); r++)
        if (step_a[r].kind == ALLOC) {
            size_t end = slots[i++] + round16(step_a[r].size);
            plan_hi = end > plan_hi ? end : plan_hi;
        }
    struct om_serving_stats s0 = stats();
    /* One step with a new request in the middle of it (new call site: a new token). */
    void *blocks[STEP_MAX], *stray;
    unsigned made = 0;
    run_ops(step_a, 0, 5, blocks, &made);
    stray = take(50, 96 * KIB, 0, 1);
    run_ops(step_a, 5, NOPS(step_a), blocks, &made);
    struct om_serving_stats s1 = stats();
    assert_true(offset_of(stray) >= plan_hi);
    assert_int_equal(s1.fallbacks - s0.fallbacks, 1);
    /* The stray request misses, once: the cursor stays at the slot of the request after
     * it, and every request of the step is still served from its slot. */
    assert_int_equal(s1.misses - s0.misses, 1);
    assert_int_equal(s1.hits - s0.hits, STEP_A_REQUESTS);
    assert_int_equal(s1.served_from_plan - s0.served_from_plan, STEP_A_REQUESTS);
    /* The stray block lives on over the next steps: their slots never meet it. */
    size_t now[STEP_A_REQUESTS];
    for (int k = 0; k < 5; k++) {
        run_step(step_a, NOPS(step_a), now);
        assert_memory_equal(now, slots, sizeof slots);
    }
    give(stray);
    struct om_serving_stats s2 = stats();
    assert_int_equal(s2.replans, 0);
    assert_int_equal(s2.served_from_plan - s1.served_from_plan, 5 * STEP_A_REQUESTS);
    give(weights);
}

/* A request made instead of one of the plan's (another call site, the same size) misses
 * once: the request after it takes the next slot as a hit, and the others are served. The
 * same where the request replaced is the step's last, its successor the next step's first. */
static void test_substituted_request_one_miss(void **state)
{
    void *weights = take(100, MIB, 0, 0);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    size_t slots[STEP_A_REQUESTS];
    run_step(step_a, NOPS(step_a), slots);
    static const unsigned replaced[] = {6, 18};
    for (unsigned k = 0; k < 2; k++) {
        struct op step[NOPS(step_a)];
        memcpy(step, step_a, sizeof step);
        for (size_t r = 0; r < NOPS(step); r++)
            if (step[r].kind == ALLOC && step[r].id == replaced[k])
                step[r].id = 60 + k;
        struct om_serving_stats s0 = stats();
        run_step(step, NOPS(step), NULL);
        size_t now[STEP_A_REQUESTS];
        run_step(step_a, NOPS(step_a), now);
        struct om_serving_stats s1 = stats();
        assert_int_equal(s1.misses - s0.misses, 1);
        assert_int_equal(s1.hits - s0.hits, 2 * STEP_A_REQUESTS - 1);
        assert_int_equal(s1.fallbacks - s0.fallbacks, 1);
        assert_int_equal(s1.served_from_plan - s0.served_from_plan, 2 * STEP_A_REQUESTS - 1);
        assert_int_equal(s1.replans, 0);
        assert_memory_equal(now, slots, sizeof slots);
    }
    give(weights);
}

/* Requests made instead of the plan's from then on (the same sizes from call sites whose
 * stacks changed, as Python's specializing interpreter makes them), two in a row: each misses
 * in the first step only, and then hits at the replaced request's slot, where the replaced
 * request hits as well. One of another size keeps missing: it is not the slot's. */
static void test_new_stacks_take_their_slots(void **state)
{
    void *weights = take(100, MIB, 0, 0);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    size_t slots[STEP_A_REQUESTS];
    run_step(step_a, NOPS(step_a), slots);
    struct op step[NOPS(step_a)];
    memcpy(step, step_a, sizeof step);
    for (size_t r = 0; r < NOPS(step); r++)
        if (step[r].kind == ALLOC && (step[r].id == 13 || step[r].id == 14))
            step[r].id += 60;
    struct om_serving_stats s0 = stats();
    run_step(step, NOPS(step), NULL);
    struct om_serving_stats s1 = stats();
    assert_int_equal(s1.misses - s0.misses, 2);
    assert_int_equal(s1.fallbacks - s0.fallbacks, 2);
    size_t now[STEP_A_REQUESTS];
    for (int k = 0; k < 4; k++) {
        run_step(step, NOPS(step), now);
        assert_memory_equal(now, slots, sizeof slots);
    }
    run_step(step_a, NOPS(step_a), now);
    assert_memory_equal(now, slots, sizeof slots);
    struct om_serving_stats s2 = stats();
    assert_int_equal(s2.misses, s1.misses);
    assert_int_equal(s2.fallbacks, s1.fallbacks);
    assert_int_equal(s2.served_from_plan - s1.served_from_plan, 5 * STEP_A_REQUESTS);
    assert_int_equal(s2.replans, 0);
    /* 64 KiB at the slot of a request of 128 KiB (id 8, followed by a hit). */
    memcpy(step, step_a, sizeof step);
    for (size_t r = 0; r < NOPS(step); r++)
        if (step[r].kind == ALLOC && step[r].id == 8)
            step[r].id = 70, step[r].size = 64 * KIB;
    for (int k = 0; k < 3; k++)
        run_step(step, NOPS(step), NULL);
    struct om_serving_stats s3 = stats();
    assert_int_equal(s3.misses - s2.misses, 3);
    assert_int_equal(s3.served_from_plan - s2.served_from_plan, 3 * (STEP_A_REQUESTS - 1));
    give(weights);
}

/* The guard: a block that outlives its step holds its slot's bytes; the next step's request
 * for that slot is turned away and placed above the plan, never over the live block. */
static void test_guard_turns_away_taken_slot(void **state)
{
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    void *blocks[STEP_MAX], *kept = NULL;
    unsigned made = 0;
    for (size_t r = 0; r < NOPS(step_a); r++) {
        if (step_a[r].kind == ALLOC) {
            blocks[made++] =
                take(step_a[r].id, step_a[r].size, step_a[r].alignment, step_a[r].zero);
        } else if (step_a[r].id == 4) {
            kept = blocks[4]; /* lives into the next step */
        } else {
            give(blocks[step_a[r].id]);
        }
    }
    struct om_serving_stats s0 = stats();
    run_step(step_a, NOPS(step_a), NULL); /* take() checks that nothing meets the kept block */
    struct om_serving_stats s1 = stats();
    assert_true(s1.guard_rejections > s0.guard_rejections);
    assert_true(s1.fallbacks > s0.fallbacks);
    give(kept);
}

/* (d) A plan that misses too often is dropped, and the new loop is learnt and planned. */
static void test_drift_drops_plan(void **state)
{
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    for (int k = 0; k < 4; k++)
        run_step(step_a, NOPS(step_a), NULL);
    assert_int_equal(stats().replans, 0);
    run_step(step_b, NOPS(step_b), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    struct om_serving_stats s = stats();
    assert_int_equal(s.replans, 1);
    run_until_served(step_b, NOPS(step_b), STEP_B_REQUESTS, 40);
    s = stats();
    assert_int_equal(s.plans, 2);
    assert_int_equal(s.plan_slots, STEP_B_REQUESTS);
    assert_int_equal(s.plan_lower_bound_bytes, step_lower_bound(step_b, NOPS(step_b)));
}

/* (e) A kept plan serves again when its phase comes back, without a search. */
static void test_phase_comes_back(void **state)
{
    void *weights = take(100, MIB, 0, 0);
    size_t a_first[STEP_A_REQUESTS], a_again[STEP_A_REQUESTS];
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    for (int k = 0; k < 4; k++)
        run_step(step_a, NOPS(step_a), a_first);
    run_until_served(step_b, NOPS(step_b), STEP_B_REQUESTS, 40);
    for (int k = 0; k < 4; k++)
        run_step(step_b, NOPS(step_b), NULL);
    struct om_serving_stats s0 = stats();
    assert_int_equal(s0.plans, 2);
    assert_int_equal(s0.reused_plans, 0);
    /* A again: the first step follows the kept plan, the next ones are served whole. */
    run_step(step_a, NOPS(step_a), NULL);
    run_step(step_a, NOPS(step_a), NULL);
    struct om_serving_stats s1 = stats();
    assert_int_equal(s1.reused_plans, 1);
    assert_int_equal(s1.plans, 2);
    run_step(step_a, NOPS(step_a), a_again);
    assert_memory_equal(a_again, a_first, sizeof a_first);
    assert_int_equal(stats().served_from_plan - s1.served_from_plan, STEP_A_REQUESTS);
    /* And B's plan, kept in turn, comes back as well. */
    for (int k = 0; k < 3; k++)
        run_step(step_a, NOPS(step_a), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    struct om_serving_stats s2 = stats();
    assert_int_equal(s2.reused_plans, 2);
    assert_int_equal(s2.plans, 2);
    give(weights);
}

/* Pages of [p, p + len) that are resident. */
static size_t resident_pages(const void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, resident = 0;
    unsigned char vec[(64 * MIB) / 4096];
    assert_true(n <= sizeof vec && (uintptr_t)p % page == 0);
    assert_int_equal(mincore((void *)p, len, vec), 0);
    for (size_t i = 0; i < n; i++)
        resident += vec[i] & 1;
    return resident;
}

/* Waits up to 10 s for the pool's released bytes to reach at least bytes. */
/* The bytes given back once the optmem-pages thread has been still for 20 ms. */
static size_t settled_released(void)
{
    size_t last = stats().released_bytes;
    for (unsigned still = 0; still < 20;) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
        size_t now = stats().released_bytes;
        still = now == last ? still + 1 : 0;
        last = now;
    }
    return last;
}

static size_t released_at_least(size_t bytes)
{
    for (unsigned i = 0; i < 10000 && stats().released_bytes < bytes; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return stats().released_bytes;
}

/* Blocks taken on a thread of their own: not the iteration's requests, which would miss the
 * plan serving and drop it. */
struct other_takes {
    unsigned id, n;
    size_t size;
    unsigned char **out;
};

static void *take_others(void *arg)
{
    struct other_takes *t = arg;
    for (unsigned i = 0; i < t->n; i++)
        t->out[i] = take(t->id + i, t->size, 0, 0);
    return NULL;
}

static void take_on_other_thread(unsigned id, size_t size, unsigned n, unsigned char **out)
{
    struct other_takes t = {id, n, size, out};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, take_others, &t), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
}

/* While a plan serves, a large block it did not place gives its pages back when freed, not
 * all in the free: a slice in each call, and the rest on the optmem-pages thread, with no
 * call into the pool. A burst of such frees, more than the pool keeps apart, goes back
 * whole too, and a block taken again at the same offset in the meantime keeps its data. */
static void test_freed_pages_go_back_later(void **state)
{
    const size_t big = 24 * MIB, small = 4 * MIB;
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    uint64_t replans = stats().replans;
    unsigned char *a;
    take_on_other_thread(200, big, 1, &a);
    memset(a, 1, big);
    assert_int_equal(resident_pages(a, big), big / 4096);
    size_t before = stats().released_bytes;
    give(a);
    assert_true(released_at_least(before + big) >= before + big);
    assert_int_equal(resident_pages(a, big), 0);
    /* A burst: 80 blocks freed one after the other. */
    enum { BURST = 80 };
    unsigned char *b[BURST];
    take_on_other_thread(300, small, BURST, b);
    for (unsigned i = 0; i < BURST; i++)
        memset(b[i], 1, small);
    before = stats().released_bytes;
    for (unsigned i = 0; i < BURST; i++)
        give(b[i]);
    assert_true(released_at_least(before + BURST * small) >= before + BURST * small);
    for (unsigned i = 0; i < BURST; i++)
        assert_int_equal(resident_pages(b[i], small), 0);
    /* Freed and taken again at once: whatever went back of it meanwhile, the new block's
     * bytes are its own from then on. */
    for (unsigned k = 0; k < 8; k++) {
        unsigned char *c, *d;
        take_on_other_thread(400, big, 1, &c);
        memset(c, 2, big);
        give(c);
        take_on_other_thread(400, big, 1, &d);
        memset(d, 3, big);
        for (unsigned i = 0; i < 50; i++) {
            struct timespec us = {0, 100000};
            nanosleep(&us, NULL);
        }
        for (size_t i = 0; i < big; i += 4096)
            assert_int_equal(d[i], 3);
        give(d);
    }
    assert_int_equal(stats().replans, replans); /* the plan served throughout */
}

/* (f) Frees of pointers that are no block are counted and ignored; usable_size says 0. */
/* Before a plan, where the resident pages exceed the peak of live bytes, a call that made
 * pages resident gives as many idle ones back: a slice (2 MiB, OM_RELEASE_SLICE in
 * pool_internal.h) itself, the rest on the optmem-pages thread, with no call into the pool. */
static void test_idle_release_matches_growth(void **state)
{
    const size_t slice = 2 * MIB, hole = 64 * MIB;
    void *a = take(1, hole, 0, 0), *pin = take(3, 4 * KIB, 0, 0); /* a hole, not the top */
    give(a);                                                      /* dirtied: resident */
    assert_int_equal(stats().released_bytes, 0);
    /* Above the hole, a request that makes 80 MiB resident beside 64 MiB idle has the whole
     * hole given back, not a slice of it: a slice a call let the resident pages grow by what
     * the request made resident until the next calls gave the rest back. */
    void *b = take(2, 80 * MIB, 0, 0);
    assert_true(offset_of(b) >= hole);
    assert_true(stats().released_bytes >= slice);
    /* All of it but what the limit lets stay resident: a 128th of the peak of live bytes. */
    const size_t share = (80 * MIB + 4 * KIB) / 128;
    released_at_least(hole - share - 4 * KIB);
    size_t before = settled_released();
    assert_true(before >= hole - share - 4 * KIB && before <= hole);
    /* Calls that make no more than a page resident give nothing back: the arena is within
     * its limit. */
    for (unsigned i = 0; i < 8; i++) {
        give(take(100 + i, 4 * KIB, 0, 0));
        assert_int_equal(stats().released_bytes, before);
    }
    give(b);
    give(pin);
}

/* The host backend, whose release, on any thread but the test's, first takes a block where
 * best fit would put it on the pages being released, were they free space, and dirties it:
 * the optmem-pages thread releases with the pool's lock let go, and no request is placed on
 * pages it is releasing (their release would zero the block). */
static struct {
    pthread_t test_thread;
    int nested;              /* a release of the request below's own call */
    unsigned rounds, locked; /* releases on the thread; those made under the pool's lock */
    unsigned char *block;    /* taken while pages were being released */
    size_t block_len;
    uintptr_t from, to; /* what was being released then */
} watch;

static int watched_release(void *ctx, uintptr_t addr, size_t len)
{
    if (!pthread_equal(pthread_self(), watch.test_thread) && !watch.nested) {
        watch.rounds++;
        if (__atomic_load_n(&pool->lock.word, __ATOMIC_ACQUIRE) != 0)
            watch.locked++; /* no request can be taken: the pool's lock is this thread's */
        else if (!watch.block) {
            struct om_stack s = site(77);
            watch.nested = 1;
            watch.block = om_pool_alloc(pool, watch.block_len, 0, 0, OM_STREAM_NONE, &s);
            watch.nested = 0;
            if (watch.block)
                memset(watch.block, 5, watch.block_len);
            watch.from = addr;
            watch.to = addr + len;
        }
    }
    return om_host_backend.release(ctx, addr, len);
}

static void test_pages_released_outside_lock(void **state)
{
    struct om_backend watched = om_host_backend;
    watched.release = watched_release;
    memset(&watch, 0, sizeof watch);
    watch.test_thread = pthread_self();
    const size_t hole = 64 * MIB;
    watch.block_len = hole; /* the hole's exact fit, were the pages released free space */
    start_on(&watched, 0, 0, "");
    void *a = take(1, hole, 0, 0), *pin = take(3, 4 * KIB, 0, 0);
    give(a);
    /* 80 MiB made resident above a 64 MiB idle hole: the call gives a slice of the hole
     * back, the optmem-pages thread the rest. */
    void *b = take(2, 80 * MIB, 0, 0);
    released_at_least(hole - 2 * MIB);
    settled_released();
    assert_true(watch.rounds > 0);
    assert_int_equal(watch.locked, 0);
    assert_non_null(watch.block);
    uintptr_t p = (uintptr_t)watch.block;
    assert_false(p < watch.to && watch.from < p + watch.block_len);
    for (size_t i = 0; i < watch.block_len; i += 4096)
        assert_int_equal(watch.block[i], 5);
    om_pool_free(pool, watch.block, OM_STREAM_NONE);
    give(b);
    give(pin);
}

/* Bytes handed to the backend's release on the test's thread: inside its calls. */
static size_t in_calls;

static int counted_release(void *ctx, uintptr_t addr, size_t len)
{
    if (pthread_equal(pthread_self(), watch.test_thread))
        in_calls += len;
    return om_host_backend.release(ctx, addr, len);
}

/* Before a plan, a call gives back at most a release slice (2 MiB, OM_RELEASE_SLICE) of
 * idle pages, however many of the holes it looks at hold none: freed, taken again and freed
 * again, a hole is in the ring many times, and its pages went back with the first. Such a
 * call walked on through the ring, releasing pages given back already, until it had given
 * back as much as it made resident. The optmem-pages thread goes on with the rest. */
static void test_call_gives_back_a_slice_at_most(void **state)
{
    enum { HOLES = 8, AGAIN = 8, TAKES = 20 };
    struct om_backend counted = om_host_backend;
    counted.release = counted_release;
    memset(&watch, 0, sizeof watch);
    watch.test_thread = pthread_self();
    start_on(&counted, 0, 0, "");
    const size_t slice = 2 * MIB;
    /* Holes a, in the ring AGAIN + 1 times each, then holes b. */
    void *a[HOLES], *b[HOLES], *pin[2 * HOLES], *big[TAKES];
    for (unsigned i = 0; i < HOLES; i++) {
        a[i] = take(100 + i, MIB, 0, 0);
        pin[i] = take(200 + i, 4 * KIB, 0, 0);
        b[i] = take(300 + i, MIB, 0, 0);
        pin[HOLES + i] = take(400 + i, 4 * KIB, 0, 0);
        memset(a[i], 1, MIB);
        memset(b[i], 1, MIB);
    }
    for (unsigned k = 0; k < AGAIN; k++)
        for (unsigned i = 0; i < HOLES; i++) {
            give(a[i]);
            a[i] = take(100 + i, MIB, 0, 0); /* back in its own hole */
        }
    for (unsigned i = 0; i < HOLES; i++)
        give(a[i]);
    for (unsigned i = 0; i < HOLES; i++)
        give(b[i]);
    /* Requests above the holes, each making a slice's worth of pages resident. */
    size_t most = 0;
    for (unsigned j = 0; j < TAKES; j++) {
        in_calls = 0;
        big[j] = take(500 + j, slice, 0, 0);
        most = in_calls > most ? in_calls : most;
        memset(big[j], 2, slice);
    }
    settled_released();
    assert_true(most > 0);
    assert_true(most <= slice);
    /* The idle holes went back all the same, but for the slack: a 128th of the peak, or a
     * slice where holes were taken again. */
    om_pool_lock(pool);
    size_t resident = om_arena_resident(&pool->arena), peak = pool->arena.peak_used;
    om_pool_unlock(pool);
    assert_true(resident <= peak + (peak / 128 > slice ? peak / 128 : slice) + 64 * KIB);
    /* And the thread, with nothing owed any more, waits for more (a page owed was looked for
     * a page at a time through the holes given back already, for thousands of rounds). */
    for (unsigned i = 0; i < 1000 && !__atomic_load_n(&pool->drop_waiting, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    om_pool_lock(pool);
    assert_int_equal(pool->owed, 0);
    assert_int_equal(pool->drop_waiting, 1);
    om_pool_unlock(pool);
    for (unsigned j = 0; j < TAKES; j++)
        give(big[j]);
    for (unsigned i = 0; i < 2 * HOLES; i++)
        give(pin[i]);
}

/* Before a plan, small holes given back and taken again widen the slack by one release
 * slice (OM_RELEASE_SLICE) at most, however many there were: after rounds in which 8 MiB of
 * 1 MiB holes go back and are taken again, 8 MiB of such holes idle beyond the peak still go
 * back but for the slice (uncapped, the slack had grown by the rounds' retaken pages and
 * held them all; ResNet-18's warm-up held 17 MiB so). */
static void test_idle_slack_capped(void **state)
{
    enum { PIECES = 8, ROUNDS = 6 };
    const size_t piece = 1 * MIB;
    void *weights = take(1, 32 * MIB, 0, 0), *x[PIECES], *pin[ROUNDS + 1];
    for (unsigned r = 0; r <= ROUNDS; r++) {
        for (unsigned i = 0; i < PIECES; i++) {
            x[i] = take(1000 + 20 * r + i, piece, 0, 0); /* no iteration to plan */
            memset(x[i], 1, piece);
        }
        pin[r] = take(1011 + 20 * r, 4 * KIB, 0, 0); /* the holes below are no free tail */
        for (unsigned i = 0; i < PIECES; i++)
            give(x[i]);
        if (r == ROUNDS)
            break;
        /* Beyond the holes: they are idle past the limit, and go back. */
        void *y = take(1010 + 20 * r, PIECES * piece + 64 * KIB, 0, 0);
        memset(y, 2, PIECES * piece + 64 * KIB);
        settled_released();
        give(y);
    }
    void *z = take(300, PIECES * piece + 128 * KIB, 0, 0);
    memset(z, 3, PIECES * piece + 128 * KIB);
    settled_released();
    om_pool_lock(pool);
    size_t resident = om_arena_resident(&pool->arena), peak = pool->arena.peak_used;
    om_pool_unlock(pool);
    const size_t slice = 2 * MIB, share = peak / 128;
    /* The rounds took back more than the tolerance and two slices: uncapped, a slack of more
     * than a slice. */
    assert_true(pool->idle_retaken >= peak / 16 + 2 * slice);
    assert_true(resident <= peak + (share > slice ? share : slice) + 64 * KIB);
    give(z);
    for (unsigned r = 0; r <= ROUNDS; r++)
        give(pin[r]);
    give(weights);
}

/* Before a plan, arrays of a release slice or more given back and taken again never widen
 * the slack: their pages go back whenever they are idle beyond the limit, round after
 * round, where a slack grown by them held them resident at every later peak (the MLP's
 * 4 and 8 MiB activations: 23 MiB above its plan-mode peak of 2026-11-22). */
static void test_idle_arrays_go_back(void **state)
{
    const size_t array = 4 * MIB;
    void *weights = take(1, 96 * MIB, 0, 0); /* arrays below 1/16 of the peak */
    for (unsigned r = 0; r < 8; r++) {
        size_t before = stats().released_bytes;
        void *x = take(1000 + 10 * r, array, 0, 0), *y = take(1001 + 10 * r, array, 0, 0);
        give(x);
        void *z = take(1002 + 10 * r, 2 * array, 0, 0);
        give(y);
        give(z);
        /* The arrays' pages went back again (a slice in the call that made pages resident,
         * the rest on the optmem-pages thread), and were taken again. */
        if (r)
            assert_true(settled_released() - before >= array);
    }
    give(weights);
}

static void test_unknown_pointers(void **state)
{
    unsigned char *a = take(1, 64 * KIB, 0, 0);
    assert_int_equal(om_pool_usable_size(pool, a + 16), 0);
    assert_int_equal(om_pool_usable_size(pool, a + 64 * KIB + 4096), 0);
    assert_false(om_pool_contains(pool, base - 1));
    assert_false(om_pool_contains(pool, base + ARENA_BYTES + 4 * MIB));
    assert_true(om_pool_contains(pool, base));
    om_pool_free(pool, a + 16, OM_STREAM_NONE); /* inside a block */
    om_pool_free(pool, base + 100 * MIB, OM_STREAM_NONE);
    assert_int_equal(stats().invalid_frees, 2);
    assert_int_equal(om_pool_usable_size(pool, a), 64 * KIB); /* a lives on */
    memset(a, 1, 64 * KIB);
    give(a);
    om_pool_free(pool, a, OM_STREAM_NONE); /* a double free */
    assert_int_equal(stats().invalid_frees, 3);
    assert_int_equal(om_pool_usable_size(pool, a), 0);
    void *b = take(2, 64 * KIB, 0, 0); /* the bytes serve again */
    assert_ptr_equal(b, a);
    give(b);
}

/* (g) calloc over a reused slot: the slot held the last step's dirt (give() writes it), and
 * the request that takes it must read zeros, every step. take() checks each byte. */
static void test_calloc_in_reused_slot(void **state)
{
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    size_t first[STEP_A_REQUESTS], now[STEP_A_REQUESTS];
    run_step(step_a, NOPS(step_a), first);
    /* Request 1 and request 7 are zeroed; their slots are other blocks' too, or their own
     * from the step before: either way dirtied since. */
    for (int k = 0; k < 4; k++) {
        uint64_t before = stats().served_from_plan;
        run_step(step_a, NOPS(step_a), now);
        assert_int_equal(stats().served_from_plan - before, STEP_A_REQUESTS);
        assert_int_equal(now[1], first[1]);
        assert_int_equal(now[7], first[7]);
    }
    /* Zeroing counts even for a request below the arena's high-water mark served by best
     * fit: a dirty hole, then a calloc into it. */
    unsigned char *x = take(60, 128 * KIB, 0, 0);
    give(x);
    unsigned char *y = take(61, 128 * KIB, 0, 1);
    give(y);
}

/* calloc onto a slot whose pages a layout under way moves there (om_arena_move_onto): moved
 * idle pages hold what their old place held, even where the slot lies above the arena's
 * touched mark, beyond which pages are fresh; those fresh pages stay untouched (zeroing them
 * would fault them in). The layout's state (pages left to lay out, moves left), the idle
 * pages (free, resident, dirty, on no slot) and a slot above the mark are set by hand, so
 * that the request comes before any slice or release reaches them. */
static void test_calloc_onto_moved_pages(void **state)
{
    const size_t idle_len = 128 * KIB, page = (size_t)sysconf(_SC_PAGESIZE);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    run_step(step_a, NOPS(step_a), NULL);
    om_pool_lock(pool);
    assert_int_equal(pool->phase, SERVE);
    /* The request the plan expects next: step_a's first (the plan's iteration may begin
     * elsewhere in the step), zeroed here; larger than the idle pages. */
    const size_t size = step_a[0].size;
    struct om_stack first = site(step_a[0].id);
    struct om_slot *sl = &pool->plan.slots[pool->cursor];
    assert_int_equal(sl->token, om_token_of(&first, size));
    assert_true(sl->len >= size && size > idle_len && size % page == 0);
    struct om_arena *a = &pool->arena;
    /* At the touched mark: no free page below them that a move would take first. */
    size_t idle = om_arena_touched_end(a);
    assert_int_equal(om_arena_take(a, idle, idle_len), 0);
    memset(base + idle, DIRT, idle_len);
    assert_int_equal(om_arena_give(a, idle, idle_len), 0);
    size_t above = (a->touched + 4 * MIB) & ~(MIB - 1);
    sl->offset = above;
    pool->layout_next = 1;
    pool->moves_left = 1;
    size_t moved = pool->stats.moved_bytes;
    om_pool_unlock(pool);
    unsigned char *p = om_pool_alloc(pool, size, 0, 1, OM_STREAM_NONE, &first);
    assert_ptr_equal(p, base + above);
    om_pool_lock(pool);
    assert_int_equal(pool->stats.moved_bytes - moved, idle_len);
    om_pool_unlock(pool);
    assert_int_equal(resident_pages(p, size), idle_len / page);
    for (size_t i = 0; i < size; i++)
        assert_int_equal(p[i], 0);
    om_pool_free(pool, p, OM_STREAM_NONE);
}

/* (h) Alignments up to 2 MiB are the arena's, while learning and from slots; larger ones,
 * and requests beyond a quarter of the arena, are refused (the real allocator's). */
static void test_alignment(void **state)
{
    size_t aligns[] = {16, 64, 256, 4096, 65536, MIB, 2 * MIB};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
        void *p = take(70 + (unsigned)i, 40 * KIB + 16 * i, aligns[i], 0);
        give(p);
    }
    void *pinned = take(80, 4 * KIB, 0, 0); /* the next is not at an aligned top by chance */
    void *big_align = take(81, 100 * KIB, 2 * MIB, 0);
    struct om_stack s = site(82);
    assert_null(om_pool_alloc(pool, 100 * KIB, 4 * MIB, 0, OM_STREAM_NONE, &s));
    assert_null(om_pool_alloc(pool, ARENA_BYTES / 4 + 4096, 0, 0, OM_STREAM_NONE, &s));
    give(big_align);
    give(pinned);
    /* Served steps keep step A's 4 KiB and 64 KiB alignments (take() checks each). */
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    for (int k = 0; k < 3; k++)
        run_step(step_a, NOPS(step_a), NULL);
}

/* OPTMEM_PLAN_DUMP, where pages do not move (huge pages): a hole too small for the plan
 * below a small live block, so the arcs are packed again around the live blocks above the
 * hole. Both instances are written, the second with its fixed block, in the CSV the
 * replanner reads back, and each has the lower bound of the in-program plan or the fixed
 * block's bytes on top of it. */
static void test_plan_dump(void **state)
{
    char dir[] = "/tmp/optmem_test_pool_XXXXXX";
    assert_non_null(mkdtemp(dir));
    start_with(0, 1, dir);
    void *weights = take(100, MIB, 0, 0);
    void *spacer = take(101, MIB + 64 * KIB, 0, 0);
    void *small = take(102, 16 * KIB, 0, 0); /* above the hole spacer leaves */
    give(spacer);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    size_t lb = step_lower_bound(step_a, NOPS(step_a));
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int alone = 0, around = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], line[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        assert_int_equal(strncmp(e->d_name, "plan-", 5), 0);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        om_rp_block *blocks;
        size_t n;
        uint64_t period, bound;
        char err[256];
        assert_int_equal(
            om_rp_csv_read_instance(path, &om_rp_mmap, &blocks, &n, &period, err, sizeof err), 0);
        assert_int_equal(period, STEP_A_REQUESTS);
        assert_int_equal(om_rp_lower_bound(blocks, n, period, &om_rp_mmap, &bound, err, sizeof err),
                         0);
        size_t fixed = 0;
        for (size_t i = 0; i < n; i++)
            fixed += blocks[i].fixed ? blocks[i].size : 0;
        if (strstr(line, "packed around the live blocks")) {
            around++;
            assert_int_equal(fixed, 16 * KIB);
            assert_int_equal(n, STEP_A_REQUESTS + 1);
        } else {
            assert_non_null(strstr(line, "searched inline"));
            alone++;
            assert_int_equal(fixed, 0);
            assert_int_equal(n, STEP_A_REQUESTS);
        }
        assert_int_equal(bound, lb + fixed);
        om_rp_csv_free(&om_rp_mmap, blocks, n);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
    assert_int_equal(alone, 1);
    assert_int_equal(around, 1);
    om_cfg.plan_dump[0] = '\0';
    give(small);
    give(weights);
}

/* The search on the optmem-plan thread: the plan serves from an iteration boundary after
 * the search ended, which comes within a bounded number of steps. */
static void test_plan_thread(void **state)
{
    start(1);
    void *weights = take(100, MIB, 0, 0);
    unsigned steps = 0;
    for (; steps < 5000 && stats().served_from_plan == 0; steps++) {
        run_step(step_a, NOPS(step_a), NULL);
        sched_yield(); /* the search may need the CPU the loop holds */
    }
    assert_true(steps < 5000);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 100);
    struct om_serving_stats s = stats();
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.plan_lower_bound_bytes, step_lower_bound(step_a, NOPS(step_a)));
    give(weights);
}

/* A plan searched on the optmem-plan thread, serving training, then left for evaluation
 * steps: kept, and reused when training comes back, not searched again; the report's
 * figures say it was searched on the thread. (Where the search is still running when the
 * phase changes, what happens depends on when it ends: serving.drift.evaluate runs that
 * through a real program, many times over.) */
static void test_plan_thread_phase_left(void **state)
{
    start(1);
    void *weights = take(100, MIB, 0, 0);
    unsigned steps = 0, served = 0;
    for (; steps < 5000 && !served; steps++) {
        uint64_t before = stats().served_from_plan;
        run_step(step_a, NOPS(step_a), NULL);
        served = stats().served_from_plan - before == STEP_A_REQUESTS;
        sched_yield(); /* the search may need the CPU the loop holds */
    }
    assert_true(served);
    run_step(step_a, NOPS(step_a), NULL);
    run_step(step_a, NOPS(step_a), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    struct om_serving_stats s = stats();
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.reused_plans, 1);
    assert_int_equal(s.plan_on_thread, 1);
    assert_int_equal(s.plan_lower_bound_bytes, step_lower_bound(step_a, NOPS(step_a)));
    give(weights);
}

/* The searches for plans, held while the test says so: test_pool is linked with
 * --wrap=om_rp_plan, so that a search on the optmem-plan thread ends when the test wants
 * (a thread that a loaded machine gives the CPU late), not when the scheduler lets it. */
static int hold_searches, searches_started, searches_ended;

int __real_om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt,
                      uint64_t *offsets, om_rp_result *res);
int __wrap_om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt,
                      uint64_t *offsets, om_rp_result *res);

int __wrap_om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt,
                      uint64_t *offsets, om_rp_result *res)
{
    __atomic_add_fetch(&searches_started, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&hold_searches, __ATOMIC_SEQ_CST))
        usleep(100);
    int rc = __real_om_rp_plan(blocks, n, opt, offsets, res);
    __atomic_add_fetch(&searches_ended, 1, __ATOMIC_SEQ_CST);
    return rc;
}

/* A search on the optmem-plan thread that ends only after the program left its phase
 * (training, then evaluation) and came back to it: its plan, kept when it ends, serves
 * training at once, as if it had ended before training came back; training is not searched
 * again (learning, held while the search ran, knew training's period already). */
static void test_plan_thread_ends_after_phase_came_back(void **state)
{
    start(1);
    void *weights = take(100, MIB, 0, 0);
    __atomic_store_n(&hold_searches, 1, __ATOMIC_SEQ_CST);
    int started = __atomic_load_n(&searches_started, __ATOMIC_SEQ_CST);
    unsigned steps = 0;
    for (; steps < 40 && __atomic_load_n(&searches_started, __ATOMIC_SEQ_CST) == started; steps++)
        run_step(step_a, NOPS(step_a), NULL);
    assert_true(steps < 40);
    /* Two whole steps followed the iteration searched; evaluation leaves it. */
    for (unsigned k = 0; k < 2; k++)
        run_step(step_a, NOPS(step_a), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    run_step(step_b, NOPS(step_b), NULL);
    for (unsigned k = 0; k < 4; k++)
        run_step(step_a, NOPS(step_a), NULL);
    assert_int_equal(stats().plans, 0);
    int ended = __atomic_load_n(&searches_ended, __ATOMIC_SEQ_CST);
    __atomic_store_n(&hold_searches, 0, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&searches_ended, __ATOMIC_SEQ_CST) == ended)
        usleep(100);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 3);
    struct om_serving_stats s = stats();
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.reused_plans, 1);
    assert_int_equal(s.plan_on_thread, 1);
    assert_int_equal(s.plan_lower_bound_bytes, step_lower_bound(step_a, NOPS(step_a)));
    give(weights);
}

/* Thread names, seen through --wrap=pthread_setname_np: optmem's threads are detached, and
 * a detached thread's handle may be freed (its stack unmapped) as soon as it ends, so only
 * the thread itself may name itself. optmem-plan runs SCHED_BATCH by then, so that waking it
 * never preempts the program's thread; optmem-pages does not, so that it gives pages back as
 * soon as it is woken. */
static int names_by_self, names_by_others, pages_threads, names_wrong_policy;

int __real_pthread_setname_np(pthread_t thread, const char *name);
int __wrap_pthread_setname_np(pthread_t thread, const char *name);

int __wrap_pthread_setname_np(pthread_t thread, const char *name)
{
    if (strcmp(name, "optmem-pages") == 0)
        __atomic_add_fetch(&pages_threads, 1, __ATOMIC_SEQ_CST);
    if ((sched_getscheduler(0) == SCHED_BATCH) != (strcmp(name, "optmem-pages") != 0))
        __atomic_add_fetch(&names_wrong_policy, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(pthread_equal(thread, pthread_self()) ? &names_by_self : &names_by_others, 1,
                       __ATOMIC_SEQ_CST);
    return __real_pthread_setname_np(thread, name);
}

/* The optmem-plan and optmem-pages threads name themselves: a search that ends at once (a
 * plan that meets its bound) and a large block freed under the plan start them. */
static void test_threads_name_themselves(void **state)
{
    start(1);
    int before = __atomic_load_n(&names_by_self, __ATOMIC_SEQ_CST);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    assert_int_equal(stats().plan_on_thread, 1);
    unsigned char *a;
    take_on_other_thread(500, 24 * MIB, 1, &a);
    memset(a, 1, 24 * MIB);
    size_t released = stats().released_bytes;
    give(a);
    assert_true(released_at_least(released + 24 * MIB) >= released + 24 * MIB);
    assert_true(__atomic_load_n(&names_by_self, __ATOMIC_SEQ_CST) >= before + 2);
    assert_int_equal(__atomic_load_n(&names_by_others, __ATOMIC_SEQ_CST), 0);
    assert_int_equal(__atomic_load_n(&names_wrong_policy, __ATOMIC_SEQ_CST), 0);
}

/* One optmem-pages thread serves the pool: bursts of freed blocks' pages, with nothing to
 * give back between them, go back on the thread the first one started, which waits for
 * more in between (a thread started for each burst was created inside the call that left
 * the pages). */
static void test_pages_thread_reused(void **state)
{
    int before = __atomic_load_n(&pages_threads, __ATOMIC_SEQ_CST);
    run_until_served(step_a, NOPS(step_a), STEP_A_REQUESTS, 40);
    for (unsigned r = 0; r < 4; r++) {
        unsigned char *a;
        take_on_other_thread(600 + r, 24 * MIB, 1, &a);
        memset(a, 1, 24 * MIB);
        size_t released = stats().released_bytes;
        give(a);
        assert_true(released_at_least(released + 24 * MIB) >= released + 24 * MIB);
        assert_int_equal(resident_pages(a, 24 * MIB), 0);
        settled_released(); /* nothing left: the thread waits */
    }
    assert_int_equal(__atomic_load_n(&pages_threads, __ATOMIC_SEQ_CST) - before, 1);
}

/* A process whose main thread ends with pthread_exit ends with its last thread, as glibc
 * has it, though optmem-pages waits for more work: idle, it ends too (waiting, it kept such
 * a process alive for ever). The child, a process of its own, starts its own thread. */
static int forked_child;

/* LeakSanitizer's hook (sanitizer/lsan_interface.h): the child that ends with its last
 * thread leaves the test runner's blocks behind, which are no leak of optmem's. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
    return forked_child;
}

static void test_pages_thread_lets_process_end(void **state)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        forked_child = 1;
        void *a = take(1, 64 * MIB, 0, 0), *pin = take(3, 4 * KIB, 0, 0);
        give(a);
        void *b = take(2, 80 * MIB, 0, 0); /* a slice in the call, the rest on the thread */
        memset(b, 1, 80 * MIB);
        (void)pin;
        pthread_exit(NULL);
    }
    int status = 0;
    pid_t got = 0;
    for (unsigned i = 0; i < 10000 && got == 0; i++) {
        got = waitpid(pid, &status, WNOHANG);
        if (got == 0)
            usleep(1000);
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    assert_int_equal(got, pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The first lines of the files in dir, joined, and the files removed with dir. */
static void dumped_searches(const char *dir, char *out, size_t cap, unsigned *files)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    *files = 0;
    out[0] = '\0';
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], line[256] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        strncat(out, line, cap - strlen(out) - 1);
        unlink(path);
        ++*files;
    }
    closedir(d);
    rmdir(dir);
}

/* By default (OPTMEM_PLAN_THREAD=auto) the host's plan is searched on the optmem-plan thread,
 * never inline in the request that reaches the quiet point, even one that meets its lower
 * bound at once; where pages do not move (huge pages) it is searched inline. */
static void test_default_plans_off_thread(void **state)
{
    assert_int_equal(om_config_load(&om_cfg, no_env), 0);
    int auto_value = om_cfg.plan_thread;
    assert_true(auto_value < 0);
    for (int huge = 0; huge < 2; huge++) {
        char dir[] = "/tmp/optmem_test_pool_XXXXXX", lines[1024];
        assert_non_null(mkdtemp(dir));
        start_with(auto_value, huge, dir);
        void *weights = take(100, MIB, 0, 0);
        unsigned steps = 0;
        for (; steps < 5000 && stats().served_from_plan == 0; steps++) {
            run_step(step_a, NOPS(step_a), NULL);
            sched_yield();
        }
        assert_true(steps < 5000);
        struct om_serving_stats s = stats();
        assert_int_equal(s.plans, 1);
        assert_int_equal(s.plan_peak_bytes, step_lower_bound(step_a, NOPS(step_a)));
        unsigned files;
        dumped_searches(dir, lines, sizeof lines, &files);
        assert_int_equal(files, 1);
        if (huge) {
            assert_non_null(strstr(lines, "searched inline"));
        } else {
            assert_non_null(strstr(lines, "searched on the optmem-plan thread"));
            assert_null(strstr(lines, "inline"));
        }
        om_cfg.plan_dump[0] = '\0';
        give(weights);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_learning_best_fit, setup_inline),
        cmocka_unit_test_setup(test_plan_serves_slots, setup_inline),
        cmocka_unit_test_setup(test_unknown_request_falls_back, setup_inline),
        cmocka_unit_test_setup(test_substituted_request_one_miss, setup_inline),
        cmocka_unit_test_setup(test_new_stacks_take_their_slots, setup_inline),
        cmocka_unit_test_setup(test_guard_turns_away_taken_slot, setup_inline),
        cmocka_unit_test_setup(test_drift_drops_plan, setup_inline),
        cmocka_unit_test_setup(test_phase_comes_back, setup_inline),
        cmocka_unit_test_setup(test_idle_release_matches_growth, setup_inline),
        cmocka_unit_test_setup(test_idle_arrays_go_back, setup_inline),
        cmocka_unit_test(test_pages_released_outside_lock),
        cmocka_unit_test_setup(test_idle_slack_capped, setup_inline),
        cmocka_unit_test(test_call_gives_back_a_slice_at_most),
        cmocka_unit_test_setup(test_freed_pages_go_back_later, setup_inline),
        cmocka_unit_test_setup(test_unknown_pointers, setup_inline),
        cmocka_unit_test_setup(test_calloc_in_reused_slot, setup_inline),
        cmocka_unit_test_setup(test_calloc_onto_moved_pages, setup_inline),
        cmocka_unit_test_setup(test_alignment, setup_inline),
        cmocka_unit_test(test_plan_dump),
        cmocka_unit_test(test_plan_thread),
        cmocka_unit_test(test_plan_thread_phase_left),
        cmocka_unit_test(test_plan_thread_ends_after_phase_came_back),
        cmocka_unit_test(test_default_plans_off_thread),
        cmocka_unit_test(test_threads_name_themselves),
        cmocka_unit_test_setup(test_pages_thread_reused, setup_inline),
        cmocka_unit_test_setup(test_pages_thread_lets_process_end, setup_inline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
