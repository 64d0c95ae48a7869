/* Unit tests of the saved plan's build (preload/saved_plan.c) on simulated training runs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replanner.h"
#include "saved_plan.h"

#define MAX_REQUESTS 20000
#define LAYERS 30
#define PER_LAYER 8
#define PARAMS (PER_LAYER * LAYERS)
#define PARAM_KIB 256
#define ACT_KIB 16384
#define TOKEN(kind, i) (1000000 * (kind) + (i))
#define CHECKED_ITERATIONS 3
#define STARTUP 4500

/* A run's main-thread requests, as the pool logs them: death is the number of requests
 * made when the block was freed. */
struct run {
    struct om_logged_request e[MAX_REQUESTS];
    size_t n;
    uint64_t rng;
};

static uint64_t next(struct run *r)
{
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return r->rng >> 33;
}

static size_t req(struct run *r, uint64_t token, uint64_t len)
{
    assert_true(r->n < MAX_REQUESTS);
    r->e[r->n] = (struct om_logged_request){token, (len + 15) & ~15ull, 64, OM_NO_DEATH};
    return r->n++;
}

static void done(struct run *r, size_t i)
{
    r->e[i].death = r->n;
}

/* A size between lo and hi KiB, in 16-byte steps as the pool rounds them: seldom a multiple
 * of the 64-byte alignment, as on real runs (which keeps the circle's search from stacking
 * blocks live all the time at the bottom by itself). */
static uint64_t kib(struct run *r, uint64_t lo, uint64_t hi)
{
    return (lo + next(r) % (hi - lo + 1)) * 1024 + 16 * (next(r) % 4);
}

/*
 * A training run: parameters made one by one among temporaries, then iterations of a
 * forward pass (activations, freed in backward), a backward pass and an optimizer step. The
 * first iteration also makes what lives from then on (gradients, optimizer state, born
 * among live activations), so it differs from the others; the second is like the cycle
 * (its blocks take the arcs' offsets); the cycle starts with the third. One buffer of each
 * iteration is freed in the next one (an arc that wraps).
 */
static void simulate(struct run *r, uint64_t seed, int iterations, uint64_t *nprologue,
                     uint64_t *period)
{
    uint64_t psize[PARAMS], asize[LAYERS];
    size_t act[LAYERS], carry = SIZE_MAX;
    memset(r, 0, sizeof *r);
    r->rng = seed;
    /* Start-up: thousands of small short-lived blocks (an interpreter's imports), some of
     * them overlapping, under one long-lived block; with them the prologue has more blocks
     * than the branch and bound takes at once. */
    size_t loader = req(r, 1, kib(r, 2000, 4000));
    for (int k = 0, open = -1; k < STARTUP; k++) {
        size_t t = req(r, 10 + k % 50, kib(r, 4, 64));
        if (open >= 0 && next(r) % 2)
            done(r, (size_t)open), open = -1;
        if (open < 0)
            open = (int)t;
        else
            done(r, t);
    }
    for (int p = 0; p < PARAMS; p++) {
        psize[p] = kib(r, PARAM_KIB / 8, PARAM_KIB);
        req(r, TOKEN(1, p), psize[p]);
        size_t t = req(r, 2, kib(r, 16, 512));
        if (p % 3 == 0)
            req(r, 3, kib(r, 8, 64)); /* a small one kept (a module's buffer) */
        done(r, t);
    }
    done(r, loader);
    for (int l = 0; l < LAYERS; l++)
        asize[l] = kib(r, ACT_KIB / 4, ACT_KIB);
    for (int it = 0; it < iterations; it++) {
        if (it == 2)
            *nprologue = r->n;
        if (it == 0)
            req(r, 4, kib(r, 64, 128)); /* made on first use: nothing after is a copy */
        for (int l = 0; l < LAYERS; l++) {
            act[l] = req(r, TOKEN(2, l), asize[l]);
            size_t t = req(r, TOKEN(3, l), asize[l] / 2);
            done(r, t);
            if (l == 1 && carry != SIZE_MAX)
                done(r, carry);
        }
        /* Backward frees the activations out of order (every fourth one is kept for three
         * more layers) and its buffers live for one to three layers: a jumble that a greedy
         * placement leaves holes in. */
        size_t g[LAYERS];
        for (int l = LAYERS - 1; l >= 0; l--) {
            g[l] = req(r, TOKEN(4, l), asize[(l * 7) % LAYERS]);
            for (int p = l * PER_LAYER; it == 0 && p < (l + 1) * PER_LAYER; p++)
                req(r, TOKEN(5, p), psize[p]); /* gradients, kept */
            for (int k = l + 1; k < LAYERS && k <= l + 3; k++)
                if (k - 1 - k % 3 == l)
                    done(r, g[k]);
            if (l % 4 != 3)
                done(r, act[l]);
            if (l % 4 == 0 && l + 3 < LAYERS)
                done(r, act[l + 3]);
        }
        for (int k = 0; k < LAYERS; k++)
            if (k - 1 - k % 3 < 0)
                done(r, g[k]);
        for (int p = 0; p < PARAMS; p++) {
            if (it == 0)
                req(r, TOKEN(6, p), psize[p]); /* optimizer state, born in the first step */
            size_t t = req(r, TOKEN(7, p), psize[p]);
            done(r, t);
        }
        carry = req(r, 8, kib(r, 100, 200));
        if (it == 2)
            *period = r->n - *nprologue;
    }
}

