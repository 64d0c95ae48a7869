/* The replanner's scratch memory from the CLI's own heap (the library hands it mmap). */
#include "commands.h"
#include "replanner.h"

#include <stdlib.h>

static void *heap_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n ? n : 1);
}

static void heap_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    (void)n;
    free(p);
}

const om_rp_allocator om_cli_rp_heap = {heap_alloc, heap_release, NULL};
