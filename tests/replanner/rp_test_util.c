/* Helpers shared by the replanner tests: a counting allocator, random instances, brute force. */
#include "rp_test_util.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static size_t live, peak_live;

static void *t_malloc(void *ctx, size_t n)
{
    (void)ctx;
    live += n;
    if (live > peak_live)
        peak_live = live;
    return malloc(n);
}

static void t_free(void *ctx, void *p, size_t n)
{
    (void)ctx;
    assert_true(live >= n);
    live -= n;
    free(p);
}

om_rp_allocator t_alloc = {t_malloc, t_free, NULL};

size_t t_live_bytes(void)
{
    return live;
}

size_t t_peak_bytes(void)
{
    return peak_live;
}

void t_peak_reset(void)
{
    peak_live = live;
}

uint64_t t_rand(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void t_random_blocks(om_rp_block *b, size_t n, uint64_t horizon, int cyclic, int aligned,
                     uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        memset(&b[i], 0, sizeof(b[i]));
        b[i].id = 100 + i;
        b[i].lower = t_rand(seed) % horizon;
        if (cyclic)
            b[i].upper = b[i].lower + 1 + t_rand(seed) % horizon;
        else
            b[i].upper = b[i].lower + 1 + t_rand(seed) % (horizon - b[i].lower);
        b[i].size = 1 + t_rand(seed) % 64;
        if (aligned)
            b[i].align = (uint64_t)1 << (t_rand(seed) % 5);
    }
}

int t_live_together(const om_rp_block *a, const om_rp_block *b, uint64_t p)
{
    if (a->lower < b->upper && b->lower < a->upper)
        return 1;
    if (!p)
        return 0;
    return (a->lower + p < b->upper && b->lower < a->upper + p) ||
           (b->lower + p < a->upper && a->lower < b->upper + p);
}

uint64_t t_align_up(uint64_t x, uint64_t a)
{
    return a > 1 ? (x + a - 1) / a * a : x;
}

static int fits(const om_rp_block *b, const uint64_t *off, const int *placed, size_t n, size_t k,
                uint64_t o, uint64_t period)
{
    for (size_t j = 0; j < n; j++)
        if (placed[j] && t_live_together(&b[j], &b[k], period) && off[j] < o + b[k].size &&
            o < off[j] + b[j].size)
            return 0;
    return 1;
}

static void first_fit(const om_rp_block *b, size_t n, uint64_t period, const size_t *perm,
                      size_t nperm, uint64_t *best)
{
    uint64_t off[8], peak = 0;
    int placed[8] = {0};

    for (size_t j = 0; j < n; j++)
        if (b[j].fixed) {
            placed[j] = 1;
            off[j] = b[j].offset;
            peak = off[j] + b[j].size > peak ? off[j] + b[j].size : peak;
        }
    for (size_t x = 0; x < nperm; x++) {
        size_t k = perm[x];
        uint64_t o = UINT64_MAX, c = 0;
        if (fits(b, off, placed, n, k, 0, period))
            o = 0;
        for (size_t j = 0; j < n; j++) {
            if (!placed[j])
                continue;
            c = t_align_up(off[j] + b[j].size, b[k].align);
            if (c < o && fits(b, off, placed, n, k, c, period))
                o = c;
        }
        off[k] = o;
        placed[k] = 1;
        peak = o + b[k].size > peak ? o + b[k].size : peak;
    }
    if (peak < *best)
        *best = peak;
}

static void permute(const om_rp_block *b, size_t n, uint64_t period, size_t *perm, size_t m,
                    size_t at, uint64_t *best)
{
    if (at == m) {
        first_fit(b, n, period, perm, m, best);
        return;
    }
    for (size_t i = at; i < m; i++) {
        size_t t = perm[at];
        perm[at] = perm[i];
        perm[i] = t;
        permute(b, n, period, perm, m, at + 1, best);
        perm[i] = perm[at];
        perm[at] = t;
    }
}

uint64_t t_brute_force(const om_rp_block *b, size_t n, uint64_t period)
{
    size_t perm[8], m = 0;
    uint64_t best = UINT64_MAX;

    assert_true(n <= 7);
    for (size_t i = 0; i < n; i++)
        if (!b[i].fixed)
            perm[m++] = i;
    permute(b, n, period, perm, m, 0, &best);
    return best;
}

uint64_t t_plan_checked(const om_rp_block *b, size_t n, uint64_t period, int algo,
                        uint32_t budget_ms, uint64_t *lb)
{
    om_rp_options opt = {0};
    om_rp_result res;
    uint64_t *off = calloc(n + 1, sizeof(*off));
    char err[256] = "";
    size_t live0 = t_live_bytes();

    assert_non_null(off);
    opt.period = period;
    opt.budget_ms = budget_ms;
    opt.algo = algo;
    opt.seed = 7;
    opt.alloc = t_alloc;
    opt.err = err;
    opt.errlen = sizeof(err);
    if (om_rp_plan(b, n, &opt, off, &res) != 0)
        fail_msg("plan failed: %s", err);
    if (om_rp_check(b, n, period, off, &t_alloc, err, sizeof(err)) != 0)
        fail_msg("invalid plan (algo %s): %s", om_rp_algo_name(algo), err);
    assert_int_equal(res.peak, om_rp_peak(b, n, off));
    assert_true(res.peak >= res.proven_bound && res.proven_bound >= res.lower_bound);
    assert_int_equal(t_live_bytes(), live0);
    if (lb)
        *lb = res.lower_bound;
    free(off);
    return res.peak;
}
