/* Greedy by size: largest block first, each at the lowest offset where it fits. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * The placed blocks are indexed by a segment tree over the sections. A block's run of
 * sections [a, e) splits into canonical nodes (ranges inside the run whose parents are not);
 * the block goes into own() of those, and into all() of them and of every node on the
 * paths from the root to leaves a and e - 1. A block b meets a run in time exactly when it
 * is in own() of a node on the run's two paths (b covers a node that holds part of the run)
 * or in all() of one of the run's canonical nodes (b touches one). Each set is a union of
 * byte ranges, merged: a candidate offset that meets a merged range meets one of its blocks
 * wherever it starts below the range's end, so it can jump there. The lowest offset is
 * found by jumping until no set of either run has anything in the way; every jump passes
 * bytes that are proven taken. An own() set holds at most as many ranges as blocks live at
 * once; near the root, all() sets merge into a few long ranges.
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
/* A run has at most 2 * 32 path nodes and 2 * 32 canonical ones; a block two runs. */
#define MAX_SETS 256

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

typedef struct tree {
    ivset *own, *all; /* all() of a leaf is its own(): all has the inner nodes only */
    uint32_t size; /* leaves, a power of two */
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
        return rp_alloc(p->m, (size_t)1 << cls, sizeof(iv));
    if (p->left < bytes) {
        size_t n = p->next < SLAB_FIRST ? SLAB_FIRST : p->next;

        while (n < bytes)
            n *= 2;
        if (!(p->slab = rp_alloc(p->m, n, 1)))
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

/* The first range from index lo on that ends above y. Without branches on the ranges: the
 * sets are searched at every insert, where a branch on each step is a coin toss. */
static uint32_t first_above(const ivset *s, uint32_t lo, uint64_t y)
{
    uint32_t n = s->n - lo;

    if (lo >= s->n)
        return s->n;
    while (n > 1) {
        uint32_t half = n / 2;

        lo = s->v[lo + half].hi <= y ? lo + half : lo;
        n -= half;
    }
    return lo + (s->v[lo].hi <= y);
}

/*
 * The lowest aligned offset >= y where [offset, offset + size) meets no range of s. *at is
 * where the last call on s stopped: the offset only rises while a block is placed, so the
 * search goes on from there, a step at a time first (the next range is nearly always the
 * one), then by halves.
 */
static uint64_t clear_of(const ivset *s, uint32_t *at, uint64_t y, uint64_t size, uint64_t align)
{
    uint32_t x = *at;

    if (x < s->n && s->v[x].hi <= y && ++x < s->n && s->v[x].hi <= y)
        x = first_above(s, x + 1, y);
    while (x < s->n && s->v[x].lo < y + size) {
        y = rp_align_up(s->v[x].hi, align);
        while (x < s->n && s->v[x].hi <= y)
            x++;
    }
    *at = x;
    return y;
}

/* Adds [lo, hi) to s: 0, 1 if s held it already, or -ENOMEM. */
static int ivset_add(pool *p, ivset *s, uint64_t lo, uint64_t hi)
{
    uint32_t x = first_above(s, 0, lo ? lo - 1 : 0), j = x;

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
        memmove(s->v + x + 1, s->v + j, (s->n - j) * sizeof(iv));
        s->n -= j - x - 1;
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
    memmove(s->v + x + 1, s->v + x, (s->n - x) * sizeof(iv));
    s->v[x] = (iv){lo, hi};
    s->n++;
    return 0;
}

static const ivset *all_of(const tree *t, uint32_t x)
{
    return x < t->size ? &t->all[x] : &t->own[x];
}

/* Is node x, h levels above the leaves, inside the run [a, e)? */
static int inside(const tree *t, uint32_t x, unsigned h, uint32_t a, uint32_t e)
{
    uint64_t lo = ((uint64_t)x << h) - t->size;

    return lo >= a && lo + ((uint64_t)1 << h) <= e;
}

/*
 * The sets a run [a, e) must be clear of, appended to sets. A node of the two paths that
 * lies inside the run is under one of its canonical nodes, whose all() holds its own():
 * only the nodes above them are looked at.
 */
static uint32_t run_sets(const tree *t, uint32_t a, uint32_t e, const ivset **sets, uint32_t ns)
{
    uint32_t l = a + t->size, r = e + t->size, x = l, y = r - 1;
    unsigned h = 0;

    /* leaves a and e - 1 are at the same depth: their paths meet and stay together */
    for (; x >= 1 && inside(t, x, h, a, e) && inside(t, y, h, a, e); x >>= 1, y >>= 1)
        h++;
    for (; x >= 1; x >>= 1, y >>= 1, h++) {
        if (t->own[x].n && !inside(t, x, h, a, e))
            sets[ns++] = &t->own[x];
        if (y != x && t->own[y].n && !inside(t, y, h, a, e))
            sets[ns++] = &t->own[y];
    }
    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            if (all_of(t, l)->n)
                sets[ns++] = all_of(t, l);
            l++;
        }
        if (r & 1) {
            --r;
            if (all_of(t, r)->n)
                sets[ns++] = all_of(t, r);
        }
    }
    return ns;
}

