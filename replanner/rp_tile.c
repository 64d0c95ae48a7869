/* Exact search for instances without slack: every section holds LB bytes, so a plan at LB tiles. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>
#ifdef RP_TILE_STATS
#include <stdio.h>
#endif

/*
 * Where every section's load is LB, a plan at LB leaves no byte free below LB in any
 * section: the placed blocks fill each section from 0 to its skyline. The search places
 * blocks on the skyline only, so that stays true. A valley of the skyline, a flat stretch
 * [a, b) at level L whose neighbours are higher (or the ends of time), then has its
 * bottom-left cell (a, L) covered by a block at offset L (nothing below L is free) that
 * starts at a (at a - 1 the byte L is taken) and lies within [a, b) (at b it is taken):
 * branching on those blocks only, at any one valley, finds every plan at LB (the
 * bottom-left corner rule of perfect packing, where the canonical search branches on every
 * block at the lowest offset). The valley taken is the one with the fewest such blocks
 * (fail first: a valley with one is a forced move), not the lowest. A step (a flat
 * stretch [a, r) higher on its left only) whose corner (a, L) only one block can take,
 * ending by r so lying flat, is such a forced move too (branching on steps with more
 * candidates as well solved fewer of the generated packings), and so is a bottom-right
 * corner (r - 1, L) of a valley or of a stretch higher on its right only that one block
 * alone can take, ending at r and lying flat.
 *
 * Pruning, at every node, all necessary for a plan at LB: each valley's floor must be
 * covered exactly by a chain of unplaced blocks end to end from a to b, each fitting below
 * LB; the floor of each step (a stretch higher on one side only) by a chain from its high
 * side past its low one; each basin (the sections around a level no higher than it,
 * between higher ones) crossed at that level by a chain of unplaced blocks within it,
 * whose bytes fill it up to the lower of the sections beside it. Blocks with the same run
 * and size are interchangeable: only the first unplaced one of them is tried, so the
 * placed ones are always a prefix of their class. Where no unplaced block crosses a
 * section boundary, the two sides are solved one after the other, and a failure of one
 * does not try the other's other tilings. A set of placed blocks from which the search
 * failed is remembered (is_dead), so that no other order of the same placements, in this
 * run or a later one, searches it again.
 *
 * On a circle every arc is cut at a section boundary that no arc other than those live all
 * the time crosses, where there is one (a packing turned around the circle has one): a plan
 * of that line is a plan of the circle, and a circle's plan at LB is one of the line.
 *
 * Before the search, blocks that lie at one offset in every plan at LB (one block alone
 * ending at a boundary, one alone starting there, or one on one side and blocks of one run
 * stacked on the other) are joined into one block (join_blocks). Runs alternate between
 * time as it is and turned around.
 */

/* Entries of the table of dead placed sets: per block, and at most (16 bytes each). */
#define TILE_DEAD_PER_BLOCK 16u
#define TILE_DEAD_MAX (1u << 18)

/* The corner a node branches on: a valley's bottom-left (its candidates begin a cover of its
 * floor), a step's bottom-left or a bottom-right corner that one block alone can take. */
enum { CORNER_VALLEY, CORNER_STEP, CORNER_RIGHT };

/* The search's state; blocks (positions in mov) have the run [a, e) on the line. */
typedef struct tile {
    uint32_t nm, nsec;
    uint64_t lb;
    uint32_t *a, *e;
    uint64_t *sz;
    uint32_t *bs, *byst;  /* by start: group x is byst[bs[x]] .. byst[bs[x + 1]) */
    uint32_t *be, *byend; /* by end: group x ends at x */
    uint64_t *sky;
    int32_t *cross;  /* per boundary x (between x - 1 and x): unplaced blocks across it */
    int32_t *cross0; /* the same with nothing placed */
    uint32_t *sx, *ng, *pg, *stk; /* survey's stretches of the skyline */
    uint32_t *cprev; /* the block before it in its class (same run and size), by index */
    uint32_t *rs, *re, *rn, *rof; /* runs [rs, re) by start then end, from rs[rbs[x]];
                                   * rn: their unplaced blocks; rof: each block's run */
    uint32_t *rbs;
    uint64_t *rsz, *dif; /* the runs' unplaced bytes; a basin's, by section */
    unsigned char *placed, *can;
    uint32_t *trail; /* the blocks placed, in order */
    struct frame *frames;
    uint64_t *off;
    rp_kv *kv;
    uint64_t *zob;  /* two random keys per block: a set's hash is their xor */
    uint64_t h[2];  /* the placed blocks' */
    uint64_t *dead; /* placed sets from which nothing tiles, two keys an entry */
    uint32_t dmask; /* entries - 1 */
#ifdef RP_TILE_STATS
    /* nodes entered, and by tenths of the depth; sets met dead on entry, candidates not
     * tried for theirs; failed surveys; the most blocks placed at once */
    uint64_t st_nodes, st_tenth[10], st_hits, st_skips, st_fails, st_depth_max;
#endif
} tile;

/* z is unplaced and the first unplaced of its class (cprev: the one before it by index). */
static int first_of_class(const tile *t, uint32_t z)
{
    return !t->placed[z] && (t->cprev[z] == UINT32_MAX || t->placed[t->cprev[z]]);
}

/* z can go on the floor of [a, b) at level L: unplaced, within it, below LB. */
static int fits(const tile *t, uint32_t z, uint32_t a, uint32_t b, uint64_t L)
{
    return !t->placed[z] && t->a[z] >= a && t->e[z] <= b && t->sz[z] <= t->lb - L;
}

/*
 * The floor [a, b) of a valley at level L must be covered end to end by unplaced blocks
 * that fit below LB. can[p]: [p, b) can be. Returns the classes that can take its corner
 * (from a, on to such a cover).
 */
