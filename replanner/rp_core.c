/* The replanner's entry points: input validation, the instance, lower bound, checker, driver. */
#include "rp_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define RP_MAX_BLOCKS (UINT32_C(1) << 30)

void rp_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int is_pow2(uint64_t x)
{
    return x && !(x & (x - 1));
}

/* Arcs intersect iff some shift by a period makes the intervals meet (upper < 2P). */
static int raw_overlap(const om_rp_block *a, const om_rp_block *b, uint64_t period)
{
    if (!period)
        return a->lower < b->upper && b->lower < a->upper;
    if (a->lower < b->upper && b->lower < a->upper)
        return 1;
    if (a->lower + period < b->upper && b->lower < a->upper + period)
        return 1;
    return b->lower + period < a->upper && a->lower < b->upper + period;
}

static int validate_one(const om_rp_block *b, uint64_t period, char *err, size_t errlen)
{
    uint64_t id = b->id;

    if (b->size == 0)
        return rp_errf(err, errlen, "block %" PRIu64 ": size is 0", id), -EINVAL;
    if (b->size > OM_RP_MAX_BYTES)
        return rp_errf(err, errlen, "block %" PRIu64 ": size %" PRIu64 " overflows (max 2^60)", id,
                       b->size),
               -EINVAL;
    if (b->align > 1 && !is_pow2(b->align))
        return rp_errf(err, errlen,
                       "block %" PRIu64 ": alignment %" PRIu64 " is not a power of two", id,
                       b->align),
               -EINVAL;
    if (b->align > OM_RP_MAX_BYTES)
        return rp_errf(err, errlen, "block %" PRIu64 ": alignment %" PRIu64 " is too large", id,
                       b->align),
               -EINVAL;
    if (b->lower >= b->upper)
        return rp_errf(err, errlen,
                       "block %" PRIu64 ": lower %" PRIu64 " >= upper %" PRIu64
                       " (lifetimes are half-open [lower, upper))",
                       id, b->lower, b->upper),
               -EINVAL;
    if (period && b->lower >= period)
        return rp_errf(err, errlen,
                       "block %" PRIu64 ": lower %" PRIu64 " is outside the period %" PRIu64, id,
                       b->lower, period),
               -EINVAL;
    if (period && b->upper - b->lower > period)
        return rp_errf(err, errlen,
                       "block %" PRIu64 ": arc [%" PRIu64 ",%" PRIu64
                       ") is longer than the period %" PRIu64,
                       id, b->lower, b->upper, period),
               -EINVAL;
    if (b->fixed && b->align > 1 && b->offset % b->align)
        return rp_errf(err, errlen,
                       "block %" PRIu64 ": fixed offset %" PRIu64 " is not aligned to %" PRIu64, id,
                       b->offset, b->align),
               -EINVAL;
    if (b->fixed && b->offset > OM_RP_MAX_BYTES - b->size)
        return rp_errf(err, errlen, "block %" PRIu64 ": fixed offset %" PRIu64 " overflows", id,
                       b->offset),
               -EINVAL;
    return 0;
}

int om_rp_validate(const om_rp_block *blocks, size_t n, uint64_t period, char *err, size_t errlen)
{
    uint64_t total = 0;
    int rc;

    if (n && !blocks)
        return rp_errf(err, errlen, "no blocks given"), -EINVAL;
    if (n > RP_MAX_BLOCKS)
        return rp_errf(err, errlen, "%zu blocks: too many (max 2^30)", n), -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];

        if ((rc = validate_one(b, period, err, errlen)) < 0)
            return rc;
        /* Any plan fits below the sum of all (aligned) sizes: keep that sum representable. */
        total += b->fixed ? 0 : b->size + (b->align > 1 ? b->align : 0);
        if (total > OM_RP_MAX_BYTES)
            return rp_errf(err, errlen, "block %" PRIu64 ": total size overflows (max 2^60)",
                           b->id),
                   -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!blocks[i].fixed)
            continue;
        for (size_t j = i + 1; j < n; j++) {
            const om_rp_block *a = &blocks[i], *b = &blocks[j];

            if (!b->fixed || !raw_overlap(a, b, period))
                continue;
            if (a->offset < b->offset + b->size && b->offset < a->offset + a->size)
                return rp_errf(err, errlen,
                               "fixed blocks %" PRIu64 " and %" PRIu64 " collide: bytes [%" PRIu64
                               ",%" PRIu64 ") and [%" PRIu64 ",%" PRIu64 ") while both live",
                               a->id, b->id, a->offset, a->offset + a->size, b->offset,
                               b->offset + b->size),
                       -EINVAL;
        }
    }
    return 0;
}

