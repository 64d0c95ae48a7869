/* Branch and bound on canonical plans (after MiniMalloc, Moffitt, ASPLOS 2023): one decision run.
 */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * Decision version: can every block fit below capacity C? Blocks are placed in order of
 * (offset, rank), each at its lowest offset above the blocks already placed that it meets
 * in time; every optimal plan has such a form, so the search is complete. Pruning:
 * - monotonic floor: nothing placed later goes below the current offset, so in every
 *   section offset + unplaced bytes must stay within C;
 * - unallocated floor: nor below the lowest offset any unplaced block in it can take
 *   (checked only where a bumped block breaks it alone, so no per-section rescan);
 * - dominance: a block that would sit above the top of another unplaced block at its
 *   lowest offset leaves a gap that the other could fill, so it is skipped;
 * - a block that meets no unplaced block ("hatless") is independent of the rest: when
 *   the subtree after it fails, its siblings fail too.
 * - decomposition: once no unplaced block spans a section boundary, the two sides are
 *   independent problems, each searched on its own (and a failure of one is final).
 * The restarts over rankings and capacities are in rp_restart.c.
 */

/* Old lowest offsets, to restore on the way back: in segments that never move, since a dive
 * of 20,000 blocks trails millions (doubling one array copied and cleared hundreds of MB). */
#define TRAIL_SEG_BITS 16
#define TRAIL_SEGS 16384
typedef struct trail_ent {
    uint64_t old;
    uint32_t idx;
    uint32_t ex; /* its place's pex before */
} trail_ent;

typedef struct trail {
    trail_ent *seg[TRAIL_SEGS];
    size_t len, cap;
} trail;

/* A stack of indices that may move when it grows: its users address it by position. */
typedef struct ustack {
    uint32_t *v;
    size_t top, cap;
} ustack;

struct rp_search {
    const rp_inst *in;
    rp_mem *m;
    rp_best *best;
    rp_clock *clk;
    uint32_t nm, nsec;
    uint64_t cap; /* C */
    uint64_t *size;
    /* On a circle, the arcs longer than half the period meet pairwise (rp_bound.c): the
     * unplaced ones, long_left bytes, all go above the current offset, each on bytes of its
     * own. islong NULL: none. */
    unsigned char *islong;
    uint64_t long_left;
    /* The blocks each block k meets in time: ov from ov_start[k] to ov_start[k + 1], and on
     * a line also bys (blocks by start) from r0[k] to r1[k], those starting after k before
     * it ends; so the list holds only the earlier starters that are live when k starts.
     * k's list ends at ov_end[k]. */
    uint32_t *ov_start, *ov_end, *ov;
    uint32_t *bys, *r0, *r1;
    uint32_t *deg; /* how many blocks each block meets */
    /* Blocks live in each section. Without the max tree (few sections: small instances,
     * where the unallocated floor scans sections often) the unplaced ones go first, ucnt of
     * them, kept by a swap at each placement (loc: where each block and section it spans
     * sits in sc, from kbase[k]). With it the scans are rare, and that upkeep, a cost in
     * sections per placement, took most of the time of long-lived blocks. */
    uint32_t *sc_start, *sc;
    uint32_t *ucnt, *kbase, *loc;
    const rp_ranking *rk; /* the ranking of this run */
    uint32_t *rank;       /* its ranks, redone within each part after a split */
    rp_kv *kv;
    uint64_t *off, *minoff, *total;
    rp_maxtree tree; /* total, for the monotonic floor; n == 0: not kept */
    uint32_t *stamp;
    uint64_t *sol;  /* the offset each block took last in the current run */
    uint32_t *cuts; /* per section boundary x|x+1: unplaced blocks spanning it */
    int decompose;  /* linear timelines only: a circle has no ends to cut at */
    ustack parts;   /* members of the open parts */
    /* By place in parts: the member's lowest offset, its size, its rank; where each block
     * is in parts. search() scans these, in a row, instead of the blocks. */
    uint64_t *pmo, *psz;
    uint32_t *prk, *pos;
    /* From PLACE_TREE_MIN blocks on, a tree over the places answers what search() scans for
     * (see search_tree): per node, the place of the lowest (offset, rank) under it that is
     * not excluded, and the lowest top. pex by place: a child that failed at an open node
     * and was not bumped since. pn: leaves, a power of two; 0: no tree. */
    unsigned char *pex;
    uint32_t *pkey;
    uint64_t *ptop;
    unsigned char *pdirty; /* per node: to redo before it answers (ptree_set) */
    size_t pn;
    int ptree;
    ustack cands; /* candidates of the open nodes */
    ustack saved; /* ranks of the parts ranked afresh, to restore */
    uint64_t nodes_left;
    uint32_t *wit;       /* per section: an unplaced member low enough at the last check, or none */
    uint32_t *pre, npre; /* blocks that meet all others, stacked at the bottom before the search */
    trail tmin;
};

static int trail_push(rp_search *s, trail *t, uint32_t idx, uint64_t old, uint32_t ex)
{
    trail_ent *e;

    if (t->len == t->cap) {
        size_t seg = t->cap >> TRAIL_SEG_BITS;

        if (seg == TRAIL_SEGS ||
            !(t->seg[seg] = rp_alloc(s->m, (size_t)1 << TRAIL_SEG_BITS, sizeof(trail_ent))))
            return -ENOMEM;
        t->cap += (size_t)1 << TRAIL_SEG_BITS;
    }
    e = &t->seg[t->len >> TRAIL_SEG_BITS][t->len & (((size_t)1 << TRAIL_SEG_BITS) - 1)];
    e->idx = idx;
    e->old = old;
    e->ex = ex;
    t->len++;
    return 0;
}

#define PT_NONE UINT32_MAX

/* Places a before b in (offset, rank) order; PT_NONE after all. */
static inline int pkey_less(const rp_search *s, uint32_t a, uint32_t b)
{
    if (a == PT_NONE)
        return 0;
    if (b == PT_NONE)
        return 1;
    return s->pmo[a] < s->pmo[b] || (s->pmo[a] == s->pmo[b] && s->prk[a] < s->prk[b]);
}

static inline void ptree_pull(rp_search *s, size_t v)
{
    uint32_t a = s->pkey[2 * v], b = s->pkey[2 * v + 1];
    uint64_t ta = s->ptop[2 * v], tb = s->ptop[2 * v + 1];

    s->pkey[v] = pkey_less(s, b, a) ? b : a;
    s->ptop[v] = tb < ta ? tb : ta;
}

