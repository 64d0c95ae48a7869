/* Replanner tests: validity everywhere, optimality on tiny sets, cycles, fixed blocks, errors. */
#include "rp_internal.h"
#include "rp_test_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

static const int algos[] = {OM_RP_ALGO_GREEDY, OM_RP_ALGO_LOCAL, OM_RP_ALGO_BNB, OM_RP_ALGO_AUTO};

static om_rp_block blk(uint64_t id, uint64_t lo, uint64_t up, uint64_t size)
{
    om_rp_block b = {0};
    b.id = id;
    b.lower = lo;
    b.upper = up;
    b.size = size;
    return b;
}

static void test_bundled_sets(void **state)
{
    static const char *const files[] = {"minimalloc-A.csv",         "minimalloc-B.csv",
                                        "minimalloc-C.csv",         "minimalloc-D.csv",
                                        "minimalloc-E.csv",         "minimalloc-F.csv",
                                        "idealloc-resnet50.csv",    "omnimalloc-small-a.6.csv",
                                        "omnimalloc-small-b.6.csv", "omnimalloc-small-c.8.csv"};
    struct stat st;
    (void)state;

    /* CI always has the data: a missing directory is a failure, not a skip. */
    if (stat(OM_LIFETIMES_DIR, &st) != 0)
        fail_msg("bundled lifetimes not found at %s", OM_LIFETIMES_DIR);
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[1024], err[512];
        om_rp_block *b;
        size_t n;
        uint64_t lb, peak;

        snprintf(path, sizeof(path), "%s/%s", OM_LIFETIMES_DIR, files[f]);
        if (om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        for (size_t a = 0; a < 4; a++) {
            peak = t_plan_checked(b, n, 0, algos[a], 10, &lb);
            /* The small omnimalloc sets are solved to optimality by every search stage. */
            if (strncmp(files[f], "omnimalloc", 10) == 0 && algos[a] != OM_RP_ALGO_GREEDY)
                assert_int_equal(peak, lb);
        }
        om_rp_csv_free(&t_alloc, b, n);
        assert_int_equal(t_live_bytes(), 0);
    }
}

/*
 * MiniMalloc's hardest two: E at its optimum (LB) and D at its best known peak or below,
 * each within a node budget (so the same on any machine) of about a tenth of a second.
 */
