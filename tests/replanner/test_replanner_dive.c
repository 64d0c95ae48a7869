/* Replanner tests: the dive without backtracking against a plain quadratic one, its use, and
 * the exact search of instances without slack. */
#include "rp_internal.h"
#include "rp_test_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/*
 * The canonical dive the plain way: each step computes every unplaced block's lowest offset
 * (aligned, above every placed block it meets in time, past the fixed blocks) from scratch
 * and places the one with the lowest, ties by rank. order gets movable positions.
 */
static void reference_dive(const rp_inst *in, const uint32_t *rank, uint32_t *order)
{
    uint64_t *off = calloc(in->nm + 1, sizeof(*off));
    char *placed = calloc(in->nm + 1, 1);

    assert_true(off && placed);
    for (uint32_t x = 0; x < in->nm; x++) {
        uint32_t pick = UINT32_MAX;
        uint64_t pick_off = 0;

        for (uint32_t k = 0; k < in->nm; k++) {
            const om_rp_block *b = &in->b[in->mov[k]];
            uint64_t o = 0;
            int moved = 1;

            if (placed[k])
                continue;
            for (uint32_t j = 0; j < in->nm; j++)
                if (placed[j] && t_live_together(b, &in->b[in->mov[j]], in->period) &&
                    off[j] + in->b[in->mov[j]].size > o)
                    o = off[j] + in->b[in->mov[j]].size;
            o = t_align_up(o, b->align);
            while (moved) {
                moved = 0;
                for (size_t f = 0; f < in->n; f++) {
                    const om_rp_block *g = &in->b[f];
                    if (g->fixed && t_live_together(b, g, in->period) && g->offset < o + b->size &&
                        o < g->offset + g->size) {
                        o = t_align_up(g->offset + g->size, b->align);
                        moved = 1;
                    }
                }
            }
            if (pick == UINT32_MAX || o < pick_off || (o == pick_off && rank[k] < rank[pick])) {
                pick = k;
                pick_off = o;
            }
        }
        if (pick >= in->nm)
            fail_msg("no block left to place at step %u", x);
        order[x] = pick;
        off[pick] = pick_off;
        placed[pick] = 1;
    }
    free(off);
    free(placed);
}

/* n random blocks, some of them fixed high up (apart in bytes, so never colliding). */
static void random_instance(om_rp_block *b, size_t n, int cyclic, int fixed, uint64_t *seed)
{
    t_random_blocks(b, n, 40, cyclic, 1, seed);
    for (size_t i = 0; fixed && i < n; i += 7) {
        b[i].fixed = 1;
        b[i].align = 0;
        b[i].offset = 32 + 100 * (i / 7);
    }
}

static void check_same_order(const om_rp_block *b, size_t n, uint64_t period, uint64_t *seed)
{
    rp_mem m = {&t_alloc, NULL};
    rp_inst in;
    uint32_t *rank, *got, *want;

    assert_int_equal(rp_inst_build(&in, &m, b, n, period), 0);
    rank = calloc(in.nm + 1, sizeof(*rank));
    got = calloc(in.nm + 1, sizeof(*got));
    want = calloc(in.nm + 1, sizeof(*want));
    assert_true(rank && got && want);
    /* A random permutation as the ranking: ties of lowest offsets are many. */
    for (uint32_t k = 0; k < in.nm; k++)
        rank[k] = k;
    for (uint32_t k = in.nm; k > 1; k--) {
        uint32_t j = (uint32_t)(t_rand(seed) % k), t = rank[k - 1];
        rank[k - 1] = rank[j];
        rank[j] = t;
    }
    assert_int_equal(rp_dive(&in, &m, rank, got, UINT64_MAX), 0);
    reference_dive(&in, rank, want);
    assert_memory_equal(got, want, in.nm * sizeof(uint32_t));
    free(rank);
    free(got);
    free(want);
    rp_mem_free_all(&m);
}

static void test_dive_matches_reference(void **state)
{
    om_rp_block b[160];
    uint64_t seed = 2024;

    (void)state;
    for (int round = 0; round < 40; round++) {
        size_t n = 1 + (size_t)(t_rand(&seed) % 160);
        int cyclic = round % 3 == 1, fixed = round % 4 == 2;

        random_instance(b, n, cyclic, fixed, &seed);
        check_same_order(b, n, cyclic ? 40 : 0, &seed);
    }
    assert_int_equal(t_live_bytes(), 0);
}

/* The clock stops a dive: -ETIMEDOUT, and nothing is left allocated. */
static void test_dive_deadline(void **state)
{
    om_rp_block b[600];
    uint64_t seed = 7;
    rp_mem m = {&t_alloc, NULL};
    rp_inst in;
    uint32_t rank[600], order[600];

    (void)state;
    t_random_blocks(b, 600, 40, 0, 0, &seed);
    assert_int_equal(rp_inst_build(&in, &m, b, 600, 0), 0);
    for (uint32_t k = 0; k < in.nm; k++)
        rank[k] = k;
    assert_int_equal(rp_dive(&in, &m, rank, order, 0), -ETIMEDOUT);
    rp_mem_free_all(&m);
    assert_int_equal(t_live_bytes(), 0);
}

/* The peak of the plan that places movable blocks in order, each above those placed before
 * it that it meets (no fixed blocks). */
