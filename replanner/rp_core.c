/* The replanner's entry points: input validation, the instance, lower bound, checker, driver. */
#include "rp_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define RP_MAX_BLOCKS (UINT32_C(1) << 30)
/* The branch and bound's lists are built at about 180 thousand entries a millisecond (a
 * 2-core VM): 32768 a millisecond of budget keeps that under a fifth of it. Past 2^27
 * entries (512 MiB of lists) no budget is worth it. */
#define BNB_ENTRIES_PER_MS 32768
#define BNB_MAX_ENTRIES (UINT64_C(1) << 27)
/* What the lists take at most, at that speed with a margin: the time left must hold it. */
#define BNB_SETUP_PER_MS (4 * BNB_ENTRIES_PER_MS)
/* Iterated first fit's probe (rp_refit): orders, and the share of the time left at most. */
#define REFIT_PROBE 64
#define REFIT_PROBE_SHARE 8

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

/*
 * Two blocks of blocks[idx[0..count)] that share bytes while both live, at offsets off[i]
 * (the blocks' own offsets if off is NULL): 1 with their indices in *x < *y, 0 if none, or
 * -ENOMEM. A sweep over time: when a block starts, the blocks live then are disjoint (else
 * a pair was found before), so one range query over a count of live blocks per byte tells
 * whether it meets any. n log n: comparing every two blocks that share bytes at any time
 * was quadratic where a few offsets serve many blocks in turn (a saved plan's prologue of
 * 200 000 blocks took 16 s). On a circle each block goes twice, a period apart, on a line
 * of three periods, where every shift at which two arcs can meet shows.
 */
static int find_collision(const om_rp_block *blocks, const uint32_t *idx, size_t count,
                          const uint64_t *off, uint64_t period, rp_mem *m, uint32_t *x, uint32_t *y)
{
    size_t copies = period ? 2 : 1, ne = count * copies, npts = 0;
    rp_kv *kv = rp_alloc(m, 2 * ne + 1, sizeof(*kv));
    uint64_t *pts = rp_alloc(m, 2 * count + 1, sizeof(*pts));
    uint32_t *lo = rp_alloc(m, count + 1, sizeof(uint32_t));
    uint32_t *hi = rp_alloc(m, count + 1, sizeof(uint32_t));
    unsigned char *live = rp_alloc(m, ne + 1, 1);
    rp_maxtree c; /* a count of live blocks per byte range, on compressed offsets */

#define OFF(k) (off ? off[idx[k]] : blocks[idx[k]].offset)
    if (!kv || !pts || !lo || !hi || !live)
        return -ENOMEM;
    for (size_t k = 0; k < count; k++) {
        kv[2 * k].k1 = OFF(k);
        kv[2 * k + 1].k1 = OFF(k) + blocks[idx[k]].size;
    }
    rp_sort_kv(kv, 2 * count);
    for (size_t k = 0; k < 2 * count; k++)
        if (npts == 0 || pts[npts - 1] != kv[k].k1)
            pts[npts++] = kv[k].k1;
    for (size_t k = 0; k < count; k++) {
        lo[k] = find_point(pts, (uint32_t)npts, OFF(k));
        hi[k] = find_point(pts, (uint32_t)npts, OFF(k) + blocks[idx[k]].size);
    }
    if (rp_maxtree_init(&c, m, (uint32_t)npts) < 0)
        return -ENOMEM;
    /* Ends sort before starts at the same time: lifetimes are half-open. */
    for (size_t e = 0; e < ne; e++) {
        const om_rp_block *b = &blocks[idx[e / copies]];
        uint64_t shift = (e % copies) * period;
        kv[2 * e] = (rp_kv){b->lower + shift, 1, 0, (uint32_t)e};
        kv[2 * e + 1] = (rp_kv){b->upper + shift, 0, 0, (uint32_t)e};
    }
    rp_sort_kv(kv, 2 * ne);
    for (size_t t = 0; t < 2 * ne; t++) {
        uint32_t e = kv[t].v, k = e / (uint32_t)copies;
        if (!kv[t].k2) {
            live[e] = 0;
            rp_maxtree_add(&c, lo[k], hi[k], -1);
            continue;
        }
        if (rp_maxtree_max(&c, lo[k], hi[k]) > 0) {
            for (uint32_t f = 0; f < ne; f++) {
                uint32_t j = f / (uint32_t)copies;
                if (live[f] && lo[j] < hi[k] && lo[k] < hi[j]) {
                    *x = idx[j] < idx[k] ? idx[j] : idx[k];
                    *y = idx[j] < idx[k] ? idx[k] : idx[j];
                    return 1;
                }
            }
        }
        live[e] = 1;
        rp_maxtree_add(&c, lo[k], hi[k], 1);
    }
#undef OFF
    return 0;
}