static uint32_t chain(tile *t, uint32_t a, uint32_t b, uint64_t L)
{
    uint32_t count = 0;

    t->can[b] = 1;
    for (uint32_t p = b; p-- > a + 1;) {
        /* past the corner, runs will do: every unplaced block within the valley fits below
         * LB (with the others over one of its sections, it adds up to LB - L) */
        t->can[p] = 0;
        for (uint32_t k = t->rbs[p]; k < t->rbs[p + 1] && t->re[k] <= b; k++) {
            if (t->rn[k] && t->can[t->re[k]]) {
                t->can[p] = 1;
                break;
            }
        }
    }
    t->can[a] = 0;
    for (uint32_t q = t->bs[a]; q < t->bs[a + 1]; q++) {
        uint32_t y = t->byst[q];

        if (fits(t, y, a, b, L) && t->can[t->e[y]]) {
            t->can[a] = 1;
            count += first_of_class(t, y);
        }
    }
    return count;
}

/*
 * A step: the stretch [x, r) at level L, higher on one side only. Each of its cells at L
 * is covered by a block at offset L (the cells below are taken) over sections no higher
 * than L, so they form a chain of unplaced blocks end to end from the high side past the
 * low one: from x (within [x, f), f the first higher section after it) to r or beyond
 * (side 0), or back from r (within [g, r)) to x or before (side 1).
 */
static int step_ok(tile *t, uint32_t x, uint32_t r, uint32_t g, uint32_t f, uint64_t L, int side)
{
    unsigned char *reach = t->can;

    memset(reach + g, 0, (size_t)(f - g + 1));
    if (side == 0) {
        reach[x] = 1;
        for (uint32_t p = x; p < r; p++) {
            if (!reach[p])
                continue;
            for (uint32_t q = t->bs[p]; q < t->bs[p + 1]; q++) {
                uint32_t y = t->byst[q];
                if (fits(t, y, x, f, L)) {
                    if (t->e[y] >= r)
                        return 1;
                    reach[t->e[y]] = 1;
                }
            }
        }
        return 0;
    }
    reach[r] = 1;
    for (uint32_t p = r; p > x; p--) {
        if (!reach[p])
            continue;
        for (uint32_t q = t->be[p]; q < t->be[p + 1]; q++) {
            uint32_t y = t->byend[q];
            if (fits(t, y, g, r, L)) {
                if (t->a[y] <= x)
                    return 1;
                reach[t->a[y]] = 1;
            }
        }
    }
    return 0;
}

/*
 * Whether the unplaced blocks lying within [p, q) have, in each of its sections, the bytes
 * up to h (where the sections beside it are filled): blocks reaching beyond it lie above h.
 */
static int basin_full(tile *t, uint32_t p, uint32_t q, uint64_t h)
{
    uint64_t *d = t->dif, c = 0;

    memset(d + p, 0, (size_t)(q - p + 1) * sizeof(uint64_t));
    for (uint32_t k = t->rbs[p]; k < t->rbs[q]; k++) {
        if (t->re[k] <= q && t->rn[k]) {
            d[t->rs[k]] += t->rsz[k];
            d[t->re[k]] -= t->rsz[k];
        }
    }
    for (uint32_t x = p; x < q; x++) {
        c += d[x];
        if (t->sky[x] < h && c < h - t->sky[x])
            return 0;
    }
    return 1;
}

/*
 * Whether unplaced blocks lying within [p, q) can tile it end to end, each run (start and
 * end) once however many blocks share it.
 */
static int basin_ok(tile *t, uint32_t p, uint32_t q)
{
    unsigned char *reach = t->can;

    memset(reach + p, 0, (size_t)(q - p + 1));
    reach[p] = 1;
    for (uint32_t x = p; x < q; x++) {
        if (!reach[x])
            continue;
        for (uint32_t k = t->rbs[x]; k < t->rbs[x + 1] && t->re[k] <= q; k++) {
            if (!t->rn[k])
                continue;
            if (t->re[k] == q)
                return 1;
            reach[t->re[k]] = 1;
        }
    }
    return 0;
}

/*
 * Whether one block alone (one class) can take the bottom-right cell (r - 1, L) of the flat
 * stretch [x, r) at level L, walled at r: the blocks that can end at r at offset L start at
 * g or later (g: where the skyline is higher before x, or x for a valley); where one of them
 * would start before x (it is not flat there yet), the move is not forced.
 */
static int right_forced(const tile *t, uint32_t g, uint32_t x, uint32_t r, uint64_t L)
{
    uint32_t c = 0;

    for (uint32_t q = t->be[r]; q < t->be[r + 1]; q++) {
        uint32_t y = t->byend[q];
        if (!fits(t, y, g, r, L))
            continue;
        if (t->a[y] < x || (c += first_of_class(t, y)) > 1)
            return 0;
    }
    return c == 1;
}

/*
 * Checks every valley and corner of the part [lo, hi), whose ends are walls (no unplaced
 * block crosses them); 0 if one fails, else 1 with the stretch [*va, *vb) to branch on and
 * its corner *st (CORNER_*). The skyline
 * goes in stretches of one level (sx: their starts, sx[m] = hi); ng/pg: the next and
 * the previous higher stretch (m and UINT32_MAX if none).
 */