static inline void ptree_leaf(rp_search *s, size_t x)
{
    s->pkey[s->pn + x] = s->pex[x] ? PT_NONE : (uint32_t)x;
    s->ptop[s->pn + x] = s->pmo[x] + s->psz[x];
}

/*
 * Place x changed: its ancestors are marked, up to the first marked one (all above a marked
 * node are marked), and redone when a query needs them. A node bumps a hundred blocks and
 * undoes it before the next query at its parent; the bumped blocks are the lowest of their
 * subtrees, so redoing each path at once walked it to the root every time.
 */
static void ptree_set(rp_search *s, size_t x)
{
    ptree_leaf(s, x);
    for (size_t v = (s->pn + x) >> 1; v && !s->pdirty[v]; v >>= 1)
        s->pdirty[v] = 1;
}

/* Redoes marked node v and the marked nodes under it (leaves are never marked). */
static void ptree_clean(rp_search *s, size_t v)
{
    if (2 * v < s->pn) {
        if (s->pdirty[2 * v])
            ptree_clean(s, 2 * v);
        if (s->pdirty[2 * v + 1])
            ptree_clean(s, 2 * v + 1);
    }
    ptree_pull(s, v);
    s->pdirty[v] = 0;
}

/* Places [lo, hi) set afresh. */
static void ptree_build(rp_search *s, size_t lo, size_t hi)
{
    for (size_t x = lo; x < hi; x++)
        ptree_set(s, x);
}

/* Over places [lo, hi): *mh the lowest top, *at the first place in (offset, rank) order
 * that is not excluded (PT_NONE if none). */
static void ptree_query(rp_search *s, size_t lo, size_t hi, uint64_t *mh, uint32_t *at)
{
    uint32_t k = PT_NONE;
    uint64_t t = RP_NONE;

    for (size_t l = lo + s->pn, r = hi + s->pn; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            if (l < s->pn && s->pdirty[l])
                ptree_clean(s, l);
            k = pkey_less(s, s->pkey[l], k) ? s->pkey[l] : k;
            t = s->ptop[l] < t ? s->ptop[l] : t;
            l++;
        }
        if (r & 1) {
            r--;
            if (r < s->pn && s->pdirty[r])
                ptree_clean(s, r);
            k = pkey_less(s, s->pkey[r], k) ? s->pkey[r] : k;
            t = s->ptop[r] < t ? s->ptop[r] : t;
        }
    }
    *mh = t;
    *at = k;
}

/* Lowest offset of block y (and its copy where it is in parts) set to o. */
static void set_minoff(rp_search *s, uint32_t y, uint64_t o)
{
    uint32_t at = s->pos[y];

    s->minoff[y] = o;
    s->pmo[at] = o;
    if (s->pn)
        ptree_set(s, at);
}

/* Room in parts for more members, the per-place arrays along. */
static int parts_reserve(rp_search *s, size_t more)
{
    ustack *u = &s->parts;

    if (u->top + more > u->cap) {
        size_t cap = 2 * (u->top + more) + 1024;
        uint32_t *n = rp_alloc(s->m, cap, sizeof(uint32_t));
        uint32_t *rk = rp_alloc(s->m, cap, sizeof(uint32_t));
        uint64_t *mo = rp_alloc(s->m, cap, sizeof(uint64_t));
        uint64_t *top = rp_alloc(s->m, cap, sizeof(uint64_t));
        unsigned char *ex = rp_alloc(s->m, cap, 1);

        if (!n || !rk || !mo || !top || !ex)
            return -ENOMEM;
        if (u->top) {
            memcpy(n, u->v, u->top * sizeof(uint32_t));
            memcpy(rk, s->prk, u->top * sizeof(uint32_t));
            memcpy(mo, s->pmo, u->top * sizeof(uint64_t));
            memcpy(top, s->psz, u->top * sizeof(uint64_t));
            memcpy(ex, s->pex, u->top);
        }
        u->v = n;
        s->prk = rk;
        s->pmo = mo;
        s->psz = top;
        s->pex = ex;
        u->cap = cap;
        if (s->ptree) {
            size_t pn = 1;

            while (pn < cap)
                pn *= 2;
            if (!(s->pkey = rp_alloc(s->m, 2 * pn, sizeof(uint32_t))) ||
                !(s->ptop = rp_alloc(s->m, 2 * pn, sizeof(uint64_t))) ||
                !(s->pdirty = rp_alloc(s->m, pn, 1)))
                return -ENOMEM;
            s->pn = pn;
            memset(s->pkey + pn, 0xff, pn * sizeof(uint32_t));
            memset(s->ptop + pn, 0xff, pn * sizeof(uint64_t));
            for (size_t x = 0; x < u->top; x++)
                ptree_leaf(s, x);
            for (size_t v = pn; v-- > 1;)
                ptree_pull(s, v);
        }
    }
    return 0;
}

static void parts_swap(rp_search *s, size_t a, size_t b)
{
    uint32_t k = s->parts.v[a], rk = s->prk[a];
    uint64_t mo = s->pmo[a], sz = s->psz[a];
    unsigned char ex = s->pex[a];

    s->parts.v[a] = s->parts.v[b];
    s->prk[a] = s->prk[b];
    s->pmo[a] = s->pmo[b];
    s->psz[a] = s->psz[b];
    s->parts.v[b] = k;
    s->prk[b] = rk;
    s->pmo[b] = mo;
    s->psz[b] = sz;
    s->pex[a] = s->pex[b];
    s->pex[b] = ex;
    s->pos[s->parts.v[a]] = (uint32_t)a;
    s->pos[k] = (uint32_t)b;
    if (s->pn && a != b) {
        ptree_set(s, a);
        ptree_set(s, b);
    }
}

/* Block k goes to place at in parts. */
static void parts_put(rp_search *s, size_t at, uint32_t k)
{
    s->parts.v[at] = k;
    s->pmo[at] = s->minoff[k];
    s->psz[at] = s->size[k];
    s->prk[at] = s->rank[k];
    s->pex[at] = 0;
    s->pos[k] = (uint32_t)at;
}

