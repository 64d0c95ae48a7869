/* Placement of buffer lifetimes into one pool: the replanner's API, shared by preload and CLI. */
#ifndef OPTMEM_REPLANNER_H
#define OPTMEM_REPLANNER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The replanner never calls malloc: every byte it needs comes from this allocator, so the
 * preload library can hand it an mmap-backed one. release() gets the size given to alloc().
 */
typedef struct om_rp_allocator {
    void *(*alloc)(void *ctx, size_t n);
    void (*release)(void *ctx, void *p, size_t n);
    void *ctx;
} om_rp_allocator;

/*
 * One buffer. Lifetimes are half-open [lower, upper): a block ending at t may share bytes
 * with one starting at t.
 * Linear timeline (period 0): lower < upper.
 * Cyclic timeline of period P: 0 <= lower < P and lower < upper <= lower + P; the block
 * occupies [lower, upper) mod P, so upper > P is an arc that wraps into the next iteration
 * and upper == lower + P is live during the whole period.
 * align: a power of two, 0 or 1 for none. A fixed block keeps its offset (memory already
 * live when the plan is made); the plan routes the others around it.
 */
typedef struct om_rp_block {
    uint64_t id; /* the caller's name for it, used in messages only */
    uint64_t lower;
    uint64_t upper;
    uint64_t size;
    uint64_t align;
    uint64_t offset; /* input for fixed blocks, ignored otherwise */
    int fixed;
} om_rp_block;

enum om_rp_algo {
    OM_RP_ALGO_AUTO = 0, /* greedy, iterated first fit where it wins its probe, then branch
                            and bound or local search, by size */
    OM_RP_ALGO_GREEDY,   /* best of a few orders through the skyline decoder; no search */
    OM_RP_ALGO_LOCAL,    /* greedy, then a randomized search over orders */
    OM_RP_ALGO_BNB,      /* greedy, then branch and bound (local search on huge instances) */
};

/* auto takes branch and bound up to this many blocks, and above it while the pairs that
 * overlap in time, whose lists its memory and setup grow with, are few for the budget. */
#define OM_RP_BNB_MAX_BLOCKS 4096
#define OM_RP_DEFAULT_BUDGET_MS 20
/* Sizes, offsets and peaks stay below this so that no sum can overflow. */
#define OM_RP_MAX_BYTES (UINT64_C(1) << 60)

typedef struct om_rp_options {
    uint64_t period;    /* 0: linear timeline; else cyclic of this period */
    uint32_t budget_ms; /* search time; 0 means OM_RP_DEFAULT_BUDGET_MS */
    uint64_t seed;      /* for the randomized search */
    uint64_t max_nodes; /* if nonzero, also stop the search after this many decodes or nodes:
                           with a budget that never runs out first, the plan is reproducible */
    uint64_t goal;      /* if nonzero: a plan with a peak at most this is good enough, and the
                           search stops there (the caller has a higher peak elsewhere) */
    int algo;           /* enum om_rp_algo */
    size_t stack_bytes; /* if nonzero: the stack the search may use below the caller's frame;
                           its branch and bound recurses once per block placed (a few hundred
                           bytes a level) and stops, as at its deadline, where the next level
                           would go deeper */
    om_rp_allocator alloc;
    char *err; /* optional: a one-line message on failure */
    size_t errlen;
} om_rp_options;

typedef struct om_rp_result {
    uint64_t peak;         /* max over blocks of offset + size, fixed blocks included */
    uint64_t lower_bound;  /* max bytes live at once (fixed included; on the circle if cyclic) */
    uint64_t greedy_peak;  /* greedy by size's (largest first, each at the lowest offset where
                              it fits), the first plan of every search: peak never exceeds it.
                              With greedy_cut, the first plan's instead (see there) */
    uint64_t proven_bound; /* no plan has a lower peak: lower_bound (or the highest fixed end)
                              where nothing more is known, higher where the branch and bound
                              proved that no plan reaches it. peak above it: the gap may be
                              the search's; proven_bound above lower_bound: that much of the
                              gap is the bound's */
    uint64_t elapsed_ns;
    uint64_t nodes;    /* decodes or branch and bound nodes spent */
    int optimal;       /* peak equals proven_bound */
    int greedy_cut;    /* the budget ran out before greedy by size placed every block: the
                          rest went on top of what they meet (a valid plan, found fast),
                          and greedy_peak is that first plan's peak */
    const char *stage; /* which stage found the plan: "greedy", "local", "bnb", "tile",
                        * "refit" */
} om_rp_result;