static int survey(tile *t, uint32_t lo, uint32_t hi, const uint32_t *win, uint32_t *va,
                  uint32_t *vb, int *st)
{
    const uint64_t *sky = t->sky;
    uint32_t m = 0, sp = 0, best = UINT32_MAX, *sx = t->sx, *ng = t->ng, *pg = t->pg;
    uint64_t bl = 0;

    for (uint32_t x = lo; x < hi; x++)
        if (x == lo || sky[x] != sky[x - 1])
            sx[m++] = x;
    sx[m] = hi;
    for (uint32_t i = m; i-- > 0;) {
        while (sp && sky[sx[t->stk[sp - 1]]] <= sky[sx[i]])
            sp--;
        ng[i] = sp ? t->stk[sp - 1] : m;
        t->stk[sp++] = i;
    }
    sp = 0;
    for (uint32_t i = 0; i < m; i++) {
        while (sp && sky[sx[t->stk[sp - 1]]] <= sky[sx[i]])
            sp--;
        pg[i] = sp ? t->stk[sp - 1] : UINT32_MAX;
        t->stk[sp++] = i;
    }
    for (uint32_t i = 0; i < m; i++) {
        uint32_t x = sx[i], r = sx[i + 1];
        uint64_t L = sky[x];
        int lw = i == 0 || sky[sx[i - 1]] > L, rw = i + 1 == m || sky[r] > L;

        if (L >= t->lb)
            continue;
        if (lw && rw) {
            uint32_t c = chain(t, x, r, L);
            if (c == 0)
                return 0;
            if (c < best || (c == best && L < bl)) {
                best = c;
                bl = L;
                *va = x;
                *vb = r;
                *st = CORNER_VALLEY;
            }
            /* its bottom-right cell is a block's that ends at r: where one alone can take
             * it, that is a forced move as well */
            if (c > 1 && best > 1 && right_forced(t, x, x, r, L)) {
                best = 1;
                bl = L;
                *va = x;
                *vb = r;
                *st = CORNER_RIGHT;
            }
        } else if (lw) {
            uint32_t f = sx[ng[i]], c = 0;
            if (!step_ok(t, x, r, x, f, L, 0))
                return 0;
            /* where one block alone can take its corner, lying on the flat stretch, it is
             * a forced move like a valley's */
            for (uint32_t q = t->bs[x]; q < t->bs[x + 1] && c != UINT32_MAX; q++) {
                uint32_t y = t->byst[q];
                if (fits(t, y, x, f, L))
                    c = t->e[y] > r ? UINT32_MAX : c + first_of_class(t, y);
            }
            if (c == 1 && c < best) {
                best = c;
                bl = L;
                *va = x;
                *vb = r;
                *st = CORNER_STEP;
            }
        } else if (rw) {
            uint32_t g = pg[i] == UINT32_MAX ? lo : sx[pg[i] + 1];
            if (!step_ok(t, x, r, g, r, L, 1))
                return 0;
            if (best > 1 && right_forced(t, g, x, r, L)) {
                best = 1;
                bl = L;
                *va = x;
                *vb = r;
                *st = CORNER_RIGHT;
            }
        }
    }
    if (best == UINT32_MAX)
        return 0;
    /* the basin of each level: the stretches around it no higher, between higher ones; its
     * cells at that level, and every cell below the lower of the sections beside it, are
     * blocks' that lie within it (those sections are filled to their level), so unplaced
     * blocks within it tile it end to end and fill it that high (a valley's floor chain is
     * stricter, checked above; the part as a whole nearly always passes) */
    sp = 0;
    for (uint32_t i = 0; i < m; i++) {
        uint32_t p = pg[i] == UINT32_MAX ? lo : sx[pg[i] + 1], q = sx[ng[i]], pe;
        int same;
        while (sp && sky[sx[t->stk[sp - 1]]] < sky[sx[i]])
            sp--;
        pe = sp ? t->stk[sp - 1] : UINT32_MAX; /* the stretch before at least as high */
        t->stk[sp++] = i;
        if (sky[sx[i]] >= t->lb || (pe != UINT32_MAX && sky[sx[pe]] == sky[sx[i]]) ||
            (p == lo && q == hi))
            continue;
        /* one that ends at no new end of the part, neither meeting the block placed last
         * nor beside it, was the same before it and passed then; one around it did too,
         * its bytes as full as before, and its chain is left where a block of the placed
         * one's run is left to take its place */
        same = (p != lo || lo == win[2]) && (q != hi || hi == win[3]);
        if (same && (p > win[1] || q < win[0] || (p <= win[0] && q >= win[1] && win[4])))
            continue;
        if (!(p == sx[i] && q == sx[i + 1]) && !basin_ok(t, p, q))
            return 0;
        if (!same || p > win[0] || q < win[1]) {
            uint64_t hl = p > lo ? sky[p - 1] : t->lb, hr = q < hi ? sky[q] : t->lb;
            if (!basin_full(t, p, q, hl < hr ? hl : hr))
                return 0;
        }
    }
    return 1;
}

static void lift(tile *t, uint32_t y, int dir)
{
    t->h[0] ^= t->zob[2 * (size_t)y];
    t->h[1] ^= t->zob[2 * (size_t)y + 1];
    for (uint32_t x = t->a[y]; x < t->e[y]; x++)
        t->sky[x] = dir > 0 ? t->sky[x] + t->sz[y] : t->sky[x] - t->sz[y];
    for (uint32_t x = t->a[y] + 1; x < t->e[y]; x++)
        t->cross[x] -= dir;
    t->rn[t->rof[y]] -= dir;
    t->rsz[t->rof[y]] = dir > 0 ? t->rsz[t->rof[y]] - t->sz[y] : t->rsz[t->rof[y]] + t->sz[y];
    t->placed[y] = dir > 0;
}

/*
 * The placed blocks alone decide whether the search can go on to a plan (each section's
 * skyline is their bytes there), however it came to them: different orders of the same
 * placements (blocks stacked in another order, parts of a split tiled another way) meet
 * again, within a run and across runs. A set proven to lead nowhere is kept in a table by
 * its hash, the newer entry replacing the older where two share a slot. A collision would
 * hide plans (and could let a failed run claim a proof): at 128 bits it is not expected.
 */