static int ustack_reserve(rp_search *s, ustack *u, size_t more)
{
    if (u->top + more > u->cap) {
        size_t cap = 2 * (u->top + more) + 1024;
        uint32_t *n = rp_alloc(s->m, cap, sizeof(uint32_t));

        if (!n)
            return -ENOMEM;
        if (u->top)
            memcpy(n, u->v, u->top * sizeof(uint32_t));
        u->v = n;
        u->cap = cap;
    }
    return 0;
}

/* check() scans a part's sections at every node, which on a large circle (no decomposition:
 * 12635 sections for a 12635-arc transformer step) costs more than a max tree over them;
 * below this the tree's upkeep costs more (MiniMalloc D, 102 sections: 12 % slower). */
#define TREE_MIN_SECTIONS 1024
/* Below this many blocks search() scans its members; from it on, search_tree(). */
#define PLACE_TREE_MIN 4096

#define FOR_SECTIONS(in, i, s)                                                                     \
    for (int run_ = 0; run_ < 2; run_++)                                                           \
        for (uint32_t s = run_ ? (in)->w0[i] : (in)->s0[i],                                        \
                      end_ = run_ ? (in)->w1[i] : (in)->s1[i];                                     \
             s < end_; s++)

/* Blocks live in each section, in sc from sc_start[x] on. */
static void build_sections(rp_search *s)
{
    const rp_inst *in = s->in;

    memset(s->sc_start, 0, ((size_t)s->nsec + 1) * sizeof(uint32_t));
    for (uint32_t k = 0; k < s->nm; k++)
        FOR_SECTIONS(in, in->mov[k], x) s->sc_start[x + 1]++;
    for (uint32_t x = 0; x < s->nsec; x++)
        s->sc_start[x + 1] += s->sc_start[x];
    for (uint32_t k = 0; k < s->nm; k++)
        FOR_SECTIONS(in, in->mov[k], x) s->sc[s->sc_start[x] + s->stamp[x]++] = k;
    memset(s->stamp, 0, s->nsec * sizeof(uint32_t));
}

/* On a circle, the blocks that cover its last section (every arc that wraps does); they all
 * meet one another. Every other block is one run of sections on the line [0, nsec - 1). */
static int covers_end(const rp_inst *in, uint32_t i)
{
    return in->period && in->s1[i] == in->nsec;
}

/* The movable blocks that do not cover the end, sorted by key (s0 or s1) with a counting
 * sort: their positions in mov go to out; count is scratch for nsec + 2 entries. */
static uint32_t sort_line(const rp_search *s, const uint32_t *key, uint32_t *count, uint32_t *out)
{
    const rp_inst *in = s->in;
    uint32_t n = 0;

    memset(count, 0, ((size_t)s->nsec + 2) * sizeof(uint32_t));
    for (uint32_t k = 0; k < s->nm; k++)
        if (!covers_end(in, in->mov[k]))
            count[key[in->mov[k]] + 1]++, n++;
    for (uint32_t x = 0; x < s->nsec; x++)
        count[x + 1] += count[x];
    for (uint32_t k = 0; k < s->nm; k++)
        if (!covers_end(in, in->mov[k]))
            out[count[key[in->mov[k]]]++] = k;
    return n;
}

/*
 * Calls pair(s, a, b) once for each two movable blocks that meet in time, at a cost in
 * pairs, not n^2 (4000 blocks took about 50 ms the other way, and a 6491-arc transformer
 * step 90 ms). On the line, by first section: a block meets the later starters that start
 * before it ends. A block c covering the circle's end meets every other such block, the
 * line's blocks that start before its wrapped run [0, w1) ends, and those that end after
 * it starts (skipping the ones met already). scratch: 3 nm + nsec + 2 entries.
 */
static void for_pairs(rp_search *s, uint32_t *scratch,
                      void (*pair)(rp_search *, uint32_t, uint32_t))
{
    const rp_inst *in = s->in;
    uint32_t *by_start = scratch, *by_end = scratch + s->nm, *ends = by_end + s->nm;
    uint32_t *count = ends + s->nm;
    uint32_t nl = sort_line(s, in->s0, count, by_start), nends = 0;

    sort_line(s, in->s1, count, by_end);
    for (uint32_t x = 0; x < nl; x++) {
        uint32_t a = by_start[x], end = in->s1[in->mov[a]];

        for (uint32_t y = x + 1; y < nl && in->s0[in->mov[by_start[y]]] < end; y++)
            pair(s, a, by_start[y]);
    }
    for (uint32_t k = 0; k < s->nm; k++) {
        uint32_t c = in->mov[k];

        if (!covers_end(in, c))
            continue;
        for (uint32_t j = 0; j < nends; j++)
            pair(s, ends[j], k);
        ends[nends++] = k;
        for (uint32_t x = 0; x < nl && in->s0[in->mov[by_start[x]]] < in->w1[c]; x++)
            pair(s, k, by_start[x]);
        for (uint32_t x = nl; x-- > 0 && in->s1[in->mov[by_end[x]]] > in->s0[c];)
            if (in->s0[in->mov[by_end[x]]] >= in->w1[c])
                pair(s, k, by_end[x]);
    }
}

static void count_pair(rp_search *s, uint32_t a, uint32_t b)
{
    s->ov_start[a + 1]++;
    s->ov_start[b + 1]++;
}

/* Fills each list from its end: ov_start[k + 1] walks down to the start of k's list. */
static void fill_pair(rp_search *s, uint32_t a, uint32_t b)
{
    s->ov[--s->ov_start[a + 1]] = b;
    s->ov[--s->ov_start[b + 1]] = a;
}

/*
 * Whether each pair is listed once (under the later starter, see rp_search): on a line
 * above OM_RP_BNB_MAX_BLOCKS, where listing is what the setup costs. Below, both ends: the
 * order of a block's list (all its partners, latest starter first) is the order place()
 * bumps them in, which decides how often the unallocated floor's remembered member still
 * passes; in start order within two halves MiniMalloc D took 34 % longer per node and J 55 %.
 */
static int lists_once(const rp_inst *in)
{
    return !in->period && in->nm > OM_RP_BNB_MAX_BLOCKS;
}

