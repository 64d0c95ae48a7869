/* The host's arena backend: anonymous MAP_NORESERVE memory, backed on first touch. */
#include "arena.h"
#include "backend.h"

#include <errno.h>
#include <sys/mman.h>

static int host_reserve(void *ctx, size_t *len, uintptr_t *base)
{
    /* Offsets are aligned relative to the base, so the base carries the largest alignment
     * the arena serves: map more and trim both ends. */
    size_t mapped = *len + OM_ARENA_ALIGNMENT;
    unsigned char *raw = mmap(NULL, mapped, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return -errno;
    unsigned char *aligned = (unsigned char *)(((uintptr_t)raw + OM_ARENA_ALIGNMENT - 1) &
                                               ~(uintptr_t)(OM_ARENA_ALIGNMENT - 1));
    if (aligned > raw)
        munmap(raw, (size_t)(aligned - raw));
    if (raw + mapped > aligned + *len)
        munmap(aligned + *len, (size_t)(raw + mapped - (aligned + *len)));
    *base = (uintptr_t)aligned;
    return 0;
}

static int host_release(void *ctx, uintptr_t addr, size_t len)
{
    return madvise((void *)addr, len, MADV_DONTNEED) == 0 ? 0 : -errno;
}

static int host_move(void *ctx, uintptr_t from, uintptr_t to, size_t len)
{
    (void)ctx;
    /* Page table entries move, not bytes: no copy, and no fault where they land. With
     * DONTUNMAP the source stays mapped (empty, as after MADV_DONTNEED), so the reservation
     * keeps no hole whatever happens next; kernels before 5.13 refuse it (EINVAL). */
    void *r = mremap((void *)from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                     (void *)to);
    return r == MAP_FAILED ? -errno : 0;
}

const struct om_backend om_host_backend = {
    .name = "cpu",
    .host_addressable = 1,
    .page = 0, /* the system's page size */
    .reserve = host_reserve,
    .release = host_release,
    .move = host_move,
};
