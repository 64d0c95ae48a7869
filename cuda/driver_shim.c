/* The driver's allocation entry points, reached only through run-time lookups: dlsym,
 * cuGetProcAddress(_v2) and cudaGetDriverEntryPoint(ByVersion) are interposed, and a
 * successful lookup of an allocation entry point (or of a resolver) returns optmem's
 * function, which remembers the real one it replaces. Compiled with sibling calls even in
 * Debug builds: see dlsym below. */
#include "glue.h"
#include "real_cuda.h"

#include <dlfcn.h>
#include <limits.h>
#include <string.h>

OM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags);
OM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, int *symbolStatus);
OM_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn,
                                              unsigned long long flags, int *status);
OM_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn,
                                                   unsigned long long flags, int *status);
OM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                       unsigned int cudaVersion,
                                                       unsigned long long flags, int *status);
OM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                            unsigned int cudaVersion,
                                                            unsigned long long flags, int *status);

/* The entry points optmem replaces, by the name the driver exports. */
#define OM_CUDA_SUBSTITUTES(X)                                                                     \
    X(cuMemAlloc_v2)                                                                               \
    X(cuMemFree_v2)                                                                                \
    X(cuMemAllocAsync)                                                                             \
    X(cuMemAllocAsync_ptsz)                                                                        \
    X(cuMemFreeAsync)                                                                              \
    X(cuMemFreeAsync_ptsz)                                                                         \
    X(cuGetProcAddress)                                                                            \
    X(cuGetProcAddress_v2)

#define OM_CUDA_SUB_ID(name) SUB_##name,
enum { OM_CUDA_SUBSTITUTES(OM_CUDA_SUB_ID) SUB_COUNT };
#undef OM_CUDA_SUB_ID

#define OM_CUDA_SUB_NAME(name) #name,
static const char *const sub_names[SUB_COUNT] = {OM_CUDA_SUBSTITUTES(OM_CUDA_SUB_NAME)};
#undef OM_CUDA_SUB_NAME

static CUresult sub_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
static CUresult sub_cuMemFree_v2(CUdeviceptr dptr);
static CUresult sub_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream);
static CUresult sub_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream);
static CUresult sub_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
static CUresult sub_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
/* The exported resolvers are aliases of these: their addresses are this library's own even
 * where another object's cuGetProcAddress comes first in the lookup order. */
static CUresult get_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
static CUresult get_proc_address_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, int *symbolStatus);

static void *const ours[SUB_COUNT] = {
    (void *)sub_cuMemAlloc_v2,        (void *)sub_cuMemFree_v2,    (void *)sub_cuMemAllocAsync,
    (void *)sub_cuMemAllocAsync_ptsz, (void *)sub_cuMemFreeAsync,  (void *)sub_cuMemFreeAsync_ptsz,
    (void *)get_proc_address,         (void *)get_proc_address_v2,
};

/* The real function each replacement calls: the last one a lookup returned. */
static void *slots[SUB_COUNT];

static int is_ours(const void *f)
{
    for (int i = 0; i < SUB_COUNT; i++)
        if (f == ours[i])
            return 1;
    return 0;
}

/* A replacement handed out by a lookup that found optmem's own export has no slot yet. */
OM_NOINLINE static void *resolve_slot(int id)
{
    void *f = om_cuda_driver_symbol(sub_names[id]);
    if (!f || is_ours(f))
        return NULL;
    __atomic_store_n(&slots[id], f, __ATOMIC_RELEASE);
    return f;
}

static inline void *real_of(int id)
{
    void *f = __atomic_load_n(&slots[id], __ATOMIC_ACQUIRE);
    return f ? f : resolve_slot(id);
}

/* What a successful lookup hands out: optmem's function for slot id, remembering found. */
static void *substitute(int id, void *found)
{
    if (id < 0 || !found || is_ours(found) || !om_cuda_substituting())
        return found;
    __atomic_store_n(&slots[id], found, __ATOMIC_RELEASE);
    return ours[id];
}

static int substitute_id_of_name(const char *name)
{
    if (name[0] != 'c' || name[1] != 'u')
        return -1;
    for (int i = 0; i < SUB_COUNT; i++)
        if (strcmp(name, sub_names[i]) == 0)
            return i;
    return -1;
}

/* cuGetProcAddress's names carry no version suffix: the version and the stream flags say
 * which function is meant. cuMemAlloc and cuMemFree before 3.2 are the 32-bit ABI. */
