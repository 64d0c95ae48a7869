/* Exact search for instances without slack: every section holds LB bytes, so a plan at LB tiles. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * Where every section's load is LB, a plan at LB leaves no byte free below LB in any
 * section: the placed blocks fill each section from 0 to its skyline. Then the lowest point
 * of the skyline, leftmost, at section x and height h (section x - 1 higher, or x the
 * first) is covered by a block whose offset is h (nothing below h is free) and which
 * starts at x (in x - 1 the bytes at h are taken): its run [x, s1) must lie where the
 * skyline is h throughout, and h + size <= LB. Branching on those blocks only finds every
 * plan at LB (the bottom-left corner rule of perfect packing), where the canonical search
 * branches on every block at the lowest offset. Blocks with the same run and size are
 * interchangeable, so only the first of them is tried at a node. The skyline is two max
 * trees, of the heights and of their negations (for the leftmost lowest section); placing
 * a block adds its size over a run that is all at h, which is an assignment.
 */

/* 1 when the search applies: a line, no fixed blocks, no alignment, every section at LB. */
static int tight(const rp_inst *in)
{
    if (in->period || in->nm != in->n || in->nm == 0)
        return 0;
    for (uint32_t k = 0; k < in->nm; k++)
        if (in->b[in->mov[k]].align > 1)
            return 0;
    for (uint32_t x = 0; x < in->nsec; x++)
        if (in->load[x] != in->lb)
            return 0;
    return 1;
}

/* Blocks grouped by a section: group x is idx[st[x]] .. idx[st[x + 1]). */
typedef struct groups {
    uint32_t *st, *idx;
} groups;

/*
 * A valley whose wall is at section w, level L (the skyline at w, below the wall): its
 * corner at (w, L) must be covered by an unplaced block whose run starts at w (left wall;
 * at_end 0) or ends at w + 1 (right wall), at offset L, below LB and nowhere above the
 * skyline's L on its run. A placement that leaves a corner no block can take fails at
 * once, not when that corner becomes the lowest.
 */
static int corner_ok(const rp_inst *in, const groups *g, const unsigned char *placed,
                     const rp_maxtree *up, uint32_t w, uint64_t level, int at_end)
{
    uint32_t x = at_end ? w + 1 : w;

    for (uint32_t p = g->st[x]; p < g->st[x + 1]; p++) {
        uint32_t y = g->idx[p], i = in->mov[y];

        if (!placed[y] && in->b[i].size <= in->lb - level &&
            (uint64_t)rp_maxtree_max(up, in->s0[i], in->s1[i]) <= level)
            return 1;
    }
    return 0;
}

/* Block k placed on the skyline from section x (dir 1) or taken off it (dir -1). */
static void lift(const rp_inst *in, rp_maxtree *up, rp_maxtree *down, unsigned char *placed,
                 uint32_t k, uint32_t x, int dir)
{
    uint32_t i = in->mov[k];
    int64_t d = dir * (int64_t)in->b[i].size;

    placed[k] = dir > 0;
    rp_maxtree_add(up, x, in->s1[i], d);
    rp_maxtree_add(down, x, in->s1[i], -d);
}

/* After a block on [x, e) with top `top`: the corners beside it can still be covered. */
static int walls_ok(const rp_inst *in, const groups *starts, const groups *ends,
                    const unsigned char *placed, const rp_maxtree *up, uint32_t x, uint32_t e,
                    uint64_t top)
{
    if (x > 0) {
        uint64_t l = (uint64_t)rp_maxtree_max(up, x - 1, x);
        if (l < top && l < in->lb && !corner_ok(in, ends, placed, up, x - 1, l, 1))
            return 0;
    }
    if (e < in->nsec) {
        uint64_t r = (uint64_t)rp_maxtree_max(up, e, e + 1);
        if (r < top && r < in->lb && !corner_ok(in, starts, placed, up, e, r, 0))
            return 0;
    }
    if (top >= in->lb)
        return 1;
    /* Its own top: a corner where the neighbour (or the end of time) rises above it. */
    if ((x == 0 || (uint64_t)rp_maxtree_max(up, x - 1, x) > top) &&
        !corner_ok(in, starts, placed, up, x, top, 0))
        return 0;
    if ((e == in->nsec || (uint64_t)rp_maxtree_max(up, e, e + 1) > top) &&
        !corner_ok(in, ends, placed, up, e - 1, top, 1))
        return 0;
    return 1;
}