int rp_bnb_setup_size(const rp_inst *in, rp_mem *m, uint64_t *entries)
{
    uint32_t *starts = rp_alloc(m, (size_t)in->nsec + 2, sizeof(uint32_t));
    uint32_t *ends = rp_alloc(m, (size_t)in->nsec + 2, sizeof(uint32_t));
    uint64_t nends = 0, sum = 0, line = 0;

    if (!starts || !ends)
        return -ENOMEM;
    memset(starts, 0, ((size_t)in->nsec + 2) * sizeof(uint32_t));
    memset(ends, 0, ((size_t)in->nsec + 2) * sizeof(uint32_t));
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];

        sum += in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
        if (covers_end(in, i))
            nends++;
        else
            starts[in->s0[i] + 1]++, ends[in->s1[i]]++;
    }
    /* Now starts[x]: line blocks starting before section x; ends[x]: those ended by x. */
    for (uint32_t x = 0; x <= in->nsec; x++)
        starts[x + 1] += starts[x], ends[x + 1] += ends[x];
    sum += nends * (nends ? nends - 1 : 0);
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];

        if (lists_once(in)) /* each pair once: half the sum */
            line += starts[in->s1[i]] - ends[in->s0[i]] - 1;
        else if (!covers_end(in, i))
            sum += starts[in->s1[i]] - ends[in->s0[i]] - 1;
        else
            sum += 2 * ((uint64_t)starts[in->w1[i]] + starts[in->nsec + 1] - ends[in->s0[i]]);
    }
    *entries = sum + line / 2;
    return 0;
}

/*
 * On a line, by a sweep in start order: the blocks live when k starts that started before
 * it, copied from a set of live blocks (remove by swapping with the last). The other half
 * of each block's pairs, the later starters, are a range of bys and need no list: listing
 * every pair twice, scattered, was most of the setup on traces of 20,000 blocks.
 */
static int build_line_overlaps(rp_search *s, uint32_t *scratch)
{
    const rp_inst *in = s->in;
    uint32_t *by_end = scratch, *count = scratch + s->nm, *live = count + s->nsec + 2;
    uint32_t *at = live + s->nm;
    size_t total = 0;

    sort_line(s, in->s1, count, by_end);
    sort_line(s, in->s0, count, s->bys);
    /* count[x] is now where blocks starting at x end in bys: the ranges' ends. */
    for (int fill = 0; fill < 2; fill++) {
        uint32_t nlive = 0, e = 0;

        total = 0;
        for (uint32_t x = 0; x < s->nm; x++) {
            uint32_t k = s->bys[x], start = in->s0[in->mov[k]];

            /* Millions of entries take a while: the plan must not come late for them. */
            if (fill && (x & 1023) == 0 && rp_now_ns() >= s->clk->deadline_ns)
                return -ETIMEDOUT;

            for (; e < s->nm && in->s1[in->mov[by_end[e]]] <= start; e++) {
                uint32_t gone = by_end[e], last = live[--nlive];

                live[at[gone]] = last;
                at[last] = at[gone];
            }
            if (fill) {
                s->ov_start[k] = (uint32_t)total;
                s->ov_end[k] = (uint32_t)total + nlive;
                memcpy(s->ov + total, live, nlive * sizeof(uint32_t));
                s->r0[k] = x + 1;
                s->r1[k] = in->s1[in->mov[k]] ? count[in->s1[in->mov[k]] - 1] : 0;
                s->deg[k] = nlive + s->r1[k] - s->r0[k];
            }
            total += nlive;
            at[k] = nlive;
            live[nlive++] = k;
        }
        if (!fill &&
            (total > UINT32_MAX - 1 || !(s->ov = rp_alloc(s->m, total + 1, sizeof(uint32_t)))))
            return -ENOMEM;
    }
    return 0;
}

/* The blocks each block meets in time (see rp_search): on a circle all in ov. */
static int build_overlaps(rp_search *s)
{
    uint32_t *scratch = rp_alloc(s->m, 3 * (size_t)s->nm + s->nsec + 2, sizeof(uint32_t));
    uint32_t total;

    if (!scratch)
        return -ENOMEM;
    if (lists_once(s->in))
        return build_line_overlaps(s, scratch);
    memset(s->ov_start, 0, ((size_t)s->nm + 1) * sizeof(uint32_t));
    for_pairs(s, scratch, count_pair);
    for (uint32_t k = 0; k < s->nm; k++)
        s->ov_start[k + 1] += s->ov_start[k];
    total = s->ov_start[s->nm];
    if (!(s->ov = rp_alloc(s->m, (size_t)total + 1, sizeof(uint32_t))))
        return -ENOMEM;
    for_pairs(s, scratch, fill_pair);
    /* Now ov_start[k + 1] is where k's list starts. */
    memmove(s->ov_start, s->ov_start + 1, s->nm * sizeof(uint32_t));
    s->ov_start[s->nm] = total;
    for (uint32_t k = 0; k < s->nm; k++) {
        s->ov_end[k] = s->ov_start[k + 1];
        s->r0[k] = s->r1[k] = 0;
        s->deg[k] = s->ov_end[k] - s->ov_start[k];
    }
    return 0;
}

/*
 * MiniMalloc's preprocessing: a block that meets every other one in time can go to the
 * bottom. In any plan each other block lies wholly below or above it; taking such blocks
 * out, moving every other block down by the sizes of those that were below it and lifting
 * all by their sum keeps the plan valid and its peak. Alignment survives when their sizes
 * are multiples of every alignment; a fixed block could not move, so then nothing is done.
 */
static int find_bottom(rp_search *s)
{
    const rp_inst *in = s->in;
    uint64_t amax = 1;

    s->npre = 0;
    if (in->nm != in->n)
        return 0;
    if (!(s->pre = rp_alloc(s->m, (size_t)s->nm + 1, sizeof(uint32_t))))
        return -ENOMEM;
    for (uint32_t k = 0; k < s->nm; k++)
        if (in->b[in->mov[k]].align > amax)
            amax = in->b[in->mov[k]].align;
    for (uint32_t k = 0; k < s->nm; k++)
        if (s->deg[k] == s->nm - 1 && s->size[k] % amax == 0)
            s->pre[s->npre++] = k;
    return 0;
}