static int substitute_id_of_proc(const char *symbol, long version, int ptds)
{
    if (!symbol || symbol[0] != 'c' || symbol[1] != 'u')
        return -1;
    if (strcmp(symbol, "cuMemAlloc") == 0)
        return version >= 3020 ? SUB_cuMemAlloc_v2 : -1;
    if (strcmp(symbol, "cuMemFree") == 0)
        return version >= 3020 ? SUB_cuMemFree_v2 : -1;
    if (strcmp(symbol, "cuMemAllocAsync") == 0)
        return ptds ? SUB_cuMemAllocAsync_ptsz : SUB_cuMemAllocAsync;
    if (strcmp(symbol, "cuMemFreeAsync") == 0)
        return ptds ? SUB_cuMemFreeAsync_ptsz : SUB_cuMemFreeAsync;
    if (strcmp(symbol, "cuGetProcAddress") == 0)
        return version >= 12000 ? SUB_cuGetProcAddress_v2 : SUB_cuGetProcAddress;
    return -1;
}

OM_NOINLINE static void *dlsym_slow(om_dlsym_fn real_dlsym, void *handle, const char *name, int id)
{
    void *found = real_dlsym(handle, name);
    return substitute(id, found);
}

/* glibc's dlsym reads its caller from the return address: dlsym(RTLD_NEXT, ...) and every
 * lookup optmem leaves alone are passed on as sibling calls, so the library that asked is
 * still the caller. */
OM_EXPORT void *dlsym(void *restrict handle, const char *restrict name)
{
    om_dlsym_fn real_dlsym = om_cuda_real_dlsym();
    int id = handle == RTLD_NEXT ? -1 : substitute_id_of_name(name);
    if (OM_LIKELY(id < 0 || !om_cuda_substituting()))
        return real_dlsym(handle, name);
    return dlsym_slow(real_dlsym, handle, name, id);
}

static CUresult no_driver(void **pfn, int *status)
{
    if (pfn)
        *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_INITIALIZED;
}

/* The four signatures of the resolvers (the _ptsz exports share their plain one's). */
enum resolver { CU_PROC, CU_PROC_V2, RT_ENTRY, RT_ENTRY_BY_VERSION };

/* The one path of every resolver's lookup. While substituting, the result starts as NULL: a
 * resolver that fails without writing it must not leave a stale pointer behind to be taken for
 * the symbol. */
static int lookup(enum resolver form, void *real, const char *symbol, void **pfn, long version,
                  unsigned long long flags, int *status, int ptds)
{
    int on = om_cuda_substituting();
    if (on && pfn)
        *pfn = NULL;
    int rc;
    switch (form) {
    case CU_PROC:
        rc = ((om_cuGetProcAddress_fn)real)(symbol, pfn, (int)version, flags);
        break;
    case CU_PROC_V2:
        rc = ((om_cuGetProcAddress_v2_fn)real)(symbol, pfn, (int)version, flags, status);
        break;
    case RT_ENTRY:
        rc = ((om_cudaGetDriverEntryPoint_fn)real)(symbol, pfn, flags, status);
        break;
    default:
        rc = ((om_cudaGetDriverEntryPointByVersion_fn)real)(symbol, pfn, (unsigned int)version,
                                                            flags, status);
    }
    if (on && rc == CUDA_SUCCESS && pfn && *pfn)
        *pfn = substitute(substitute_id_of_proc(symbol, version, ptds), *pfn);
    return rc;
}

/* The driver's resolvers: id says which, and _v2 also reports the symbol's status. */
static CUresult proc_address(int id, const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags, int *symbolStatus)
{
    void *real = real_of(id);
    if (OM_UNLIKELY(!real))
        return no_driver(pfn, symbolStatus);
    return lookup(id == SUB_cuGetProcAddress_v2 ? CU_PROC_V2 : CU_PROC, real, symbol, pfn,
                  cudaVersion, flags, symbolStatus,
                  (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
}

static CUresult get_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return proc_address(SUB_cuGetProcAddress, symbol, pfn, cudaVersion, flags, NULL);
}

static CUresult get_proc_address_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, int *symbolStatus)
{
    return proc_address(SUB_cuGetProcAddress_v2, symbol, pfn, cudaVersion, flags, symbolStatus);
}

OM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags) __attribute__((alias("get_proc_address")));
OM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, int *symbolStatus)
    __attribute__((alias("get_proc_address_v2")));

/* The runtime's flags: the _ptsz export's default is the per-thread stream. */
static int runtime_ptds(unsigned long long flags, int ptsz_export)
{
    if (flags & cudaEnablePerThreadDefaultStream)
        return 1;
    return ptsz_export && !(flags & cudaEnableLegacyStream);
}

static cudaError_t entry_point(enum resolver form, void *real, const char *symbol, void **fn,
                               long version, unsigned long long flags, int *status, int ptsz_export)
{
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    return lookup(form, real, symbol, fn, version, flags, status, runtime_ptds(flags, ptsz_export));
}

/* Without a version the runtime answers for the newest ABI it knows. */
OM_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn,
                                              unsigned long long flags, int *status)
{
    return entry_point(RT_ENTRY, (void *)om_real_cudaGetDriverEntryPoint(), symbol, fn, LONG_MAX,
                       flags, status, 0);
}

