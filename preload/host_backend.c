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

const struct om_backend om_host_backend = {
    .name = "cpu",
    .host_addressable = 1,
    .page = 0, /* the system's page size */
    .reserve = host_reserve,
    .release = host_release,
};