static int setup(rp_search *s)
{
    const rp_inst *in = s->in;
    size_t nsc = 0;
    int rc;

    s->nm = in->nm;
    s->nsec = in->nsec;
    s->size = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->off = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->minoff = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->total = rp_alloc(s->m, s->nsec + 1, sizeof(uint64_t));
    s->stamp = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    s->ov_start = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->ov_end = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->bys = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->r0 = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->r1 = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->deg = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    if (!s->ov_end || !s->bys || !s->r0 || !s->r1 || !s->deg)
        return -ENOMEM;
    s->sc_start = rp_alloc(s->m, s->nsec + 2, sizeof(uint32_t));
    s->sol = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->cuts = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    s->rank = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->kv = rp_alloc(s->m, s->nm + 1, sizeof(rp_kv));
    s->wit = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    s->pos = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    if (!s->pos || !s->size || !s->off || !s->minoff || !s->total || !s->stamp || !s->ov_start ||
        !s->sc_start || !s->sol || !s->cuts || !s->rank || !s->kv || !s->wit)
        return -ENOMEM;
    s->tree.n = 0;
    if (s->nsec >= TREE_MIN_SECTIONS && rp_maxtree_init(&s->tree, s->m, s->nsec) < 0)
        return -ENOMEM;
    for (uint32_t k = 0; k < s->nm; k++) {
        const om_rp_block *b = &in->b[in->mov[k]];
        s->size[k] = b->size;
        FOR_SECTIONS(in, in->mov[k], x) nsc++;
        if (in->period && 2 * (b->upper - b->lower) > in->period) {
            if (!s->islong && !(s->islong = rp_alloc(s->m, s->nm, 1)))
                return -ENOMEM;
            s->islong[k] = 1;
        }
    }
    if (!(s->sc = rp_alloc(s->m, nsc + 1, sizeof(uint32_t))))
        return -ENOMEM;
    if (!s->tree.n) {
        s->loc = rp_alloc(s->m, nsc + 1, sizeof(uint32_t));
        s->kbase = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
        s->ucnt = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
        if (!s->loc || !s->kbase || !s->ucnt)
            return -ENOMEM;
        for (uint32_t k = 0, at = 0; k < s->nm; k++) {
            uint32_t i = in->mov[k];
            s->kbase[k] = at;
            at += in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
        }
    }
    build_sections(s);
    if (rp_now_ns() >= s->clk->deadline_ns)
        return -ETIMEDOUT;
    if ((rc = build_overlaps(s)) < 0)
        return rc;
    memset(s->wit, 0xff, ((size_t)s->nsec + 1) * sizeof(uint32_t));
    return find_bottom(s);
}

int rp_search_new(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, rp_search **out)
{
    rp_search *s = rp_alloc(m, 1, sizeof(*s));
    int rc;

    if (!s)
        return -ENOMEM;
    s->in = in;
    s->m = m;
    s->best = best;
    s->clk = clk;
    s->decompose = in->period == 0;
    s->ptree = in->nm >= PLACE_TREE_MIN;
    if ((rc = setup(s)) < 0)
        return rc;
    *out = s;
    return 0;
}

void rp_search_rank(rp_search *s, const rp_ranking *r, uint32_t *out)
{
    rp_rank(s->in, s->deg, r->keys, NULL, NULL, NULL, 0, r->factor, s->kv, out);
}

/* A part of the problem: its unplaced blocks (in parts) and its sections [lo, hi). */
typedef struct part {
    size_t first, count;
    uint32_t lo, hi;
} part;

/* After a block went to offset o, every later one sits at o or above: the unplaced bytes
 * of each section must fit between o and C. */
static int check(const rp_search *s, const part *p, uint64_t o)
{
    uint64_t room = s->cap - o;

    if (s->long_left > room)
        return 0;
    if (s->tree.n) /* the fullest section overall first: O(1) */
        return p->lo >= p->hi || (uint64_t)s->tree.mx[1] <= room ||
               (uint64_t)rp_maxtree_max(&s->tree, p->lo, p->hi) <= room;
    for (uint32_t x = p->lo; x < p->hi; x++)
        if (s->total[x] > room)
            return 0;
    return 1;
}

/* total[] of the sections block c spans changes by d, in the tree too. */
static void add_total(rp_search *s, uint32_t c, int64_t d)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[c];

    FOR_SECTIONS(in, i, sec) s->total[sec] += (uint64_t)d;
    if (s->tree.n) {
        rp_maxtree_add(&s->tree, in->s0[i], in->s1[i], d);
        rp_maxtree_add(&s->tree, in->w0[i], in->w1[i], d);
    }
}

/* Where block k's entry for section x sits in loc. */
static uint32_t loc_index(const rp_search *s, uint32_t k, uint32_t x)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[k];

    if (x >= in->s0[i] && x < in->s1[i])
        return s->kbase[k] + (x - in->s0[i]);
    return s->kbase[k] + (in->s1[i] - in->s0[i]) + (x - in->w0[i]);
}

/*
 * MiniMalloc's unallocated floor: the unplaced bytes of a section go above the lowest
 * offset its unplaced blocks can take. Lowest offsets only rise when place() bumps them and
 * totals only shrink, so checking the sections of each bumped block keeps this true at
 * every node; a section needs its members scanned only when the bumped block alone breaks it.
 */
/* Whether section x's unplaced bytes fit above some unplaced member's lowest offset, given
 * that one member has lowest offset lo. */
static inline __attribute__((always_inline)) int section_fits(rp_search *s, uint32_t x, uint64_t lo)
{
    uint64_t room = s->cap - s->total[x];
    uint32_t w = s->wit[x], z, e;

    if (lo <= room)
        return 1;
    /* The member that passed this test last time usually passes it again. */
    if (w != UINT32_MAX && s->off[w] == RP_NONE && s->minoff[w] <= room)
        return 1;
    if (s->ucnt) { /* the unplaced ones first */
        for (z = s->sc_start[x], e = z + s->ucnt[x]; z < e; z++)
            if (s->minoff[s->sc[z]] <= room)
                break;
    } else {
        for (z = s->sc_start[x], e = s->sc_start[x + 1]; z < e; z++)
            if (s->off[s->sc[z]] == RP_NONE && s->minoff[s->sc[z]] <= room)
                break;
    }
    if (z == e)
        return 0;
    s->wit[x] = s->sc[z];
    return 1;
}

struct fit_ctx {
    rp_search *s;
    uint64_t lo;
};

static int fits_cb(void *ctx, uint32_t x)
{
    struct fit_ctx *c = ctx;

    return section_fits(c->s, x, c->lo);
}

