/* Between the CUDA entry points and the engine: the checks an entry point makes inline, and
 * the out-of-line slow paths that serve, record or pass a request through. */
#ifndef OPTMEM_CUDA_GLUE_H
#define OPTMEM_CUDA_GLUE_H

#include "cuda_abi.h"
#include "device.h"
#include "guard.h"
#include "route.h"

#include <stddef.h>
#include <stdint.h>

/* CUDA guarantees 256-byte alignment for every allocation. */
#define OM_CUDA_ALIGNMENT 256

/* Whether a request of size bytes may be managed: the rest goes straight to the real call. */
static inline int om_cuda_takes(size_t size)
{
    return om_ensure_init() == 0 && size >= __atomic_load_n(&om_cuda_min, __ATOMIC_RELAXED) &&
           !om_guard_inside();
}

/* Whether a free of p must be looked at (an arena block, or a recorded one). */
static inline int om_cuda_watches(const void *p)
{
    return p && om_ensure_init() == 0 &&
           __atomic_load_n(&om_cuda_state, __ATOMIC_RELAXED) != OM_CUDA_OFF && !om_guard_inside();
}

/* Whether successful lookups of the allocation entry points get optmem's functions. */
static inline int om_cuda_substituting(void)
{
    return om_ensure_init() == 0 && __atomic_load_n(&om_cuda_state, __ATOMIC_ACQUIRE) == OM_CUDA_ON;
}

enum om_cuda_kind {
    OM_CUDA_SYNC,     /* cudaMalloc, cuMemAlloc_v2: no stream order */
    OM_CUDA_ORDERED,  /* the async entry points and the pluggable allocator */
    OM_CUDA_RECORDED, /* memory pools, managed memory: passed through, recorded */
};

/* A managed-size request; real() makes it with the caller's own arguments. */
struct om_cuda_alloc {
    enum om_cuda_kind kind;
    int runtime; /* the runtime route: its context is made current before the device is read */
    int device;  /* ordinal, or -1: the current device */
    int ptds;    /* stream 0 is the per-thread stream (a _ptsz entry point), else the legacy one */
    size_t size;
    CUstream stream; /* as the caller passed it */
    void *dst;       /* the caller's result: void ** (runtime) or CUdeviceptr * (driver) */
    void *fn;        /* the real function */
    void *pool;      /* cudaMallocFromPoolAsync's memory pool */
    unsigned flags;  /* cudaMallocManaged's flags */
    int (*real)(const struct om_cuda_alloc *req); /* the API's status, 0 on success */
};

struct om_cuda_free {
    int ordered; /* freed in stream order on stream */
    int ptds;
    void *ptr;
    CUstream stream;
    void *fn;
    int (*real)(const struct om_cuda_free *req);
};

/* Serves req from its device's pool, or makes the real call (recording a managed-size block
 * it returns). Returns the API's status. */
int om_cuda_alloc_slow(const struct om_cuda_alloc *req);

/* Frees an arena block into its pool (synchronising first when not in stream order), or
 * records the death of a recorded block and makes the real call. Returns the API's status. */
int om_cuda_free_slow(const struct om_cuda_free *req);

/* The stream key of this thread's per-thread default stream: each thread's is its own
 * stream, so the pool must not see them as one. */
uintptr_t om_cuda_thread_stream_key(void);

#endif
