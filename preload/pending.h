/* Device blocks freed in stream order: their bytes stay taken in the arena until a fence
 * recorded at the free has passed, except for requests on the stream that freed them and
 * on streams made to wait for the fence. */
#ifndef OPTMEM_PRELOAD_PENDING_H
#define OPTMEM_PRELOAD_PENDING_H

#include "arena.h"

#include <stddef.h>
#include <stdint.h>

struct om_pending_free {
    size_t off, len; /* len 0: claimed since, skipped */
    uintptr_t stream, fence;
};

/* A queue in order of the frees: fences on one stream pass in that order, so settling
 * stops at the first that has not passed. Storage from om_sys_map. */
struct om_pending {
    struct om_pending_free *q;
    size_t head, n, cap; /* entries [head, head + n) modulo cap */
    size_t live;         /* entries with len != 0 */
    uint64_t lost_bytes; /* bytes that stay taken for good: no fence could be recorded */
};

/* Queues a freed range that stays taken in the arena until its fence passes. 0 or -ENOMEM
 * (then the caller keeps the range out of use for good). */
int om_pending_add(struct om_pending *p, size_t off, size_t len, uintptr_t stream, uintptr_t fence);

/* Gives the ranges whose fences have passed back to the arena, oldest first, and tells
 * given (when not NULL) of each. */
void om_pending_settle(struct om_pending *p, struct om_arena *a,
                       void (*given)(void *ctx, size_t off, size_t len), void *ctx);

/* The best-fitting range freed on stream (from floor up) that can hold len bytes at
 * alignment: *off where to take them with om_pending_take. 0, or -ENOENT where none can. */
int om_pending_best_fit(const struct om_pending *p, size_t len, size_t alignment, size_t floor,
                        uintptr_t stream, size_t *off);

/* Takes [off, off + len) for a request on stream, where it overlaps only free space and
 * pending ranges: those freed on that same stream are safe to reuse at once (stream order),
 * those freed on another once stream waits for their fences (the backend's fence_wait);
 * the parts of those ranges left over stay pending behind a fence recorded now on stream,
 * which passes after theirs. 0, -EBUSY (a live block is in the way, or a wait failed or
 * the backend cannot wait), or -ENOMEM. */
int om_pending_take(struct om_pending *p, struct om_arena *a, size_t off, size_t len,
                    uintptr_t stream);

#endif