static int is_dead(const tile *t)
{
    const uint64_t *d = &t->dead[2 * (size_t)(t->h[0] & t->dmask)];

    return d[0] == t->h[0] && d[1] == t->h[1];
}

/* Whether placing z would reach such a set (then it is not tried: no node spent on it). */
static int dead_with(const tile *t, uint32_t z)
{
    uint64_t h0 = t->h[0] ^ t->zob[2 * (size_t)z], h1 = t->h[1] ^ t->zob[2 * (size_t)z + 1];
    const uint64_t *d = &t->dead[2 * (size_t)(h0 & t->dmask)];

    return d[0] == h0 && d[1] == h1;
}

static void set_dead(tile *t)
{
    uint64_t *d = &t->dead[2 * (size_t)(t->h[0] & t->dmask)];

    d[0] = t->h[0];
    d[1] = t->h[1];
}

/*
 * The first part of [lo, hi) with unplaced blocks: [*p0, *p1), where no unplaced block
 * crosses *p1 (nor *p0: the sections before it in [lo, hi) are full). 0 if there is none.
 */
static int next_part(const tile *t, uint32_t lo, uint32_t hi, uint32_t *p0, uint32_t *p1)
{
    uint32_t x = lo;

    while (x < hi && t->sky[x] >= t->lb)
        x++;
    if (x == hi)
        return 0;
    *p0 = x++;
    while (x < hi && t->cross[x])
        x++;
    *p1 = x;
    return 1;
}

/*
 * The search's frames. Where no unplaced block crosses a boundary, the two sides are
 * independent: a part (frame SPLIT) is solved after another, and when one fails, the
 * parts solved before it are undone and the split fails as a whole, rather than trying
 * every other tiling of them against the same failure (frame BRANCH: one valley's
 * candidates, each with a SPLIT of its part below it).
 */
enum { SPLIT, BRANCH };
typedef struct frame {
    int kind;
    uint32_t lo, hi, trail0;
    uint32_t va, vb, pos; /* BRANCH: the stretch, its corner's candidates from pos */
    int step;             /* which corner (CORNER_*) */
    /* the sections of the block placed last (all of them at first), the part where it
     * was placed and its run's unplaced blocks: which basins a survey checks again */
    uint32_t win[5];
    int rank; /* a valley's candidates: which rank (valley_rank) it is trying */
} frame;

static void undo_to(tile *t, uint32_t *tl, uint32_t trail0)
{
    while (*tl > trail0)
        lift(t, t->trail[--*tl], -1);
}

/*
 * Which of a valley's candidates a run tries first (rank 0) to last (3): those that cover
 * its whole floor, then the others; in each, those whose top meets the level of a wall
 * beside them first. A tiling made by guillotine cuts has pieces as wide as a valley and as
 * high as its wall; trying such blocks first solved more of the generated packings within
 * a step limit, trying them last fewer.
 */
static int valley_rank(const tile *t, const frame *f, uint32_t z, uint64_t L)
{
    int wide = t->e[z] == f->vb;
    uint64_t top = L + t->sz[z];

    return (wide ? 0 : 2) + !((f->va > f->lo && top == t->sky[f->va - 1]) ||
                              (wide && f->vb < f->hi && top == t->sky[f->vb]));
}

/* BRANCH f's next candidate from f->pos on (at a valley, rank f->rank on), placed; 0 if
 * none is left. */
static int branch_next(tile *t, frame *f, uint32_t *tl)
{
    uint64_t L = t->sky[f->va];
    int right = f->step == CORNER_RIGHT, valley = f->step == CORNER_VALLEY;
    uint32_t end = right ? t->be[f->vb + 1] : t->bs[f->va + 1];

    if (valley)
        chain(t, f->va, f->vb, L);
    for (;;) {
        for (; f->pos < end; f->pos++) {
            uint32_t z = right ? t->byend[f->pos] : t->byst[f->pos];
            if (!fits(t, z, f->va, f->vb, L) || !first_of_class(t, z) ||
                (valley && (!t->can[t->e[z]] || valley_rank(t, f, z, L) != f->rank)))
                continue;
            if (dead_with(t, z)) {
#ifdef RP_TILE_STATS
                t->st_skips++;
#endif
                continue;
            }
            t->off[z] = L;
            lift(t, z, 1);
            t->trail[(*tl)++] = z;
            return 1;
        }
        if (!valley || f->rank == 3)
            return 0;
        f->rank++;
        f->pos = t->bs[f->va];
    }
}

/*
 * One depth-first run from nothing placed, within `limit` nodes (and c's limits): RP_FOUND
 * (t->off holds the plan), RP_NOTFOUND (every branch failed: no plan reaches LB) or
 * RP_ABORTED.
 */
