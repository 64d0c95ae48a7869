/* Greedy by size: largest block first, each at the lowest offset where it fits. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * The placed blocks are indexed by a tree over the sections, each node with ARITY
 * children. A block's run of sections [a, e) splits into canonical nodes (nodes inside the
 * run whose parents are not); the block goes into own() of those, and into all() of them
 * and of every node on the paths from the root to leaves a and e - 1 that is not inside
 * the run (a node inside it is under a canonical node, and covered). A block b meets a run
 * in time exactly when it is in own() of a node on the run's two paths that is not inside
 * the run (b covers a node that holds part of the run) or in all() of one of the run's
 * canonical nodes (b touches one). Each set is a union of byte ranges, merged: a candidate
 * offset that meets a merged range meets one of its blocks wherever it starts below the
 * range's end, so it can jump there. The lowest offset is found by jumping until no set
 * of either run has anything in the way; every jump passes bytes that are proven taken.
 * An own() set holds at most as many ranges as blocks live at once; near the root, all()
 * sets merge into a few long ranges. Four children rather than two halve the paths, which
 * most blocks (short-lived: their canonical nodes are near the leaves) spend their inserts
 * and their sets on.
 */
typedef struct iv {
    uint64_t lo, hi;
} iv;

typedef struct ivset {
    iv *v;
    uint32_t n;
    uint8_t cls; /* capacity 1 << cls; 0 for no array yet */
} ivset;

#define MIN_CLASS 2
#define MAX_CLASS 31
/* Slabs double from the first to the last size: a small plan made in a program touches
 * a few pages, a large one few slabs. */
#define SLAB_FIRST (UINT64_C(1) << 12)
#define SLAB_LAST (UINT64_C(1) << 20)
#define ARITY_BITS 2
#define ARITY (1u << ARITY_BITS)
/* Heights above the leaves, for up to 2^32 sections. */
#define MAX_HEIGHT ((32 + ARITY_BITS - 1) / ARITY_BITS)
/* A run has two path nodes and 2 * (ARITY - 1) canonical ones per level; a block two runs. */
#define MAX_SETS (2 * 2 * ARITY * (MAX_HEIGHT + 1))

/* Arrays in classes of powers of two from slabs, given back to a free list when they grow:
 * the replanner's allocator has no cheap small allocations. */
typedef struct link {
    struct link *next; /* over the first bytes of a free array */
} link;

typedef struct pool {
    rp_mem *m;
    char *slab;
    size_t left, next; /* bytes left in the slab; the size of the next one */
    link *free[MAX_CLASS + 1];
} pool;

/* Nodes by height, root first: base[h] is the first at height h, node j covering sections
 * [j ARITY^h, (j + 1) ARITY^h); only those that cover a section are kept, a run's nodes
 * never start past the last section. */
typedef struct tree {
    /* An inner node's two sets side by side, read and written together (a path node's
     * own() searched and its all() added to, a canonical node's all() searched and both
     * added to); a leaf has its own() only, its all(). Nodes below base[0] are inner. */
    struct inner {
        ivset own, all;
    } * inner;
    ivset *leaf;
    uint32_t height;
    uint32_t base[MAX_HEIGHT + 1];
    pool p;
} tree;

static iv *pool_get(pool *p, uint8_t cls)
{
    size_t bytes = ((size_t)1 << cls) * sizeof(iv);
    link *l = p->free[cls];
    iv *r;

    if (l) {
        p->free[cls] = l->next;
        return (iv *)(void *)l;
    }
    if (bytes >= SLAB_LAST / 4)
        return rp_alloc_raw(p->m, (size_t)1 << cls, sizeof(iv));
    if (p->left < bytes) {
        size_t n = p->next < SLAB_FIRST ? SLAB_FIRST : p->next;

        while (n < bytes)
            n *= 2;
        if (!(p->slab = rp_alloc_raw(p->m, n, 1)))
            return NULL;
        p->left = n;
        p->next = n < SLAB_LAST ? 2 * n : n;
    }
    r = (iv *)(void *)p->slab;
    p->slab += bytes;
    p->left -= bytes;
    return r;
}