static int run_add(tree *t, uint32_t a, uint32_t e, uint64_t lo, uint64_t hi)
{
    uint32_t l = a + t->size, r = e + t->size;
    int rc = 0, held_x = 0, held_y = 0;

    /* leaves a and e - 1 are at the same depth: their paths meet and stay together. A
     * parent's all() holds its children's: once a node's set held the range already, so
     * do all the nodes above it on its path. A node inside the run is under one of its
     * canonical nodes, whose own() gets the range below: a run with that node among its
     * canonical nodes has the canonical node's own() on its paths. */
    for (uint32_t x = l, y = r - 1, h = 0; x >= 1 && rc >= 0 && !(held_x && held_y);
         x >>= 1, y >>= 1, h++) {
        if (!held_x && !inside(t, x, h, a, e) && (rc = ivset_add(&t->p, &t->all[x], lo, hi)) > 0)
            held_x = 1;
        if (y == x)
            held_y = held_x;
        else if (rc >= 0 && !held_y && !inside(t, y, h, a, e) &&
                 (rc = ivset_add(&t->p, &t->all[y], lo, hi)) > 0)
            held_y = 1;
    }
    rc = rc < 0 ? rc : 0;
    for (; l < r && rc == 0; l >>= 1, r >>= 1) {
        if (l & 1) {
            rc = ivset_add(&t->p, &t->own[l], lo, hi);
            if (rc >= 0 && l < t->size)
                rc = ivset_add(&t->p, &t->all[l], lo, hi);
            rc = rc < 0 ? rc : 0;
            l++;
        }
        if ((r & 1) && rc == 0) {
            --r;
            rc = ivset_add(&t->p, &t->own[r], lo, hi);
            if (rc >= 0 && r < t->size)
                rc = ivset_add(&t->p, &t->all[r], lo, hi);
            rc = rc < 0 ? rc : 0;
        }
    }
    return rc;
}

static int block_add(tree *t, const rp_inst *in, uint32_t i, uint64_t off)
{
    uint64_t top = off + in->b[i].size;
    int rc = 0;

    if (in->s0[i] < in->s1[i])
        rc = run_add(t, in->s0[i], in->s1[i], off, top);
    if (rc == 0 && in->w0[i] < in->w1[i])
        rc = run_add(t, in->w0[i], in->w1[i], off, top);
    return rc;
}

/*
 * The lowest aligned offset where block i meets nothing placed: jumps over the sets in
 * turn until a whole round leaves the offset where it is. next[x] is where set x's next
 * range starts, from where its search stopped: until the offset plus the size passes it,
 * the set cannot be in the way, and its ranges are not looked at.
 */
static uint64_t lowest_fit(const tree *t, const rp_inst *in, uint32_t i)
{
    const ivset *sets[MAX_SETS];
    const om_rp_block *b = &in->b[i];
    uint32_t ns = 0, still = 0, at[MAX_SETS];
    uint64_t y = rp_align_up(0, b->align), next[MAX_SETS];

    if (in->s0[i] < in->s1[i])
        ns = run_sets(t, in->s0[i], in->s1[i], sets, ns);
    if (in->w0[i] < in->w1[i])
        ns = run_sets(t, in->w0[i], in->w1[i], sets, ns);
    for (uint32_t x = 0; x < ns; x++) {
        at[x] = 0;
        next[x] = 0;
    }
    for (uint32_t x = 0; ns && still < ns; x = x + 1 == ns ? 0 : x + 1) {
        uint64_t z;

        if (next[x] >= y + b->size) {
            still++;
            continue;
        }
        z = clear_of(sets[x], &at[x], y, b->size, b->align);
        next[x] = at[x] < sets[x]->n ? sets[x]->v[at[x]].lo : UINT64_MAX;
        still = z == y ? still + 1 : 1;
        y = z;
    }
    return y;
}

/* Places movable blocks in order, each at the lowest offset where it fits, until the clock's
 * deadline: *placed of them. The tree's memory is given back at the end: the search that
 * follows needs its own. */
static int fit(const rp_inst *in, const rp_mem *m, const uint32_t *order, const rp_clock *clk,
               uint64_t *off, uint64_t *peak, uint32_t *placed)
{
    rp_mem own = {m->a, NULL};
    tree t = {0};
    uint32_t nsec = in->nsec ? in->nsec : 1;
    int rc = -ENOMEM;

    *placed = 0;
    *peak = in->fixed_top;
    if (clk && rp_now_ns() >= clk->deadline_ns)
        return 0; /* the setup took the budget: not even the tree */
    for (t.size = 1; t.size < nsec; t.size <<= 1)
        ;
    t.p.m = &own;
    t.own = rp_alloc(&own, 2 * (size_t)t.size, sizeof(ivset));
    t.all = rp_alloc(&own, t.size, sizeof(ivset));
    if (!t.own || !t.all)
        goto out;
    for (size_t i = 0; i < in->n; i++)
        if (in->b[i].fixed && (rc = block_add(&t, in, (uint32_t)i, in->b[i].offset)) < 0)
            goto out;
    rc = 0;
    for (uint32_t x = 0; x < in->nm && rc == 0; x++) {
        uint32_t k = order[x], i = in->mov[k];
        uint64_t o;

        /* A placement may take many jumps where the free space is cut into many gaps. */
        if ((x & 15) == 0 && clk && rp_now_ns() >= clk->deadline_ns)
            break;
        o = lowest_fit(&t, in, i);
        *placed = x + 1;
        off[k] = o;
        if (o + in->b[i].size > *peak)
            *peak = o + in->b[i].size;
        rc = block_add(&t, in, i, o);
    }
out:
    rp_mem_free_all(&own);
    return rc;
}

int rp_greedy_size(const rp_inst *in, rp_mem *m, const rp_clock *clk, uint32_t *order,
                   uint64_t *off, uint64_t *peak, uint32_t *placed)
{
    rp_kv *kv = rp_alloc(m, (size_t)in->nm + 1, sizeof(*kv));

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
    return fit(in, m, order, clk, off, peak, placed);
}
