/* Finds the real allocator with dlsym(RTLD_NEXT) and serves the allocations dlsym makes. */
#include "real.h"
#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

struct om_real_allocator om_real;

/* Aligned to a page so that valloc-style requests made during the lookup can be served. */
unsigned char om_bootstrap_arena[OM_BOOTSTRAP_BYTES] __attribute__((aligned(4096)));
static atomic_size_t bootstrap_used;

/* Each bootstrap block is preceded by its size, so realloc and malloc_usable_size work. */
void *om_bootstrap_alloc(size_t size, size_t alignment)
{
    if (alignment < 16)
        alignment = 16;
    if (size > OM_BOOTSTRAP_BYTES)
        return NULL;
    size_t used = atomic_load(&bootstrap_used);
    for (;;) {
        size_t start = (used + sizeof(size_t) + alignment - 1) & ~(alignment - 1);
        size_t end = start + ((size + 15) & ~(size_t)15);
        if (end > OM_BOOTSTRAP_BYTES)
            return NULL;
        if (atomic_compare_exchange_weak(&bootstrap_used, &used, end)) {
            memcpy(om_bootstrap_arena + start - sizeof(size_t), &size, sizeof size);
            return om_bootstrap_arena + start; /* static storage: already zero */
        }
    }
}

size_t om_bootstrap_usable_size(const void *p)
{
    size_t size;
    memcpy(&size, (const unsigned char *)p - sizeof size, sizeof size);
    return size;
}

static void *emulated_aligned_alloc(size_t alignment, size_t size)
{
    void *p = NULL;
    int rc = om_real.posix_memalign(&p, alignment, size);
    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    return p;
}

static void *emulated_memalign(size_t alignment, size_t size)
{
    /* memalign accepts any alignment; glibc rounds it up to a power of two. */
    size_t a = sizeof(void *);
    while (a < alignment && a <= (SIZE_MAX >> 1))
        a <<= 1;
    return emulated_aligned_alloc(a, size);
}

static void *emulated_valloc(size_t size)
{
    return emulated_aligned_alloc((size_t)sysconf(_SC_PAGESIZE), size);
}

static void *emulated_pvalloc(size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return emulated_aligned_alloc(page, size ? (size + page - 1) & ~(page - 1) : page);
}

#define RESOLVE(name) (om_real.name = (__typeof__(om_real.name))dlsym(RTLD_NEXT, #name))

int om_real_resolve(void)
{
    RESOLVE(malloc);
    RESOLVE(free);
    RESOLVE(calloc);
    RESOLVE(realloc);
    RESOLVE(posix_memalign);
    RESOLVE(malloc_usable_size);
    if (!om_real.malloc || !om_real.free || !om_real.calloc || !om_real.realloc ||
        !om_real.posix_memalign)
        return -ENOENT;
    if (!RESOLVE(aligned_alloc))
        om_real.aligned_alloc = emulated_aligned_alloc;
    if (!RESOLVE(memalign))
        om_real.memalign = emulated_memalign;
    if (!RESOLVE(valloc))
        om_real.valloc = emulated_valloc;
    if (!RESOLVE(pvalloc))
        om_real.pvalloc = emulated_pvalloc;
    return 0;
}
