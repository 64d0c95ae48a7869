/* Per-device state of the CUDA domain: tracer domain, arena backend and pool of each device
 * ordinal, set up at the device's first managed request. */
#ifndef OPTMEM_CUDA_DEVICE_H
#define OPTMEM_CUDA_DEVICE_H

#include "backend_cuda.h"
#include "pool.h"
#include "tracer.h"

#include <stddef.h>
#include <stdint.h>

#define OM_CUDA_DEVICES 16

/* What the domain does: nothing (OPTMEM_DEVICES without cuda, or mode off); manage; or, in
 * a fork child whose CUDA context is unusable, pass everything through and ignore frees of
 * the parent's arena blocks. */
enum om_cuda_state { OM_CUDA_OFF = 0, OM_CUDA_ON = 1, OM_CUDA_CHILD = 2 };

/* Read without a lock on every entry point (atomically). */
extern int om_cuda_state;
/* Requests of at least this many bytes take the slow path: SIZE_MAX when none is managed. */
extern size_t om_cuda_min;
extern unsigned om_cuda_depth;

struct om_cuda_dev {
    int ready; /* set up (read with acquire): domain, pool and range below are valid */
    unsigned domain;
    struct om_pool *pool; /* plan mode; NULL: requests are recorded, never served */
    uintptr_t lo;         /* the arena's range */
    size_t len;
    long live_real; /* recorded blocks that the real allocator holds */
    struct om_cuda_backend backend;
};

/* Device `ordinal`, set up at its first call (with the engine entered: set-up calls CUDA);
 * NULL when it passes through (out of range, or its set-up failed: warned once). */
struct om_cuda_dev *om_cuda_device(int ordinal);

/* The set-up device whose arena holds p, whichever device is current; NULL if none. */
struct om_cuda_dev *om_cuda_device_of(const void *p);

/* A block that the real allocator made for a managed request: its birth, and its death
 * (looked up in every device's domain) before the real free. */
void om_cuda_record_alloc(struct om_cuda_dev *d, void *p, size_t size,
                          const struct om_stack *stack);
void om_cuda_record_free(void *p);

#endif