static int collide(const om_rp_block *a, const om_rp_block *b, char *err, size_t errlen)
{
    return rp_errf(err, errlen,
                   "fixed blocks %" PRIu64 " and %" PRIu64 " collide: bytes [%" PRIu64 ",%" PRIu64
                   ") and [%" PRIu64 ",%" PRIu64 ") while both live",
                   a->id, b->id, a->offset, a->offset + a->size, b->offset, b->offset + b->size),
           -EINVAL;
}

/*
 * Fixed blocks that share bytes must not live at the same time. With scratch memory by a
 * sweep (find_collision): a saved plan's line has thousands of fixed blocks, where nf^2
 * took its whole budget; without (om_rp_validate), pair by pair.
 */
static int check_fixed(const om_rp_block *blocks, size_t n, uint64_t period, rp_mem *m, char *err,
                       size_t errlen)
{
    size_t nf = 0;

    if (!m) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; blocks[i].fixed && j < n; j++) {
                const om_rp_block *a = &blocks[i], *b = &blocks[j];
                if (b->fixed && raw_overlap(a, b, period) && a->offset < b->offset + b->size &&
                    b->offset < a->offset + a->size)
                    return collide(a, b, err, errlen);
            }
        return 0;
    }
    uint32_t *fix = rp_alloc(m, n + 1, sizeof(uint32_t)), x, y;
    if (!fix)
        return rp_errf(err, errlen, "out of memory"), -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (blocks[i].fixed)
            fix[nf++] = (uint32_t)i;
    int rc = find_collision(blocks, fix, nf, NULL, period, m, &x, &y);
    if (rc < 0)
        return rp_errf(err, errlen, "out of memory"), rc;
    return rc ? collide(&blocks[x], &blocks[y], err, errlen) : 0;
}

static int validate(const om_rp_block *blocks, size_t n, uint64_t period, rp_mem *m, char *err,
                    size_t errlen)
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
    return check_fixed(blocks, n, period, m, err, errlen);
}

int om_rp_validate(const om_rp_block *blocks, size_t n, uint64_t period, char *err, size_t errlen)
{
    return validate(blocks, n, period, NULL, err, errlen);
}

static void add_range(uint64_t *diff, uint32_t a, uint32_t b, uint64_t v)
{
    if (a < b) {
        diff[a] += v;
        diff[b] -= v;
    }
}

/* The runs of sections of block i: [s0, s1) and, for a wrapping arc, [w0, w1). */
static int run_of(const rp_inst *in, uint32_t i, int r, uint32_t *a, uint32_t *e)
{
    *a = r ? in->w0[i] : in->s0[i];
    *e = r ? in->w1[i] : in->s1[i];
    return *a < *e;
}

/* Runs grouped by their first section: start[x] .. start[x + 1] in blk and end. */
typedef struct run_index {
    uint32_t *start, *blk, *end;
} run_index;

static int index_runs(const rp_inst *in, rp_mem *m, const uint32_t *blocks, uint32_t count,
                      run_index *ri)
{
    uint32_t a, e;

    ri->start = rp_alloc(m, (size_t)in->nsec + 2, sizeof(uint32_t));
    ri->blk = rp_alloc(m, 2 * (size_t)count + 1, sizeof(uint32_t));
    ri->end = rp_alloc(m, 2 * (size_t)count + 1, sizeof(uint32_t));
    if (!ri->start || !ri->blk || !ri->end)
        return -ENOMEM;
    for (uint32_t k = 0; k < count; k++)
        for (int r = 0; r < 2; r++)
            if (run_of(in, blocks[k], r, &a, &e))
                ri->start[a + 1]++;
    for (uint32_t x = 0; x < in->nsec; x++)
        ri->start[x + 1] += ri->start[x];
    for (uint32_t k = 0; k < count; k++)
        for (int r = 0; r < 2; r++)
            if (run_of(in, blocks[k], r, &a, &e)) {
                /* start[a] walks up to where a's group ends, then is shifted back below */
                ri->blk[ri->start[a]] = k;
                ri->end[ri->start[a]++] = e;
            }
    memmove(ri->start + 1, ri->start, (size_t)in->nsec * sizeof(uint32_t));
    ri->start[0] = 0;
    return 0;
}