static void pool_put(pool *p, iv *a, uint8_t cls)
{
    link *l = (link *)(void *)a;

    l->next = p->free[cls];
    p->free[cls] = l;
}

/* The first range of [lo, end) that ends above y, or end. Without branches on the ranges:
 * the sets are searched at every insert, where a branch on each step is a coin toss. */
static uint32_t first_above_in(const ivset *s, uint32_t lo, uint32_t end, uint64_t y)
{
    uint32_t n = end - lo;

    if (lo >= end)
        return end;
    while (n > 1) {
        uint32_t half = n / 2;

        lo = s->v[lo + half].hi <= y ? lo + half : lo;
        n -= half;
    }
    return lo + (s->v[lo].hi <= y);
}

static uint32_t first_above(const ivset *s, uint32_t lo, uint64_t y)
{
    return first_above_in(s, lo, s->n, y);
}

/* The same from lo on where range lo - 1 ends at or below y: by doubling steps first, as a
 * search's offset mostly passes a few of a set's ranges at a time (the other sets' ranges
 * cover the gaps between them), and a set of thousands of ranges would take a dozen
 * halvings over lines far apart. */
static inline uint32_t first_above_near(const ivset *s, uint32_t lo, uint64_t y)
{
    uint32_t step = 1;

    while (lo + step <= s->n && s->v[lo + step - 1].hi <= y) {
        lo += step;
        step *= 2;
    }
    return first_above_in(s, lo, lo + step <= s->n ? lo + step - 1 : s->n, y);
}

/*
 * The lowest aligned offset >= y where [offset, offset + size) meets no range of s. *at is
 * where the last call on s stopped: the offset only rises while a block is placed, so the
 * search goes on from there, a step at a time first (the next range is nearly always the
 * one), then by halves.
 */
static inline uint64_t clear_of(const ivset *s, uint32_t *at, uint64_t y, uint64_t size,
                                uint64_t align)
{
    uint32_t x = *at;

    if (x < s->n && s->v[x].hi <= y && ++x < s->n && s->v[x].hi <= y)
        x = first_above_near(s, x + 1, y);
    while (x < s->n && s->v[x].lo < y + size) {
        y = rp_align_up(s->v[x].hi, align);
        while (x < s->n && s->v[x].hi <= y)
            x++;
    }
    *at = x;
    return y;
}

/* Adds [lo, hi) to s, x the first range of s that ends at or above lo: 0, 1 if s held it
 * already, or -ENOMEM. */
static int ivset_add_at(pool *p, ivset *s, uint32_t x, uint64_t lo, uint64_t hi)
{
    uint32_t j = x;

    if (x < s->n && s->v[x].lo <= lo && hi <= s->v[x].hi)
        return 1;

    /* ranges that overlap or touch [lo, hi) merge into it */
    while (j < s->n && s->v[j].lo <= hi) {
        lo = s->v[j].lo < lo ? s->v[j].lo : lo;
        hi = s->v[j].hi > hi ? s->v[j].hi : hi;
        j++;
    }
    if (j > x) {
        s->v[x] = (iv){lo, hi};
        if (j > x + 1) { /* (one range merged: the rest stays where it is) */
            memmove(s->v + x + 1, s->v + j, (s->n - j) * sizeof(iv));
            s->n -= j - x - 1;
        }
        return 0;
    }
    if (!s->cls || s->n == (UINT32_C(1) << s->cls)) {
        uint8_t cls = s->cls ? (uint8_t)(s->cls + 1) : MIN_CLASS;
        iv *a;

        if (cls > MAX_CLASS || !(a = pool_get(p, cls)))
            return -ENOMEM;
        if (s->n)
            memcpy(a, s->v, s->n * sizeof(iv));
        if (s->cls)
            pool_put(p, s->v, s->cls);
        s->v = a;
        s->cls = cls;
    }
    if (x < s->n)
        memmove(s->v + x + 1, s->v + x, (s->n - x) * sizeof(iv));
    s->v[x] = (iv){lo, hi};
    s->n++;
    return 0;
}

