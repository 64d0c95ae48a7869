/* The fake CUDA driver (libcuda.so.1) and runtime (libcudart.so.13) of optmem's tests: the
 * entry points they export beyond cuda/cuda_abi.h, and the test-only calls that let a test
 * hold back stream work and ask where a pointer came from.
 *
 * Where the fake is simpler than CUDA: every stream behaves as a non-blocking one (the
 * synchronous cudaMemcpy and cudaMemset do not wait for other streams, so a test can keep work
 * pending across them); the per-thread default stream is the legacy stream of the current
 * device; a captured graph is never launched, so work captured into it never runs and memory
 * freed in it stays mapped for good; a write queued on memory that is gone by the time it runs
 * is an illegal address that poisons the context, as on a device. Environment (read at
 * cuInit): FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_MEMORY (bytes per device, default 1 GiB),
 * FAKE_CUDA_NO_VMM=1 (cuMemAddressReserve answers CUDA_ERROR_NOT_SUPPORTED),
 * FAKE_CUDA_FAIL_CREATE_EVERY=N (every Nth cuMemCreate answers CUDA_ERROR_OUT_OF_MEMORY, a
 * driver failure on demand; allocations through cuMemAlloc are left alone, so a program that
 * allocates plainly runs as without it). */
#ifndef OPTMEM_FAKE_CUDA_H
#define OPTMEM_FAKE_CUDA_H

#include "cuda_abi.h"

#include <stddef.h>

/* ---- driver values missing from cuda_abi.h (the toolkit's values) ----
 * Macros, each only where cuda_abi.h has no macro of that name: it is edited alongside, and a
 * macro that shadows an enumerator it adds later keeps the same value. */

#ifndef CUDA_ERROR_INVALID_DEVICE
#define CUDA_ERROR_INVALID_DEVICE 101
#endif
#ifndef CUDA_ERROR_INVALID_CONTEXT
#define CUDA_ERROR_INVALID_CONTEXT 201
#endif
#ifndef CUDA_ERROR_ALREADY_MAPPED
#define CUDA_ERROR_ALREADY_MAPPED 208
#endif
#ifndef CUDA_ERROR_INVALID_HANDLE
#define CUDA_ERROR_INVALID_HANDLE 400
#endif
#ifndef CUDA_ERROR_ILLEGAL_STATE
#define CUDA_ERROR_ILLEGAL_STATE 401
#endif
#ifndef CUDA_ERROR_ILLEGAL_ADDRESS
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#endif
#ifndef CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#endif
#ifndef CUDA_ERROR_CAPTURED_EVENT
#define CUDA_ERROR_CAPTURED_EVENT 907
#endif
#ifndef CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#endif
#ifndef CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
#endif
#ifndef CU_STREAM_CAPTURE_MODE_GLOBAL
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0
#endif

typedef struct CUgraph_st *CUgraph;