/*
 * Calls emit(k, f) for each movable block k (position in mov) and fixed block f (position
 * in fixed runs' blocks) that meet in time, twice at most (a wrapping arc meets another
 * in both runs). A sweep over sections: a movable run [a, e) meets the fixed runs active
 * at a and those starting in (a, e), so the cost is the pairs, not nm x nf (a saved plan's
 * line of 5000 movable and 8000 fixed blocks spent its whole budget there).
 */
typedef void (*emit_fn)(void *ctx, uint32_t k, uint32_t f);

static void sweep_fixed(const rp_inst *in, const run_index *mr, const run_index *fr,
                        uint32_t *active, emit_fn emit, void *ctx)
{
    uint32_t na = 0;

    for (uint32_t x = 0; x < in->nsec; x++) {
        for (uint32_t y = fr->start[x]; y < fr->start[x + 1]; y++)
            active[na++] = y;
        if (mr->start[x] == mr->start[x + 1])
            continue;
        uint32_t kept = 0;
        for (uint32_t y = 0; y < na; y++)
            if (fr->end[active[y]] > x)
                active[kept++] = active[y];
        na = kept;
        for (uint32_t z = mr->start[x]; z < mr->start[x + 1]; z++) {
            uint32_t k = mr->blk[z], e = mr->end[z];
            for (uint32_t y = 0; y < na; y++)
                emit(ctx, k, fr->blk[active[y]]);
            for (uint32_t y = fr->start[x + 1]; y < fr->start[e]; y++)
                emit(ctx, k, fr->blk[y]);
        }
    }
}

typedef struct fx_build {
    uint32_t *per_k, *per_f; /* pair counts, then fill positions */
    uint32_t *by_f;          /* movable blocks grouped by fixed block */
} fx_build;

static void count_fx(void *ctx, uint32_t k, uint32_t f)
{
    fx_build *b = ctx;
    b->per_k[k]++;
    b->per_f[f]++;
}

static void fill_fx(void *ctx, uint32_t k, uint32_t f)
{
    fx_build *b = ctx;
    b->by_f[b->per_f[f]++] = k;
}

/* fx_reach[x]: the highest end among k's fixed blocks up to x, for rp_bump_fixed's search. */
static int build_reach(rp_inst *in, rp_mem *m)
{
    if (!(in->fx_reach = rp_alloc(m, (size_t)in->fx_start[in->nm] + 1, sizeof(uint64_t))))
        return -ENOMEM;
    for (uint32_t k = 0; k < in->nm; k++) {
        uint64_t reach = 0;
        for (uint32_t x = in->fx_start[k]; x < in->fx_start[k + 1]; x++) {
            const om_rp_block *f = &in->b[in->fx_list[x]];
            reach = f->offset + f->size > reach ? f->offset + f->size : reach;
            in->fx_reach[x] = reach;
        }
    }
    return 0;
}

/*
 * Per movable block, the fixed blocks live with it ordered by offset (rp_bump_fixed stops
 * at the first one above): pairs are found by fixed block, in offset order (by_off), and
 * dealt out to the movable blocks in that order, so no list needs sorting.
 */