static int sections_fit(rp_search *s, uint32_t y)
{
    const rp_inst *in = s->in;
    uint64_t lo = s->minoff[y];

    if (lo > s->cap || s->size[y] > s->cap - lo)
        return 0;
    /* Every section passes when the fullest does, or when the block's busiest section did at
     * the start (totals only shrink from there); else the tree finds the sections that the
     * block alone breaks, without a scan of all the sections a long-lived block spans (that
     * scan was most of the time on traces of 20,000 blocks). */
    if (s->tree.n) {
        uint32_t i = in->mov[y];
        int64_t thr = (int64_t)(s->cap - lo);

        if (s->tree.mx[1] <= thr || in->secmax[y] <= s->cap - lo)
            return 1;
        struct fit_ctx c = {s, lo};

        return rp_maxtree_each_above(&s->tree, in->s0[i], in->s1[i], thr, fits_cb, &c) &&
               rp_maxtree_each_above(&s->tree, in->w0[i], in->w1[i], thr, fits_cb, &c);
    }
    FOR_SECTIONS(in, in->mov[y], x)
    if (!section_fits(s, x, lo))
        return 0;
    return 1;
}

/* Places block c at offset o. Returns bit 0: no unplaced block meets it; bit 1: a section
 * boundary lost its last spanning block; bit 2: a section can no longer fit its unplaced
 * bytes. Or -ENOMEM. unplace() undoes it in every case. */
static int place(rp_search *s, uint32_t c, uint64_t o)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[c];
    uint64_t height = o + s->size[c];
    int flags = 1;

    s->off[c] = o;
    if (s->islong && s->islong[c])
        s->long_left -= s->size[c];
    /* Out of the unplaced prefix of each section; unplace() is LIFO, so a count undoes it. */
    if (s->ucnt)
        FOR_SECTIONS(in, i, sec)
        {
            uint32_t at = s->loc[loc_index(s, c, sec)], last = s->sc_start[sec] + --s->ucnt[sec];
            uint32_t w = s->sc[last];

            s->sc[last] = c;
            s->sc[at] = w;
            s->loc[loc_index(s, c, sec)] = last;
            s->loc[loc_index(s, w, sec)] = at;
        }
    add_total(s, c, -(int64_t)s->size[c]);
    if (s->decompose)
        for (uint32_t x = in->s0[i]; x + 1 < in->s1[i]; x++)
            if (--s->cuts[x] == 0)
                flags |= 2;
    for (int half = 0; half < 2; half++) {
        const uint32_t *list = half ? s->bys : s->ov;
        uint32_t from = half ? s->r0[c] : s->ov_start[c], to = half ? s->r1[c] : s->ov_end[c];

        for (uint32_t x = from; x < to; x++) {
            uint32_t y = list[x];

            if (s->off[y] != RP_NONE)
                continue;
            flags &= ~1;
            if (s->minoff[y] >= height)
                continue;
            if (trail_push(s, &s->tmin, y, s->minoff[y], s->pex[s->pos[y]]) < 0)
                return -ENOMEM;
            s->pex[s->pos[y]] = 0; /* above c: in order again */
            set_minoff(s, y, rp_bump_fixed(in, y, height));
            if (!sections_fit(s, y))
                return flags | 4;
        }
    }
    return flags;
}

static void unplace(rp_search *s, uint32_t c, size_t tmin_mark)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[c];

    while (s->tmin.len > tmin_mark) {
        size_t x = --s->tmin.len;
        const trail_ent *e =
            &s->tmin.seg[x >> TRAIL_SEG_BITS][x & (((size_t)1 << TRAIL_SEG_BITS) - 1)];

        s->pex[s->pos[e->idx]] = (unsigned char)e->ex;
        set_minoff(s, e->idx, e->old);
    }
    add_total(s, c, (int64_t)s->size[c]);
    if (s->decompose)
        for (uint32_t x = in->s0[i]; x + 1 < in->s1[i]; x++)
            s->cuts[x]++;
    if (s->ucnt)
        FOR_SECTIONS(in, i, sec) s->ucnt[sec]++;
    if (s->islong && s->islong[c])
        s->long_left += s->size[c];
    s->off[c] = RP_NONE;
}

static int search(rp_search *s, const part *p, uint64_t min_off, uint32_t min_rank);
static int search_tree(rp_search *s, const part *p);

/*
 * A part searched on its own, ranked afresh as MiniMalloc does: T (the most unplaced bytes in
 * a section the block spans) now counts only what this part still holds, so its own
 * bottleneck goes first. On E no static ranking finds the plan at LB within 40 M nodes; TW
 * ranked this way finds it in 4 k.
 */
static int solve_part(rp_search *s, const part *q)
{
    size_t mark = s->saved.top;
    int r;

    /* Other keys do not change, nor does the order they give to a part's blocks; a ranking
     * with keep (the first dives) keeps its order for the whole run. */
    if (s->rk->keep || (!strchr(s->rk->keys, 'T') && !strchr(s->rk->keys, 't'))) {
        if (s->pn)
            ptree_build(s, q->first, q->first + q->count);
        return search(s, q, 0, 0);
    }
    if (ustack_reserve(s, &s->saved, q->count) < 0)
        return -ENOMEM;
    for (size_t x = 0; x < q->count; x++)
        s->saved.v[s->saved.top++] = s->rank[s->parts.v[q->first + x]];
    rp_rank(s->in, s->deg, s->rk->keys, s->total, s->tree.n ? &s->tree : NULL,
            s->parts.v + q->first, (uint32_t)q->count, s->rk->factor, s->kv, s->rank);
    for (size_t x = q->first; x < q->first + q->count; x++)
        s->prk[x] = s->rank[s->parts.v[x]];
    if (s->pn)
        ptree_build(s, q->first, q->first + q->count);
    r = search(s, q, 0, 0);
    for (size_t x = 0; x < q->count; x++)
        s->rank[s->parts.v[q->first + x]] = s->saved.v[mark + x];
    s->saved.top = mark;
    return r;
}

/* Splits part p at the boundaries no unplaced block spans and solves each side alone. */
static int solve_split(rp_search *s, const part *p)
{
    const rp_inst *in = s->in;
    size_t mark = s->parts.top;
    uint32_t a = p->lo;
    int r = RP_FOUND;

    while (a < p->hi && r == RP_FOUND) {
        uint32_t b = a;
        part q;

        while (b + 1 < p->hi && s->cuts[b] != 0)
            b++;
        b++; /* sections [a, b) */
        if (parts_reserve(s, p->count) < 0)
            return -ENOMEM;
        q.first = s->parts.top;
        q.count = 0;
        q.lo = a;
        q.hi = b;
        for (size_t x = 0; x < p->count; x++) {
            uint32_t k = s->parts.v[p->first + x], i = in->mov[k];
            if (s->off[k] == RP_NONE && in->s0[i] < b && a < in->s1[i])
                parts_put(s, q.first + q.count++, k);
        }
        s->parts.top += q.count;
        if (q.count)
            r = solve_part(s, &q);
        s->parts.top = q.first;
        a = b;
    }
    /* Back in p: its members' places are theirs again. */
    for (size_t x = p->first; x < p->first + p->count; x++)
        s->pos[s->parts.v[x]] = (uint32_t)x;
    s->parts.top = mark;
    return r;
}