static uint32_t find_point(const uint64_t *pts, uint32_t npts, uint64_t t)
{
    uint32_t lo = 0, hi = npts;

    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pts[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static void add_range(uint64_t *diff, uint32_t a, uint32_t b, uint64_t v)
{
    if (a < b) {
        diff[a] += v;
        diff[b] -= v;
    }
}

int rp_inst_build(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period)
{
    rp_kv *kv = NULL;
    uint64_t *pts, *diff;
    uint32_t npts = 0, nf = 0, *fix;

    memset(in, 0, sizeof(*in));
    in->b = blocks;
    in->n = n;
    in->period = period;
    kv = rp_alloc(m, 2 * n + 1, sizeof(*kv));
    pts = rp_alloc(m, 2 * n + 1, sizeof(*pts));
    in->s0 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->s1 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->w0 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->w1 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->mov = rp_alloc(m, n + 1, sizeof(uint32_t));
    fix = rp_alloc(m, n + 1, sizeof(uint32_t));
    if (!kv || !pts || !in->s0 || !in->s1 || !in->w0 || !in->w1 || !in->mov || !fix)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = blocks[i].upper;
        kv[2 * i].k1 = blocks[i].lower;
        kv[2 * i + 1].k1 = period && u >= period ? u - period : u;
    }
    rp_sort_kv(kv, 2 * n);
    for (size_t i = 0; i < 2 * n; i++)
        if (npts == 0 || pts[npts - 1] != kv[i].k1)
            pts[npts++] = kv[i].k1;
    /* A line of npts points has npts-1 sections; a circle has npts. */
    in->nsec = period ? npts : (npts ? npts - 1 : 0);
    diff = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*diff));
    in->load = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*in->load));
    if (!diff || !in->load)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];
        uint32_t a = find_point(pts, npts, b->lower);
        uint64_t u = period && b->upper >= period ? b->upper - period : b->upper;
        uint32_t e = find_point(pts, npts, u);

        in->w0[i] = in->w1[i] = 0;
        if (period && b->upper - b->lower == period) {
            in->s0[i] = 0;
            in->s1[i] = in->nsec;
        } else if (!period || a < e) {
            in->s0[i] = a;
            in->s1[i] = e;
        } else {
            in->s0[i] = a;
            in->s1[i] = in->nsec;
            in->w1[i] = e;
        }
        add_range(diff, in->s0[i], in->s1[i], b->size);
        add_range(diff, in->w0[i], in->w1[i], b->size);
        if (b->fixed) {
            fix[nf++] = (uint32_t)i;
            if (b->offset + b->size > in->fixed_top)
                in->fixed_top = b->offset + b->size;
        } else {
            in->mov[in->nm++] = (uint32_t)i;
        }
    }
    for (uint32_t s = 0; s < in->nsec; s++) {
        in->load[s] = (s ? in->load[s - 1] : 0) + diff[s];
        if (in->load[s] > in->lb)
            in->lb = in->load[s];
    }
    in->floor_lb = in->lb > in->fixed_top ? in->lb : in->fixed_top;

    /* Fixed blocks by offset, so that one pass of rp_bump_fixed suffices. */
    for (uint32_t k = 0; k < nf; k++) {
        kv[k].k1 = blocks[fix[k]].offset;
        kv[k].k2 = 0;
        kv[k].v = fix[k];
    }
    rp_sort_kv(kv, nf);
    in->fx_start = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    in->secmax = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint64_t));
    if (!in->fx_start || !in->secmax)
        return -ENOMEM;
    for (int pass = 0; pass < 2; pass++) {
        size_t cnt = 0;
        for (uint32_t k = 0; k < in->nm; k++) {
            in->fx_start[k] = (uint32_t)cnt;
            for (uint32_t f = 0; f < nf; f++) {
                if (!rp_overlap_time(in, in->mov[k], kv[f].v))
                    continue;
                if (pass)
                    in->fx_list[cnt] = kv[f].v;
                cnt++;
            }
        }
        in->fx_start[in->nm] = (uint32_t)cnt;
        if (!pass && !(in->fx_list = rp_alloc(m, cnt + 1, sizeof(uint32_t))))
            return -ENOMEM;
    }
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];
        uint64_t mx = 0;
        for (uint32_t s = in->s0[i]; s < in->s1[i]; s++)
            mx = in->load[s] > mx ? in->load[s] : mx;
        for (uint32_t s = in->w0[i]; s < in->w1[i]; s++)
            mx = in->load[s] > mx ? in->load[s] : mx;
        in->secmax[k] = mx;
    }
    return 0;
}