static void test_minimalloc_targets(void **state)
{
    static const struct {
        const char *file;
        uint64_t best_known;
    } sets[] = {{"minimalloc-D.csv", 1040384}, {"minimalloc-E.csv", 1048576}};
    (void)state;

    for (size_t f = 0; f < sizeof(sets) / sizeof(sets[0]); f++) {
        char path[1024], err[512];
        om_rp_options opt = {0};
        om_rp_result res;
        om_rp_block *b;
        uint64_t *off;
        size_t n;

        snprintf(path, sizeof(path), "%s/%s", OM_LIFETIMES_DIR, sets[f].file);
        if (om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        off = calloc(n, sizeof(*off));
        assert_non_null(off);
        opt.alloc = t_alloc;
        opt.budget_ms = 60000; /* the node limit ends it, never the clock */
        opt.max_nodes = 200000;
        opt.seed = 1;
        assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
        assert_int_equal(om_rp_check(b, n, 0, off, &t_alloc, err, sizeof(err)), 0);
        if (res.peak > sets[f].best_known)
            fail_msg("%s: peak %llu, best known %llu", sets[f].file, (unsigned long long)res.peak,
                     (unsigned long long)sets[f].best_known);
        free(off);
        om_rp_csv_free(&t_alloc, b, n);
    }
}

static void test_lower_bound(void **state)
{
    /* Half-open: 0 and 1 touch at t=4 and never overlap; 2 wraps on a circle of 10. */
    om_rp_block b[3] = {blk(0, 0, 4, 10), blk(1, 4, 8, 20), blk(2, 7, 12, 5)};
    uint64_t lb;
    (void)state;

    assert_int_equal(om_rp_lower_bound(b, 3, 0, &t_alloc, &lb, NULL, 0), 0);
    assert_int_equal(lb, 25);
    /* Cyclic: 2 lives over [7,10) and [0,2), meeting 0 as well as 1. */
    assert_int_equal(om_rp_lower_bound(b, 3, 10, &t_alloc, &lb, NULL, 0), 0);
    assert_int_equal(lb, 25);
    b[1].size = 1;
    assert_int_equal(om_rp_lower_bound(b, 3, 10, &t_alloc, &lb, NULL, 0), 0);
    assert_int_equal(lb, 15);
}

static void test_random_valid(void **state)
{
    uint64_t seed = 42;
    om_rp_block b[60];
    (void)state;

    for (int iter = 0; iter < 40; iter++) {
        int cyclic = iter & 1, aligned = (iter >> 1) & 1, fixed = (iter >> 2) & 1;
        size_t n = 10 + t_rand(&seed) % 50;
        uint64_t period = cyclic ? 50 : 0;

        t_random_blocks(b, n, 50, cyclic, aligned, &seed);
        if (fixed) {
            /* A few fixed blocks, stacked so that they never collide among themselves. */
            uint64_t top = 0;
            for (size_t i = 0; i < n; i += 7) {
                b[i].fixed = 1;
                b[i].offset = top + (t_rand(&seed) % 3) * 64;
                b[i].offset = b[i].align > 1
                                  ? (b[i].offset + b[i].align - 1) / b[i].align * b[i].align
                                  : b[i].offset;
                top = b[i].offset + b[i].size;
            }
        }
        for (size_t a = 0; a < 4; a++)
            t_plan_checked(b, n, period, algos[a], 3, NULL);
    }
}

static void test_optimal_tiny(void **state)
{
    uint64_t seed = 7;
    om_rp_block b[6];
    (void)state;

    for (int iter = 0; iter < 120; iter++) {
        int cyclic = iter % 3 == 1, aligned = iter % 4 == 2;
        size_t n = 2 + t_rand(&seed) % 5;
        uint64_t period = cyclic ? 12 : 0, opt, peak;

        t_random_blocks(b, n, 12, cyclic, aligned, &seed);
        opt = t_brute_force(b, n, period);
        peak = t_plan_checked(b, n, period, OM_RP_ALGO_BNB, 2000, NULL);
        if (peak != opt)
            fail_msg("iteration %d (n %zu, period %llu): peak %llu, optimum %llu", iter, n,
                     (unsigned long long)period, (unsigned long long)peak, (unsigned long long)opt);
    }
}

/*
 * Seven crowded blocks (short horizon, many overlaps, LB often infeasible): the branch and
 * bound runs until it proves its plan optimal, so a wrong prune (the section check with its
 * cached witness, a deeper C taken as a proof) shows as a peak above the brute force one.
 */
static void test_optimal_crowded(void **state)
{
    uint64_t seed = 11;
    om_rp_block b[7];
    (void)state;

    for (int iter = 0; iter < 150; iter++) {
        int cyclic = iter % 4 == 3, aligned = iter % 5 == 4;
        uint64_t period = cyclic ? 6 : 0, opt, peak;

        t_random_blocks(b, 7, 6, cyclic, aligned, &seed);
        opt = t_brute_force(b, 7, period);
        peak = t_plan_checked(b, 7, period, OM_RP_ALGO_BNB, 5000, NULL);
        if (peak != opt)
            fail_msg("iteration %d (period %llu): peak %llu, optimum %llu", iter,
                     (unsigned long long)period, (unsigned long long)peak, (unsigned long long)opt);
    }
}

/*
 * Blocks that meet every other one go to the bottom before the search (find_bottom): with
 * and without alignment, on a line and on a circle, the plan must stay optimal; with a
 * fixed block nothing is moved, and the plan must stay valid.
 */
static void test_bottom_blocks(void **state)
{
    uint64_t seed = 23;
    om_rp_block b[7];
    (void)state;

    for (int iter = 0; iter < 120; iter++) {
        int cyclic = iter % 3 == 2, aligned = iter % 4 >= 2;
        size_t n = 3 + t_rand(&seed) % 5, nfull = 1 + iter % 2;
        uint64_t period = cyclic ? 12 : 0, opt, peak;

        t_random_blocks(b, n, 12, cyclic, aligned, &seed);
        for (size_t i = 0; i < nfull; i++) {
            b[i].lower = cyclic ? t_rand(&seed) % 12 : 0;
            b[i].upper = b[i].lower + 12;
            /* In half of the iterations, sizes that keep every alignment when moved. */
            if (iter & 4)
                b[i].size = 16 * (1 + t_rand(&seed) % 3);
        }
        opt = t_brute_force(b, n, period);
        peak = t_plan_checked(b, n, period, OM_RP_ALGO_BNB, 2000, NULL);
        if (peak != opt)
            fail_msg("iteration %d (n %zu, period %llu): peak %llu, optimum %llu", iter, n,
                     (unsigned long long)period, (unsigned long long)peak, (unsigned long long)opt);
        b[n - 1].fixed = 1;
        b[n - 1].offset = b[n - 1].align > 1 ? 2 * b[n - 1].align : 5;
        t_plan_checked(b, n, period, OM_RP_ALGO_BNB, 20, NULL);
    }
}

static int meets(const om_rp_block *a, const om_rp_block *b, uint64_t p)
{
    if (a->lower < b->upper && b->lower < a->upper)
        return 1;
    return p && ((a->lower + p < b->upper && b->lower < a->upper + p) ||
                 (b->lower + p < a->upper && a->lower < b->upper + p));
}

/* The lowest aligned offset where block k misses every other block that it meets. */
static uint64_t first_fit(const om_rp_block *b, size_t n, size_t k, uint64_t period)
{
    uint64_t a = b[k].align > 1 ? b[k].align : 1, off = 0;
    for (int moved = 1; moved;) {
        moved = 0;
        for (size_t j = 0; j < n; j++)
            if (j != k && meets(&b[k], &b[j], period) && b[j].offset < off + b[k].size &&
                off < b[j].offset + b[j].size) {
                off = (b[j].offset + b[j].size + a - 1) / a * a;
                moved = 1;
            }
    }
    return off;
}

/*
 * Many fixed blocks (a saved plan's line has thousands): each movable block's list of the
 * fixed blocks it meets comes from a sweep, and the greedy skips those below by a search.
 * With one movable block among fixed ones, the greedy must put it where first fit over all
 * others does: a fixed block missing from its list shows as an overlap, one listed that it
 * does not meet as a higher offset. Then half of them movable, planned by every stage.
 */
static void test_many_fixed(void **state)
{
    enum { N = 700 };
    static om_rp_block b[N];
    static uint64_t off[N];
    uint64_t seed = 31;
    om_rp_options opt = {0};
    om_rp_result res;
    char err[256] = "";
    (void)state;

    opt.alloc = t_alloc;
    opt.err = err;
    opt.errlen = sizeof(err);
    opt.algo = OM_RP_ALGO_GREEDY;
    for (int cyclic = 0; cyclic < 2; cyclic++) {
        uint64_t period = cyclic ? 300 : 0;

        t_random_blocks(b, N, 300, cyclic, 1, &seed);
        opt.period = period;
        if (om_rp_plan(b, N, &opt, off, &res) != 0)
            fail_msg("%s", err);
        for (size_t i = 0; i < N; i++) {
            b[i].fixed = 1;
            b[i].offset = off[i];
        }
        for (int probe = 0; probe < 40; probe++) {
            size_t k = t_rand(&seed) % N;
            uint64_t want;

            b[k].fixed = 0;
            want = first_fit(b, N, k, period);
            if (om_rp_plan(b, N, &opt, off, &res) != 0)
                fail_msg("%s", err);
            if (off[k] != want)
                fail_msg("period %llu, block %zu: greedy at %llu, first fit at %llu",
                         (unsigned long long)period, k, (unsigned long long)off[k],
                         (unsigned long long)want);
            b[k].fixed = 1;
        }
        for (size_t i = 0; i < N; i += 2)
            b[i].fixed = 0;
        for (size_t a = 0; a < 4; a++)
            t_plan_checked(b, N, period, algos[a], 20, NULL);
    }
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * A goal above LB: the search stops at the first plan that reaches it (the saved plan's
 * line needs its parts only below the circle's peak). Instances whose greedy plan misses
 * LB: with the greedy peak as the goal nothing is searched; without, the search runs.
 */
static void test_goal(void **state)
{
    static om_rp_block b[200];
    static uint64_t off[200];
    uint64_t seed = 5;
    int seen = 0;
    om_rp_options opt = {0};
    om_rp_result greedy, res;
    (void)state;

    opt.alloc = t_alloc;
    opt.max_nodes = 20000;
    opt.budget_ms = 10000;
    for (int iter = 0; iter < 20; iter++) {
        t_random_blocks(b, 200, 100, 0, 0, &seed);
        opt.algo = OM_RP_ALGO_GREEDY;
        opt.goal = 0;
        assert_int_equal(om_rp_plan(b, 200, &opt, off, &greedy), 0);
        if (greedy.peak == greedy.lower_bound)
            continue;
        seen++;
        opt.algo = OM_RP_ALGO_AUTO;
        opt.goal = greedy.peak;
        assert_int_equal(om_rp_plan(b, 200, &opt, off, &res), 0);
        assert_int_equal(res.peak, greedy.peak);
        assert_int_equal(res.nodes, 0);
        assert_int_equal(om_rp_check(b, 200, 0, off, &t_alloc, NULL, 0), 0);
        opt.goal = 0;
        assert_int_equal(om_rp_plan(b, 200, &opt, off, &res), 0);
        assert_true(res.nodes > 0);
        assert_true(res.peak <= greedy.peak);
    }
    assert_true(seen > 0);
    assert_int_equal(t_live_bytes(), 0);
}

static void test_cyclic_wrap(void **state)
{
    /* A (8..12 mod 10) wraps into B's [0,3): they must not share bytes; C fits beside. */
    om_rp_block b[3] = {blk(1, 8, 13, 4), blk(2, 0, 3, 4), blk(3, 3, 8, 8)};
    uint64_t lb, peak;
    (void)state;

    for (size_t a = 0; a < 4; a++) {
        peak = t_plan_checked(b, 3, 10, algos[a], 5, &lb);
        assert_int_equal(lb, 8);
        assert_int_equal(peak, 8);
    }
    /* The same blocks on a line do not meet at all. */
    b[0].upper = 10;
    peak = t_plan_checked(b, 3, 0, OM_RP_ALGO_AUTO, 5, NULL);
    assert_int_equal(peak, 8);
    /* A block live the whole period meets everything. */
    b[0].lower = 4;
    b[0].upper = 14;
    peak = t_plan_checked(b, 3, 10, OM_RP_ALGO_AUTO, 5, &lb);
    assert_int_equal(lb, 12);
    assert_int_equal(peak, 12);
}

static void test_fixed_and_alignment(void **state)
{
    /* A fixed block in the middle of the pool: the others route around it. */
    om_rp_block b[4] = {blk(1, 0, 10, 16), blk(2, 0, 10, 16), blk(3, 0, 10, 16),
                        blk(4, 0, 10, 100)};
    uint64_t off[4];
    om_rp_options opt = {0};
    om_rp_result res;
    char err[256];
    (void)state;

    b[0].fixed = 1;
    b[0].offset = 8;
    b[3].align = 64;
    opt.alloc = t_alloc;
    opt.budget_ms = 5;
    opt.err = err;
    opt.errlen = sizeof(err);
    for (size_t a = 0; a < 4; a++) {
        opt.algo = algos[a];
        assert_int_equal(om_rp_plan(b, 4, &opt, off, &res), 0);
        assert_int_equal(om_rp_check(b, 4, 0, off, &t_alloc, err, sizeof(err)), 0);
        assert_int_equal(off[0], 8);
        assert_int_equal(off[3] % 64, 0);
    }
    assert_int_equal(t_live_bytes(), 0);
}

static void expect_einval(const om_rp_block *b, size_t n, uint64_t period, const char *want)
{
    om_rp_options opt = {0};
    uint64_t off[4];
    char err[256] = "";

    opt.alloc = t_alloc;
    opt.period = period;
    opt.err = err;
    opt.errlen = sizeof(err);
    assert_int_equal(om_rp_plan(b, n, &opt, off, NULL), -EINVAL);
    if (!strstr(err, want))
        fail_msg("message '%s' lacks '%s'", err, want);
    assert_int_equal(om_rp_validate(b, n, period, NULL, 0), -EINVAL);
    assert_int_equal(t_live_bytes(), 0);
}

static void test_bad_input(void **state)
{
    om_rp_block b[2] = {blk(5, 0, 4, 8), blk(9, 2, 6, 8)};
    (void)state;

    b[1].upper = 2;
    expect_einval(b, 2, 0, "block 9: lower 2 >= upper 2");
    b[1] = blk(9, 2, 6, 0);
    expect_einval(b, 2, 0, "block 9: size is 0");
    b[1].size = UINT64_MAX;
    expect_einval(b, 2, 0, "block 9: size 18446744073709551615 overflows");
    b[1].size = OM_RP_MAX_BYTES;
    b[0].size = OM_RP_MAX_BYTES;
    b[0].upper = 3; /* fine alone, but the two sizes add up past the limit */
    expect_einval(b, 2, 0, "total size overflows");
    b[0] = blk(5, 0, 4, 8);
    b[1] = blk(9, 2, 6, 8);
    b[1].align = 24;
    expect_einval(b, 2, 0, "block 9: alignment 24 is not a power of two");
    b[1].align = 8;
    b[1].fixed = 1;
    b[1].offset = 4;
    expect_einval(b, 2, 0, "block 9: fixed offset 4 is not aligned to 8");
    b[0].fixed = 1;
    b[0].offset = 0;
    b[1].offset = 0;
    expect_einval(b, 2, 0, "fixed blocks 5 and 9 collide");
    /* By offset 9 comes first; the message keeps the input's order. */
    b[0].offset = 8;
    b[1].size = 16;
    b[1].align = 0;
    expect_einval(b, 2, 0, "fixed blocks 5 and 9 collide");
    b[0] = blk(5, 0, 4, 8);
    b[1] = blk(9, 2, 15, 8);
    expect_einval(b, 2, 10, "block 9: arc [2,15) is longer than the period 10");
    b[1] = blk(9, 10, 12, 8);
    expect_einval(b, 2, 10, "block 9: lower 10 is outside the period 10");
}

static void test_checker_rejects(void **state)
{
    om_rp_block b[3] = {blk(1, 0, 10, 16), blk(2, 5, 15, 16), blk(3, 15, 20, 16)};
    uint64_t off[3] = {0, 8, 0};
    char err[256] = "";
    (void)state;

    /* 1 and 2 share bytes [8,16) during [5,10). */
    assert_int_equal(om_rp_check(b, 3, 0, off, &t_alloc, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "blocks 1 and 2 overlap"));
    off[1] = 16;
    assert_int_equal(om_rp_check(b, 3, 0, off, &t_alloc, err, sizeof(err)), 0);
    /* On a circle of 16, 3 ([15,20) wraps to [0,4)) meets 1 at the same bytes. */
    assert_int_equal(om_rp_check(b, 3, 16, off, &t_alloc, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "blocks 1 and 3 overlap"));
    b[2].align = 32;
    off[2] = 48;
    assert_int_equal(om_rp_check(b, 3, 0, off, &t_alloc, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "block 3: offset 48 is not aligned to 32"));
    b[2].align = 0;
    b[2].fixed = 1;
    b[2].offset = 32;
    assert_int_equal(om_rp_check(b, 3, 0, off, &t_alloc, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "block 3: fixed at 32 but placed at 48"));
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * The checker's sweep against every pair: random offsets in a narrow range, so that about
 * half of the plans collide, on lines and circles; a pair it names must collide.
 */
static void test_checker_random(void **state)
{
    enum { N = 12 };
    om_rp_block b[N];
    uint64_t off[N], seed = 77;
    char err[256];
    (void)state;

    for (int iter = 0; iter < 3000; iter++) {
        int cyclic = iter & 1;
        uint64_t period = cyclic ? 20 : 0, bad = 0;

        t_random_blocks(b, N, 20, cyclic, 0, &seed);
        for (size_t i = 0; i < N; i++)
            off[i] = t_rand(&seed) % 400;
        for (size_t i = 0; i < N; i++)
            for (size_t j = i + 1; j < N; j++)
                bad |= meets(&b[i], &b[j], period) && off[i] < off[j] + b[j].size &&
                       off[j] < off[i] + b[i].size;
        int rc = om_rp_check(b, N, period, off, &t_alloc, err, sizeof(err));
        if ((rc != 0) != (bad != 0))
            fail_msg("iteration %d: checker says %d, pairs say %s", iter, rc,
                     bad ? "collision" : "none");
        if (rc != 0) {
            unsigned long long x, y;
            assert_int_equal(sscanf(err, "blocks %llu and %llu overlap", &x, &y), 2);
            x -= 100; /* t_random_blocks numbers them from 100 */
            y -= 100;
            assert_true(x < y && y < N && meets(&b[x], &b[y], period));
            assert_true(off[x] < off[y] + b[y].size && off[y] < off[x] + b[x].size);
        }
    }
    assert_int_equal(t_live_bytes(), 0);
}

static void test_deterministic(void **state)
{
    uint64_t seed = 99, o1[200], o2[200];
    om_rp_block b[200];
    om_rp_options opt = {0};
    (void)state;

    t_random_blocks(b, 200, 1000, 0, 1, &seed);
    opt.alloc = t_alloc;
    opt.algo = OM_RP_ALGO_LOCAL;
    opt.budget_ms = 60000; /* the node limit ends it, never the clock */
    opt.max_nodes = 300;
    opt.seed = 3;
    assert_int_equal(om_rp_plan(b, 200, &opt, o1, NULL), 0);
    assert_int_equal(om_rp_plan(b, 200, &opt, o2, NULL), 0);
    assert_memory_equal(o1, o2, sizeof(o1));
}

/* The restarts of the branch and bound draw randomized rankings: same seed, same plan. */
static void test_bnb_restarts(void **state)
{
    uint64_t seed = 5, o1[120], o2[120];
    om_rp_block b[120];
    om_rp_options opt = {0};
    om_rp_result res;
    char err[256];
    (void)state;

    t_random_blocks(b, 120, 400, 0, 0, &seed);
    opt.alloc = t_alloc;
    opt.algo = OM_RP_ALGO_BNB;
    opt.budget_ms = 60000;  /* the node limit ends it, never the clock */
    opt.max_nodes = 200000; /* past several restarts of 4096 nodes */
    for (uint64_t sd = 1; sd <= 4; sd++) {
        opt.seed = sd;
        assert_int_equal(om_rp_plan(b, 120, &opt, o1, &res), 0);
        assert_int_equal(om_rp_check(b, 120, 0, o1, &t_alloc, err, sizeof(err)), 0);
        assert_int_equal(om_rp_plan(b, 120, &opt, o2, NULL), 0);
        assert_memory_equal(o1, o2, sizeof(o1));
        assert_true(res.peak >= res.lower_bound);
    }
}

/* A budget that runs out during the greedy stage still yields a valid plan. */
static void test_tiny_budget_large(void **state)
{
    size_t n = 20000;
    uint64_t seed = 11, *off = malloc(n * sizeof(*off));
    om_rp_block *b = malloc(n * sizeof(*b));
    om_rp_options opt = {0};
    om_rp_result res;
    char err[256];
    (void)state;

    assert_non_null(off);
    assert_non_null(b);
    t_random_blocks(b, n, 5000, 0, 1, &seed);
    opt.alloc = t_alloc;
    opt.budget_ms = 1;
    assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
    assert_int_equal(om_rp_check(b, n, 0, off, &t_alloc, err, sizeof(err)), 0);
    assert_int_equal(res.peak, om_rp_peak(b, n, off));
    free(off);
    free(b);
}

/* The radix sort against introsort on large arrays: keys that tie in some words and not in
 * others, v in order or shuffled (the radix sort skips v's passes only when in order). */
static void test_sort_radix(void **state)
{
    const size_t n = 9000;
    rp_kv *a = malloc(n * sizeof(*a)), *b = malloc(n * sizeof(*b));
    uint64_t seed = 41;
    (void)state;

    assert_true(a && b);
    for (int round = 0; round < 6; round++) {
        rp_mem m = {&t_alloc, NULL};

        memset(a, 0, n * sizeof(*a)); /* the padding too: the arrays are compared whole */
        for (size_t i = 0; i < n; i++) {
            a[i].k1 = round < 2 ? t_rand(&seed) : t_rand(&seed) % 50;
            a[i].k2 = round & 2 ? 7 : t_rand(&seed) % 3;
            a[i].k3 = round == 4 ? t_rand(&seed) << 20 : 0;
            a[i].v = round & 1 ? (uint32_t)i : (uint32_t)(t_rand(&seed) % n);
        }
        memcpy(b, a, n * sizeof(*a));
        rp_sort_kv(a, n);
        assert_int_equal(rp_sort_kv_mem(b, n, &m), 0);
        assert_memory_equal(a, b, n * sizeof(*a));
        rp_mem_free_all(&m);
    }
    free(a);
    free(b);
    assert_int_equal(t_live_bytes(), 0);
}

/* The max tree against a plain array: random range adds of either sign, random range maxima. */
static void test_maxtree_random(void **state)
{
    uint64_t seed = 31, v[300];
    (void)state;

    for (int iter = 0; iter < 40; iter++) {
        uint32_t n = 1 + (uint32_t)(t_rand(&seed) % 300);
        rp_mem m = {&t_alloc, NULL};
        rp_maxtree t;

        for (uint32_t i = 0; i < n; i++)
            v[i] = t_rand(&seed) % 1000000;
        assert_int_equal(rp_maxtree_init(&t, &m, n), 0);
        rp_maxtree_build(&t, v, n);
        for (int op = 0; op < 500; op++) {
            uint32_t lo = (uint32_t)(t_rand(&seed) % n);
            uint32_t hi = lo + 1 + (uint32_t)(t_rand(&seed) % (n - lo));
            int64_t d = (int64_t)(t_rand(&seed) % 200001) - 100000, want = INT64_MIN;

            for (uint32_t i = lo; i < hi; i++) /* totals never go below 0 */
                if ((int64_t)v[i] + d < 0)
                    d = -(int64_t)v[i];
            rp_maxtree_add(&t, lo, hi, d);
            for (uint32_t i = lo; i < hi; i++)
                v[i] += (uint64_t)d;
            lo = (uint32_t)(t_rand(&seed) % n);
            hi = lo + 1 + (uint32_t)(t_rand(&seed) % (n - lo));
            for (uint32_t i = lo; i < hi; i++)
                if ((int64_t)v[i] > want)
                    want = (int64_t)v[i];
            assert_int_equal(rp_maxtree_max(&t, lo, hi), want);
        }
        rp_mem_free_all(&m);
    }
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * The branch and bound's setup size, against every pair checked one by one: exact on a line
 * (both ends of each pair that meets, plus the sections of every block), never below the
 * truth on a circle, where a wrapping block met at both of its runs counts twice.
 */
static void test_setup_size(void **state)
{
    uint64_t seed = 23;
    static om_rp_block b[OM_RP_BNB_MAX_BLOCKS + 200];
    (void)state;

    /* The last iteration is a line above OM_RP_BNB_MAX_BLOCKS, where each pair is listed
     * once; below (and on a circle) both ends are. */
    for (int iter = 0; iter < 61; iter++) {
        int cyclic = iter & 1, big = iter == 60;
        size_t n = big ? OM_RP_BNB_MAX_BLOCKS + 200 : 1 + t_rand(&seed) % 80;
        uint64_t horizon = big ? 20000 : 4 + t_rand(&seed) % 60, entries = 0, truth = 0;
        rp_mem m = {&t_alloc, NULL};
        rp_inst in;

        t_random_blocks(b, n, horizon, cyclic, 0, &seed);
        assert_int_equal(rp_inst_build(&in, &m, b, n, cyclic ? horizon : 0), 0);
        assert_int_equal(rp_bnb_setup_size(&in, &m, &entries), 0);
        for (uint32_t k = 0; k < in.nm; k++) {
            uint32_t i = in.mov[k];
            truth += in.s1[i] - in.s0[i] + in.w1[i] - in.w0[i];
            for (uint32_t j = big ? k + 1 : 0; j < in.nm; j++)
                truth += j != k && rp_overlap_time(&in, i, in.mov[j]);
        }
        if (cyclic ? entries < truth : entries != truth)
            fail_msg("iteration %d (n %zu, %s): setup size %llu, counted %llu", iter, n,
                     cyclic ? "circle" : "line", (unsigned long long)entries,
                     (unsigned long long)truth);
        rp_mem_free_all(&m);
    }
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * One iteration of the bundled transformer at batch 32 (6491 arcs on a circle, 24 of them
 * wrapping; see data/README.md): above OM_RP_BNB_MAX_BLOCKS, but with few pairs meeting in
 * time, so auto takes the branch and bound, whose first dive reaches LB (local search was
 * at 1.04 x LB after 200 ms). With a budget far too short to list its pairs, local search.
 * Node limits, not the clock, end both runs. The search's memory stays linear in the arcs:
 * holding every open node's candidates took 59 MB here, 9.5 MB without.
 */
#define PEAK_PER_ARC 2048
static void test_auto_large_step(void **state)
{
    char path[1024], err[512];
    om_rp_block *b;
    size_t n;
    om_rp_options opt = {0};
    om_rp_result res;
    uint64_t *off;
    (void)state;

    snprintf(path, sizeof(path), "%s/transformer-b32-step.csv", OM_TEST_DATA_DIR);
    if (om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_true(n > OM_RP_BNB_MAX_BLOCKS);
    off = malloc(n * sizeof(*off));
    assert_non_null(off);
    opt.alloc = t_alloc;
    opt.period = 6491;
    opt.budget_ms = 60000;
    opt.max_nodes = 4 * n;
    opt.err = err;
    opt.errlen = sizeof(err);
    t_peak_reset();
    assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
    if (t_peak_bytes() - t_live_bytes() > PEAK_PER_ARC * n)
        fail_msg("the search took %zu bytes for %zu arcs", t_peak_bytes() - t_live_bytes(), n);
    assert_int_equal(om_rp_check(b, n, opt.period, off, &t_alloc, err, sizeof(err)), 0);
    assert_string_equal(res.stage, "bnb");
    assert_true(res.optimal);
    opt.budget_ms = 1;
    opt.max_nodes = 50;
    assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
    assert_int_equal(om_rp_check(b, n, opt.period, off, &t_alloc, err, sizeof(err)), 0);
    assert_string_not_equal(res.stage, "bnb");
    free(off);
    om_rp_csv_free(&t_alloc, b, n);
    assert_int_equal(t_live_bytes(), 0);
}

/*
 * A long trace whose greedy by size stays above LB (idealloc PanGu 2.6B, 18,692 buffers):
 * the branch and bound's first dives reach LB within 2 n nodes. TWA's dive, whose parts
 * keep its order, takes about 1.14 n; lZ's first, as before, failed after n + n/4 + 64.
 */
static void test_first_dives_trace(void **state)
{
    char path[1024], err[512];
    om_rp_block *b;
    size_t n;
    om_rp_options opt = {0};
    om_rp_result res;
    uint64_t *off;
    (void)state;

    snprintf(path, sizeof(path), "%s/idealloc-pangu-2.6B.csv", OM_LIFETIMES_DIR);
    if (om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    off = malloc(n * sizeof(*off));
    assert_non_null(off);
    opt.alloc = t_alloc;
    opt.budget_ms = 60000;
    opt.max_nodes = 2 * n; /* the node limit ends it, never the clock */
    opt.err = err;
    opt.errlen = sizeof(err);
    assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
    assert_int_equal(om_rp_check(b, n, 0, off, &t_alloc, err, sizeof(err)), 0);
    assert_true(res.greedy_peak > res.lower_bound);
    assert_int_equal(res.peak, res.lower_bound);
    assert_string_equal(res.stage, "bnb");
    free(off);
    om_rp_csv_free(&t_alloc, b, n);
    assert_int_equal(t_live_bytes(), 0);
}

/* Where alignment puts LB out of reach, the search proves it: the gap is the bound's. */
static void test_proven_bound(void **state)
{
    om_rp_block b[3] = {blk(1, 0, 10, 1), blk(2, 0, 10, 1), blk(3, 5, 15, 3)};
    uint64_t off[3];
    om_rp_options opt = {0};
    om_rp_result res;
    (void)state;

    b[0].align = b[1].align = 8;
    opt.alloc = t_alloc;
    opt.budget_ms = 1000;
    opt.max_nodes = 100000;
    opt.algo = OM_RP_ALGO_BNB;
    assert_int_equal(om_rp_plan(b, 3, &opt, off, &res), 0);
    assert_int_equal(res.lower_bound, 5); /* 1 + 1 + 3 live in [5, 10) */
    assert_int_equal(res.peak, 9);        /* 0 and 8, the 3 bytes between */
    assert_int_equal(res.proven_bound, 9);
    assert_true(res.optimal);
    /* The greedy alone proves nothing beyond LB. */
    opt.algo = OM_RP_ALGO_GREEDY;
    assert_int_equal(om_rp_plan(b, 3, &opt, off, &res), 0);
    assert_int_equal(res.proven_bound, 5);
    assert_false(res.optimal);
    assert_int_equal(t_live_bytes(), 0);
}

/* The proven bound with no search (algo greedy): rp_bound's alone. */
static uint64_t shape_bound(const om_rp_block *b, size_t n, uint64_t period, uint64_t *peak)
{
    uint64_t off[8];
    om_rp_options opt = {0};
    om_rp_result res;

    assert_true(n <= 8);
    opt.period = period;
    opt.algo = OM_RP_ALGO_GREEDY;
    opt.alloc = t_alloc;
    assert_int_equal(om_rp_plan(b, n, &opt, off, &res), 0);
    assert_int_equal(om_rp_check(b, n, period, off, &t_alloc, NULL, 0), 0);
    assert_true(res.peak >= res.proven_bound && res.proven_bound >= res.lower_bound);
    if (peak)
        *peak = res.peak;
    return res.proven_bound;
}

/*
 * Three arcs longer than half the period meet pairwise but are never live all at once: the
 * max of live bytes (2) is out of reach, the clique (3) is proven. A fixed block live
 * throughout leaves a hole of 1000 bytes below it that no 1500-byte block fits in: the
 * blocks go above it, at 2000 + 1500.
 */
static void test_shape_bound(void **state)
{
    om_rp_block arcs[4] = {blk(1, 0, 6, 1), blk(2, 3, 9, 1), blk(3, 6, 12, 1), blk(4, 9, 10, 1)};
    om_rp_block line[3] = {blk(1, 0, 10, 1000), blk(2, 0, 4, 1500), blk(3, 5, 10, 1500)};
    uint64_t peak;
    (void)state;

    assert_int_equal(shape_bound(arcs, 3, 10, &peak), 3);
    assert_int_equal(peak, 3);
    /* [9, 10) meets only [6, 12) of the three: not in the clique */
    assert_int_equal(shape_bound(arcs, 4, 10, &peak), 3);
    /* arcs of exactly half the period need not meet */
    arcs[0] = blk(1, 0, 5, 1);
    arcs[1] = blk(2, 5, 10, 1);
    assert_int_equal(shape_bound(arcs, 2, 10, &peak), 1);
    assert_int_equal(peak, 1);
    line[0].fixed = 1;
    line[0].offset = 1000;
    assert_int_equal(shape_bound(line, 3, 0, &peak), 3500);
    assert_int_equal(peak, 3500);
    /* a hole large enough: nothing beyond the fixed block's end, where the plan is */
    line[0].offset = 1500;
    assert_int_equal(shape_bound(line, 3, 0, &peak), 2500);
    assert_int_equal(peak, 2500);
    assert_int_equal(t_live_bytes(), 0);
}

/* The shape bound never exceeds the optimum (brute force) on random small instances,
 * cyclic with long arcs and with fixed blocks live throughout. */
static void test_shape_bound_sound(void **state)
{
    uint64_t seed = 23;
    om_rp_block b[7];
    int above_lb = 0;
    (void)state;

    for (int iter = 0; iter < 400; iter++) {
        int cyclic = iter % 2, aligned = iter % 5 == 3;
        size_t n = 3 + t_rand(&seed) % 5, nf = iter % 3 == 0 ? 1 + t_rand(&seed) % 2 : 0;
        uint64_t period = cyclic ? 12 : 0, top = 0, lb;

        t_random_blocks(b, n, 12, cyclic, aligned, &seed);
        for (size_t i = 0; i < nf; i++) { /* live throughout, with a hole below each */
            b[i].fixed = 1;
            b[i].lower = 0;
            b[i].upper = 12;
            b[i].align = 0;
            b[i].offset = top + t_rand(&seed) % 40;
            top = b[i].offset + b[i].size;
        }
        uint64_t opt = t_brute_force(b, n, period), bound = shape_bound(b, n, period, NULL);
        if (bound > opt)
            fail_msg("iteration %d (n %zu, period %llu): bound %llu above the optimum %llu", iter,
                     n, (unsigned long long)period, (unsigned long long)bound,
                     (unsigned long long)opt);
        assert_int_equal(om_rp_lower_bound(b, n, period, &t_alloc, &lb, NULL, 0), 0);
        above_lb += bound > lb && bound > top;
    }
    assert_true(above_lb > 0); /* the instances exercise it */
    assert_int_equal(t_live_bytes(), 0);
}

static void test_empty(void **state)
{
    om_rp_options opt = {0};
    om_rp_result res;
    uint64_t off[1];
    (void)state;

    opt.alloc = t_alloc;
    assert_int_equal(om_rp_plan(NULL, 0, &opt, off, &res), 0);
    assert_int_equal(res.peak, 0);
    assert_int_equal(res.lower_bound, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_sets),
        cmocka_unit_test(test_minimalloc_targets),
        cmocka_unit_test(test_lower_bound),
        cmocka_unit_test(test_random_valid),
        cmocka_unit_test(test_optimal_tiny),
        cmocka_unit_test(test_optimal_crowded),
        cmocka_unit_test(test_bottom_blocks),
        cmocka_unit_test(test_cyclic_wrap),
        cmocka_unit_test(test_fixed_and_alignment),
        cmocka_unit_test(test_many_fixed),
        cmocka_unit_test(test_goal),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_checker_rejects),
        cmocka_unit_test(test_checker_random),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_proven_bound),
        cmocka_unit_test(test_shape_bound),
        cmocka_unit_test(test_shape_bound_sound),
        cmocka_unit_test(test_bnb_restarts),
        cmocka_unit_test(test_tiny_budget_large),
        cmocka_unit_test(test_maxtree_random),
        cmocka_unit_test(test_sort_radix),
        cmocka_unit_test(test_setup_size),
        cmocka_unit_test(test_auto_large_step),
        cmocka_unit_test(test_first_dives_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