static int tile_run(tile *t, rp_clock *c, uint64_t limit)
{
    frame *fs = t->frames;
    uint32_t top = 0, tl = 0;
    int ret = -1; /* what the frame above top returned, -1 while it is entered */

    memset(t->sky, 0, t->nsec * sizeof(uint64_t));
    memset(t->placed, 0, t->nm);
    memset(t->rn, 0, t->nm * sizeof(uint32_t));
    memset(t->rsz, 0, t->nm * sizeof(uint64_t));
    for (uint32_t k = 0; k < t->nm; k++) {
        t->rn[t->rof[k]]++;
        t->rsz[t->rof[k]] += t->sz[k];
    }
    memcpy(t->cross, t->cross0, (t->nsec + 1) * sizeof(int32_t));
    t->h[0] = t->h[1] = UINT64_C(0x9e3779b97f4a7c15); /* the empty set's: not 0, an empty slot */
    fs[0] = (frame){SPLIT, 0, t->nsec, 0, 0, 0, 0, 0, {0, t->nsec, UINT32_MAX, UINT32_MAX, 0}, 0};
    for (;;) {
        frame *f = &fs[top];

        if (f->kind == SPLIT) {
            uint32_t p0, p1;
            if (ret == RP_NOTFOUND) {
                undo_to(t, &tl, f->trail0);
                set_dead(t);
            } else if (!next_part(t, f->lo, f->hi, &p0, &p1)) {
                ret = RP_FOUND;
            } else {
                f->lo = p1;
                fs[top + 1] = (frame){BRANCH, p0, p1, tl, 0, 0, 0, 0, {0}, 0};
                memcpy(fs[++top].win, f->win, sizeof(f->win));
                ret = -1;
                continue;
            }
        } else if (ret == -1) { /* entered */
            if (limit-- == 0 || rp_expired(c))
                return RP_ABORTED;
#ifdef RP_TILE_STATS
            t->st_nodes++;
            t->st_tenth[(uint64_t)tl * 10 / t->nm]++;
            if (tl > t->st_depth_max)
                t->st_depth_max = tl;
#endif
            if (is_dead(t)) {
#ifdef RP_TILE_STATS
                t->st_hits++;
#endif
                ret = RP_NOTFOUND;
            } else if (!survey(t, f->lo, f->hi, f->win, &f->va, &f->vb, &f->step)) {
#ifdef RP_TILE_STATS
                t->st_fails++;
#endif
                ret = RP_NOTFOUND;
            } else {
                f->pos = f->step == CORNER_RIGHT ? t->be[f->vb] : t->bs[f->va];
                f->rank = 0;
                ret = branch_next(t, f, &tl) ? -2 : RP_NOTFOUND;
            }
        } else if (ret == RP_NOTFOUND) {
            undo_to(t, &tl, f->trail0);
            f->pos++;
            if (limit-- == 0 || rp_expired(c))
                return RP_ABORTED;
            ret = branch_next(t, f, &tl) ? -2 : RP_NOTFOUND;
        }
        if (ret == -2) { /* placed: its part next */
            uint32_t z = t->trail[tl - 1];
            frame *g = &fs[++top];
            *g = (frame){SPLIT, f->lo, f->hi, tl, 0, 0, 0, 0, {0}, 0};
            g->win[0] = t->a[z];
            g->win[1] = t->e[z];
            g->win[2] = f->lo;
            g->win[3] = f->hi;
            g->win[4] = t->rn[t->rof[z]];
            ret = -1;
            continue;
        }
        /* f returns ret (RP_FOUND or RP_NOTFOUND) to the frame below */
        if (ret == RP_NOTFOUND && f->kind == BRANCH)
            set_dead(t);
        if (top == 0)
            return ret;
        top--;
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
    for (uint32_t k = 0; k < t->nm; k++) {
        uint64_t cls = UINT64_MAX - t->e[k];

        if (shuffle) { /* a hash of the class and the run's seed */
            uint64_t z = *rng ^ (t->e[k] * UINT64_C(0x9e3779b97f4a7c15)) ^
                         (t->sz[k] * UINT64_C(0xbf58476d1ce4e5b9));
            cls = rp_rand(&z);
        }
        t->kv[k] = (rp_kv){t->a[k], cls, UINT64_MAX - t->sz[k], k};
        if (shuffle) /* the class's blocks together: same run, same size */
            t->kv[k].k3 = ((uint64_t)t->e[k] << 32) ^ t->sz[k];
    }
    rp_sort_kv(t->kv, t->nm);
    for (uint32_t k = 0; k < t->nm; k++)
        t->byst[k] = t->kv[k].v;
    rp_rand(rng);
}

/*
 * The runs [a, e) on a line: as they are on a line; on a circle cut at a boundary no arc
 * crosses (arcs live all the time aside, which span the whole line). 0 where there is none.
 */
static int cut_line(const rp_inst *in, uint32_t *a, uint32_t *e, uint64_t *sz, uint32_t *cross)
{
    uint32_t nsec = in->nsec, cut = 0;

    if (in->period) {
        memset(cross, 0, ((size_t)nsec + 1) * sizeof(uint32_t));
        for (uint32_t k = 0; k < in->nm; k++) {
            uint32_t i = in->mov[k], len = in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
            uint32_t lo = in->s0[i] + 1, hi = in->s0[i] + len; /* boundaries crossed, mod nsec */
            if (len == nsec || len < 2)
                continue;
            if (hi <= nsec) {
                cross[lo]++;
                cross[hi]--;
            } else {
                cross[lo]++;
                cross[nsec]--;
                cross[0]++;
                cross[hi - nsec]--;
            }
        }
        for (cut = 0; cut < nsec; cut++) {
            if (cut)
                cross[cut] += cross[cut - 1];
            if (cross[cut] == 0)
                break;
        }
        if (cut == nsec)
            return 0;
    }
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k], len = in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
        a[k] = len == nsec ? 0 : (in->s0[i] + nsec - cut) % nsec;
        e[k] = a[k] + len;
        sz[k] = in->b[i].size;
    }
    return 1;
}

/*
 * Blocks joined into one before the search (join_blocks): node k < nm is block k, the others
 * two nodes each, c2 at d2 bytes above c1 (0: side by side in time).
 */
typedef struct join {
    uint32_t *a, *e, *c1, *c2; /* per node: its run [a, e), its two parts */
    uint64_t *sz, *d2;         /* per node: its bytes, where its second part lies */
    unsigned char *used;       /* per node: 2 joined into another, 1 made or joined this round */
    /* per boundary x, each round: the nodes ending (ne) and starting (ns) there, the one
     * start of those ending there (ea) and end of those starting there (se) or UINT32_MAX,
     * their bytes (sume, sums), and where they are listed (list from at[x], lists from
     * as[x]) */
    uint32_t *ne, *ns, *ea, *se, *at, *list, *as, *lists;
    uint64_t *sume, *sums;
} join;

