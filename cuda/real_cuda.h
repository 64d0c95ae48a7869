/* The real CUDA runtime and driver functions behind optmem's entry points, and glibc's
 * dlsym, all found at run time: liboptmem.so has no link-time dependency on CUDA. */
#ifndef OPTMEM_CUDA_REAL_CUDA_H
#define OPTMEM_CUDA_REAL_CUDA_H

#include "cuda_abi.h"

typedef void *(*om_dlsym_fn)(void *handle, const char *name);

/* The runtime functions optmem calls through or interposes: found with dlsym(RTLD_NEXT),
 * else in the cudart that a library loaded in a local scope (torch does). */
#define OM_CUDA_RUNTIME_FUNCTIONS(X)                                                               \
    X(cudaMalloc, om_cudaMalloc_fn)                                                                \
    X(cudaFree, om_cudaFree_fn)                                                                    \
    X(cudaMallocAsync, om_cudaMallocAsync_fn)                                                      \
    X(cudaMallocAsync_ptsz, om_cudaMallocAsync_fn)                                                 \
    X(cudaFreeAsync, om_cudaFreeAsync_fn)                                                          \
    X(cudaFreeAsync_ptsz, om_cudaFreeAsync_fn)                                                     \
    X(cudaMallocFromPoolAsync, om_cudaMallocFromPoolAsync_fn)                                      \
    X(cudaMallocFromPoolAsync_ptsz, om_cudaMallocFromPoolAsync_fn)                                 \
    X(cudaMallocManaged, om_cudaMallocManaged_fn)                                                  \
    X(cudaGetDriverEntryPoint, om_cudaGetDriverEntryPoint_fn)                                      \
    X(cudaGetDriverEntryPoint_ptsz, om_cudaGetDriverEntryPoint_fn)                                 \
    X(cudaGetDriverEntryPointByVersion, om_cudaGetDriverEntryPointByVersion_fn)                    \
    X(cudaGetDriverEntryPointByVersion_ptsz, om_cudaGetDriverEntryPointByVersion_fn)

/* The driver functions of the device backend and of the stream logic, from libcuda.so.1.
 * cuCtxGetCurrent, cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2 may be missing: then only
 * the current device can be synchronised. */
#define OM_CUDA_DRIVER_FUNCTIONS(X)                                                                \
    X(cuCtxGetDevice, om_cuCtxGetDevice_fn)                                                        \
    X(cuCtxSynchronize, om_cuCtxSynchronize_fn)                                                    \
    X(cuCtxGetCurrent, om_cuCtxGetCurrent_fn)                                                      \
    X(cuCtxPushCurrent_v2, om_cuCtxPushCurrent_v2_fn)                                              \
    X(cuCtxPopCurrent_v2, om_cuCtxPopCurrent_v2_fn)                                                \
    X(cuDeviceTotalMem_v2, om_cuDeviceTotalMem_v2_fn)                                              \
    X(cuMemGetInfo_v2, om_cuMemGetInfo_v2_fn)                                                      \
    X(cuMemAlloc_v2, om_cuMemAlloc_v2_fn)                                                          \
    X(cuMemFree_v2, om_cuMemFree_v2_fn)                                                            \
    X(cuMemAddressReserve, om_cuMemAddressReserve_fn)                                              \
    X(cuMemAddressFree, om_cuMemAddressFree_fn)                                                    \
    X(cuMemCreate, om_cuMemCreate_fn)                                                              \
    X(cuMemRelease, om_cuMemRelease_fn)                                                            \
    X(cuMemMap, om_cuMemMap_fn)                                                                    \
    X(cuMemUnmap, om_cuMemUnmap_fn)                                                                \
    X(cuMemSetAccess, om_cuMemSetAccess_fn)                                                        \
    X(cuMemGetAllocationGranularity, om_cuMemGetAllocationGranularity_fn)                          \
    X(cuEventCreate, om_cuEventCreate_fn)                                                          \
    X(cuEventRecord, om_cuEventRecord_fn)                                                          \
    X(cuEventQuery, om_cuEventQuery_fn)                                                            \
    X(cuStreamWaitEvent, om_cuStreamWaitEvent_fn)                                                  \
    X(cuEventDestroy_v2, om_cuEventDestroy_v2_fn)                                                  \
    X(cuStreamIsCapturing, om_cuStreamIsCapturing_fn)

#define OM_CUDA_ID(name, type) OM_REAL_##name,
enum om_cuda_runtime_id { OM_CUDA_RUNTIME_FUNCTIONS(OM_CUDA_ID) OM_RUNTIME_COUNT };
enum om_cuda_driver_id { OM_CUDA_DRIVER_FUNCTIONS(OM_CUDA_ID) OM_DRIVER_COUNT };
#undef OM_CUDA_ID

/* Caches, filled once found; read and written atomically. A miss is not cached: the library
 * may be loaded later. */
extern om_dlsym_fn om_cuda_dlsym_cache;
extern void *om_cuda_runtime_cache[OM_RUNTIME_COUNT];
extern void *om_cuda_driver_cache[OM_DRIVER_COUNT];

/* glibc's dlsym, found with dlvsym; aborts when there is none (nothing could be found). */
om_dlsym_fn om_cuda_resolve_dlsym(void);
/* NULL when the runtime (or the driver) or the function cannot be found. */
void *om_cuda_resolve_runtime(enum om_cuda_runtime_id id);
void *om_cuda_resolve_driver(enum om_cuda_driver_id id);

/* The driver function called name, for the entry points that replace one: the definition
 * after liboptmem in the global scope, else libcuda.so.1's. NULL when there is none. */
void *om_cuda_driver_symbol(const char *name);

static inline om_dlsym_fn om_cuda_real_dlsym(void)
{
    om_dlsym_fn f = __atomic_load_n(&om_cuda_dlsym_cache, __ATOMIC_ACQUIRE);
    return f ? f : om_cuda_resolve_dlsym();
}

/* om_real_cudaMalloc() ... and om_real_cuCtxGetDevice() ...: the typed real functions. */
#define OM_CUDA_RUNTIME_GETTER(name, type)                                                         \
    static inline type om_real_##name(void)                                                        \
    {                                                                                              \
        void *f = __atomic_load_n(&om_cuda_runtime_cache[OM_REAL_##name], __ATOMIC_ACQUIRE);       \
        return (type)(f ? f : om_cuda_resolve_runtime(OM_REAL_##name));                            \
    }
#define OM_CUDA_DRIVER_GETTER(name, type)                                                          \
    static inline type om_real_##name(void)                                                        \
    {                                                                                              \
        void *f = __atomic_load_n(&om_cuda_driver_cache[OM_REAL_##name], __ATOMIC_ACQUIRE);        \
        return (type)(f ? f : om_cuda_resolve_driver(OM_REAL_##name));                             \
    }
OM_CUDA_RUNTIME_FUNCTIONS(OM_CUDA_RUNTIME_GETTER)
OM_CUDA_DRIVER_FUNCTIONS(OM_CUDA_DRIVER_GETTER)
#undef OM_CUDA_RUNTIME_GETTER
#undef OM_CUDA_DRIVER_GETTER

#endif
