/* Routing between the real allocator, the bootstrap buffer and the engine: the shim's slow
 * paths, out of line so that the entry points stay a compare and a call. */
#ifndef OPTMEM_PRELOAD_ROUTE_H
#define OPTMEM_PRELOAD_ROUTE_H

#include "guard.h"
#include "real.h"

#include <stddef.h>
#include <stdint.h>

#define OM_EXPORT __attribute__((visibility("default")))

/* Requests of at least this many bytes take the slow path: 0 until the library is
 * initialised, SIZE_MAX when nothing is managed (OPTMEM_MODE=off). */
extern size_t om_route_min;
/* Non-zero while frees must be looked at (before init, and while blocks are managed). */
extern int om_route_frees;

/* What a free must be told apart from while blocks are managed: the pool's arena, and
 * managed blocks that live in the real allocator (all of them in trace mode, rare ones in
 * plan mode). om_real_managed starts at 1 so that frees are routed until init is done. */
extern uintptr_t om_arena_lo;
extern size_t om_arena_len;
extern long om_real_managed;

/* A free the real allocator takes as it is: no bootstrap, arena or managed block. */
static inline int om_free_is_plain(const void *ptr)
{
    return !om_is_bootstrap(ptr) &&
           (!om_route_frees || ((uintptr_t)ptr - om_arena_lo >= om_arena_len &&
                                !__atomic_load_n(&om_real_managed, __ATOMIC_RELAXED)));
}

/* Initialises once; returns 0, or -EAGAIN when called again by the initialising thread
 * (dlsym allocating), in which case the caller serves from the bootstrap buffer. */
int om_ensure_init(void);

void *om_route_malloc(size_t size);
void *om_route_calloc(size_t count, size_t size);
void *om_route_realloc(void *ptr, size_t size);
void *om_route_aligned(size_t alignment, size_t size, int kind);
int om_route_posix_memalign(void **out, size_t alignment, size_t size);
void om_route_free(void *ptr);
size_t om_route_usable_size(void *ptr);

/* Which aligned entry point om_route_aligned serves: their argument checks differ. */
enum om_aligned_kind { OM_ALIGNED_ALLOC, OM_MEMALIGN, OM_VALLOC, OM_PVALLOC };

#endif