/* A new node of c1 and c2 (d2 above it) over [a, e), of sz bytes: its number. */
static uint32_t join_two(join *j, uint32_t *nn, uint32_t c1, uint32_t c2, uint64_t d2, uint64_t sz)
{
    uint32_t k = (*nn)++;

    j->a[k] = j->a[c1] < j->a[c2] ? j->a[c1] : j->a[c2];
    j->e[k] = j->e[c1] > j->e[c2] ? j->e[c1] : j->e[c2];
    j->sz[k] = sz;
    j->c1[k] = c1;
    j->c2[k] = c2;
    j->d2[k] = d2;
    j->used[c1] = j->used[c2] = 2; /* gone */
    j->used[k] = 1;
    return k;
}

/*
 * In a plan at LB the blocks that end at a boundary x and those that start there cover the
 * same bytes (in the sections on either side of x, the rest are the blocks across x, at the
 * same offsets in both). Where one block alone ends at x and one alone starts there, of one
 * size, they lie at one offset in every such plan: one block over both runs. Where one
 * alone starts there and those ending there all start at one time, they are stacked in its
 * bytes, in any order: one block of their run, joined to it (and the other way round).
 * Rounds of that until none is left; nodes k >= nm are the joined ones (struct join).
 * Returns the number of nodes.
 */
static uint32_t join_blocks(join *j, uint32_t nm, uint32_t nsec)
{
    uint32_t nn = nm;

    for (uint32_t k = 0; k < nm; k++)
        j->used[k] = 0;
    for (int again = 1; again;) {
        again = 0;
        memset(j->ne, 0, ((size_t)nsec + 2) * sizeof(uint32_t));
        memset(j->ns, 0, ((size_t)nsec + 2) * sizeof(uint32_t));
        memset(j->sume, 0, ((size_t)nsec + 1) * sizeof(uint64_t));
        memset(j->sums, 0, ((size_t)nsec + 1) * sizeof(uint64_t));
        for (uint32_t k = 0; k < nn; k++) {
            uint32_t a = j->a[k], e = j->e[k];
            if (j->used[k] == 2)
                continue;
            j->used[k] = 0;
            if (j->ne[e]++ == 0)
                j->ea[e] = a; /* the start of those ending at e, UINT32_MAX if several */
            else if (j->ea[e] != a)
                j->ea[e] = UINT32_MAX;
            if (j->ns[a]++ == 0)
                j->se[a] = e;
            else if (j->se[a] != e)
                j->se[a] = UINT32_MAX;
            j->sume[e] += j->sz[k];
            j->sums[a] += j->sz[k];
        }
        /* the nodes by end (list from at[x]) and by start (lists from as[x]) */
        j->at[0] = j->as[0] = 0;
        for (uint32_t x = 0; x <= nsec; x++) {
            j->at[x + 1] = j->at[x] + j->ne[x];
            j->as[x + 1] = j->as[x] + j->ns[x];
        }
        for (uint32_t k = 0; k < nn; k++) {
            if (j->used[k] != 2) {
                j->list[j->at[j->e[k]]++] = k;
                j->lists[j->as[j->a[k]]++] = k;
            }
        }
        for (uint32_t x = nsec + 1; x-- > 0;) {
            j->at[x + 1] = j->at[x];
            j->as[x + 1] = j->as[x];
        }
        j->at[0] = j->as[0] = 0;
        for (uint32_t x = 1; x < nsec; x++) {
            uint32_t ne = j->ne[x], ns = j->ns[x], k = UINT32_MAX, y = UINT32_MAX;
            int free = 1;
            if (!ne || !ns || (ne > 1 && ns > 1) || j->sume[x] != j->sums[x] ||
                (ne > 1 && j->ea[x] == UINT32_MAX) || (ns > 1 && j->se[x] == UINT32_MAX))
                continue;
            for (uint32_t q = j->at[x]; q < j->at[x + 1]; q++)
                free &= j->used[j->list[q]] == 0;
            for (uint32_t q = j->as[x]; q < j->as[x + 1]; q++)
                free &= j->used[j->lists[q]] == 0;
            if (!free)
                continue;
            /* those of one run stacked (in any order: the same bytes), then side by side */
            for (uint32_t q = j->at[x]; q < j->at[x + 1]; q++) {
                uint32_t z = j->list[q];
                k = k == UINT32_MAX ? z : join_two(j, &nn, k, z, j->sz[k], j->sz[k] + j->sz[z]);
            }
            for (uint32_t q = j->as[x]; q < j->as[x + 1]; q++) {
                uint32_t z = j->lists[q];
                y = y == UINT32_MAX ? z : join_two(j, &nn, y, z, j->sz[y], j->sz[y] + j->sz[z]);
            }
            join_two(j, &nn, k, y, 0, j->sz[y]);
            again = 1;
        }
    }
    return nn;
}

/* 1 when the search applies: no fixed blocks, no alignment, every section at LB. */
static int tight(const rp_inst *in)
{
    if (in->nm != in->n || in->nm == 0 || in->nsec == 0)
        return 0;
    for (uint32_t k = 0; k < in->nm; k++)
        if (in->b[in->mov[k]].align > 1)
            return 0;
    for (uint32_t x = 0; x < in->nsec; x++)
        if (in->load[x] != in->lb)
            return 0;
    return 1;
}

/*
 * One orientation's state for the blocks [a, e) of sz on the line, mirrored (time turned
 * around: a tiling turned around is one of the turned blocks) or not. The table of dead
 * sets, its keys and the plan are set by the caller and shared. 0 or -ENOMEM.
 */
