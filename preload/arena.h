/* An arena: one large virtual reservation (host or device, by its backend) whose bytes are
 * handed out by offset.
 * Free space is a sorted, coalesced set of extents, so the guard ("is this range free?")
 * and every update are a binary search. Callers hold the engine lock. */
#ifndef OPTMEM_PRELOAD_ARENA_H
#define OPTMEM_PRELOAD_ARENA_H

#include "backend.h"
#include "extents.h"

#include <stddef.h>
#include <stdint.h>

/* Pages released outside the caller's lock: while `defer` is set, a release updates the
 * books at once and only records its pages here (om_arena_withhold and on). */
#define OM_RELEASE_BATCH 512

struct om_release_batch {
    size_t n;
    struct om_extent v[OM_RELEASE_BATCH];
};

struct om_arena {
    const struct om_backend *backend;
    size_t page; /* the backend's: what map and release work in */
    unsigned char *base;
    size_t reserved;
    size_t top;             /* [0, top) has been handed out at some time; beyond it all is free */
    size_t touched;         /* [0, touched) may hold old data; beyond it pages read as zero */
    struct om_extents free; /* free space inside [0, top) */
    /* Pages inside [0, touched) given back and not taken since: what the arena holds
     * resident is the rest of [0, touched). */
    struct om_extents unbacked;
    size_t used_bytes; /* bytes taken */
    size_t peak_used;  /* the most bytes taken at once */
    size_t released;   /* bytes given back to the kernel so far */
    /* Where set, releases are recorded here rather than made (a full batch makes them). */
    struct om_release_batch *defer;
};

/* Pages of a free tail smaller than this stay mapped: returning them only to fault them in
 * again next iteration is what makes glibc slow on training loops. */
#define OM_ARENA_RELEASE_MIN ((size_t)1 << 20)

/* The base's alignment, and so the largest alignment the arena serves. */
#define OM_ARENA_ALIGNMENT ((size_t)2 << 20)

/* Reserves up to `reserve` bytes through backend (which may give less). 0 or -errno. */
int om_arena_init(struct om_arena *a, const struct om_backend *backend, size_t reserve);

static inline int om_arena_contains(const struct om_arena *a, const void *p)
{
    return (uintptr_t)p - (uintptr_t)a->base < a->reserved;
}

/* The end of the last page touched. */
static inline size_t om_arena_touched_end(const struct om_arena *a)
{
    return (a->touched + a->page - 1) & ~(a->page - 1);
}

/* Bytes of the arena's pages that may be resident: touched and not given back since. */
static inline size_t om_arena_resident(const struct om_arena *a)
{
    return om_arena_touched_end(a) - a->unbacked.bytes;
}

/* The guard: whether [off, off + len) overlaps nothing that is taken. */
int om_arena_is_free(const struct om_arena *a, size_t off, size_t len);

/* Best fit: the free range of len bytes at or above floor, aligned, that wastes least of
 * its hole (the end of the arena when no hole fits). 0 or -ENOMEM. Takes nothing. */
int om_arena_best_fit(const struct om_arena *a, size_t len, size_t alignment, size_t floor,
                      size_t *off);

/* Marks [off, off + len) taken, mapping its pages first where the backend maps. 0, -EBUSY
 * when any byte of it is taken, -ENOMEM when it lies beyond the reservation, or the extent
 * table cannot grow, or the backend cannot map it. */
int om_arena_take(struct om_arena *a, size_t off, size_t len);

/* Marks [off, off + len) free again; the range must have been taken. 0 or -ENOMEM. */
int om_arena_give(struct om_arena *a, size_t off, size_t len);

/* Returns the pages of the free tail above max(keep, last taken byte) to the kernel when
 * they add up to OM_ARENA_RELEASE_MIN or more. Returns the bytes released. */
size_t om_arena_release_tail(struct om_arena *a, size_t keep);

/* Returns to the kernel the whole pages of free space that [off, off + len), just given
 * back, lies on. Returns the bytes released. */
size_t om_arena_release_range(struct om_arena *a, size_t off, size_t len);

/* Returns the whole pages of free space inside [from, to) (0, SIZE_MAX: all of it). Returns
 * the bytes released. */
size_t om_arena_release_free(struct om_arena *a, size_t from, size_t to);

/* The pages recorded in b (free, and counted released already) leave the free space, so
 * that no request is placed on them while the caller, its lock let go, releases them
 * (om_arena_release_batch); a piece that cannot leave it is released at once. */
void om_arena_withhold(struct om_arena *a, struct om_release_batch *b);

/* Releases the pages of b; called without the caller's lock, which only b's pages need. */
void om_arena_release_batch(const struct om_arena *a, const struct om_release_batch *b);

/* Under the lock again: b's pages are free space once more. 0, or -ENOMEM where the free
 * extents could not grow: the pieces not yet back stay in b for a later try. */
int om_arena_restore(struct om_arena *a, struct om_release_batch *b);

/* Where a series of moves (a plan's pages, laid out in slices) ended: a move that goes on
 * from there, source and destination both, extends the mappings the last one made rather
 * than splitting others. */
struct om_move_run {
    size_t src_end, dst_end;
};

/* Where the backend moves memory: moves resident pages of free space inside [from, to) on
 * which no range of `keep` lies onto the pages inside `keep` that are free and not resident,
 * instead of releasing the one and faulting the other in. Each move takes one of
 * *moves_left, except one that goes on from where run (if not NULL) ended, and it stops
 * when none is left. Returns the bytes moved. */
size_t om_arena_move_into(struct om_arena *a, size_t from, size_t to, const struct om_extents *keep,
                          size_t *moves_left, struct om_move_run *run);

/* Moves resident pages of free space on which no range of keep lies onto the pages of
 * [off, off + len) that are free and not resident (a slot about to be served), lowest
 * first, each move taking one of *moves_left. Returns the bytes moved. */
size_t om_arena_move_onto(struct om_arena *a, size_t off, size_t len, const struct om_extents *keep,
                          size_t *moves_left);

/* The end of the highest byte taken: from there on to the reservation's end, all is free. */
size_t om_arena_taken_end(const struct om_arena *a);

/* Checks the extent tables (sorted, coalesced, free space inside [0, top), released pages
 * inside the touched ones, top no higher than them); for OPTMEM_VERIFY=1. */
int om_arena_check(const struct om_arena *a);

#endif
