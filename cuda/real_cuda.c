/* Finds glibc's dlsym and the real CUDA runtime and driver functions, thread-safely and
 * without the library being initialised (the first CUDA call may come before it). */
#include "real_cuda.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

om_dlsym_fn om_cuda_dlsym_cache;
void *om_cuda_runtime_cache[OM_RUNTIME_COUNT];
void *om_cuda_driver_cache[OM_DRIVER_COUNT];

#define OM_CUDA_NAME(name, type) #name,
static const char *const runtime_names[OM_RUNTIME_COUNT] = {
    OM_CUDA_RUNTIME_FUNCTIONS(OM_CUDA_NAME)};
static const char *const driver_names[OM_DRIVER_COUNT] = {OM_CUDA_DRIVER_FUNCTIONS(OM_CUDA_NAME)};
#undef OM_CUDA_NAME

static void *runtime_handle, *driver_handle;

om_dlsym_fn om_cuda_resolve_dlsym(void)
{
    /* x86-64 since 2.34, x86-64 before, aarch64 before. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    void *f = NULL;
    for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++)
        f = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!f) {
        static const char msg[] = "optmem: the real dlsym cannot be found; aborting\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    __atomic_store_n(&om_cuda_dlsym_cache, (om_dlsym_fn)f, __ATOMIC_RELEASE);
    return (om_dlsym_fn)f;
}

/* Keeps the first handle opened; a racing thread's extra reference is dropped. */
static void *keep_handle(void **slot, void *h)
{
    void *expected = NULL;
    if (__atomic_compare_exchange_n(slot, &expected, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return h;
    dlclose(h);
    return expected;
}

/* The cudart already in the process, by soname, newest first. */
static void *find_runtime(void)
{
    static const char *const sonames[] = {"libcudart.so.13", "libcudart.so.12",
                                          "libcudart.so.11.0"};
    void *h = __atomic_load_n(&runtime_handle, __ATOMIC_ACQUIRE);
    for (size_t i = 0; !h && i < sizeof sonames / sizeof sonames[0]; i++) {
        h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h)
            h = keep_handle(&runtime_handle, h);
    }
    return h;
}

static void *find_driver(void)
{
    void *h = __atomic_load_n(&driver_handle, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_LAZY);
    return h ? keep_handle(&driver_handle, h) : NULL;
}

static void *cache(void **slot, void *f)
{
    if (f)
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    return f;
}

void *om_cuda_resolve_runtime(enum om_cuda_runtime_id id)
{
    om_dlsym_fn real_dlsym = om_cuda_real_dlsym();
    /* Called here, not as a tail call: the caller glibc sees is liboptmem, so RTLD_NEXT
     * means the definition after optmem's own. */
    void *f = real_dlsym(RTLD_NEXT, runtime_names[id]);
    if (!f) {
        void *h = find_runtime();
        f = h ? real_dlsym(h, runtime_names[id]) : NULL;
    }
    return cache(&om_cuda_runtime_cache[id], f);
}

void *om_cuda_resolve_driver(enum om_cuda_driver_id id)
{
    void *h = find_driver();
    void *f = h ? om_cuda_real_dlsym()(h, driver_names[id]) : NULL;
    return cache(&om_cuda_driver_cache[id], f);
}

void *om_cuda_driver_symbol(const char *name)
{
    om_dlsym_fn real_dlsym = om_cuda_real_dlsym();
    void *f = real_dlsym(RTLD_NEXT, name);
    if (!f) {
        void *h = find_driver();
        f = h ? real_dlsym(h, name) : NULL;
    }
    return f;
}
