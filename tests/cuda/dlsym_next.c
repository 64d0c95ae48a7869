/* dlsym(RTLD_NEXT, ...) called from the main program must search after the main program,
 * whoever interposes dlsym: it returns the same function as the program's own reference
 * (liboptmem.so's malloc when preloaded, libc's otherwise).
 * usage: dlsym_next */
#include "cuda_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long checked;

static void expect_same(const char *name, void *next, void *mine)
{
    Dl_info a, b;
    checked++;
    if (next == mine)
        return;
    const char *na = next && dladdr(next, &a) ? a.dli_fname : "?";
    const char *nb = mine && dladdr(mine, &b) ? b.dli_fname : "?";
    ct_die("dlsym(RTLD_NEXT, \"%s\") is %p in %s, the program's %s is %p in %s", name, next, na,
           name, mine, nb);
}

int main(void)
{
    /* volatile: the addresses the program's own references resolve to, as loaded. */
    void *volatile own_malloc = (void *)malloc;
    void *volatile own_free = (void *)free;
    void *volatile own_calloc = (void *)calloc;
    void *volatile own_realloc = (void *)realloc;
    void *volatile own_cuda_malloc = (void *)cudaMalloc;
    void *volatile own_cuda_free_async = (void *)cudaFreeAsync;
    expect_same("malloc", dlsym(RTLD_NEXT, "malloc"), own_malloc);
    expect_same("free", dlsym(RTLD_NEXT, "free"), own_free);
    expect_same("calloc", dlsym(RTLD_NEXT, "calloc"), own_calloc);
    expect_same("realloc", dlsym(RTLD_NEXT, "realloc"), own_realloc);
    expect_same("cudaMalloc", dlsym(RTLD_NEXT, "cudaMalloc"), own_cuda_malloc);
    expect_same("cudaFreeAsync", dlsym(RTLD_NEXT, "cudaFreeAsync"), own_cuda_free_async);
    expect_same("malloc (default)", dlsym(RTLD_DEFAULT, "malloc"), own_malloc);
    void *p = ((void *(*)(size_t))dlsym(RTLD_NEXT, "malloc"))(1 << 16);
    CT_EXPECT(p != NULL, "malloc through dlsym failed");
    free(p);
    printf("dlsym RTLD_NEXT from the program: %lu lookups agree\n", checked);
    return 0;
}