/* (offset, rank) order of the canonical form, as one comparison. */
static int cand_less(const rp_search *s, uint32_t a, uint32_t b)
{
    return s->minoff[a] < s->minoff[b] || (s->minoff[a] == s->minoff[b] && s->rank[a] < s->rank[b]);
}

/* A heap of places among the members mem, ordered by the blocks there. */
static void heap_down(const rp_search *s, const uint32_t *mem, uint32_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        uint32_t t;

        if (l < n && cand_less(s, mem[h[l]], mem[h[m]]))
            m = l;
        if (l + 1 < n && cand_less(s, mem[h[l + 1]], mem[h[m]]))
            m = l + 1;
        if (m == i)
            return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/*
 * One child of a node: c, at place `at` among p's members, placed at its lowest offset and
 * the rest searched. c is swapped to the end of the members and left out of them, so that
 * each node scans only what is still unplaced, and swapped back after: solve_part() restores
 * ranks by place, and the caller's heap holds places. Its offset goes to sol at once: when a
 * part is found, the last offset each of its blocks took is the plan's. *flags gets
 * place()'s flags. RP_ABORTED once the nodes or the time run out.
 */
static int child(rp_search *s, const part *p, uint32_t c, size_t at, int *flags)
{
    uint64_t co = s->minoff[c];
    size_t m1 = s->tmin.len, last = p->first + p->count - 1;
    part q = *p;
    int r;

    /* A node is one placement: failed ones cost as much as the others. A node recurses, so
     * a dive as deep as the stack allows ends there too. */
    if (s->nodes_left == 0 || rp_expired(s->clk) ||
        (uintptr_t)__builtin_frame_address(0) < s->clk->stack_floor)
        return RP_ABORTED;
    s->nodes_left--;
    parts_swap(s, p->first + at, last);
    q.count--;
    if ((*flags = place(s, c, co)) < 0)
        return *flags;
    s->sol[c] = co;
    if ((*flags & 4) || !check(s, &q, co))
        r = RP_NOTFOUND;
    else if (*flags & 2)
        r = solve_split(s, &q);
    else /* search_tree() straight from here: a frame less per level of a deep dive */
        r = s->pn ? search_tree(s, &q) : search(s, &q, co, s->rank[c]);
    unplace(s, c, m1);
    parts_swap(s, p->first + at, last);
    return r;
}

/* Whether (o, r) comes at or after (off, rank) in the canonical order: as a value to take the
 * minimum of, o or RP_NONE. */
static inline uint64_t at_or_after(uint64_t o, uint32_t r, uint64_t off, uint32_t rank)
{
    return o > off || (o == off && r >= rank) ? o : RP_NONE;
}

/*
 * *mh: the lowest top of n members; *at: the place of the first of them in (offset, rank)
 * order at or after (off, rank), n if none. A new first is rare, so its branch costs
 * little; mh's chain of minima has no branch.
 */
static void lowest(const uint64_t *mo, const uint64_t *sz, const uint32_t *rk, size_t n,
                   uint64_t off, uint32_t rank, uint64_t *mh, size_t *at)
{
    uint64_t h = RP_NONE, lo = RP_NONE;
    uint32_t lo_rank = UINT32_MAX;

    *at = n;
    for (size_t x = 0; x < n; x++) {
        uint64_t v = at_or_after(mo[x], rk[x], off, rank);

        h = mo[x] + sz[x] < h ? mo[x] + sz[x] : h;
        if (v < lo || (v == lo && v != RP_NONE && rk[x] < lo_rank))
            lo = v, lo_rank = rk[x], *at = x;
    }
    *mh = h;
}

/*
 * search() from PLACE_TREE_MIN blocks on, where scanning the members at every node was
 * most of the time of a dive (its cost is quadratic in the blocks). The tree gives mh and
 * the first child; the members before (offset, rank) of the node's block, which the scan
 * skipped, are exactly the children that failed at the open nodes and were not bumped
 * since (the first child is the lowest of all, later ones pass over only failed siblings,
 * and a bump puts a block above the block that bumped it), so each child that fails is
 * excluded from the tree until its node closes, and the next child is the tree's first
 * again: the same children in the same order as search()'s heap.
 */
static int search_tree(rp_search *s, const part *p)
{
    size_t base = s->cands.top;
    uint64_t mh, unused;
    uint32_t at;
    int r = RP_NOTFOUND, flags;

    ptree_query(s, p->first, p->first + p->count, &mh, &at);
    if (mh == RP_NONE)
        return RP_FOUND;
    while (at != PT_NONE && s->pmo[at] < mh) {
        r = child(s, p, s->parts.v[at], at - p->first, &flags);
        if (r != RP_NOTFOUND || (flags & 1))
            break;
        if (ustack_reserve(s, &s->cands, 1) < 0) {
            r = -ENOMEM;
            break;
        }
        s->cands.v[s->cands.top++] = at;
        s->pex[at] = 1;
        ptree_set(s, at);
        ptree_query(s, p->first, p->first + p->count, &unused, &at);
    }
    while (s->cands.top > base) {
        at = s->cands.v[--s->cands.top];
        s->pex[at] = 0;
        ptree_set(s, at);
    }
    return r;
}

/*
 * Children in (offset, rank) order, each at its lowest offset below mh, the lowest top an
 * unplaced block can have. The first is found by a scan: a dive takes the first child of
 * nearly every node, and keeping every open node's candidates took memory quadratic in the
 * blocks (200 MB for a 12635-arc transformer step). Only a node that goes on to its second
 * child gathers the rest, into a heap: large parts have hundreds of candidates at one
 * offset. The state is the same again after each child is undone, so the heap stays valid.
 */
static int search(rp_search *s, const part *p, uint64_t min_off, uint32_t min_rank)
{
    const uint32_t *mem;
    const uint64_t *mo = s->pmo + p->first, *sz = s->psz + p->first;
    const uint32_t *rk = s->prk + p->first;
    uint64_t mh, lo;
    uint32_t first, lo_rank;
    size_t base = s->cands.top, cnt = 0, first_at;
    int r, flags;

    if (s->pn)
        return search_tree(s, p);
    /*
     * The members are all unplaced (each child moves its block out of the range), and
     * their lowest offsets, tops and ranks sit in a row by place: one pass finds mh and
     * the first candidate. Reading them through the block numbers was most of the time of
     * a dive over 20,000 blocks.
     */
    lowest(mo, sz, rk, p->count, min_off, min_rank, &mh, &first_at);
    if (mh == RP_NONE)
        return RP_FOUND;
    if (first_at == p->count || mo[first_at] >= mh)
        return RP_NOTFOUND;
    lo = mo[first_at];
    lo_rank = rk[first_at];
    first = s->parts.v[p->first + first_at];
    r = child(s, p, first, first_at, &flags);
    if (r != RP_NOTFOUND || (flags & 1))
        return r;
    if (ustack_reserve(s, &s->cands, p->count) < 0)
        return -ENOMEM;
    mo = s->pmo + p->first; /* parts may have grown */
    rk = s->prk + p->first;
    for (uint32_t x = 0; x < p->count; x++)
        if (x != first_at && mo[x] < mh && (mo[x] > lo || (mo[x] == lo && rk[x] >= lo_rank)))
            s->cands.v[base + cnt++] = x;
    mem = s->parts.v + p->first;
    for (size_t x = cnt / 2; x-- > 0;)
        heap_down(s, mem, s->cands.v + base, cnt, x);
    s->cands.top = base + cnt;
    for (size_t left = cnt; left > 0; left--) {
        uint32_t *h = s->cands.v + base, at = h[0];

        /* Each child leaves the members in their order, so places stay valid; parts may
         * have grown, moving them. */
        mem = s->parts.v + p->first;
        h[0] = h[left - 1];
        heap_down(s, mem, h, left - 1, 0);
        r = child(s, p, mem[at], at, &flags);
        if (r != RP_NOTFOUND || (flags & 1))
            break;
    }
    s->cands.top = base;
    return r;
}

/* Blocks meeting all others go to the bottom first (find_bottom), at their lowest offsets. */
static int place_bottom(rp_search *s, const part *all)
{
    for (uint32_t x = 0; x < s->npre; x++) {
        uint32_t k = s->pre[x];
        uint64_t o = s->minoff[k];
        int flags;

        s->sol[k] = o;
        if ((flags = place(s, k, o)) < 0)
            return flags;
        if ((flags & 4) || !check(s, all, o))
            return RP_NOTFOUND;
    }
    return RP_FOUND;
}

int rp_search_run(rp_search *s, const rp_ranking *rk, uint64_t cap, uint64_t node_limit)
{
    const rp_inst *in = s->in;
    part all = {0, s->nm, 0, s->nsec};
    int r;

    s->cap = cap;
    s->rk = rk;
    memcpy(s->rank, rk->rank, s->nm * sizeof(uint32_t));
    s->nodes_left = node_limit;
    s->tmin.len = 0;
    s->parts.top = 0;
    s->cands.top = 0;
    s->saved.top = 0;
    if (cap < in->fixed_top)
        return RP_NOTFOUND;
    if (parts_reserve(s, s->nm) < 0)
        return -ENOMEM;
    memset(s->total, 0, ((size_t)s->nsec + 1) * sizeof(uint64_t));
    memset(s->cuts, 0, ((size_t)s->nsec + 1) * sizeof(uint32_t));
    s->long_left = 0;
    /* As differences, summed after: the sections of long-lived blocks add up to millions,
     * which every run went through. Wrapping sums are exact. */
    for (uint32_t k = 0; k < s->nm; k++) {
        uint32_t i = in->mov[k];
        s->off[k] = RP_NONE;
        s->long_left += s->islong && s->islong[k] ? s->size[k] : 0;
        s->minoff[k] = rp_bump_fixed(in, k, 0);
        parts_put(s, k, k);
        s->total[in->s0[i]] += s->size[k];
        s->total[in->s1[i]] -= s->size[k];
        s->total[in->w0[i]] += s->size[k];
        s->total[in->w1[i]] -= s->size[k];
        if (s->decompose && in->s0[i] + 1 < in->s1[i]) {
            s->cuts[in->s0[i]]++;
            s->cuts[in->s1[i] - 1]--;
        }
    }
    for (uint32_t x = 1; x < s->nsec; x++) {
        s->total[x] += s->total[x - 1];
        s->cuts[x] += s->cuts[x - 1];
    }
    s->total[s->nsec] = 0;
    s->cuts[s->nsec] = 0;
    if (s->tree.n)
        rp_maxtree_build(&s->tree, s->total, s->nsec);
    s->parts.top = s->nm;
    if (s->pn)
        ptree_build(s, 0, s->nm);
    for (uint32_t x = 0; s->ucnt && x < s->nsec; x++) {
        s->ucnt[x] = s->sc_start[x + 1] - s->sc_start[x];
        for (uint32_t z = s->sc_start[x]; z < s->sc_start[x + 1]; z++)
            s->loc[loc_index(s, s->sc[z], x)] = z;
    }
    for (uint32_t k = 0; k < s->nm; k++)
        if (!sections_fit(s, k))
            return RP_NOTFOUND;
    if ((r = place_bottom(s, &all)) != RP_FOUND)
        return r;
    /* Members are unplaced blocks only: the bottom ones go past the end. */
    for (size_t x = 0; x < all.count;)
        if (s->off[s->parts.v[x]] != RP_NONE)
            parts_swap(s, x, --all.count);
        else
            x++;
    r = s->decompose ? solve_split(s, &all) : search(s, &all, 0, 0);
    if (r == RP_FOUND) {
        uint64_t peak = in->fixed_top;
        for (uint32_t k = 0; k < s->nm; k++)
            if (s->sol[k] + s->size[k] > peak)
                peak = s->sol[k] + s->size[k];
        if (peak < s->best->peak) {
            memcpy(s->best->off, s->sol, s->nm * sizeof(uint64_t));
            s->best->peak = peak;
            s->best->stage = "bnb";
        }
    }
    return r;
}
