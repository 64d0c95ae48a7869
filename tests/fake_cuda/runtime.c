/* The fake CUDA runtime, libcudart.so.13: like the real one it dlopen()s libcuda.so.1 and
 * reaches every driver function through the driver's cuGetProcAddress_v2 (itself found with
 * dlsym), so an interposer of dlsym or cuGetProcAddress sees the lookups it would see in a
 * real process. */
#include "fake_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define RUNTIME_VERSION 13000
#define MAX_DEVICES 16
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* The driver functions this runtime uses, looked up by base name. */
static struct {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamIsCapturing)(CUstream, int *);
    CUresult (*cuStreamIsCapturing_ptsz)(CUstream, int *);
    CUresult (*cuStreamBeginCapture)(CUstream, int);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventDestroy)(CUevent);
} drv;

static om_cuGetProcAddress_v2_fn get_proc;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static cudaError_t init_error;
static int device_count;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[MAX_DEVICES];
static TLS int current_device;

static int resolve(const char *name, cuuint64_t flags, void *slot)
{
    void *fn = NULL;
    int status = -1;
    if (get_proc(name, &fn, RUNTIME_VERSION, flags, &status) != CUDA_SUCCESS || !fn)
        return -1;
    *(void **)slot = fn;
    return 0;
}

#define RESOLVE(name) resolve(#name, 0, &drv.name)
#define RESOLVE_PTSZ(name)                                                                         \
    resolve(#name, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &drv.name##_ptsz)

static void init(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    get_proc = lib ? (om_cuGetProcAddress_v2_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!get_proc) {
        init_error = cudaErrorInitializationError;
        return;
    }
    int missing = RESOLVE(cuInit) | RESOLVE(cuDeviceGetCount) | RESOLVE(cuDevicePrimaryCtxRetain) |
                  RESOLVE(cuCtxSetCurrent) | RESOLVE(cuCtxGetCurrent) | RESOLVE(cuCtxSynchronize) |
                  RESOLVE(cuMemAlloc) | RESOLVE(cuMemFree) | RESOLVE(cuMemAllocManaged) |
                  RESOLVE(cuMemAllocAsync) | RESOLVE_PTSZ(cuMemAllocAsync) |
                  RESOLVE(cuMemAllocFromPoolAsync) | RESOLVE_PTSZ(cuMemAllocFromPoolAsync) |
                  RESOLVE(cuMemFreeAsync) | RESOLVE_PTSZ(cuMemFreeAsync) | RESOLVE(cuMemcpyHtoD) |
                  RESOLVE(cuMemcpyDtoH) | RESOLVE(cuMemcpyDtoD) | RESOLVE(cuMemcpy) |
                  RESOLVE(cuMemsetD8) | RESOLVE(cuMemsetD8Async) | RESOLVE(cuStreamCreate) |
                  RESOLVE(cuStreamDestroy) | RESOLVE(cuStreamSynchronize) |
                  RESOLVE(cuStreamIsCapturing) | RESOLVE_PTSZ(cuStreamIsCapturing) |
                  RESOLVE(cuStreamBeginCapture) | RESOLVE(cuStreamEndCapture) |
                  RESOLVE(cuEventCreate) | RESOLVE(cuEventRecord) | RESOLVE(cuEventQuery) |
                  RESOLVE(cuEventSynchronize) | RESOLVE(cuEventDestroy);
    if (missing || drv.cuInit(0) != CUDA_SUCCESS || drv.cuDeviceGetCount(&device_count) ||
        device_count < 1) {
        init_error = cudaErrorInitializationError;
        return;
    }
    if (device_count > MAX_DEVICES)
        device_count = MAX_DEVICES;
}

/* Driver and runtime error codes agree for every value the fake driver returns. */
static cudaError_t rt(CUresult rc)
{
    return (cudaError_t)rc;
}

/* Every runtime call starts here: initialises once, then makes the calling thread's device's
 * primary context current, as the real runtime does lazily in each thread. */
static cudaError_t enter(void)
{
    pthread_once(&once, init);
    if (init_error)
        return init_error;
    int dev = current_device;
    pthread_mutex_lock(&ctx_lock);
    CUresult rc = primary[dev] ? CUDA_SUCCESS : drv.cuDevicePrimaryCtxRetain(&primary[dev], dev);
    CUcontext ctx = primary[dev];
    pthread_mutex_unlock(&ctx_lock);
    CUcontext now = NULL;
    if (!rc)
        rc = drv.cuCtxGetCurrent(&now);
    if (!rc && now != ctx)
        rc = drv.cuCtxSetCurrent(ctx);
    return rt(rc);
}

#define ENTER()                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = enter();                                                                  \
        if (e_)                                                                                    \
            return e_;                                                                             \
    } while (0)

