/* A set of byte ranges, sorted and coalesced, in memory of its own (never the interposed
 * malloc): the arena's free space and its released pages. */
#ifndef OPTMEM_PRELOAD_EXTENTS_H
#define OPTMEM_PRELOAD_EXTENTS_H

#include <stddef.h>

struct om_extent {
    size_t off, len;
};

struct om_extents {
    struct om_extent *v;
    size_t n, cap;
    size_t bytes; /* the sum of the lengths */
};

/* 0 or -ENOMEM. */
int om_extents_init(struct om_extents *s);

/* Unmaps the table. */
void om_extents_destroy(struct om_extents *s);

/* Room for `more` extents beyond the present ones, so that the next `more` adds or removes
 * cannot fail. 0 or -ENOMEM. */
int om_extents_reserve(struct om_extents *s, size_t more);

/* Index of the last extent starting at or below off, or -1. */
ptrdiff_t om_extents_at_or_below(const struct om_extents *s, size_t off);

/* Adds [off, off + len), which may overlap or touch extents already there. 0 or -ENOMEM. */
int om_extents_add(struct om_extents *s, size_t off, size_t len);

/* Removes whatever of [off, off + len) is in the set. Returns the bytes removed, or
 * -ENOMEM when an extent had to be split and the table could not grow. */
long om_extents_remove(struct om_extents *s, size_t off, size_t len);

/* As om_extents_remove, with first = om_extents_at_or_below(s, off) found already (the
 * guard's test of a planned offset found it). */
long om_extents_remove_at(struct om_extents *s, ptrdiff_t first, size_t off, size_t len);

#endif