/* ---- driver entry points the fake exports (all also reachable by cuGetProcAddress) ---- */

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *ctx);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                 CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                      CUstream stream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n);
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       int option);
CUresult cuEventCreate(CUevent *event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventRecord_ptsz(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuEventSynchronize(CUevent event);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
CUresult cuStreamCreate(CUstream *stream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamSynchronize_ptsz(CUstream stream);
CUresult cuStreamIsCapturing(CUstream stream, int *status);
CUresult cuStreamIsCapturing_ptsz(CUstream stream, int *status);
CUresult cuStreamBeginCapture_v2(CUstream stream, int mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             int *symbolStatus);

/* ---- test-only driver calls ---- */

/* Queues a write of len bytes of `byte` at dst on stream: it happens only when the stream's
 * work runs (a synchronize, or fakeStreamRunOne). CUDA_ERROR_INVALID_VALUE when dst is not
 * device memory; work queued on a capturing stream goes into the graph and never runs. */
CUresult fakeLaunchFill(void *dst, size_t len, int byte, CUstream stream);
/* Queues a read of len bytes at src on stream that counts those not equal to `byte` when it
 * runs (a kernel that reads the buffer late, as a device does): see fakeCudaMismatches. */
CUresult fakeLaunchCheck(const void *src, size_t len, int byte, CUstream stream);
/* Bytes that queued checks found not as expected, since cuInit. */
unsigned long fakeCudaMismatches(void);
/* Runs the oldest queued operation of stream: 1 if one ran, 0 if none was queued, -1 for a
 * stream that does not exist. */
int fakeStreamRunOne(CUstream stream);
/* Operations queued on stream and not yet run. */
unsigned long fakeStreamPending(CUstream stream);
/* Whether p was returned by the fake's own cuMemAlloc_v2, cuMemAllocAsync,
 * cuMemAllocFromPoolAsync or cuMemAllocManaged and is not freed. */
int fakeCudaIsDirectAllocation(const void *p);
/* The start (and, when len is not NULL, the size) of the live direct allocation that holds
 * p; NULL when none does (a pointer into a cuMemMap'ed range, or not device memory). */
void *fakeCudaDirectBase(const void *p, size_t *len);
/* The device whose memory holds p (a direct allocation, or a mapped physical allocation);
 * -1 when p is not device memory. */
int fakeCudaDeviceOf(const void *p);
/* The most device memory of device held at once (direct allocations but managed ones, and
 * physical allocations) since cuInit, or since the last call with restart != 0, which starts
 * the next window at what is held now. 0 for a device that does not exist. */
size_t fakeCudaPeakBytes(int device, int restart);
/* Calls made to a driver entry point, by its exported name (for example "cuMemAlloc_v2");
 * (unsigned long)-1 for a name the fake does not export. */
unsigned long fakeCudaCalls(const char *name);

/* ---- runtime values and types missing from cuda_abi.h (macros, as above) ---- */

#ifndef cudaErrorInitializationError
#define cudaErrorInitializationError 3
#endif
#ifndef cudaErrorInvalidDevice
#define cudaErrorInvalidDevice 101
#endif
#ifndef cudaErrorSymbolNotFound
#define cudaErrorSymbolNotFound 500
#endif
#ifndef cudaErrorNotReady
#define cudaErrorNotReady 600
#endif
#ifndef cudaErrorIllegalAddress
#define cudaErrorIllegalAddress 700
#endif
#ifndef cudaErrorStreamCaptureUnsupported
#define cudaErrorStreamCaptureUnsupported 900
#endif
#ifndef cudaErrorCapturedEvent
#define cudaErrorCapturedEvent 907
#endif
#ifndef cudaErrorUnknown
#define cudaErrorUnknown 999
#endif
#ifndef cudaMemcpyHostToHost
#define cudaMemcpyHostToHost 0
#endif
#ifndef cudaMemcpyHostToDevice
#define cudaMemcpyHostToDevice 1
#endif
#ifndef cudaMemcpyDeviceToHost
#define cudaMemcpyDeviceToHost 2
#endif
#ifndef cudaMemcpyDeviceToDevice
#define cudaMemcpyDeviceToDevice 3
#endif
#ifndef cudaMemcpyDefault
#define cudaMemcpyDefault 4
#endif
#ifndef cudaStreamCaptureStatusNone
#define cudaStreamCaptureStatusNone 0
#endif
#ifndef cudaStreamCaptureStatusActive
#define cudaStreamCaptureStatusActive 1
#endif
#ifndef cudaStreamCaptureModeGlobal
#define cudaStreamCaptureModeGlobal 0
#endif
#ifndef cudaEnableDefault
#define cudaEnableDefault 0
#endif
#ifndef cudaEnableLegacyStream
#define cudaEnableLegacyStream 1
#endif
#ifndef cudaEnablePerThreadDefaultStream
#define cudaEnablePerThreadDefaultStream 2
#endif
#ifndef cudaMemAttachGlobal
#define cudaMemAttachGlobal 1
#endif
typedef CUevent cudaEvent_t;
typedef CUgraph cudaGraph_t;

/* ---- runtime entry points (versioned libcudart.so.13, as the real library's) ---- */

cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream);
cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, int *status);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, int *status);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemset(void *ptr, int value, size_t n);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t n, cudaStream_t stream);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    int *status);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                         int *status);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             int *status);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags, int *status);
const char *cudaGetErrorString(cudaError_t error);

#endif