static int build_fixed_lists(rp_inst *in, rp_mem *m, const rp_kv *by_off, uint32_t nf)
{
    uint32_t *fixed = rp_alloc(m, (size_t)nf + 1, sizeof(uint32_t));
    uint32_t *active = rp_alloc(m, 2 * (size_t)nf + 1, sizeof(uint32_t));
    fx_build b = {rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t)),
                  rp_alloc(m, (size_t)nf + 1, sizeof(uint32_t)), NULL};
    run_index mr, fr;
    size_t total = 0, cnt = 0;

    if (!fixed || !active || !b.per_k || !b.per_f)
        return -ENOMEM;
    if (nf == 0) /* fx_start is all 0 */
        return (in->fx_list = rp_alloc(m, 1, sizeof(uint32_t))) &&
                       (in->fx_reach = rp_alloc(m, 1, sizeof(uint64_t)))
                   ? 0
                   : -ENOMEM;
    for (uint32_t r = 0; r < nf; r++)
        fixed[r] = by_off[r].v;
    if (index_runs(in, m, in->mov, in->nm, &mr) != 0 || index_runs(in, m, fixed, nf, &fr) != 0)
        return -ENOMEM;
    sweep_fixed(in, &mr, &fr, active, count_fx, &b);
    for (uint32_t r = 0; r < nf; r++) {
        uint32_t c = b.per_f[r];
        b.per_f[r] = (uint32_t)total;
        total += c;
    }
    if (total > UINT32_MAX - 1 || !(b.by_f = rp_alloc(m, total + 1, sizeof(uint32_t))) ||
        !(in->fx_list = rp_alloc(m, total + 1, sizeof(uint32_t))))
        return -ENOMEM;
    sweep_fixed(in, &mr, &fr, active, fill_fx, &b);
    for (uint32_t k = 0; k < in->nm; k++) {
        in->fx_start[k] = (uint32_t)cnt;
        cnt += b.per_k[k];
        b.per_k[k] = in->fx_start[k];
    }
    in->fx_start[in->nm] = (uint32_t)cnt;
    /* per_f[r] now ends fixed block r's group */
    for (uint32_t r = 0, y = 0; r < nf; r++)
        for (; y < b.per_f[r]; y++)
            in->fx_list[b.per_k[b.by_f[y]]++] = fixed[r];
    if (!in->period)
        return build_reach(in, m);
    /* A pair met in two runs is listed twice, next to itself. */
    cnt = 0;
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t from = in->fx_start[k], to = in->fx_start[k + 1];
        in->fx_start[k] = (uint32_t)cnt;
        for (uint32_t x = from; x < to; x++)
            if (x == from || in->fx_list[x] != in->fx_list[x - 1])
                in->fx_list[cnt++] = in->fx_list[x];
    }
    in->fx_start[in->nm] = (uint32_t)cnt;
    return build_reach(in, m);
}

/* A block's end as a point of the timeline: on a circle, an end past the period wraps. */
static uint64_t end_point(const om_rp_block *b, uint64_t period)
{
    return period && b->upper >= period ? b->upper - period : b->upper;
}

/*
 * Each end's point, its rank among the distinct ends (s0: the start's, s1: the end's, for
 * now), in *npts their count. Where the ends span at most SPAN_PER_END values per end (a
 * trace's event counter), a table over the span ranks them in O(n + span), in no more memory
 * than the sort's records: the sort was most of the setup before greedy by size. Else the
 * ends sorted, each point as the sorted ends come rather than a binary search per end.
 */
#define SPAN_PER_END 4

static int rank_ends(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period,
                     uint32_t *npts)
{
    uint64_t lo = UINT64_MAX, hi = 0, last = 0;
    rp_kv *kv;

    *npts = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = blocks[i].lower, e = end_point(&blocks[i], period);

        lo = a < lo ? a : lo;
        lo = e < lo ? e : lo;
        hi = a > hi ? a : hi;
        hi = e > hi ? e : hi;
    }
    if (n && hi - lo < (uint64_t)SPAN_PER_END * 2 * n) {
        uint32_t *rank = rp_alloc(m, (size_t)(hi - lo) + 2, sizeof(uint32_t));

        if (!rank)
            return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
            rank[blocks[i].lower - lo] = 1;
            rank[end_point(&blocks[i], period) - lo] = 1;
        }
        for (uint64_t x = 0; x <= hi - lo; x++) {
            uint32_t seen = rank[x];
            rank[x] = *npts;
            *npts += seen;
        }
        for (size_t i = 0; i < n; i++) {
            in->s0[i] = rank[blocks[i].lower - lo];
            in->s1[i] = rank[end_point(&blocks[i], period) - lo];
        }
        return 0;
    }
    if (!(kv = rp_alloc(m, 2 * n + 1, sizeof(*kv))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        kv[2 * i] = (rp_kv){blocks[i].lower, 0, 0, (uint32_t)(2 * i)};
        kv[2 * i + 1] = (rp_kv){end_point(&blocks[i], period), 0, 0, (uint32_t)(2 * i + 1)};
    }
    if (rp_sort_kv_mem(kv, 2 * n, m) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < 2 * n; i++) {
        if (*npts == 0 || last != kv[i].k1)
            (*npts)++;
        last = kv[i].k1;
        if (kv[i].v & 1)
            in->s1[kv[i].v / 2] = *npts - 1;
        else
            in->s0[kv[i].v / 2] = *npts - 1;
    }
    return 0;
}