OM_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn,
                                                   unsigned long long flags, int *status)
{
    return entry_point(RT_ENTRY, (void *)om_real_cudaGetDriverEntryPoint_ptsz(), symbol, fn,
                       LONG_MAX, flags, status, 1);
}

OM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                       unsigned int cudaVersion,
                                                       unsigned long long flags, int *status)
{
    return entry_point(RT_ENTRY_BY_VERSION, (void *)om_real_cudaGetDriverEntryPointByVersion(),
                       symbol, fn, cudaVersion, flags, status, 0);
}

OM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                            unsigned int cudaVersion,
                                                            unsigned long long flags, int *status)
{
    return entry_point(RT_ENTRY_BY_VERSION, (void *)om_real_cudaGetDriverEntryPointByVersion_ptsz(),
                       symbol, fn, cudaVersion, flags, status, 1);
}

/* The replacements: the real calls, with the caller's own arguments. */
static int call_mem_alloc(const struct om_cuda_alloc *req)
{
    return ((om_cuMemAlloc_v2_fn)req->fn)(req->dst, req->size);
}

static int call_mem_alloc_async(const struct om_cuda_alloc *req)
{
    return ((om_cuMemAllocAsync_fn)req->fn)(req->dst, req->size, req->stream);
}

static int call_mem_free(const struct om_cuda_free *req)
{
    return ((om_cuMemFree_v2_fn)req->fn)((CUdeviceptr)(uintptr_t)req->ptr);
}

static int call_mem_free_async(const struct om_cuda_free *req)
{
    return ((om_cuMemFreeAsync_fn)req->fn)((CUdeviceptr)(uintptr_t)req->ptr, req->stream);
}

OM_NOINLINE static CUresult mem_alloc_slow(void *real, CUdeviceptr *dptr, size_t size, int ordered,
                                           CUstream stream, int ptds)
{
    struct om_cuda_alloc req = {.kind = ordered ? OM_CUDA_ORDERED : OM_CUDA_SYNC,
                                .device = -1,
                                .ptds = ptds,
                                .size = size,
                                .stream = stream,
                                .dst = dptr,
                                .fn = real,
                                .real = ordered ? call_mem_alloc_async : call_mem_alloc};
    return om_cuda_alloc_slow(&req);
}

OM_NOINLINE static CUresult mem_free_slow(void *real, CUdeviceptr dptr, int ordered,
                                          CUstream stream, int ptds)
{
    struct om_cuda_free req = {.ordered = ordered,
                               .ptds = ptds,
                               .ptr = (void *)(uintptr_t)dptr,
                               .stream = stream,
                               .fn = real,
                               .real = ordered ? call_mem_free_async : call_mem_free};
    return om_cuda_free_slow(&req);
}

static CUresult sub_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    om_cuMemAlloc_v2_fn real = (om_cuMemAlloc_v2_fn)real_of(SUB_cuMemAlloc_v2);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(dptr, size);
    return mem_alloc_slow((void *)real, dptr, size, 0, NULL, 0);
}

static CUresult sub_cuMemFree_v2(CUdeviceptr dptr)
{
    om_cuMemFree_v2_fn real = (om_cuMemFree_v2_fn)real_of(SUB_cuMemFree_v2);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_watches((void *)(uintptr_t)dptr)))
        return real(dptr);
    return mem_free_slow((void *)real, dptr, 0, NULL, 0);
}

static CUresult sub_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    om_cuMemAllocAsync_fn real = (om_cuMemAllocAsync_fn)real_of(SUB_cuMemAllocAsync);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(dptr, size, stream);
    return mem_alloc_slow((void *)real, dptr, size, 1, stream, 0);
}

static CUresult sub_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    om_cuMemAllocAsync_fn real = (om_cuMemAllocAsync_fn)real_of(SUB_cuMemAllocAsync_ptsz);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(dptr, size, stream);
    return mem_alloc_slow((void *)real, dptr, size, 1, stream, 1);
}

static CUresult sub_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    om_cuMemFreeAsync_fn real = (om_cuMemFreeAsync_fn)real_of(SUB_cuMemFreeAsync);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_watches((void *)(uintptr_t)dptr)))
        return real(dptr, stream);
    return mem_free_slow((void *)real, dptr, 1, stream, 0);
}

static CUresult sub_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    om_cuMemFreeAsync_fn real = (om_cuMemFreeAsync_fn)real_of(SUB_cuMemFreeAsync_ptsz);
    if (OM_UNLIKELY(!real))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (OM_LIKELY(!om_cuda_watches((void *)(uintptr_t)dptr)))
        return real(dptr, stream);
    return mem_free_slow((void *)real, dptr, 1, stream, 1);
}