static int tile_setup(tile *t, rp_mem *own, uint32_t nm, uint32_t nsec, uint64_t lb,
                      const uint32_t *a, const uint32_t *e, const uint64_t *sz, int mirror)
{
    t->nm = nm;
    t->nsec = nsec;
    t->lb = lb;
    t->kv = rp_alloc(own, (size_t)nm + 1, sizeof(rp_kv));
    t->a = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->e = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->sz = rp_alloc(own, (size_t)nm + 1, sizeof(uint64_t));
    t->bs = rp_alloc(own, (size_t)nsec + 2, sizeof(uint32_t));
    t->be = rp_alloc(own, (size_t)nsec + 3, sizeof(uint32_t));
    t->byst = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->byend = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->sky = rp_alloc(own, (size_t)nsec + 1, sizeof(uint64_t));
    t->cross = rp_alloc(own, (size_t)nsec + 1, sizeof(int32_t));
    t->cross0 = rp_alloc(own, (size_t)nsec + 2, sizeof(int32_t));
    t->sx = rp_alloc(own, (size_t)nsec + 1, sizeof(uint32_t));
    t->ng = rp_alloc(own, (size_t)nsec + 1, sizeof(uint32_t));
    t->pg = rp_alloc(own, (size_t)nsec + 1, sizeof(uint32_t));
    t->stk = rp_alloc(own, (size_t)nsec + 1, sizeof(uint32_t));
    t->cprev = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->rs = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->re = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->rn = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->rof = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->rbs = rp_alloc(own, (size_t)nsec + 2, sizeof(uint32_t));
    t->rsz = rp_alloc(own, (size_t)nm + 1, sizeof(uint64_t));
    t->dif = rp_alloc(own, (size_t)nsec + 2, sizeof(uint64_t));
    t->can = rp_alloc(own, (size_t)nsec + 1, 1);
    t->placed = rp_alloc(own, (size_t)nm + 1, 1);
    t->trail = rp_alloc(own, (size_t)nm + 1, sizeof(uint32_t));
    t->frames = rp_alloc(own, 2 * (size_t)nm + 2, sizeof(frame));
    if (!t->kv || !t->a || !t->e || !t->sz || !t->bs || !t->be || !t->byst || !t->byend ||
        !t->sky || !t->cross || !t->cross0 || !t->sx || !t->ng || !t->pg || !t->cprev || !t->rs ||
        !t->re || !t->rn || !t->rof || !t->rbs || !t->rsz || !t->dif || !t->stk || !t->can ||
        !t->placed || !t->trail || !t->frames)
        return -ENOMEM;
    for (uint32_t k = 0; k < nm; k++) {
        t->a[k] = mirror ? nsec - e[k] : a[k];
        t->e[k] = mirror ? nsec - a[k] : e[k];
        t->sz[k] = sz[k];
    }
    memset(t->bs, 0, ((size_t)nsec + 2) * sizeof(uint32_t));
    memset(t->be, 0, ((size_t)nsec + 3) * sizeof(uint32_t));
    memset(t->cross0, 0, ((size_t)nsec + 2) * sizeof(int32_t));
    for (uint32_t k = 0; k < nm; k++) {
        t->bs[t->a[k] + 1]++;
        t->be[t->e[k] + 1]++;
        if (t->e[k] > t->a[k] + 1) {
            t->cross0[t->a[k] + 1]++;
            t->cross0[t->e[k]]--;
        }
    }
    for (uint32_t x = 1; x <= nsec; x++)
        t->cross0[x] += t->cross0[x - 1];
    for (uint32_t x = 0; x < nsec; x++)
        t->bs[x + 1] += t->bs[x];
    for (uint32_t x = 0; x <= nsec; x++)
        t->be[x + 1] += t->be[x];
    for (uint32_t k = 0; k < nm; k++)
        t->kv[k] = (rp_kv){((uint64_t)t->a[k] << 32) | t->e[k], t->sz[k], 0, k};
    rp_sort_kv(t->kv, nm); /* classes together, each by index */
    memset(t->rbs, 0, ((size_t)nsec + 2) * sizeof(uint32_t));
    for (uint32_t k = 0, nr = 0; k < nm; k++) {
        const rp_kv *p = k ? &t->kv[k - 1] : NULL;
        uint32_t y = t->kv[k].v;
        t->cprev[y] = p && p->k1 == t->kv[k].k1 && p->k2 == t->kv[k].k2 ? p->v : UINT32_MAX;
        if (!p || p->k1 != t->kv[k].k1) { /* a new run */
            t->rs[nr] = t->a[y];
            t->re[nr] = t->e[y];
            t->rn[nr++] = 0;
            t->rbs[t->a[y] + 1]++;
        }
        t->rof[y] = nr - 1;
        t->rn[nr - 1]++;
    }
    for (uint32_t x = 0; x < nsec; x++)
        t->rbs[x + 1] += t->rbs[x];
    for (uint32_t k = 0; k < nm; k++)
        t->kv[k] = (rp_kv){t->e[k], 0, 0, k};
    rp_sort_kv(t->kv, nm); /* by end, for the right corners */
    for (uint32_t k = 0; k < nm; k++)
        t->byend[k] = t->kv[k].v;
    return 0;
}

