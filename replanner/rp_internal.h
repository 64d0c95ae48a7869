/* Private to the replanner: the prepared instance, scratch memory, sorting, timing. */
#ifndef OPTMEM_RP_INTERNAL_H
#define OPTMEM_RP_INTERNAL_H

#include "replanner.h"

#include <stdint.h>
#include <stddef.h>

#define RP_NONE UINT64_MAX

/* Scratch memory taken from the caller's allocator, all given back at once. */
typedef struct rp_mem {
    const om_rp_allocator *a;
    struct rp_chunk *head;
} rp_mem;

void *rp_alloc(rp_mem *m, size_t count, size_t elem);
/* The same, not zeroed: for memory written before it is read. */
void *rp_alloc_raw(rp_mem *m, size_t count, size_t elem);
void rp_mem_free_all(rp_mem *m);

/* Sort records: by k1, k2, k3, then v (so the order never depends on the sort). */
typedef struct rp_kv {
    uint64_t k1;
    uint64_t k2;
    uint64_t k3;
    uint32_t v;
} rp_kv;

void rp_sort_kv(rp_kv *a, size_t n);
/* The same order, faster on large arrays (a radix sort with scratch from m); 0 or -ENOMEM. */
int rp_sort_kv_mem(rp_kv *a, size_t n, rp_mem *m);

/*
 * Values under range adds with their maximum over a range, both in O(log n): a node holds
 * the max of its subtree plus its own add, which is never pushed down. The branch and
 * bound's section totals; the checker's count of live blocks per byte range.
 */
typedef struct rp_maxtree {
    int64_t *mx, *add;
    uint32_t n; /* leaves, a power of two */
} rp_maxtree;

/* n values, all 0. */
int rp_maxtree_init(rp_maxtree *t, rp_mem *m, uint32_t n);
/* Values v[0..n), the rest 0, with nothing added. */
void rp_maxtree_build(rp_maxtree *t, const uint64_t *v, uint32_t n);
void rp_maxtree_add(rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t d);
/* The max over [lo, hi), which must not be empty. */
int64_t rp_maxtree_max(const rp_maxtree *t, uint32_t lo, uint32_t hi);
/* The first index in [lo, hi) whose value is above thr, or hi if none. */
uint32_t rp_maxtree_first_above(const rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t thr);
/* fn(ctx, x) for each index x in [lo, hi) whose value is above thr, in order, until fn
 * returns 0 (the tree must not change meanwhile): 0 if it did, else 1. One walk visits
 * what a call of rp_maxtree_first_above per index would, each shared path once. */
int rp_maxtree_each_above(const rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t thr,
                          int (*fn)(void *, uint32_t), void *ctx);

/* splitmix64: deterministic and stateless apart from the caller's word. */
uint64_t rp_rand(uint64_t *state);
/* The Luby sequence 1 1 2 1 1 2 4 ... (i from 1): restart lengths that waste at most a log
 * factor against the best fixed length. */
uint64_t rp_luby(uint64_t i);
uint64_t rp_now_ns(void);

/*
 * The instance as the algorithms see it. Time is cut into sections: the elementary
 * segments between consecutive lifetime ends (on a circle if cyclic). Each block covers
 * one or two runs of sections ([s0,s1) and, for a wrapping arc, [w0,w1)).
 */
typedef struct rp_inst {
    const om_rp_block *b;
    size_t n;
    uint64_t period;
    uint32_t nsec;
    uint32_t *s0, *s1, *w0, *w1; /* per block */
    uint64_t lb;                 /* max live bytes over sections */
    uint64_t shape_lb;           /* rp_bound's: cliques on a circle, holes among fixed blocks */
    uint64_t clique_lb;          /* its clique part (0 on a line) */
    uint64_t floor_lb;           /* max(lb, highest fixed end, shape_lb): no plan can beat it */
    uint64_t stop;               /* max(floor_lb, the caller's goal): a plan this good ends it */
    uint32_t nm;                 /* movable blocks */
    uint32_t *mov;               /* their indices into b */
    /* per movable block (by position in mov), the fixed blocks live with it, by offset */
    uint32_t *fx_start;
    uint32_t *fx_list;
    uint64_t *fx_reach; /* per fx_list entry: the highest end of the list up to it */
    uint64_t fixed_top;
    uint64_t *load;   /* per section: bytes of all blocks live in it */
    uint64_t *secmax; /* per movable block: max load over its sections */
} rp_inst;

/* rp_core.c: the instance in two steps: rp_inst_core builds what greedy by size and the
 * skyline decoder need (the sections, loads, LB and the fixed blocks' lists), so that the
 * first plan comes before the rest; rp_inst_complete adds rp_bound's bound (floor_lb, stop)
 * and secmax. rp_inst_build does both. 0 or -ENOMEM. */
int rp_inst_core(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period);
int rp_inst_complete(rp_inst *in, rp_mem *m);
int rp_inst_build(rp_inst *in, rp_mem *m, const om_rp_block *blocks, size_t n, uint64_t period);

