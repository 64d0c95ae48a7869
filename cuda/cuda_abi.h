/* The part of the CUDA driver and runtime ABI that optmem calls or interposes, declared
 * here so that the library (and the fake CUDA in tests/) build without the toolkit.
 * tests/gpu/abi_check.c compares every layout and value with the real headers
 * (tests/gpu/abi_items.h lists them: add a line there for each declaration added here). */
#ifndef OPTMEM_CUDA_ABI_H
#define OPTMEM_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- driver (libcuda.so.1) ---- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

#define OM_CU_STREAM_LEGACY ((CUstream)0x1)
#define OM_CU_STREAM_PER_THREAD ((CUstream)0x2)

enum { CU_EVENT_DISABLE_TIMING = 0x2 };
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1 };
enum { CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1 };
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0 };
enum { CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1 << 0 };
enum { CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1 };
enum { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 };
enum { CU_MEM_HANDLE_TYPE_NONE = 0x0 };
enum { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 };
enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 };
enum { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0 };

typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_* */
    int id;
} CUmemLocation;

typedef struct {
    int type;                 /* CU_MEM_ALLOCATION_TYPE_* */
    int requestedHandleTypes; /* CU_MEM_HANDLE_TYPE_* */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct {
    CUmemLocation location;
    int flags; /* CU_MEM_ACCESS_FLAGS_* */
} CUmemAccessDesc;

/* Driver entry points by type, named as the driver exports them. */
typedef CUresult (*om_cuMemAlloc_v2_fn)(CUdeviceptr *dptr, size_t size);
typedef CUresult (*om_cuMemFree_v2_fn)(CUdeviceptr dptr);
typedef CUresult (*om_cuMemAllocAsync_fn)(CUdeviceptr *dptr, size_t size, CUstream stream);
typedef CUresult (*om_cuMemFreeAsync_fn)(CUdeviceptr dptr, CUstream stream);
typedef CUresult (*om_cuGetProcAddress_fn)(const char *symbol, void **pfn, int cudaVersion,
                                           cuuint64_t flags);
typedef CUresult (*om_cuGetProcAddress_v2_fn)(const char *symbol, void **pfn, int cudaVersion,
                                              cuuint64_t flags, int *symbolStatus);
typedef CUresult (*om_cuCtxGetDevice_fn)(CUdevice *device);
typedef CUresult (*om_cuCtxSynchronize_fn)(void);
typedef CUresult (*om_cuCtxGetCurrent_fn)(CUcontext *pctx);
typedef CUresult (*om_cuCtxPushCurrent_v2_fn)(CUcontext ctx);
typedef CUresult (*om_cuCtxPopCurrent_v2_fn)(CUcontext *pctx);
typedef CUresult (*om_cuDeviceTotalMem_v2_fn)(size_t *bytes, CUdevice dev);
typedef CUresult (*om_cuMemGetInfo_v2_fn)(size_t *free, size_t *total);
typedef CUresult (*om_cuMemAddressReserve_fn)(CUdeviceptr *ptr, size_t size, size_t alignment,
                                              CUdeviceptr addr, unsigned long long flags);
typedef CUresult (*om_cuMemAddressFree_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*om_cuMemCreate_fn)(CUmemGenericAllocationHandle *handle, size_t size,
                                      const CUmemAllocationProp *prop, unsigned long long flags);
typedef CUresult (*om_cuMemRelease_fn)(CUmemGenericAllocationHandle handle);
typedef CUresult (*om_cuMemMap_fn)(CUdeviceptr ptr, size_t size, size_t offset,
                                   CUmemGenericAllocationHandle handle, unsigned long long flags);
typedef CUresult (*om_cuMemUnmap_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult (*om_cuMemSetAccess_fn)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                         size_t count);
typedef CUresult (*om_cuMemGetAllocationGranularity_fn)(size_t *granularity,
                                                        const CUmemAllocationProp *prop,
                                                        int option);
typedef CUresult (*om_cuEventCreate_fn)(CUevent *event, unsigned int flags);
typedef CUresult (*om_cuEventRecord_fn)(CUevent event, CUstream stream);
typedef CUresult (*om_cuEventQuery_fn)(CUevent event);
typedef CUresult (*om_cuStreamWaitEvent_fn)(CUstream stream, CUevent event, unsigned int flags);
typedef CUresult (*om_cuEventDestroy_v2_fn)(CUevent event);
typedef CUresult (*om_cuStreamIsCapturing_fn)(CUstream stream, int *status);

/* ---- runtime (libcudart.so.13) ---- */

typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUmemoryPool cudaMemPool_t;

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
};

/* cudaGetDriverEntryPoint's flags (enum cudaGetDriverEntryPointFlags). */
enum {
    cudaEnableDefault = 0x0,
    cudaEnableLegacyStream = 0x1,
    cudaEnablePerThreadDefaultStream = 0x2,
};

typedef cudaError_t (*om_cudaMalloc_fn)(void **ptr, size_t size);
typedef cudaError_t (*om_cudaFree_fn)(void *ptr);
typedef cudaError_t (*om_cudaMallocAsync_fn)(void **ptr, size_t size, cudaStream_t stream);
typedef cudaError_t (*om_cudaFreeAsync_fn)(void *ptr, cudaStream_t stream);
typedef cudaError_t (*om_cudaMallocFromPoolAsync_fn)(void **ptr, size_t size, cudaMemPool_t pool,
                                                     cudaStream_t stream);
typedef cudaError_t (*om_cudaMallocManaged_fn)(void **ptr, size_t size, unsigned int flags);
typedef cudaError_t (*om_cudaGetDriverEntryPoint_fn)(const char *symbol, void **fn,
                                                     unsigned long long flags, int *status);
typedef cudaError_t (*om_cudaGetDriverEntryPointByVersion_fn)(const char *symbol, void **fn,
                                                              unsigned int cudaVersion,
                                                              unsigned long long flags,
                                                              int *status);

#endif