static int ivset_add(pool *p, ivset *s, uint64_t lo, uint64_t hi)
{
    return ivset_add_at(p, s, first_above(s, 0, lo ? lo - 1 : 0), lo, hi);
}

/* first_above(a, 0, y) and first_above(b, 0, y) by halves in step: an inner node's two
 * sets are apart in memory, and their loads are under way together. */
static void first_above2(const ivset *a, const ivset *b, uint64_t y, uint32_t *xa, uint32_t *xb)
{
    uint32_t na = a->n, nb = b->n, la = 0, lb = 0;

    while (na > 1 && nb > 1) {
        uint32_t ha = na / 2, hb = nb / 2;

        la = a->v[la + ha].hi <= y ? la + ha : la;
        lb = b->v[lb + hb].hi <= y ? lb + hb : lb;
        na -= ha;
        nb -= hb;
    }
    *xa = na ? first_above_in(a, la, la + na, y) : 0;
    *xb = nb ? first_above_in(b, lb, lb + nb, y) : 0;
}

static uint32_t node(const tree *t, unsigned h, uint32_t j)
{
    return t->base[h] + j;
}

/* Is node j at height h inside the run [a, e)? */
static int inside(unsigned h, uint32_t j, uint32_t a, uint32_t e)
{
    uint64_t lo = (uint64_t)j << (ARITY_BITS * h);

    return lo >= a && lo + ((uint64_t)1 << (ARITY_BITS * h)) <= e;
}

/* The run's canonical nodes, as heights and indices in hs and js: their count. Bottom up,
 * the nodes at each end whose parents reach past the run. */
static uint32_t canonical(uint32_t a, uint32_t e, uint8_t *hs, uint32_t *js)
{
    uint32_t c = 0, l = a, r = e;

    for (unsigned h = 0; l < r; h++, l >>= ARITY_BITS, r >>= ARITY_BITS) {
        for (; l < r && (l & (ARITY - 1)); l++, c++) {
            hs[c] = (uint8_t)h;
            js[c] = l;
        }
        for (; l < r && (r & (ARITY - 1)); c++) {
            hs[c] = (uint8_t)h;
            js[c] = --r;
        }
    }
    return c;
}

/* A run's nodes, found once for both its search and its insert: its canonical nodes (with
 * their heights) and, per height above the leaves, the path nodes at its two ends that are
 * not inside it (NO_NODE where inside, or where the right one is the left one). */
#define NO_NODE UINT32_MAX
#define SAME_NODE (UINT32_MAX - 1)
typedef struct run_nodes {
    uint32_t nc;
    uint8_t hs[2 * ARITY * (MAX_HEIGHT + 1)];
    uint32_t cn[2 * ARITY * (MAX_HEIGHT + 1)]; /* node numbers */
    uint32_t pl[MAX_HEIGHT + 1], pr[MAX_HEIGHT + 1];
} run_nodes;

static void run_nodes_of(const tree *t, uint32_t a, uint32_t e, run_nodes *r)
{
    uint32_t js[2 * ARITY * (MAX_HEIGHT + 1)];

    r->nc = canonical(a, e, r->hs, js);
    for (uint32_t c = 0; c < r->nc; c++)
        r->cn[c] = node(t, r->hs[c], js[c]);
    for (unsigned h = 1; h <= t->height; h++) {
        uint32_t jl = a >> (ARITY_BITS * h), jr = (e - 1) >> (ARITY_BITS * h);

        r->pl[h] = inside(h, jl, a, e) ? NO_NODE : node(t, h, jl);
        r->pr[h] = jr == jl ? SAME_NODE : inside(h, jr, a, e) ? NO_NODE : node(t, h, jr);
    }
}