/* rp_bound.c: a proven lower bound from the instance's shape, where the max of live bytes is
 * out of reach: the arcs that meet pairwise without being live at once on a circle (those
 * longer than half the period, with the arcs of a section that meet them all), and the
 * movable bytes that the holes among fixed blocks live throughout cannot take; *clique the
 * first alone. 0 where it knows nothing more; 0 or -ENOMEM. Needs the sections (not the lists). */
int rp_bound(const rp_inst *in, rp_mem *m, uint64_t *bound, uint64_t *clique);

/* Do blocks i and j (indices into b) live at the same time? */
int rp_overlap_time(const rp_inst *in, uint32_t i, uint32_t j);

static inline uint64_t rp_align_up(uint64_t x, uint64_t a)
{
    return a > 1 ? (x + a - 1) & ~(a - 1) : x;
}

/* Fetches block j's record and runs (indices into b) ahead of its placement: the orders
 * the greedy passes follow jump around the blocks. */
static inline void rp_prefetch_block(const rp_inst *in, uint32_t j)
{
    __builtin_prefetch(&in->b[j]);
    __builtin_prefetch(&in->s0[j]);
    __builtin_prefetch(&in->s1[j]);
    __builtin_prefetch(&in->w0[j]);
    __builtin_prefetch(&in->w1[j]);
}

/* Lowest offset >= off, aligned, that misses every fixed block live with movable k. */
uint64_t rp_bump_fixed(const rp_inst *in, uint32_t k, uint64_t off);

/* Stopping rule shared by the search stages. */
typedef struct rp_clock {
    uint64_t deadline_ns;
    uint64_t nodes;
    uint64_t max_nodes;    /* 0: no limit */
    uintptr_t stack_floor; /* a search whose frames reach below this stops (om_rp_options) */
    int stopped;
} rp_clock;

static inline int rp_expired(rp_clock *c)
{
    if (c->stopped)
        return 1;
    c->nodes++;
    if (c->max_nodes && c->nodes >= c->max_nodes)
        c->stopped = 1;
    else if ((c->nodes & 63) == 0 && rp_now_ns() >= c->deadline_ns)
        c->stopped = 1;
    return c->stopped;
}

/*
 * Best plan so far: offsets per movable block (by position in mov) and its peak.
 * Every stage only ever replaces it by a strictly lower valid peak.
 */
typedef struct rp_best {
    uint64_t *off;
    uint32_t *order; /* a decoder order (positions in mov) that yields off, for the local search */
    uint64_t peak;
    uint64_t greedy_peak; /* greedy by size's, which the plan never exceeds */
    int greedy_cut;       /* the deadline stopped greedy by size: greedy_peak is the first plan's */
    uint64_t proven;      /* no plan has a lower peak: floor_lb, or more where a search proved it */
    const char *stage;
    /* The dives' best plan (rp_greedy.c), kept aside so that the branch and bound, whose
     * runs below the best plan aim at capacities spread from its peak, searches as it would
     * without it; the driver takes it after the search if it is lower. spare_peak RP_NONE:
     * none. */
    uint64_t *spare_off;
    uint32_t *spare_order;
    uint64_t spare_peak;
} rp_best;

/* rp_bysize.c: greedy by size (largest first, ties by birth, each at the lowest offset
 * where it fits). order: the size order (positions in mov); off per movable block, for
 * the first *placed blocks of the order: all unless clk's deadline came first (clk may be
 * NULL); *peak with the fixed blocks. */
int rp_greedy_size(const rp_inst *in, rp_mem *m, const rp_clock *clk, uint32_t *order,
                   uint64_t *off, uint64_t *peak, uint32_t *placed);
/* The same placement in any order (positions in mov): each block at the lowest offset where
 * it meets no block placed before it, with the same outputs. */
int rp_fit_order(const rp_inst *in, const rp_mem *m, const uint32_t *order, const rp_clock *clk,
                 uint64_t *off, uint64_t *peak, uint32_t *placed);
/* The same, stopping after the first block that ends above cutoff (*placed counts it); the
 * first known blocks of the order are where off has them already (the plan of an order
 * that begins as this one does: each of them found the same blocks before it). */
int rp_fit_below(const rp_inst *in, const rp_mem *m, const uint32_t *order, uint32_t known,
                 const rp_clock *clk, uint64_t cutoff, uint64_t *off, uint64_t *peak,
                 uint32_t *placed);

/* rp_dive.c: the branch and bound's dive without backtracking, under rank (rp_rank's out):
 * order gets the blocks (positions in mov) as placed, which the skyline decoder turns into
 * the same plan. 0, -ENOMEM, or -ETIMEDOUT once the clock passes deadline_ns. */
int rp_dive(const rp_inst *in, rp_mem *m, const uint32_t *rank, uint32_t *order,
            uint64_t deadline_ns);

/* rp_tile.c: where every section holds LB bytes (no fixed blocks, no alignment; on a
 * circle, a section boundary that no arc crosses), searches for a plan at LB until
 * deadline_ns (and clk's limits); best gets it, or best->proven LB + 1 when the search
 * proves there is none. Else nothing. 0 or -ENOMEM. */