/* A runtime call that is one driver call in the thread's context, defined as
 * FORWARD(runtime function, driver call, its parameters...). */
#define FORWARD(name, call, ...)                                                                   \
    cudaError_t name(__VA_ARGS__)                                                                  \
    {                                                                                              \
        ENTER();                                                                                   \
        return rt(drv.call);                                                                       \
    }

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
    ENTER();
    if (!count)
        return cudaErrorInvalidValue;
    *count = device_count;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    ENTER();
    if (!device)
        return cudaErrorInvalidValue;
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    pthread_once(&once, init);
    if (init_error)
        return init_error;
    if (device < 0 || device >= device_count)
        return cudaErrorInvalidDevice;
    current_device = device;
    return enter();
}

FORWARD(cudaDeviceSynchronize, cuCtxSynchronize(), void)

cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version)
        return cudaErrorInvalidValue;
    *version = RUNTIME_VERSION;
    return cudaSuccess;
}

/* ---- memory ---- */

static cudaError_t out_ptr(void **ptr, CUdeviceptr d, CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        *ptr = (void *)(uintptr_t)d;
    return rt(rc);
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

/* As the real runtime: a request of 0 bytes succeeds with NULL. The driver entry is passed
 * by its slot: the slots are filled by the first ENTER(). */
static cudaError_t malloc_with(void **ptr, size_t size, cudaStream_t stream, const alloc_fn *fn)
{
    ENTER();
    if (!ptr)
        return cudaErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    return out_ptr(ptr, d, (*fn)(&d, size, stream));
}

/* cuMemAlloc in cuMemAllocAsync's shape, for malloc_with. */
static CUresult mem_alloc(CUdeviceptr *d, size_t size, CUstream unused)
{
    return drv.cuMemAlloc(d, size);
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    static const alloc_fn sync_alloc = mem_alloc;
    return malloc_with(ptr, size, NULL, &sync_alloc);
}

/* cudaFree(NULL) only initialises; any other free waits for the device first. */
cudaError_t cudaFree(void *ptr)
{
    ENTER();
    if (!ptr)
        return cudaSuccess;
    CUresult rc = drv.cuCtxSynchronize();
    return rt(rc ? rc : drv.cuMemFree(dptr(ptr)));
}

cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags)
{
    ENTER();
    if (!ptr || size == 0)
        return cudaErrorInvalidValue;
    CUdeviceptr d = 0;
    return out_ptr(ptr, d, drv.cuMemAllocManaged(&d, size, flags));
}

cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream)
{
    return malloc_with(ptr, size, stream, &drv.cuMemAllocAsync);
}

cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream)
{
    return malloc_with(ptr, size, stream, &drv.cuMemAllocAsync_ptsz);
}

/* The pool is the caller's business: the fake driver ignores it. */
static cudaError_t malloc_from_pool(void **ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream, const pool_alloc_fn *fn)
{
    ENTER();
    if (!ptr || size == 0)
        return cudaErrorInvalidValue;
    CUdeviceptr d = 0;
    return out_ptr(ptr, d, (*fn)(&d, size, pool, stream));
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, pool, stream, &drv.cuMemAllocFromPoolAsync);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, pool, stream, &drv.cuMemAllocFromPoolAsync_ptsz);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    ENTER();
    return ptr ? rt(drv.cuMemFreeAsync(dptr(ptr), stream)) : cudaSuccess;
}

cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream)
{
    ENTER();
    return ptr ? rt(drv.cuMemFreeAsync_ptsz(dptr(ptr), stream)) : cudaSuccess;
}