int rp_tile(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t deadline_ns)
{
    rp_mem own = {m->a, NULL};
    tile t[2] = {{0}, {0}};
    join j = {0};
    uint32_t nm = in->nm, nsec = in->nsec, nn, nj = 0, dmask, *ja, *je, *idx;
    uint64_t rng = UINT64_C(0x2545f4914f6cdd1d), *zob, *dead, *off, *jsz;
    size_t n2 = 2 * (size_t)nm + 1, ns2 = (size_t)nsec + 2;
    rp_clock c = *clk;
    int rc = -ENOMEM, r = RP_ABORTED;

    if (!tight(in))
        return 0;
    c.deadline_ns = deadline_ns < clk->deadline_ns ? deadline_ns : clk->deadline_ns;
    for (dmask = 1023; dmask < TILE_DEAD_PER_BLOCK * (uint64_t)nm - 1 && dmask < TILE_DEAD_MAX - 1;)
        dmask = 2 * dmask + 1;
    off = rp_alloc(&own, n2, sizeof(uint64_t));
    zob = rp_alloc(&own, n2, sizeof(uint64_t));
    dead = rp_alloc(&own, 2 * ((size_t)dmask + 1), sizeof(uint64_t));
    ja = rp_alloc(&own, n2, sizeof(uint32_t));
    je = rp_alloc(&own, n2, sizeof(uint32_t));
    jsz = rp_alloc(&own, n2, sizeof(uint64_t));
    idx = rp_alloc(&own, n2, sizeof(uint32_t));
    j.a = rp_alloc(&own, n2, sizeof(uint32_t));
    j.e = rp_alloc(&own, n2, sizeof(uint32_t));
    j.c1 = rp_alloc(&own, n2, sizeof(uint32_t));
    j.c2 = rp_alloc(&own, n2, sizeof(uint32_t));
    j.list = rp_alloc(&own, n2, sizeof(uint32_t));
    j.lists = rp_alloc(&own, n2, sizeof(uint32_t));
    j.sz = rp_alloc(&own, n2, sizeof(uint64_t));
    j.d2 = rp_alloc(&own, n2, sizeof(uint64_t));
    j.used = rp_alloc(&own, n2, 1);
    j.ne = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.ns = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.ea = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.se = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.at = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.as = rp_alloc(&own, ns2, sizeof(uint32_t));
    j.sume = rp_alloc(&own, ns2, sizeof(uint64_t));
    j.sums = rp_alloc(&own, ns2, sizeof(uint64_t));
    if (!off || !zob || !dead || !ja || !je || !jsz || !idx || !j.a || !j.e || !j.c1 || !j.c2 ||
        !j.list || !j.lists || !j.sz || !j.d2 || !j.used || !j.ne || !j.ns || !j.ea || !j.se ||
        !j.at || !j.as || !j.sume || !j.sums)
        goto out;
    rc = 0;
    if (!cut_line(in, j.a, j.e, j.sz, j.ne))
        goto out;
    nn = join_blocks(&j, nm, nsec);
    for (uint32_t k = 0; k < nn; k++) {
        if (j.used[k] == 2)
            continue;
        idx[k] = nj;
        ja[nj] = j.a[k];
        je[nj] = j.e[k];
        jsz[nj++] = j.sz[k];
    }
    for (uint64_t z = rng ^ UINT64_C(0xd1b54a32d192ed03), k = 0; k < 2 * (uint64_t)nj; k++)
        zob[k] = rp_rand(&z);
    for (int d = 0; d < 2; d++) {
        if ((rc = tile_setup(&t[d], &own, nj, nsec, in->lb, ja, je, jsz, d)) < 0)
            goto out;
        t[d].off = off;
        t[d].zob = zob;
        t[d].dead = dead;
        t[d].dmask = dmask;
    }
    /* Runs alternate between time as it is and turned around (each on its own Luby
     * schedule): which of the two a tiling is easier to reach from often differs by orders
     * of magnitude. Both place the same blocks on the same skylines, mirrored, so a set
     * proven dead in one is dead in the other and they share the table. */
    for (uint64_t run = 1; r == RP_ABORTED && !c.stopped; run++) {
        tile *tr = &t[(run - 1) & 1];
        order_starts(tr, &rng, run > 2);
        r = tile_run(tr, &c, 4 * (uint64_t)nj * rp_luby((run + 1) / 2));
    }
    if (r == RP_FOUND) {
        /* the joined nodes' offsets, then their parts' (a node is numbered after its parts) */
        for (uint32_t k = nn; k-- > 0;) {
            if (j.used[k] != 2)
                jsz[k] = off[idx[k]];
            if (k >= nm) {
                jsz[j.c1[k]] = jsz[k];
                jsz[j.c2[k]] = jsz[k] + j.d2[k];
            }
        }
        for (uint32_t k = 0; k < nm; k++)
            best->off[k] = jsz[k];
        best->peak = in->lb;
        best->stage = "tile";
    } else if (r == RP_NOTFOUND && in->lb + 1 > best->proven) {
        best->proven = in->lb + 1;
    }
#ifdef RP_TILE_STATS
    t[0].st_nodes += t[1].st_nodes;
    t[0].st_fails += t[1].st_fails;
    t[0].st_hits += t[1].st_hits;
    t[0].st_skips += t[1].st_skips;
    for (int d = 0; d < 10; d++)
        t[0].st_tenth[d] += t[1].st_tenth[d];
    if (t[1].st_depth_max > t[0].st_depth_max)
        t[0].st_depth_max = t[1].st_depth_max;
    fprintf(stderr, "tile: %s, %llu nodes (by tenths of the depth:",
            r == RP_FOUND      ? "found"
            : r == RP_NOTFOUND ? "none"
                               : "aborted",
            (unsigned long long)t[0].st_nodes);
    for (int d = 0; d < 10; d++)
        fprintf(stderr, " %llu", (unsigned long long)t[0].st_tenth[d]);
    fprintf(
        stderr,
        "), %llu failed surveys, %llu dead on entry, %llu candidates dead, deepest %llu of %u\n",
        (unsigned long long)t[0].st_fails, (unsigned long long)t[0].st_hits,
        (unsigned long long)t[0].st_skips, (unsigned long long)t[0].st_depth_max, nj);
#endif
    clk->nodes = c.nodes;
    if (c.max_nodes && c.nodes >= c.max_nodes)
        clk->stopped = 1;
out:
    rp_mem_free_all(&own);
    return rc;
}