static uint64_t replay_peak(const rp_inst *in, const uint32_t *order)
{
    uint64_t *off = calloc(in->nm + 1, sizeof(*off)), peak = 0;

    assert_non_null(off);
    for (uint32_t x = 0; x < in->nm; x++) {
        const om_rp_block *b = &in->b[in->mov[order[x]]];
        uint64_t o = 0;

        for (uint32_t y = 0; y < x; y++) {
            const om_rp_block *c = &in->b[in->mov[order[y]]];
            if (t_live_together(b, c, in->period) && off[order[y]] + c->size > o)
                o = off[order[y]] + c->size;
        }
        off[order[x]] = t_align_up(o, b->align);
        peak = off[order[x]] + b->size > peak ? off[order[x]] + b->size : peak;
    }
    free(off);
    return peak;
}

/*
 * Above 4096 blocks, where the branch and bound is not taken, the dives run before the local
 * search: with one step of local search, the plan is no higher than the first dive's (TWA).
 */
static void test_dives_above_bnb_size(void **state)
{
    enum { N = 4500 };
    om_rp_block *b = calloc(N, sizeof(*b));
    uint64_t *off = calloc(N, sizeof(*off)), seed = 99;
    uint32_t *rank = calloc(N, sizeof(*rank)), *order = calloc(N, sizeof(*order));
    rp_kv *kv = calloc(N, sizeof(*kv));
    om_rp_options opt = {0};
    om_rp_result res;
    rp_mem m = {&t_alloc, NULL};
    rp_inst in;
    char err[256] = "";

    (void)state;
    assert_true(b && off && rank && order && kv);
    t_random_blocks(b, N, 3000, 0, 1, &seed);
    for (size_t i = 0; i < N; i++) /* mostly short, a few long: a trace's shape */
        if (i % 16 && b[i].upper - b[i].lower > 40)
            b[i].upper = b[i].lower + 1 + b[i].upper % 40;
    assert_int_equal(rp_inst_build(&in, &m, b, N, 0), 0);
    rp_rank(&in, NULL, "TWA", NULL, NULL, NULL, 0, NULL, kv, rank);
    assert_int_equal(rp_dive(&in, &m, rank, order, UINT64_MAX), 0);
    opt.alloc = t_alloc;
    opt.budget_ms = 60000;
    opt.algo = OM_RP_ALGO_LOCAL;
    opt.max_nodes = 1;
    opt.err = err;
    opt.errlen = sizeof(err);
    assert_int_equal(om_rp_plan(b, N, &opt, off, &res), 0);
    assert_int_equal(om_rp_check(b, N, 0, off, &t_alloc, err, sizeof(err)), 0);
    assert_true(res.peak <= res.greedy_peak);
    assert_true(res.peak <= replay_peak(&in, order));
    rp_mem_free_all(&m);
    free(b);
    free(off);
    free(rank);
    free(order);
    free(kv);
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * Guillotine cuts of a width x height rectangle into n pieces, one block each (as
 * tests/replanner/gen_instances.py perfect does): the optimum is the height, every time
 * step is full. Pieces are cut across time or bytes, the largest (by a random weight) first.
 */
static size_t guillotine(om_rp_block *b, size_t n, uint64_t width, uint64_t height, uint64_t *seed)
{
    size_t m = 1, tries = 0;

    b[0] = (om_rp_block){.id = 0, .lower = 0, .upper = width, .size = height};
    while (m < n && tries++ < 100 * n) {
        size_t k = 0;
        uint64_t best = 0;

        for (size_t j = 0; j < m; j++) {
            uint64_t w = (b[j].upper - b[j].lower) * b[j].size * (1 + t_rand(seed) % 64);
            if (w > best) {
                best = w;
                k = j;
            }
        }
        if (t_rand(seed) & 1) {
            uint64_t len = b[k].upper - b[k].lower, c;
            if (len < 2)
                continue;
            c = b[k].lower + 1 + t_rand(seed) % (len - 1);
            b[m] = b[k];
            b[m].lower = c;
            b[k].upper = c;
        } else {
            uint64_t c;
            if (b[k].size < 2)
                continue;
            c = 1 + t_rand(seed) % (b[k].size - 1);
            b[m] = b[k];
            b[m].size = b[k].size - c;
            b[k].size = c;
        }
        b[m].id = m;
        m++;
    }
    return m;
}

/*
 * Perfect packings: `auto` plans them at LB (the tiling search, deterministic under a node
 * limit), and never claims a bound above LB, which the tiling search would if it gave up
 * on a branch holding a tiling.
 */
static void test_perfect_packings_tile(void **state)
{
    om_rp_block b[160];
    uint64_t off[160], seed = 31337;
    om_rp_options opt = {0};
    om_rp_result res;
    char err[256] = "";
    int tiled = 0;

    (void)state;
    opt.alloc = t_alloc;
    opt.budget_ms = 60000;
    opt.max_nodes = 2000000;
    opt.err = err;
    opt.errlen = sizeof(err);
    for (int round = 0; round < 10; round++) {
        size_t n = guillotine(b, 30 + (size_t)round * 10, 60, 1000, &seed);

        assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
        assert_int_equal(om_rp_check(b, n, 0, off, &t_alloc, err, sizeof(err)), 0);
        assert_int_equal(res.lower_bound, 1000);
        assert_int_equal(res.proven_bound, 1000);
        if (res.peak != 1000)
            fail_msg("round %d, %zu blocks: peak %llu after %llu steps (%s)", round, n,
                     (unsigned long long)res.peak, (unsigned long long)res.nodes, res.stage);
        tiled += strcmp(res.stage, "tile") == 0;
    }
    assert_true(tiled > 0); /* greedy by size and the dives do not solve them all */
    assert_int_equal(t_live_bytes(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dive_matches_reference),
        cmocka_unit_test(test_dive_deadline),
        cmocka_unit_test(test_dives_above_bnb_size),
        cmocka_unit_test(test_perfect_packings_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