static int ranges_meet(uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1)
{
    return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

int rp_overlap_time(const rp_inst *in, uint32_t i, uint32_t j)
{
    return ranges_meet(in->s0[i], in->s1[i], in->s0[j], in->s1[j]) ||
           ranges_meet(in->s0[i], in->s1[i], in->w0[j], in->w1[j]) ||
           ranges_meet(in->w0[i], in->w1[i], in->s0[j], in->s1[j]) ||
           ranges_meet(in->w0[i], in->w1[i], in->w0[j], in->w1[j]);
}

uint64_t rp_bump_fixed(const rp_inst *in, uint32_t k, uint64_t off)
{
    const om_rp_block *b = &in->b[in->mov[k]];

    off = rp_align_up(off, b->align);
    for (uint32_t x = in->fx_start[k]; x < in->fx_start[k + 1]; x++) {
        const om_rp_block *f = &in->b[in->fx_list[x]];
        if (f->offset < off + b->size && off < f->offset + f->size)
            off = rp_align_up(f->offset + f->size, b->align);
    }
    return off;
}

int om_rp_lower_bound(const om_rp_block *blocks, size_t n, uint64_t period,
                      const om_rp_allocator *alloc, uint64_t *lb, char *err, size_t errlen)
{
    rp_mem m = {alloc, NULL};
    rp_inst in;
    int rc;

    if ((rc = om_rp_validate(blocks, n, period, err, errlen)) < 0)
        return rc;
    if ((rc = rp_inst_build(&in, &m, blocks, n, period)) < 0) {
        rp_errf(err, errlen, "out of memory");
        goto out;
    }
    *lb = in.lb;
out:
    rp_mem_free_all(&m);
    return rc;
}

uint64_t om_rp_peak(const om_rp_block *blocks, size_t n, const uint64_t *offsets)
{
    uint64_t peak = 0;

    for (size_t i = 0; i < n; i++)
        if (offsets[i] + blocks[i].size > peak)
            peak = offsets[i] + blocks[i].size;
    return peak;
}

int om_rp_check(const om_rp_block *blocks, size_t n, uint64_t period, const uint64_t *offsets,
                const om_rp_allocator *alloc, char *err, size_t errlen)
{
    rp_mem m = {alloc, NULL};
    rp_kv *kv;
    int rc;

    if ((rc = om_rp_validate(blocks, n, period, err, errlen)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];
        if (offsets[i] > OM_RP_MAX_BYTES)
            return rp_errf(err, errlen, "block %" PRIu64 ": offset %" PRIu64 " overflows", b->id,
                           offsets[i]),
                   -EINVAL;
        if (b->align > 1 && offsets[i] % b->align)
            return rp_errf(err, errlen,
                           "block %" PRIu64 ": offset %" PRIu64 " is not aligned to %" PRIu64,
                           b->id, offsets[i], b->align),
                   -EINVAL;
        if (b->fixed && offsets[i] != b->offset)
            return rp_errf(err, errlen,
                           "block %" PRIu64 ": fixed at %" PRIu64 " but placed at %" PRIu64, b->id,
                           b->offset, offsets[i]),
                   -EINVAL;
    }
    if (!(kv = rp_alloc(&m, n + 1, sizeof(*kv)))) {
        rc = -ENOMEM;
        rp_errf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        kv[i].k1 = offsets[i];
        kv[i].v = (uint32_t)i;
    }
    rp_sort_kv(kv, n);
    /* By offset: only blocks starting below the end of block i can share its bytes. */
    for (size_t x = 0; x < n && rc == 0; x++) {
        const om_rp_block *a = &blocks[kv[x].v];
        uint64_t end = offsets[kv[x].v] + a->size;

        for (size_t y = x + 1; y < n && kv[y].k1 < end; y++) {
            const om_rp_block *b = &blocks[kv[y].v];
            if (!raw_overlap(a, b, period))
                continue;
            rp_errf(err, errlen,
                    "blocks %" PRIu64 " and %" PRIu64 " overlap: bytes [%" PRIu64 ",%" PRIu64
                    ") and [%" PRIu64 ",%" PRIu64 ") while both live",
                    a->id, b->id, kv[x].k1, end, kv[y].k1, kv[y].k1 + b->size);
            rc = -EINVAL;
            break;
        }
    }
out:
    rp_mem_free_all(&m);
    return rc;
}

int om_rp_algo_parse(const char *name, int *algo)
{
    static const char *const names[] = {"auto", "greedy", "local", "bnb"};

    for (int i = 0; i < 4; i++) {
        if (strcmp(name, names[i]) == 0) {
            *algo = i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *om_rp_algo_name(int algo)
{
    static const char *const names[] = {"auto", "greedy", "local", "bnb"};

    return algo >= 0 && algo < 4 ? names[algo] : "?";
}

static void finish(const rp_inst *in, const rp_best *best, uint64_t *offsets, om_rp_result *res)
{
    for (size_t i = 0; i < in->n; i++)
        if (in->b[i].fixed)
            offsets[i] = in->b[i].offset;
    for (uint32_t k = 0; k < in->nm; k++)
        offsets[in->mov[k]] = best->off[k];
    if (res) {
        res->peak = om_rp_peak(in->b, in->n, offsets);
        res->lower_bound = in->lb;
        res->optimal = res->peak == in->floor_lb;
        res->stage = best->stage;
    }
}

int om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt, uint64_t *offsets,
               om_rp_result *res)
{
    rp_mem m = {&opt->alloc, NULL};
    rp_inst in;
    rp_best best = {0};
    rp_clock clk = {0};
    uint64_t t0 = rp_now_ns();
    uint32_t budget = opt->budget_ms ? opt->budget_ms : OM_RP_DEFAULT_BUDGET_MS;
    int rc;

    if (res)
        memset(res, 0, sizeof(*res));
    if (!opt->alloc.alloc || !opt->alloc.release)
        return rp_errf(opt->err, opt->errlen, "no allocator given"), -EINVAL;
    if (opt->algo < OM_RP_ALGO_AUTO || opt->algo > OM_RP_ALGO_BNB)
        return rp_errf(opt->err, opt->errlen, "unknown algorithm %d", opt->algo), -EINVAL;
    if ((rc = om_rp_validate(blocks, n, opt->period, opt->err, opt->errlen)) < 0)
        return rc;
    if ((rc = rp_inst_build(&in, &m, blocks, n, opt->period)) < 0)
        goto nomem;
    best.off = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint64_t));
    best.order = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint32_t));
    if (!best.off || !best.order) {
        rc = -ENOMEM;
        goto nomem;
    }
    /* 3 % of the budget is left for the last decode or node to notice, and for finish(). */
    clk.deadline_ns = t0 + (uint64_t)budget * 970000u;
    clk.max_nodes = opt->max_nodes;
    if ((rc = rp_greedy(&in, &m, &best, &clk)) < 0)
        goto nomem;
    if (best.peak > in.floor_lb && opt->algo != OM_RP_ALGO_GREEDY) {
        int use_bnb = opt->algo == OM_RP_ALGO_BNB ||
                      (opt->algo == OM_RP_ALGO_AUTO && in.nm <= OM_RP_BNB_MAX_BLOCKS);
        if (in.nm > OM_RP_BNB_MAX_BLOCKS)
            use_bnb = 0;
        rc = use_bnb ? rp_bnb(&in, &m, &best, &clk, opt->seed)
                     : rp_local(&in, &m, &best, &clk, opt->seed);
        if (rc < 0)
            goto nomem;
    }
    finish(&in, &best, offsets, res);
    if (res) {
        res->nodes = clk.nodes;
        res->elapsed_ns = rp_now_ns() - t0;
    }
    rc = 0;
    goto out;
nomem:
    rp_errf(opt->err, opt->errlen, "out of memory");
out:
    rp_mem_free_all(&m);
    return rc;
}