/* Synchronous, and not ordered after other streams' work: every fake stream behaves as a
 * non-blocking stream, so a test can keep work pending across a copy. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    ENTER();
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return rt(drv.cuMemcpyHtoD(dptr(dst), src, n));
    case cudaMemcpyDeviceToHost:
        return rt(drv.cuMemcpyDtoH(dst, dptr(src), n));
    case cudaMemcpyDeviceToDevice:
        return rt(drv.cuMemcpyDtoD(dptr(dst), dptr(src), n));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        return rt(drv.cuMemcpy(dptr(dst), dptr(src), n));
    }
    return cudaErrorInvalidValue;
}

FORWARD(cudaMemset, cuMemsetD8(dptr(ptr), (unsigned char)value, n), void *ptr, int value, size_t n)
FORWARD(cudaMemsetAsync, cuMemsetD8Async(dptr(ptr), (unsigned char)value, n, stream), void *ptr,
        int value, size_t n, cudaStream_t stream)

/* ---- streams and events ---- */

FORWARD(cudaStreamCreate, cuStreamCreate(stream, 0), cudaStream_t *stream)
FORWARD(cudaStreamDestroy, cuStreamDestroy(stream), cudaStream_t stream)
FORWARD(cudaStreamSynchronize, cuStreamSynchronize(stream), cudaStream_t stream)
FORWARD(cudaStreamIsCapturing, cuStreamIsCapturing(stream, status), cudaStream_t stream,
        int *status)
FORWARD(cudaStreamIsCapturing_ptsz, cuStreamIsCapturing_ptsz(stream, status), cudaStream_t stream,
        int *status)
FORWARD(cudaStreamBeginCapture, cuStreamBeginCapture(stream, mode), cudaStream_t stream, int mode)
FORWARD(cudaStreamEndCapture, cuStreamEndCapture(stream, graph), cudaStream_t stream,
        cudaGraph_t *graph)

FORWARD(cudaEventCreate, cuEventCreate(event, 0), cudaEvent_t *event)
FORWARD(cudaEventRecord, cuEventRecord(event, stream), cudaEvent_t event, cudaStream_t stream)
FORWARD(cudaEventQuery, cuEventQuery(event), cudaEvent_t event)
FORWARD(cudaEventSynchronize, cuEventSynchronize(event), cudaEvent_t event)
FORWARD(cudaEventDestroy, cuEventDestroy(event), cudaEvent_t event)

/* ---- driver entry points ---- */

static cudaError_t entry_point(const char *symbol, void **fn, unsigned int version,
                               unsigned long long flags, int *status)
{
    ENTER();
    if (!symbol || !fn || flags > cudaEnablePerThreadDefaultStream)
        return cudaErrorInvalidValue;
    int st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = get_proc(symbol, fn, (int)version, flags, &st);
    if (status)
        *status = st;
    if (rc == CUDA_ERROR_NOT_FOUND) {
        *fn = NULL;
        return cudaSuccess;
    }
    return rt(rc);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    int *status)
{
    return entry_point(symbol, fn, RUNTIME_VERSION, flags, status);
}

/* The per-thread default stream build: cudaEnableDefault means the per-thread variants. */
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                         int *status)
{
    return entry_point(symbol, fn, RUNTIME_VERSION,
                       flags == cudaEnableDefault ? cudaEnablePerThreadDefaultStream : flags,
                       status);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             int *status)
{
    return entry_point(symbol, fn, cudaVersion, flags, status);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags, int *status)
{
    return entry_point(symbol, fn, cudaVersion,
                       flags == cudaEnableDefault ? cudaEnablePerThreadDefaultStream : flags,
                       status);
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInitializationError:
        return "initialization error";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT:
        return "invalid device context";
    case CUDA_ERROR_ALREADY_MAPPED:
        return "resource already mapped";
    case CUDA_ERROR_INVALID_HANDLE:
        return "invalid resource handle";
    case CUDA_ERROR_ILLEGAL_STATE:
        return "the operation cannot be performed in the present state";
    case cudaErrorSymbolNotFound:
        return "named symbol not found";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case CUDA_ERROR_NOT_SUPPORTED:
        return "operation not supported";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorCapturedEvent:
        return "operation not permitted on an event last recorded in a capturing stream";
    }
    return "unknown error";
}