/* The sets a run must be clear of, appended to sets. */
static uint32_t run_sets(const tree *t, const run_nodes *r, const ivset **sets, uint32_t ns)
{
    for (unsigned h = 1; h <= t->height; h++) {
        if (r->pl[h] != NO_NODE && t->inner[r->pl[h]].own.n)
            sets[ns++] = &t->inner[r->pl[h]].own;
        if (r->pr[h] < SAME_NODE && t->inner[r->pr[h]].own.n)
            sets[ns++] = &t->inner[r->pr[h]].own;
    }
    for (uint32_t c = 0; c < r->nc; c++) {
        const ivset *s = r->hs[c] ? &t->inner[r->cn[c]].all : &t->leaf[r->cn[c] - t->base[0]];

        if (s->n)
            sets[ns++] = s;
    }
    return ns;
}

static int run_add(tree *t, const run_nodes *r, uint64_t lo, uint64_t hi)
{
    int rc = 0, held_l = 0, held_r = 0;

    /* A parent's all() holds its children's: once a node's set held the range already, so
     * do all the nodes above it on its path. The leaves are inside the run. Where the two
     * paths have met, the right one is the left one. */
    for (unsigned h = 1; h <= t->height && !(held_l && held_r); h++) {
        if (!held_l && r->pl[h] != NO_NODE &&
            (rc = ivset_add(&t->p, &t->inner[r->pl[h]].all, lo, hi)) != 0) {
            if (rc < 0)
                return rc;
            held_l = 1;
        }
        if (r->pr[h] == SAME_NODE) {
            held_r = held_l;
        } else if (!held_r && r->pr[h] != NO_NODE &&
                   (rc = ivset_add(&t->p, &t->inner[r->pr[h]].all, lo, hi)) != 0) {
            if (rc < 0)
                return rc;
            held_r = 1;
        }
    }
    for (uint32_t c = 0; c < r->nc; c++) {
        if (!r->hs[c]) {
            if ((rc = ivset_add(&t->p, &t->leaf[r->cn[c] - t->base[0]], lo, hi)) < 0)
                return rc;
        } else {
            struct inner *in = &t->inner[r->cn[c]];
            uint32_t xo, xa;

            first_above2(&in->own, &in->all, lo ? lo - 1 : 0, &xo, &xa);
            if ((rc = ivset_add_at(&t->p, &in->own, xo, lo, hi)) < 0 ||
                (rc = ivset_add_at(&t->p, &in->all, xa, lo, hi)) < 0)
                return rc;
        }
    }
    return 0;
}

/* A block's runs' nodes: its lifetime's and, for an arc that wraps, the part from the
 * period's start. */
typedef struct block_nodes {
    uint32_t nr;
    run_nodes r[2];
} block_nodes;

static void block_nodes_of(const tree *t, const rp_inst *in, uint32_t i, block_nodes *bn)
{
    bn->nr = 0;
    if (in->s0[i] < in->s1[i])
        run_nodes_of(t, in->s0[i], in->s1[i], &bn->r[bn->nr++]);
    if (in->w0[i] < in->w1[i])
        run_nodes_of(t, in->w0[i], in->w1[i], &bn->r[bn->nr++]);
}

static int block_add(tree *t, const block_nodes *bn, uint64_t lo, uint64_t hi)
{
    int rc = 0;

    for (uint32_t x = 0; x < bn->nr && rc == 0; x++)
        rc = run_add(t, &bn->r[x], lo, hi);
    return rc;
}

/* Moves set x of a search one place forward, with its cursor and next start. */
static inline void search_swap(const ivset **sets, uint32_t *at, uint64_t *next, uint32_t x)
{
    const ivset *s = sets[x];
    uint64_t nx = next[x];
    uint32_t ax = at[x];

    sets[x] = sets[x - 1];
    next[x] = next[x - 1];
    at[x] = at[x - 1];
    sets[x - 1] = s;
    next[x - 1] = nx;
    at[x - 1] = ax;
}

/* A search's sets by their number of ranges, most first: a few sorted in place (a trace's
 * block with a set or two, where the passes below cost more than its search), many as
 * far as the bit length tells, in a few passes (sorted, a block of sixty sets took as long
 * as a search). */
