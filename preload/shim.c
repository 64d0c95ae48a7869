/* The interposed malloc family: each entry point routes small requests straight to the real
 * allocator and everything else to an out-of-line slow path. */
#include "guard.h"
#include "real.h"
#include "route.h"

#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>

/* Entry points that glibc 2.36's headers no longer or not yet declare. */
OM_EXPORT void cfree(void *ptr);
OM_EXPORT void free_sized(void *ptr, size_t size);
OM_EXPORT void free_aligned_sized(void *ptr, size_t alignment, size_t size);

OM_EXPORT void *malloc(size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.malloc(size);
    return om_route_malloc(size);
}

OM_EXPORT void free(void *ptr)
{
    if (OM_LIKELY(om_free_is_plain(ptr))) {
        om_real.free(ptr);
        return;
    }
    om_route_free(ptr);
}

OM_EXPORT void *calloc(size_t count, size_t size)
{
    size_t total;
    if (OM_LIKELY(!__builtin_mul_overflow(count, size, &total) && total < om_route_min))
        return om_real.calloc(count, size);
    return om_route_calloc(count, size);
}

OM_EXPORT void *realloc(void *ptr, size_t size)
{
    if (OM_LIKELY(!om_route_frees && size < om_route_min && !om_is_bootstrap(ptr)))
        return om_real.realloc(ptr, size);
    return om_route_realloc(ptr, size);
}

OM_EXPORT void *reallocarray(void *ptr, size_t count, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, total);
}

OM_EXPORT int posix_memalign(void **out, size_t alignment, size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.posix_memalign(out, alignment, size);
    return om_route_posix_memalign(out, alignment, size);
}

OM_EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.aligned_alloc(alignment, size);
    return om_route_aligned(alignment, size, OM_ALIGNED_ALLOC);
}

OM_EXPORT void *memalign(size_t alignment, size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.memalign(alignment, size);
    return om_route_aligned(alignment, size, OM_MEMALIGN);
}

OM_EXPORT void *valloc(size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.valloc(size);
    return om_route_aligned(0, size, OM_VALLOC);
}

OM_EXPORT void *pvalloc(size_t size)
{
    if (OM_LIKELY(size < om_route_min))
        return om_real.pvalloc(size);
    return om_route_aligned(0, size, OM_PVALLOC);
}

OM_EXPORT size_t malloc_usable_size(void *ptr)
{
    if (OM_LIKELY(!om_route_frees && !om_is_bootstrap(ptr) && om_real.malloc_usable_size))
        return om_real.malloc_usable_size(ptr);
    return om_route_usable_size(ptr);
}

OM_EXPORT void cfree(void *ptr)
{
    free(ptr);
}

OM_EXPORT void free_sized(void *ptr, size_t size)
{
    free(ptr);
}

OM_EXPORT void free_aligned_sized(void *ptr, size_t alignment, size_t size)
{
    free(ptr);
}
