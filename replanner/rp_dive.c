/* The branch and bound's dive without backtracking, by the blocks that meet each placed one. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * Blocks go in MiniMalloc's canonical order: the unplaced block with the lowest offset
 * (above every placed block it meets in time) next, ties by rank, at that offset. Placing
 * one raises the lowest offset of every unplaced block it meets, so a heap of blocks pays
 * a step for each such raise that reaches its top, which on a trace of long-lived blocks
 * (a block in a tall stack, ranked late, loses every level) is most of the pairs. Here the
 * raises are plain stores: the blocks a placed one meets come from a segment tree over
 * sections (each block in own() of its run's canonical nodes, and in all() of those and
 * of their ancestors; a block meets a run exactly when it is in own() of a node on the
 * run's two root paths or in all() of one of its canonical nodes), and the lowest
 * (offset, rank) from groups of GROUP blocks, each with its recorded minimum, under a
 * tournament tree; a group whose minimum rose is scanned again only when it comes to the
 * top.
 */
#define GROUP 64

typedef struct nodelists {
    uint32_t *start; /* per node: where its entries begin (CSR), then where they end */
    uint32_t *len;   /* per node: entries still listed (placed blocks are dropped lazily) */
    uint32_t *v;     /* movable block positions */
} nodelists;

typedef struct dv {
    const rp_inst *in;
    const uint32_t *rank;
    uint32_t size; /* leaves of the section tree, a power of two */
    nodelists own, all;
    uint64_t *lo;   /* per block: its lowest offset now */
    uint32_t *gmin; /* per group: its unplaced block with the lowest (offset, rank), or NONE */
    uint64_t *glo;  /* per group: that block's offset and rank when last scanned */
    uint32_t *grk;
    uint32_t *tour; /* tournament over groups: the group holding the minimum */
    uint32_t ngroups, tsize;
    unsigned char *placed, *dirty;
    uint32_t *stamp;
    uint64_t *align; /* per block, when no block has fixed ones to step over (else NULL) */
} dv;

#define NONE32 UINT32_MAX

static int before(const dv *d, uint32_t a, uint32_t b)
{
    if (b == NONE32)
        return a != NONE32;
    if (a == NONE32)
        return 0;
    return d->lo[a] < d->lo[b] || (d->lo[a] == d->lo[b] && d->rank[a] < d->rank[b]);
}

/* Calls f(d, node, list) for each list a run [a, e) goes into; list 0 own, 1 all. */
typedef void (*node_fn)(dv *d, uint32_t node, int list, uint32_t k);

static void run_nodes(dv *d, uint32_t a, uint32_t e, uint32_t k, node_fn f)
{
    uint32_t l = a + d->size, r = e + d->size, pa, pe;

    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            f(d, l, 0, k);
            f(d, l, 1, k);
            l++;
        }
        if (r & 1) {
            r--;
            f(d, r, 0, k);
            f(d, r, 1, k);
        }
    }
    /* The two root paths, once where they meet; a canonical node on them is in all()
     * already. */
    for (pa = (a + d->size) >> 1, pe = (e - 1 + d->size) >> 1; pa; pa >>= 1, pe >>= 1) {
        f(d, pa, 2, k);
        if (pe != pa)
            f(d, pe, 2, k);
    }
}

static void count_entry(dv *d, uint32_t node, int list, uint32_t k)
{
    (void)k;
    if (list == 2)
        list = 1;
    (list ? &d->all : &d->own)->len[node]++;
}

static void put_entry(dv *d, uint32_t node, int list, uint32_t k)
{
    nodelists *nl;

    /* A path node that is also a canonical node of this run: already in its all(). */
    if (list == 2) {
        nl = &d->all;
        if (nl->len[node] && nl->v[nl->start[node] + nl->len[node] - 1] == k)
            return;
    } else {
        nl = list ? &d->all : &d->own;
    }
    nl->v[nl->start[node] + nl->len[node]++] = k;
}

static int lists_build(dv *d, rp_mem *m)
{
    const rp_inst *in = d->in;
    nodelists *ls[2] = {&d->own, &d->all};

    for (int j = 0; j < 2; j++) {
        ls[j]->start = rp_alloc(m, 2 * (size_t)d->size + 1, sizeof(uint32_t));
        ls[j]->len = rp_alloc(m, 2 * (size_t)d->size, sizeof(uint32_t));
        if (!ls[j]->start || !ls[j]->len)
            return -ENOMEM;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < in->nm; k++) {
            uint32_t i = in->mov[k];
            if (in->s0[i] < in->s1[i])
                run_nodes(d, in->s0[i], in->s1[i], k, pass ? put_entry : count_entry);
            if (in->w0[i] < in->w1[i])
                run_nodes(d, in->w0[i], in->w1[i], k, pass ? put_entry : count_entry);
        }
        if (pass)
            break;
        for (int j = 0; j < 2; j++) {
            size_t total = 0;
            for (uint32_t x = 0; x < 2 * d->size; x++) {
                ls[j]->start[x] = (uint32_t)total;
                total += ls[j]->len[x];
                ls[j]->len[x] = 0;
            }
            if (total >= UINT32_MAX || !(ls[j]->v = rp_alloc(m, total + 1, sizeof(uint32_t))))
                return -ENOMEM;
        }
    }
    return 0;
}

/* Whether group a's minimum, as recorded, comes before group b's. */
static int group_before(const dv *d, uint32_t a, uint32_t b)
{
    if (b == NONE32)
        return a != NONE32;
    if (a == NONE32)
        return 0;
    return d->glo[a] < d->glo[b] || (d->glo[a] == d->glo[b] && d->grk[a] < d->grk[b]);
}