/* The search's state: blocks by start (byst, in groups starts) and by end, the skyline, and
 * per depth the block chosen, its section and where the scan of candidates stands. */
typedef struct tile {
    const rp_inst *in;
    groups starts, ends;
    rp_maxtree up, down; /* the skyline, and its negation */
    uint32_t *pos, *chosen, *xs;
    uint64_t *off;
    unsigned char *placed;
    rp_kv *kv;
} tile;

/*
 * One depth-first run from nothing placed, within `limit` nodes (and c's limits): RP_FOUND
 * (t->off holds the plan), RP_NOTFOUND (every branch failed: no plan reaches LB) or
 * RP_ABORTED.
 */
static int tile_run(tile *t, rp_clock *c, uint64_t limit)
{
    const rp_inst *in = t->in;
    const uint32_t *bs = t->starts.st, *byst = t->starts.idx;
    uint32_t depth = 0, nm = in->nm, nsec = in->nsec;
    uint64_t zero = 0;

    rp_maxtree_build(&t->up, &zero, 1);
    rp_maxtree_build(&t->down, &zero, 1);
    memset(t->placed, 0, nm);
    for (;;) {
        uint32_t x, k = UINT32_MAX;
        uint64_t h;

        if (depth == nm)
            return RP_FOUND;
        if (limit-- == 0 || rp_expired(c))
            return RP_ABORTED;
        /* The leftmost lowest section: the first whose negated height is the maximum. */
        h = (uint64_t)-rp_maxtree_max(&t->down, 0, nsec);
        x = rp_maxtree_first_above(&t->down, 0, nsec, -(int64_t)h - 1);
        t->xs[depth] = x;
        t->pos[depth] = bs[x];
        for (;;) {
            uint32_t e;

            /* The next block that fits at (x, h) from pos[depth] on, or back one level. */
            for (; t->pos[depth] < bs[x + 1]; t->pos[depth]++) {
                uint32_t p = t->pos[depth], y = byst[p], i = in->mov[y];
                uint32_t prev = p > bs[x] ? byst[p - 1] : UINT32_MAX;

                if (t->placed[y])
                    continue;
                /* the same run and size as the one tried just before: the same subtree */
                if (prev != UINT32_MAX && !t->placed[prev] && in->s1[in->mov[prev]] == in->s1[i] &&
                    in->b[in->mov[prev]].size == in->b[i].size)
                    continue;
                if (in->b[i].size > in->lb - h)
                    continue;
                if ((uint64_t)rp_maxtree_max(&t->up, x, in->s1[i]) != h)
                    continue;
                k = y;
                break;
            }
            if (k == UINT32_MAX) {
                if (depth == 0)
                    return RP_NOTFOUND;
                depth--;
                k = t->chosen[depth];
                x = t->xs[depth];
                h = t->off[k];
                lift(in, &t->up, &t->down, t->placed, k, x, -1);
                t->pos[depth]++;
                k = UINT32_MAX;
                continue;
            }
            t->chosen[depth] = k;
            t->off[k] = h;
            lift(in, &t->up, &t->down, t->placed, k, x, 1);
            /* The corners the block leaves beside it, where its top is above the skyline. */
            e = in->s1[in->mov[k]];
            if (walls_ok(in, &t->starts, &t->ends, t->placed, &t->up, x, e,
                         h + in->b[in->mov[k]].size))
                break;
            lift(in, &t->up, &t->down, t->placed, k, x, -1);
            t->pos[depth]++;
            k = UINT32_MAX;
        }
        depth++;
    }
}

/*
 * The candidates of each start in the order a run tries them: the longest run first, then
 * the largest; after the first run, blocks of one run and size stay together (the rule
 * that tries one of them) but the classes come in a random order. A depth-first search
 * over tilings has heavy tails (one early choice can hold it for millions of nodes where
 * another order finds a tiling in a few hundred), so runs restart with nodes on a Luby
 * schedule.
 */