/* The cycle's first iteration as the pool hands it over: one arc per slot. */
static size_t arcs_of(const struct run *r, uint64_t n0, uint64_t period, struct om_cycle_arc *arcs)
{
    size_t narcs = 0;
    for (uint64_t s = 0; s < period; s++) {
        const struct om_logged_request *e = &r->e[n0 + s];
        if (e->death != OM_NO_DEATH && e->death - n0 <= s + period)
            arcs[narcs++] = (struct om_cycle_arc){s, e->token, s, e->death - n0, e->len, 64};
    }
    return narcs;
}

/*
 * Serves the plan as the pool would: the prologue request by request at its slot, then
 * CHECKED_ITERATIONS of the cycle at the arcs' slots, and checks that no two blocks live at
 * once share a byte, that every slot is aligned and large enough, and the plan's figures.
 * Returns the lower bound of the served timeline.
 */
static uint64_t check_served(const struct run *r, uint64_t n0, uint64_t period,
                             const struct om_cycle_arc *arcs, size_t narcs,
                             const struct om_saved_plan *plan)
{
    uint64_t end = n0 + CHECKED_ITERATIONS * period, lb;
    size_t cap = n0 + CHECKED_ITERATIONS * narcs, m = 0;
    om_rp_block *b = calloc(cap, sizeof *b);
    uint64_t *off = calloc(cap, sizeof *off);
    char err[256] = "";
    assert_non_null(b);
    assert_non_null(off);
    for (uint64_t i = 0; i < n0; i++) {
        const struct om_slot *s = &plan->slots[i];
        uint64_t death = r->e[i].death;
        assert_int_equal(s->token, r->e[i].token);
        assert_true(s->len >= r->e[i].len);
        assert_int_equal(s->offset % 64, 0);
        /* What outlives the first iteration of the cycle keeps its bytes for good. */
        if (death == OM_NO_DEATH || death > n0 + period || death > end)
            death = end;
        b[m] = (om_rp_block){.id = i, .lower = i, .upper = death, .size = s->len};
        off[m++] = s->offset;
    }
    for (uint64_t it = 0; it < CHECKED_ITERATIONS; it++)
        for (size_t a = 0; a < narcs; a++) {
            const struct om_slot *s = &plan->slots[n0 + arcs[a].slot];
            uint64_t lower = n0 + it * period + arcs[a].lower;
            uint64_t upper = n0 + it * period + arcs[a].upper;
            assert_int_equal(s->token, arcs[a].token);
            assert_true(s->len >= arcs[a].len);
            b[m] = (om_rp_block){.id = n0 + it * narcs + a,
                                 .lower = lower,
                                 .upper = upper < end ? upper : end,
                                 .size = s->len};
            off[m++] = s->offset;
        }
    int rc = om_rp_check(b, m, 0, off, &om_rp_mmap, err, sizeof err);
    if (rc != 0)
        fail_msg("the plan hands out overlapping blocks: %s", err);
    assert_int_equal(om_rp_lower_bound(b, m, 0, &om_rp_mmap, &lb, err, sizeof err), 0);
    assert_true(om_rp_peak(b, m, off) <= plan->peak);
    free(b);
    free(off);
    return lb;
}

