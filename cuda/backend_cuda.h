/* A device's arena backend: virtual memory (cuMemAddressReserve) backed chunk by chunk, or
 * one real cuMemAlloc_v2 where the driver has no VMM; stream-order fences are events. */
#ifndef OPTMEM_CUDA_BACKEND_CUDA_H
#define OPTMEM_CUDA_BACKEND_CUDA_H

#include "backend.h"
#include "cuda_abi.h"

#include <stddef.h>
#include <stdint.h>

/* One chunk of `page` bytes of the reservation and the physical memory behind it. */
struct om_cuda_chunk {
    CUmemGenericAllocationHandle handle;
    int mapped;
};

struct om_cuda_backend {
    struct om_backend ops; /* ops.ctx points back here */
    int ordinal;
    CUcontext ctx; /* current at set-up: what a free from another device synchronises */
    int vmm;       /* the granularity query worked: cuMemAddressReserve is tried */
    /* VMM: the reservation and its chunks (a table from om_sys_map). */
    CUdeviceptr base;
    size_t len;
    struct om_cuda_chunk *chunks;
    size_t nchunks;
    /* Without VMM: the one allocation (its start, before aligning) and its size. */
    CUdeviceptr single;
    size_t single_len;
    /* Events of passed fences, for reuse (a table from om_sys_map). */
    CUevent *events;
    size_t nevents;
    int events_lock;
};

/* Fills the backend of device `ordinal` (whose context is current), named `name` ("cuda:0"),
 * and the size of the reservation to ask for: twice the device's memory. Reserves nothing
 * yet. 0 or -errno. */
int om_cuda_backend_init(struct om_cuda_backend *b, int ordinal, const char *name,
                         size_t *reserve_len);

/* Gives back what reserve obtained, for a pool that could not be created. */
void om_cuda_backend_destroy(struct om_cuda_backend *b);

/* Waits for all work queued in the device's context, from whichever device is current.
 * 0, or -EXDEV when the device's context cannot be reached from here. */
int om_cuda_backend_sync(struct om_cuda_backend *b);

#endif