#define SORT_SETS 8
static void densest_first(const ivset **sets, uint32_t *at, uint64_t *next, uint32_t ns)
{
    const ivset *ts[MAX_SETS];
    uint32_t ta[MAX_SETS], first[34] = {0};
    uint64_t tn[MAX_SETS];

    if (ns <= SORT_SETS) {
        for (uint32_t x = 1; x < ns; x++)
            for (uint32_t j = x; j > 0 && sets[j - 1]->n < sets[j]->n; j--)
                search_swap(sets, at, next, j);
        return;
    }
    for (uint32_t x = 0; x < ns; x++) /* the sets taken are not empty */
        first[__builtin_clz(sets[x]->n) + 1]++;
    for (uint32_t k = 1; k < 34; k++)
        first[k] += first[k - 1];
    for (uint32_t x = 0; x < ns; x++) {
        uint32_t k = first[__builtin_clz(sets[x]->n)]++;

        ts[k] = sets[x];
        ta[k] = at[x];
        tn[k] = next[x];
    }
    memcpy(sets, ts, ns * sizeof(*ts));
    memcpy(at, ta, ns * sizeof(*ta));
    memcpy(next, tn, ns * sizeof(*tn));
}

/*
 * The lowest aligned offset where block i meets nothing placed. next[x] is where set x's
 * next range starts, from where its search stopped: until the offset plus the size passes
 * it, the set cannot be in the way, and its ranges are not looked at. Every jump passes
 * bytes proven taken, so the offset where no set is in the way is the lowest whatever the
 * order of the jumps; the order decides how often a set is asked for nothing (a set whose
 * next ranges the offset has passed: its cursor only catches up).
 *
 * First in turn, round and round until the set after the last that moved the offset comes
 * round to it again: most blocks of a trace fit after a few jumps. Once the offset has
 * jumped as many times as the block has sets, and the turns have asked sets for nothing
 * as often as they jumped, the block is among many small gaps (a crowded instance:
 * hundreds of jumps a block, three asks a jump); its sets then go densest first, and after
 * every jump the search starts again from the first set, the set that jumped moved one
 * place forward. The sets that keep the offset moving are asked first and a sparse set
 * only where the dense ones let the offset rest, so that when it jumps the dense sets
 * catch up over many ranges at once (Algorithms, 2). With two sets the turns ask the other
 * set after every jump already.
 */
static uint64_t lowest_fit(const tree *t, const om_rp_block *b, const block_nodes *bn)
{
    const ivset *sets[MAX_SETS];
    uint32_t ns = 0, at[MAX_SETS], moves = 0, idle = 0;
    uint64_t y = rp_align_up(0, b->align), next[MAX_SETS];

    for (uint32_t r = 0; r < bn->nr; r++)
        ns = run_sets(t, &bn->r[r], sets, ns);
    for (uint32_t x = 0; x < ns; x++) {
        at[x] = 0;
        next[x] = sets[x]->v[0].lo; /* the sets taken are not empty */
    }
    if (!ns)
        return y;
    for (uint32_t x = 0, last = 0;;) {
        if (next[x] < y + b->size) {
            uint64_t z = clear_of(sets[x], &at[x], y, b->size, b->align);

            next[x] = at[x] < sets[x]->n ? sets[x]->v[at[x]].lo : UINT64_MAX;
            if (z != y) {
                y = z;
                last = x;
                if (++moves >= ns && idle >= moves && ns > 2)
                    break;
            } else {
                idle++;
            }
        }
        if (++x == ns)
            x = 0;
        if (x == last)
            return y;
    }
    densest_first(sets, at, next, ns);
    for (uint32_t x = 0; x < ns;) {
        uint64_t z;

        if (next[x] >= y + b->size) {
            x++;
            continue;
        }
        z = clear_of(sets[x], &at[x], y, b->size, b->align);
        next[x] = at[x] < sets[x]->n ? sets[x]->v[at[x]].lo : UINT64_MAX;
        if (z == y) {
            x++;
            continue;
        }
        y = z;
        if (x)
            search_swap(sets, at, next, x);
        x = 0;
    }
    return y;
}

