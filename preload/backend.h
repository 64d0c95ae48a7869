/* Where an arena's bytes come from: the host's address space or a device's. The host and
 * the CUDA domain share one arena and pool engine through this interface. */
#ifndef OPTMEM_PRELOAD_BACKEND_H
#define OPTMEM_PRELOAD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* A request or free with no stream order: the host's, or a synchronous device free. */
#define OM_STREAM_NONE UINTPTR_MAX

struct om_backend {
    char name[16];        /* the report's domain: "cpu", "cuda:0" */
    int host_addressable; /* the CPU may touch the bytes: calloc's zeroing, red zones */
    size_t page;          /* granularity of map and release; 0: the system's page size */
    void *ctx;
    /* Reserves *len bytes of address space (a multiple of the arena's alignment) aligned
     * to the arena's alignment; may reserve less, and says how much in *len. 0 or -errno. */
    int (*reserve)(void *ctx, size_t *len, uintptr_t *base);
    /* Backs the pages of [addr, addr + len) with memory before they are handed out; NULL
     * where the system does it on first touch. 0 or -errno (then the request falls back). */
    int (*map)(void *ctx, uintptr_t addr, size_t len);
    /* Gives the memory behind the pages of [addr, addr + len) back; NULL where it cannot
     * (one fixed device allocation). 0 or -errno. */
    int (*release)(void *ctx, uintptr_t addr, size_t len);
    /* Moves the memory behind the pages of [from, from + len) to [to, to + len), which
     * must have none, and leaves [from, from + len) reading as zero pages, mapped still;
     * NULL where memory cannot move. 0 or -errno (then nothing moved). */
    int (*move)(void *ctx, uintptr_t from, uintptr_t to, size_t len);
    /* Stream order, NULL on the host: a fence recorded on stream where a block is freed
     * asynchronously; the block goes to another stream once the fence has passed, or once
     * that stream has been made to wait for it (fence_wait: 0 or -errno). */
    int (*fence_record)(void *ctx, uintptr_t stream, uintptr_t *fence);
    int (*fence_passed)(void *ctx, uintptr_t fence); /* 1 passed, 0 not yet */
    int (*fence_wait)(void *ctx, uintptr_t stream, uintptr_t fence);
    void (*fence_drop)(void *ctx, uintptr_t fence);
};

/* Anonymous MAP_NORESERVE memory; pages are backed on first touch and given back with
 * madvise(MADV_DONTNEED). */
extern const struct om_backend om_host_backend;

#endif