int rp_tile(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t deadline_ns);

/* rp_greedy.c: greedy by size as the first plan (rp_greedy_first, which needs rp_inst_core
 * only: its own plan where it finished, else a plan completed from what it placed), then
 * that plan through the skyline, other orders, with stacks where the long arcs' clique is
 * above LB (rp_stack_long: the budget's, a step each), then dives (their plan kept aside,
 * see rp_best): rp_greedy, after rp_inst_complete. ws carries the scratch from one to the
 * other. */
typedef struct rp_greedy_ws rp_greedy_ws;
int rp_greedy_first(const rp_inst *in, rp_mem *m, rp_best *best, const rp_clock *clk,
                    rp_greedy_ws **ws);
int rp_greedy(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, rp_greedy_ws *ws,
              int stacks);
/* Dives (rp_dive) under the branch and bound's rankings until deadline_ns or one reaches
 * in->stop; each plan lower than the best so far goes into best, or with aside into its
 * spare (one at in->stop goes into best at once). 0 or -ENOMEM. */
int rp_dives(const rp_inst *in, rp_mem *m, rp_best *best, uint64_t deadline_ns, int aside);
/* Where the clique of long arcs (rp_bound.c) is the bound, at or above the max of live bytes:
 * the long arcs stacked in orders around the circle, the rest placed around them by greedy
 * by size's placement; the lowest plan replaces best if lower. Until deadline_ns, clk's step
 * limit (a plan a step) or a plan at in->stop. 0 or -ENOMEM. */
int rp_stack_long(const rp_inst *in, rp_mem *m, rp_best *best, rp_greedy_ws *ws, rp_clock *clk,
                  uint64_t deadline_ns);
/* The plan kept aside becomes the best one if it is lower. */
void rp_take_spare(const rp_inst *in, rp_best *best);
int rp_local(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed);

/*
 * rp_refit.c: iterated first fit. From greedy by size's order, a block at the peak swapped
 * with one anywhere before it, the order placed as greedy by size places (rp_fit_below,
 * stopped above the current peak), kept when no higher; a lower plan goes into best (its
 * order: by offset). A probe first: unless a plan is lower than every plan so far (the
 * dives' kept aside included) within probe orders and before probe_ns, it stops there, for
 * the search that suits the instance. Else until deadline_ns, half of clk's steps left (an
 * order a step) or in->stop. 0 or -ENOMEM.
 */
int rp_refit(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint32_t probe,
             uint64_t probe_ns, uint64_t deadline_ns, uint64_t seed);
/*
 * The branch and bound's rankings (rp_util.c): keys is a string of MiniMalloc's letters.
 * Ranks members[0..count) (all movable blocks if members is NULL): out[k] is k's position.
 * total: unplaced bytes per section, for T of a part of the problem (NULL: the whole load);
 * tree: if not NULL, a max tree holding total, which answers T without a scan.
 * factor: if not NULL, the first key of block k is scaled by factor[k] (randomized rankings).
 */
void rp_rank(const rp_inst *in, const uint32_t *deg, const char *keys, const uint64_t *total,
             const rp_maxtree *tree, const uint32_t *members, uint32_t count, const double *factor,
             rp_kv *kv, uint32_t *out);

/*
 * The branch and bound's decision search (rp_bnb.c). A ranking orders the blocks that could
 * go to the same offset: rank[k] for movable block k, from the letters keys (rp_rank) and
 * the random scale factor of the first key (or NULL); each part is ranked afresh after a split
 * unless keep is set.
 */
typedef struct rp_ranking {
    const char *keys;
    const double *factor;
    uint32_t *rank;
    int keep; /* parts keep rank after a split (no ranking afresh): for the first dives */
} rp_ranking;

typedef struct rp_search rp_search;
enum { RP_FOUND = 0, RP_NOTFOUND = 1, RP_ABORTED = 2 };

/* 0, -ENOMEM, or -ETIMEDOUT when clk's deadline passed during the setup. */
int rp_search_new(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, rp_search **out);
/* out[k]: the rank of movable block k under r's keys and factor. */
void rp_search_rank(rp_search *s, const rp_ranking *r, uint32_t *out);
/*
 * Can every block fit below cap, within node_limit nodes? RP_FOUND (best updated if lower),
 * RP_NOTFOUND (proven), RP_ABORTED (out of nodes or time), or -ENOMEM.
 */
int rp_search_run(rp_search *s, const rp_ranking *r, uint64_t cap, uint64_t node_limit);

/* Restarts over rankings and capacities (rp_restart.c). */
int rp_bnb(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed);

/*
 * What the branch and bound's setup would build, in list entries, bounded from above in
 * O(n + sections) before building any of it: every pair of blocks that meet in time (once
 * on a line, both ends on a circle), and every block's sections. The pairs are what grows:
 * a 20,000-block trace has 45 million of them.
 */
int rp_bnb_setup_size(const rp_inst *in, rp_mem *m, uint64_t *entries);

void rp_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