/* The tree's memory is given back at the end: the search that follows needs its own. */
int rp_fit_below(const rp_inst *in, const rp_mem *m, const uint32_t *order, uint32_t known,
                 const rp_clock *clk, uint64_t cutoff, uint64_t *off, uint64_t *peak,
                 uint32_t *placed)
{
    rp_mem own = {m->a, NULL};
    tree t = {0};
    block_nodes bn;
    uint32_t nsec = in->nsec ? in->nsec : 1;
    int rc = -ENOMEM;

    *placed = 0;
    *peak = in->fixed_top;
    if (clk && rp_now_ns() >= clk->deadline_ns)
        return 0; /* the setup took the budget: not even the tree */
    if (nsec > (UINT32_C(1) << 30))
        return -ENOMEM; /* the nodes' indices are 32 bits */
    for (uint64_t cover = 1; cover < nsec; cover <<= ARITY_BITS)
        t.height++;
    for (unsigned h = t.height; h-- > 0;)
        t.base[h] = t.base[h + 1] + (((nsec - 1) >> (ARITY_BITS * (h + 1))) + 1);
    t.p.m = &own;
    t.inner = rp_alloc(&own, (size_t)t.base[0] + 1, sizeof(*t.inner));
    t.leaf = rp_alloc(&own, nsec, sizeof(ivset));
    if (!t.inner || !t.leaf)
        goto out;
    for (size_t i = 0; i < in->n; i++) {
        if (!in->b[i].fixed)
            continue;
        block_nodes_of(&t, in, (uint32_t)i, &bn);
        if ((rc = block_add(&t, &bn, in->b[i].offset, in->b[i].offset + in->b[i].size)) < 0)
            goto out;
    }
    rc = 0;
    for (uint32_t x = 0; x < known && rc == 0; x++) {
        uint32_t k = order[x], i = in->mov[k];

        block_nodes_of(&t, in, i, &bn);
        if (off[k] + in->b[i].size > *peak)
            *peak = off[k] + in->b[i].size;
        rc = block_add(&t, &bn, off[k], off[k] + in->b[i].size);
    }
    *placed = known;
    for (uint32_t x = known; x < in->nm && rc == 0; x++) {
        uint32_t k = order[x], i = in->mov[k];
        uint64_t o;

        /* A placement may take many jumps where the free space is cut into many gaps. */
        if ((x & 15) == 0 && clk && rp_now_ns() >= clk->deadline_ns)
            break;
        if (x + 1 < in->nm)
            rp_prefetch_block(in, in->mov[order[x + 1]]);
        block_nodes_of(&t, in, i, &bn);
        o = lowest_fit(&t, &in->b[i], &bn);
        *placed = x + 1;
        off[k] = o;
        if (o + in->b[i].size > *peak) {
            *peak = o + in->b[i].size;
            if (*peak > cutoff)
                break;
        }
        rc = block_add(&t, &bn, o, o + in->b[i].size);
    }
out:
    rp_mem_free_all(&own);
    return rc;
}

int rp_fit_order(const rp_inst *in, const rp_mem *m, const uint32_t *order, const rp_clock *clk,
                 uint64_t *off, uint64_t *peak, uint32_t *placed)
{
    return rp_fit_below(in, m, order, 0, clk, UINT64_MAX, off, peak, placed);
}

int rp_greedy_size(const rp_inst *in, rp_mem *m, const rp_clock *clk, uint32_t *order,
                   uint64_t *off, uint64_t *peak, uint32_t *placed)
{
    rp_kv *kv = rp_alloc_raw(m, (size_t)in->nm + 1, sizeof(*kv)); /* written below */

    if (!kv)
        return -ENOMEM;
    for (uint32_t k = 0; k < in->nm; k++) {
        const om_rp_block *b = &in->b[in->mov[k]];
        kv[k] = (rp_kv){UINT64_MAX - b->size, b->lower, 0, k};
    }
    if (rp_sort_kv_mem(kv, in->nm, m) < 0)
        return -ENOMEM;
    for (uint32_t k = 0; k < in->nm; k++)
        order[k] = kv[k].v;
    return rp_fit_order(in, m, order, clk, off, peak, placed);
}
