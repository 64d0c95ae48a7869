/* The real allocator behind optmem, found with dlsym(RTLD_NEXT), and the bootstrap buffer
 * that serves the allocations made while it is being found. */
#ifndef OPTMEM_PRELOAD_REAL_H
#define OPTMEM_PRELOAD_REAL_H

#include <stddef.h>
#include <stdint.h>

struct om_real_allocator {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
};

extern struct om_real_allocator om_real;

/* Resolves every entry point. Returns 0, or -ENOENT when malloc, free, calloc or realloc
 * cannot be found (nothing can work then). Functions that a real allocator may lack
 * (valloc, pvalloc, ...) are emulated through posix_memalign. */
int om_real_resolve(void);

#define OM_BOOTSTRAP_BYTES (256 * 1024)
extern unsigned char om_bootstrap_arena[OM_BOOTSTRAP_BYTES];

static inline int om_is_bootstrap(const void *p)
{
    return (uintptr_t)p - (uintptr_t)om_bootstrap_arena < OM_BOOTSTRAP_BYTES;
}

/* Bump allocation from the bootstrap buffer; never freed. NULL when exhausted. */
void *om_bootstrap_alloc(size_t size, size_t alignment);
size_t om_bootstrap_usable_size(const void *p);

#endif