/* The sections, loads and lower bound; with lists, also what the placement needs. */
static int inst_build(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period,
                      int lists)
{
    rp_kv *kv = NULL;
    uint64_t *diff;
    uint32_t npts = 0, nf = 0, *fix;

    memset(in, 0, sizeof(*in));
    in->b = blocks;
    in->n = n;
    in->period = period;
    in->s0 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->s1 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->w0 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->w1 = rp_alloc(m, n + 1, sizeof(uint32_t));
    in->mov = rp_alloc(m, n + 1, sizeof(uint32_t));
    fix = rp_alloc(m, n + 1, sizeof(uint32_t));
    if (!in->s0 || !in->s1 || !in->w0 || !in->w1 || !in->mov || !fix)
        return -ENOMEM;
    if (rank_ends(in, m, blocks, n, period, &npts) < 0)
        return -ENOMEM;
    /* A line of npts points has npts-1 sections; a circle has npts. */
    in->nsec = period ? npts : (npts ? npts - 1 : 0);
    diff = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*diff));
    in->load = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*in->load));
    if (!diff || !in->load)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];
        uint32_t a = in->s0[i], e = in->s1[i];

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
    in->stop = in->floor_lb;
    if (!lists)
        return 0;
    /* Fixed blocks by offset, so that one pass of rp_bump_fixed suffices. */
    if (!(kv = rp_alloc(m, (size_t)nf + 1, sizeof(*kv))))
        return -ENOMEM;
    for (uint32_t k = 0; k < nf; k++) {
        kv[k].k1 = blocks[fix[k]].offset;
        kv[k].k2 = 0;
        kv[k].k3 = 0;
        kv[k].v = fix[k];
    }
    if (rp_sort_kv_mem(kv, nf, m) < 0)
        return -ENOMEM;
    in->fx_start = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    if (!in->fx_start || build_fixed_lists(in, m, kv, nf) != 0)
        return -ENOMEM;
    return 0;
}

/* rp_bound's bound into floor_lb and stop. */
static int inst_bound(rp_inst *in, rp_mem *m)
{
    if (rp_bound(in, m, &in->shape_lb, &in->clique_lb) < 0)
        return -ENOMEM;
    if (in->shape_lb > in->floor_lb)
        in->floor_lb = in->shape_lb;
    if (in->floor_lb > in->stop)
        in->stop = in->floor_lb;
    return 0;
}

int rp_inst_complete(rp_inst *in, rp_mem *m)
{
    rp_maxtree loads;

    if (inst_bound(in, m) < 0)
        return -ENOMEM;
    if (!(in->secmax = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint64_t))))
        return -ENOMEM;
    /* A max tree over the loads: a scan of every block's sections costs the sum of their
     * lengths, hundreds of millions on traces of long-lived blocks. */
    if (in->nsec && rp_maxtree_init(&loads, m, in->nsec) < 0)
        return -ENOMEM;
    if (in->nsec)
        rp_maxtree_build(&loads, in->load, in->nsec);
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];
        int64_t mx = in->s0[i] < in->s1[i] ? rp_maxtree_max(&loads, in->s0[i], in->s1[i]) : 0;

        if (in->w0[i] < in->w1[i]) {
            int64_t w = rp_maxtree_max(&loads, in->w0[i], in->w1[i]);
            mx = w > mx ? w : mx;
        }
        in->secmax[k] = (uint64_t)mx;
    }
    return 0;
}

int rp_inst_core(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period)
{
    return inst_build(in, m, blocks, n, period, 1);
}