/* Checks the input; 0 or -EINVAL with a message naming the block id and the problem. */
int om_rp_validate(const om_rp_block *blocks, size_t n, uint64_t period, char *err, size_t errlen);

/* Max bytes live at once. 0, -EINVAL (bad input, message in err) or -ENOMEM. */
int om_rp_lower_bound(const om_rp_block *blocks, size_t n, uint64_t period,
                      const om_rp_allocator *alloc, uint64_t *lb, char *err, size_t errlen);

/*
 * Places every block: offsets[i] for blocks[i] (fixed blocks get their own offset).
 * Anytime: the best valid plan found within the budget. 0, -EINVAL or -ENOMEM.
 */
int om_rp_plan(const om_rp_block *blocks, size_t n, const om_rp_options *opt, uint64_t *offsets,
               om_rp_result *res);

/*
 * Checks a plan: blocks live at the same time share no byte, alignment holds, fixed blocks
 * kept their offsets, nothing overflows. 0 if valid, -EINVAL with a message naming the
 * first pair or block at fault, -ENOMEM.
 */
int om_rp_check(const om_rp_block *blocks, size_t n, uint64_t period, const uint64_t *offsets,
                const om_rp_allocator *alloc, char *err, size_t errlen);

/* Max of offsets[i] + blocks[i].size (0 for no block). */
uint64_t om_rp_peak(const om_rp_block *blocks, size_t n, const uint64_t *offsets);

/* "auto", "greedy", "local", "bnb": 0 or -EINVAL. */
int om_rp_algo_parse(const char *name, int *algo);
const char *om_rp_algo_name(int algo);

/* Whose the gap between a plan's peak and its lower bound is, as far as the search proved:
 * a phrase for logs and reports ("no gap", "the gap is the bound's: no plan is lower", ...). */
const char *om_rp_gap_owner(uint64_t peak, uint64_t lower_bound, uint64_t proven_bound);

/*
 * MiniMalloc's CSV: header naming at least id,lower,upper,size in any order, optional
 * alignment, other columns (offset) ignored; one block per line, unsigned decimal integers.
 * optmem's additions: lines starting with '#' are comments, "# period: P" gives a cyclic
 * timeline's period (*period, 0 without one); a column fixed (0 or 1) fixes the blocks that
 * have 1 at their offset column (memory live when the plan is made). Reads a whole file:
 * *blocks from alloc, *n set. Duplicate ids are rejected. 0, -EINVAL (message
 * "FILE:LINE: problem" in err), -ENOENT and other -errno from fopen/read, -ENOMEM.
 */
int om_rp_csv_read_instance(const char *path, const om_rp_allocator *alloc, om_rp_block **blocks,
                            size_t *n, uint64_t *period, char *err, size_t errlen);
/* The same, without the period. */
int om_rp_csv_read(const char *path, const om_rp_allocator *alloc, om_rp_block **blocks, size_t *n,
                   char *err, size_t errlen);
/* Releases what om_rp_csv_read returned. */
void om_rp_csv_free(const om_rp_allocator *alloc, om_rp_block *blocks, size_t n);
/* Writes "# comment" (unless NULL), "# period: P" (unless 0), then
 * id,lower,upper,size[,alignment][,fixed][,offset]: offset is offsets[i] where given, else
 * a fixed block's own (0 for the others). Never allocates, no stdio. 0 or -errno. */
int om_rp_csv_write_fd(int fd, const om_rp_block *blocks, size_t n, uint64_t period,
                       const uint64_t *offsets, const char *comment);
/* om_rp_csv_write_fd on a stdio stream (flushed first), no period, no comment. */
int om_rp_csv_write(FILE *f, const om_rp_block *blocks, size_t n, const uint64_t *offsets);

#endif