static void order_starts(tile *t, uint64_t *rng, int shuffle)
{
    const rp_inst *in = t->in;

    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];
        uint64_t cls = UINT64_MAX - in->s1[i];

        if (shuffle) { /* a hash of the class and the run's seed */
            uint64_t z = *rng ^ (in->s1[i] * UINT64_C(0x9e3779b97f4a7c15)) ^
                         (in->b[i].size * UINT64_C(0xbf58476d1ce4e5b9));
            cls = rp_rand(&z);
        }
        t->kv[k] = (rp_kv){in->s0[i], cls, UINT64_MAX - in->b[i].size, k};
        if (shuffle) /* the class's blocks together: same run, same size */
            t->kv[k].k3 = ((uint64_t)in->s1[i] << 32) ^ in->b[i].size;
    }
    rp_sort_kv(t->kv, in->nm);
    for (uint32_t k = 0; k < in->nm; k++)
        t->starts.idx[k] = t->kv[k].v;
    rp_rand(rng);
}

int rp_tile(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t deadline_ns)
{
    rp_mem own = {m->a, NULL};
    tile t = {0};
    uint32_t nm = in->nm, nsec = in->nsec, *bs, *be;
    uint64_t rng = UINT64_C(0x2545f4914f6cdd1d);
    rp_clock c = *clk;
    int rc = -ENOMEM, r = RP_ABORTED;

    if (!tight(in))
        return 0;
    c.deadline_ns = deadline_ns < clk->deadline_ns ? deadline_ns : clk->deadline_ns;
    t.in = in;
    t.kv = rp_alloc(&own, (size_t)nm + 1, sizeof(rp_kv));
    bs = rp_alloc(&own, (size_t)nsec + 2, sizeof(uint32_t));
    be = rp_alloc(&own, (size_t)nsec + 3, sizeof(uint32_t));
    t.starts = (groups){bs, rp_alloc(&own, (size_t)nm + 1, sizeof(uint32_t))};
    t.ends = (groups){be, rp_alloc(&own, (size_t)nm + 1, sizeof(uint32_t))};
    t.pos = rp_alloc(&own, (size_t)nm + 1, sizeof(uint32_t));
    t.chosen = rp_alloc(&own, (size_t)nm + 1, sizeof(uint32_t));
    t.xs = rp_alloc(&own, (size_t)nm + 1, sizeof(uint32_t));
    t.off = rp_alloc(&own, (size_t)nm + 1, sizeof(uint64_t));
    t.placed = rp_alloc(&own, (size_t)nm + 1, 1);
    if (!t.kv || !bs || !be || !t.starts.idx || !t.ends.idx || !t.pos || !t.chosen || !t.xs ||
        !t.off || !t.placed || rp_maxtree_init(&t.up, &own, nsec) < 0 ||
        rp_maxtree_init(&t.down, &own, nsec) < 0)
        goto out;
    for (uint32_t k = 0; k < nm; k++) {
        uint32_t i = in->mov[k];
        bs[in->s0[i] + 1]++;
        be[in->s1[i] + 1]++;
        t.kv[k] = (rp_kv){in->s1[i], 0, 0, k};
    }
    for (uint32_t x = 0; x < nsec; x++)
        bs[x + 1] += bs[x];
    for (uint32_t x = 0; x <= nsec; x++)
        be[x + 1] += be[x];
    rp_sort_kv(t.kv, nm); /* by end, for the right walls */
    for (uint32_t k = 0; k < nm; k++)
        t.ends.idx[k] = t.kv[k].v;
    rc = 0;
    for (uint64_t run = 1; r == RP_ABORTED && !c.stopped; run++) {
        order_starts(&t, &rng, run > 1);
        r = tile_run(&t, &c, 4 * (uint64_t)nm * rp_luby(run));
    }
    if (r == RP_FOUND) {
        memcpy(best->off, t.off, nm * sizeof(uint64_t));
        best->peak = in->lb;
        best->stage = "tile";
    } else if (r == RP_NOTFOUND && in->lb + 1 > best->proven) {
        best->proven = in->lb + 1;
    }
    clk->nodes = c.nodes;
    if (c.max_nodes && c.nodes >= c.max_nodes)
        clk->stopped = 1;
out:
    rp_mem_free_all(&own);
    return rc;
}