/* The group's minimum again, recorded, and the tournament above it. */
static void group_update(dv *d, uint32_t g)
{
    uint32_t best = NONE32, end = (g + 1) * GROUP < d->in->nm ? (g + 1) * GROUP : d->in->nm;

    for (uint32_t k = g * GROUP; k < end; k++)
        if (!d->placed[k] && before(d, k, best))
            best = k;
    d->gmin[g] = best;
    d->glo[g] = best == NONE32 ? UINT64_MAX : d->lo[best];
    d->grk[g] = best == NONE32 ? UINT32_MAX : d->rank[best];
    d->dirty[g] = 0;
    for (uint32_t x = (g + d->tsize) >> 1; x; x >>= 1) {
        uint32_t a = d->tour[2 * x], b = d->tour[2 * x + 1];
        d->tour[x] = group_before(d, b, a) ? b : a;
    }
}

/* A group whose minimum rose or was placed keeps its old record, which is too low, until
 * it comes to the top of the tournament: most raises lift a block far above the level of
 * the next placement, and scanning each such group at once was a quarter of the time. */
static void mark(dv *d, uint32_t k)
{
    d->dirty[k / GROUP] = 1;
}

/* Raises the lowest offset of every unplaced block in list nl of node to at least top. */
static void raise_list(dv *d, nodelists *nl, uint32_t node, uint64_t top, uint32_t stamp)
{
    uint32_t *v = nl->v + nl->start[node], n = nl->len[node];

    for (uint32_t x = 0; x < n;) {
        uint32_t y = v[x];

        if (d->placed[y]) {
            v[x] = v[--n];
            continue;
        }
        x++;
        if (d->stamp[y] == stamp || d->lo[y] >= top)
            continue;
        d->stamp[y] = stamp;
        d->lo[y] = d->align ? rp_align_up(top, d->align[y]) : rp_bump_fixed(d->in, y, top);
        if (d->gmin[y / GROUP] == y)
            mark(d, y);
    }
    nl->len[node] = n;
}

static void raise_run(dv *d, uint32_t a, uint32_t e, uint64_t top, uint32_t stamp)
{
    uint32_t l = a + d->size, r = e + d->size, pa, pe;

    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1)
            raise_list(d, &d->all, l++, top, stamp);
        if (r & 1)
            raise_list(d, &d->all, --r, top, stamp);
    }
    for (pa = a + d->size, pe = e - 1 + d->size; pa; pa >>= 1, pe >>= 1) {
        raise_list(d, &d->own, pa, top, stamp);
        if (pe != pa)
            raise_list(d, &d->own, pe, top, stamp);
    }
}

int rp_dive(const rp_inst *in, rp_mem *m, const uint32_t *rank, uint32_t *order,
            uint64_t deadline_ns)
{
    rp_mem own = {m->a, NULL};
    dv d = {0};
    uint32_t nsec = in->nsec ? in->nsec : 1;
    int rc = -ENOMEM;

    d.in = in;
    d.rank = rank;
    for (d.size = 1; d.size < nsec; d.size <<= 1)
        ;
    d.ngroups = (in->nm + GROUP - 1) / GROUP;
    for (d.tsize = 1; d.tsize < d.ngroups; d.tsize <<= 1)
        ;
    d.lo = rp_alloc(&own, (size_t)in->nm + 1, sizeof(uint64_t));
    d.stamp = rp_alloc(&own, (size_t)in->nm + 1, sizeof(uint32_t));
    d.placed = rp_alloc(&own, (size_t)in->nm + 1, 1);
    d.gmin = rp_alloc(&own, (size_t)d.ngroups + 1, sizeof(uint32_t));
    d.dirty = rp_alloc(&own, (size_t)d.ngroups + 1, 1);
    d.glo = rp_alloc(&own, (size_t)d.ngroups + 1, sizeof(uint64_t));
    d.grk = rp_alloc(&own, (size_t)d.ngroups + 1, sizeof(uint32_t));
    d.tour = rp_alloc(&own, 2 * (size_t)d.tsize, sizeof(uint32_t));
    if (!d.lo || !d.stamp || !d.placed || !d.gmin || !d.dirty || !d.glo || !d.grk || !d.tour ||
        lists_build(&d, &own) < 0)
        goto out;
    /* Without fixed blocks a raise is an alignment, not a call and a search. */
    if (in->fx_start[in->nm] == 0) {
        if (!(d.align = rp_alloc(&own, (size_t)in->nm + 1, sizeof(uint64_t))))
            goto out;
        for (uint32_t k = 0; k < in->nm; k++)
            d.align[k] = in->b[in->mov[k]].align;
    }
    for (uint32_t k = 0; k < in->nm; k++)
        d.lo[k] = rp_bump_fixed(in, k, 0);
    for (uint32_t x = 0; x < 2 * d.tsize; x++)
        d.tour[x] = x >= d.tsize && x - d.tsize < d.ngroups ? x - d.tsize : NONE32;
    for (uint32_t g = 0; g < d.ngroups; g++)
        group_update(&d, g);
    rc = 0;
    for (uint32_t x = 0; x < in->nm; x++) {
        uint32_t g, k, i;
        uint64_t top;

        if ((x & 255) == 255 && rp_now_ns() >= deadline_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        while (d.dirty[g = d.tour[1]])
            group_update(&d, g);
        k = d.gmin[g];
        i = in->mov[k];
        top = d.lo[k] + in->b[i].size;
        order[x] = k;
        d.placed[k] = 1;
        mark(&d, k);
        if (in->s0[i] < in->s1[i])
            raise_run(&d, in->s0[i], in->s1[i], top, x + 1);
        if (in->w0[i] < in->w1[i])
            raise_run(&d, in->w0[i], in->w1[i], top, x + 1);
    }
out:
    rp_mem_free_all(&own);
    return rc;
}