static void build_and_check(uint64_t seed, int iterations)
{
    static struct run r;
    static struct om_cycle_arc arcs[MAX_REQUESTS];
    uint64_t n0 = 0, period = 0;
    simulate(&r, seed, iterations, &n0, &period);
    size_t narcs = arcs_of(&r, n0, period, arcs);
    struct om_request_log log = {r.e, r.n, MAX_REQUESTS};
    struct om_saved_plan plan;
    char err[256] = "";
    int rc = om_saved_plan_build(&log, n0, arcs, narcs, period, 0, 0, &plan, err, sizeof err);
    if (rc != 0)
        fail_msg("seed %llu: build failed: %s", (unsigned long long)seed, err);
    uint64_t lb = check_served(&r, n0, period, arcs, narcs, &plan);
    /* The lower bound is the served timeline's, and the plan stays within 1 % of it (the
     * build that planned the persistent blocks with the arcs and the whole prologue as one
     * line reached 1.02 to 1.07 here). */
    assert_int_equal(plan.lower_bound, lb);
    if (plan.peak > lb + lb / 100)
        fail_msg("seed %llu: peak %llu is %.4f of the lower bound %llu", (unsigned long long)seed,
                 (unsigned long long)plan.peak, (double)plan.peak / (double)lb,
                 (unsigned long long)lb);
    om_saved_plan_free(&plan);
}

static void test_training_runs(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 8; seed++)
        build_and_check(seed, CHECKED_ITERATIONS + 3);
}

/* A run that ends in its cycle's first iteration: the line reaches past the log's end. */
static void test_short_run(void **state)
{
    (void)state;
    build_and_check(99, 3);
}

/* Every request of the prologue lives on (no block for the line to place). */
static void test_all_persistent(void **state)
{
    static struct om_logged_request e[64];
    struct om_cycle_arc arcs[4];
    struct om_saved_plan plan;
    char err[256] = "";
    (void)state;
    for (int i = 0; i < 60; i++)
        e[i] = (struct om_logged_request){10 + i, 4096 * (1 + i % 5), 64, OM_NO_DEATH};
    for (int s = 0; s < 4; s++) {
        e[60 + s] = (struct om_logged_request){5, 8192, 64, 60 + s + 1};
        arcs[s] = (struct om_cycle_arc){s, 5, s, s + 1, 8192, 64};
    }
    struct om_request_log log = {e, 64, 64};
    assert_int_equal(om_saved_plan_build(&log, 60, arcs, 4, 4, 0, 0, &plan, err, sizeof err), 0);
    uint64_t sum = 0;
    for (int i = 0; i < 60; i++) {
        assert_int_equal(plan.slots[i].offset, sum); /* stacked by birth */
        sum += e[i].len;
    }
    assert_int_equal(plan.peak, sum + 8192);
    assert_int_equal(plan.lower_bound, sum + 8192);
    om_saved_plan_free(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_runs),
        cmocka_unit_test(test_short_run),
        cmocka_unit_test(test_all_persistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