int rp_inst_build(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period)
{
    int rc = inst_build(in, m, blocks, n, period, 1);

    return rc < 0 ? rc : rp_inst_complete(in, m);
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
    uint32_t lo = in->fx_start[k], hi = in->fx_start[k + 1];

    off = rp_align_up(off, b->align);
    /* Skip the fixed blocks that all end at or below off: a list may hold thousands (a
     * saved plan's parameters under every block of its prologue). */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (in->fx_reach[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t x = lo; x < in->fx_start[k + 1]; x++) {
        const om_rp_block *f = &in->b[in->fx_list[x]];
        if (f->offset >= off + b->size)
            break; /* by offset: every later one is above as well */
        if (off < f->offset + f->size)
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

    if ((rc = validate(blocks, n, period, &m, err, errlen)) < 0)
        goto out;
    /* No lists: a saved plan's line of 14000 blocks, 8000 fixed, needs only its bound. */
    if ((rc = inst_build(&in, &m, blocks, n, period, 0)) < 0) {
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
    uint32_t *all, x, y;
    int rc;

    if ((rc = validate(blocks, n, period, &m, err, errlen)) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];
        rc = -EINVAL;
        if (offsets[i] > OM_RP_MAX_BYTES) {
            rp_errf(err, errlen, "block %" PRIu64 ": offset %" PRIu64 " overflows", b->id,
                    offsets[i]);
            goto out;
        }
        if (b->align > 1 && offsets[i] % b->align) {
            rp_errf(err, errlen, "block %" PRIu64 ": offset %" PRIu64 " is not aligned to %" PRIu64,
                    b->id, offsets[i], b->align);
            goto out;
        }
        if (b->fixed && offsets[i] != b->offset) {
            rp_errf(err, errlen, "block %" PRIu64 ": fixed at %" PRIu64 " but placed at %" PRIu64,
                    b->id, b->offset, offsets[i]);
            goto out;
        }
        rc = 0;
    }
    if (!(all = rp_alloc(&m, n + 1, sizeof(uint32_t)))) {
        rc = -ENOMEM;
        rp_errf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    rc = find_collision(blocks, all, n, offsets, period, &m, &x, &y);
    if (rc < 0) {
        rp_errf(err, errlen, "out of memory");
    } else if (rc) {
        rp_errf(err, errlen,
                "blocks %" PRIu64 " and %" PRIu64 " overlap: bytes [%" PRIu64 ",%" PRIu64
                ") and [%" PRIu64 ",%" PRIu64 ") while both live",
                blocks[x].id, blocks[y].id, offsets[x], offsets[x] + blocks[x].size, offsets[y],
                offsets[y] + blocks[y].size);
        rc = -EINVAL;
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

const char *om_rp_gap_owner(uint64_t peak, uint64_t lower_bound, uint64_t proven_bound)
{
    if (peak <= lower_bound)
        return "no gap";
    if (proven_bound >= peak)
        return "the gap is the bound's: no plan is lower";
    if (proven_bound > lower_bound)
        return "the gap is the bound's up to the proven bound, above it not settled: the "
               "search's or a bound not proven";
    return "the gap is not settled: the search's or a bound not proven";
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
        res->greedy_peak = best->greedy_peak;
        res->greedy_cut = best->greedy_cut;
        res->proven_bound = best->proven > in->floor_lb ? best->proven : in->floor_lb;
        res->optimal = res->peak == res->proven_bound;
        res->stage = best->stage;
    }
}

/*
 * Branch and bound up to OM_RP_BNB_MAX_BLOCKS blocks; above that (auto) only while listing
 * the pairs that meet in time costs a small part of the budget: a training step of 6491
 * arcs with 0.3 million pairs gets its optimal plan in one dive, where local search left it
 * at 1.04 x LB, while generated traces of 20,000 blocks have 45 million pairs. Returns 1
 * for branch and bound, 0 for local search, or -ENOMEM.
 */
static int use_branch_and_bound(const rp_inst *in, rp_mem *m, int algo, uint32_t budget_ms,
                                const rp_clock *clk)
{
    uint64_t entries, now = rp_now_ns();
    uint64_t left_ns = clk->deadline_ns > now ? clk->deadline_ns - now : 0;
    int rc;

    if ((rc = rp_bnb_setup_size(in, m, &entries)) < 0)
        return rc;
    /* 4096 blocks list at most 4096 * 4095 pair ends and 4096 * 8192 sections: taken as long
     * as the setup fits in the time left, past which the plan would come late. */
    if (in->nm <= OM_RP_BNB_MAX_BLOCKS)
        /* In ns: a budget under a millisecond (a plan searched inline) still lists a
         * small instance, whose setup takes microseconds. */
        return algo == OM_RP_ALGO_BNB || entries * 1000000u <= left_ns * BNB_SETUP_PER_MS;
    if (entries > BNB_MAX_ENTRIES)
        return 0;
    return algo == OM_RP_ALGO_BNB || entries <= (uint64_t)budget_ms * BNB_ENTRIES_PER_MS;
}

/* Iterated first fit under auto: a probe, and where it wins (crowded instances, where first
 * fit fills the holes that the branch and bound's offsets leave), half of the time left;
 * the stages after it get the rest, from its plan. */
static int refit_stage(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk,
                       const om_rp_options *opt)
{
    if (opt->algo != OM_RP_ALGO_AUTO)
        return 0;
    uint64_t now = rp_now_ns(), left = now < clk->deadline_ns ? clk->deadline_ns - now : 0;
    return rp_refit(in, m, best, clk, REFIT_PROBE, now + left / REFIT_PROBE_SHARE, now + left / 2,
                    opt->seed);
}

/*
 * Where arcs that are never live at once still meet pairwise (the long arcs of rp_bound.c,
 * whose bytes exceed the max of live bytes), the branch and bound's runs below its best plan
 * can all fail without proving anything: the local search gets the second half of the time
 * left, from the best order found before the branch and bound. Elsewhere (generated circles
 * whose optimum is LB) the branch and bound needs the whole time.
 */
static int bnb_then_local(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed)
{
    uint64_t now = rp_now_ns(), end = clk->deadline_ns;
    int rc;

    if (now < end)
        clk->deadline_ns = now + (end - now) / 2;
    rc = rp_bnb(in, m, best, clk, seed);
    clk->deadline_ns = end;
    if (rc < 0 || best->peak <= in->stop || best->peak <= best->proven)
        return rc;
    if (clk->max_nodes && clk->nodes >= clk->max_nodes)
        return 0; /* out of nodes, not of time */
    clk->stopped = 0;
    return rp_local(in, m, best, clk, seed);
}

int om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt, uint64_t *offsets,
               om_rp_result *res)
{
    rp_mem m = {&opt->alloc, NULL};
    rp_inst in;
    rp_best best = {0};
    rp_clock clk = {0};
    rp_greedy_ws *ws = NULL;
    uint64_t t0 = rp_now_ns();
    uint32_t budget = opt->budget_ms ? opt->budget_ms : OM_RP_DEFAULT_BUDGET_MS;
    /* the long arcs stacked (rp_stack_long): not under `greedy`, nor under `local`, which
     * stays the local search alone */
    int stacks = opt->algo == OM_RP_ALGO_AUTO || opt->algo == OM_RP_ALGO_BNB;
    int rc;

    if (res)
        memset(res, 0, sizeof(*res));
    if (!opt->alloc.alloc || !opt->alloc.release)
        return rp_errf(opt->err, opt->errlen, "no allocator given"), -EINVAL;
    if (opt->algo < OM_RP_ALGO_AUTO || opt->algo > OM_RP_ALGO_BNB)
        return rp_errf(opt->err, opt->errlen, "unknown algorithm %d", opt->algo), -EINVAL;
    if ((rc = validate(blocks, n, opt->period, &m, opt->err, opt->errlen)) < 0)
        goto out;
    /* The first plan, greedy by size, needs the sections only: the bound and the keys of
     * the later stages come after it, so that a short budget gets it whole. */
    if ((rc = rp_inst_core(&in, &m, blocks, n, opt->period)) < 0)
        goto nomem;
    if (opt->goal > in.stop)
        in.stop = opt->goal;
    best.off = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint64_t));
    best.order = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint32_t));
    if (!best.off || !best.order) {
        rc = -ENOMEM;
        goto nomem;
    }
    /* 3 % of the budget is left for the last decode or node to notice, and for finish(). */
    clk.deadline_ns = t0 + (uint64_t)budget * 970000u;
    clk.max_nodes = opt->max_nodes;
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
    clk.stack_floor = opt->stack_bytes && frame > opt->stack_bytes ? frame - opt->stack_bytes : 0;
    if ((rc = rp_greedy_first(&in, &m, &best, &clk, &ws)) < 0)
        goto nomem;
    /* Past the deadline the first plan is the answer: only the bound, for the result (the
     * later stages' keys cost n log n more, after the budget). */
    if (rp_now_ns() >= clk.deadline_ns) {
        if ((rc = inst_bound(&in, &m)) < 0)
            goto nomem;
        goto done;
    }
    if ((rc = rp_inst_complete(&in, &m)) < 0 ||
        (rc = rp_greedy(&in, &m, &best, &clk, ws, stacks)) < 0)
        goto nomem;
    if (best.peak > in.stop && (opt->algo == OM_RP_ALGO_AUTO || opt->algo == OM_RP_ALGO_BNB)) {
        /* Instances without slack: an exact search of its own, with three quarters of the
         * time left (where it applies, the branch and bound rarely reaches LB; it gets the
         * rest, for a lower plan where the tiling search finds none). */
        uint64_t now = rp_now_ns();
        if (now < clk.deadline_ns &&
            (rc = rp_tile(&in, &m, &best, &clk, now + (clk.deadline_ns - now) / 4 * 3)) < 0)
            goto nomem;
    }
    if (best.peak > in.stop) {
        int use_bnb = 0, large = in.nm > OM_RP_BNB_MAX_BLOCKS;
        /* Iterated first fit first (below the branch and bound's size; above it after the
         * dives, which place a training trace at LB in a pass each, and whether the branch
         * and bound runs there does not depend on the time left). */
        if (!large && (rc = refit_stage(&in, &m, &best, &clk, opt)) < 0)
            goto nomem;
        if ((opt->algo == OM_RP_ALGO_AUTO || opt->algo == OM_RP_ALGO_BNB) &&
            (use_bnb = use_branch_and_bound(&in, &m, opt->algo, budget, &clk)) < 0)
            goto nomem;
        /* Above the branch and bound's size its dives without backtracking (rp_greedy runs
         * them below it), before the local search, which starts from their plan. */
        if (!use_bnb && large && (rc = rp_dives(&in, &m, &best, clk.deadline_ns, 0)) < 0)
            goto nomem;
        if (large && best.peak > in.stop && (rc = refit_stage(&in, &m, &best, &clk, opt)) < 0)
            goto nomem;
        /* Loops whose long arcs' clique equals LB (rp_greedy stacks them where it is above):
         * stacked with a quarter of the time left at most (a few milliseconds below a few
         * hundred blocks), after the tiling search (which solves the perfect packings on a
         * circle by itself) and the dives, and not where the dives are still to come (the
         * branch and bound's, above OM_RP_BNB_MAX_BLOCKS): one of them places a training step
         * at LB, whose arcs live throughout meet every long arc, and a stack costs a whole
         * greedy pass. */
        if (stacks && best.peak > in.stop && in.clique_lb == in.lb &&
            (!use_bnb || in.nm <= OM_RP_BNB_MAX_BLOCKS)) {
            uint64_t now = rp_now_ns(), quarter;
            quarter = now < clk.deadline_ns ? now + (clk.deadline_ns - now) / 4 : now;
            if ((rc = rp_stack_long(&in, &m, &best, ws, &clk, quarter)) < 0)
                goto nomem;
        }
        rc = 0;
        if (opt->algo != OM_RP_ALGO_GREEDY && best.peak > in.stop)
            rc = use_bnb && in.clique_lb > in.lb && opt->algo == OM_RP_ALGO_AUTO
                     ? bnb_then_local(&in, &m, &best, &clk, opt->seed)
                 : use_bnb ? rp_bnb(&in, &m, &best, &clk, opt->seed)
                           : rp_local(&in, &m, &best, &clk, opt->seed);
        if (rc < 0)
            goto nomem;
    }
    rp_take_spare(&in, &best);
done:
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
