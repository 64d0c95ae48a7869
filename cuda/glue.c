/* Managed device requests: which device and which stream, whether a graph is being captured;
 * served from the device's pool, or handed to the real call and recorded. Everything runs
 * with the engine entered, so that the driver substitutes let optmem's own calls through. */
#include "glue.h"
#include "checkpoint.h"
#include "log.h"
#include "real_cuda.h"

#include <stdint.h>

/* Its address names this thread's per-thread default stream. */
static __thread char tls_ptds_anchor;
/* The runtime has bound its context to this thread once (cudaFree(NULL)). */
static __thread int tls_runtime_bound;
static int capture_warned;

uintptr_t om_cuda_thread_stream_key(void)
{
    return (uintptr_t)&tls_ptds_anchor;
}

/* What stream 0 means for the entry point: the legacy or the per-thread default stream. */
static CUstream stream_handle(CUstream s, int ptds)
{
    if (s)
        return s;
    return ptds ? OM_CU_STREAM_PER_THREAD : OM_CU_STREAM_LEGACY;
}

static uintptr_t stream_key(CUstream s)
{
    return s == OM_CU_STREAM_PER_THREAD ? om_cuda_thread_stream_key() : (uintptr_t)s;
}

/* A stream whose state cannot be read is taken as capturing: passing through is safe. */
static int capturing(CUstream s)
{
    om_cuStreamIsCapturing_fn is_capturing = om_real_cuStreamIsCapturing();
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    return !is_capturing || is_capturing(s, &status) != CUDA_SUCCESS ||
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The runtime makes its primary context current lazily, at a thread's first runtime call. */
static void bind_runtime(void)
{
    om_cudaFree_fn real_free = om_real_cudaFree();
    if (real_free)
        real_free(NULL);
    tls_runtime_bound = 1;
}

static int current_device(int runtime)
{
    if (runtime && !tls_runtime_bound)
        bind_runtime();
    om_cuCtxGetDevice_fn get = om_real_cuCtxGetDevice();
    CUdevice dev;
    if (!get)
        return -1;
    if (get(&dev) == CUDA_SUCCESS)
        return dev;
    if (!runtime)
        return -1;
    bind_runtime(); /* the thread's context was changed since */
    return get(&dev) == CUDA_SUCCESS ? dev : -1;
}

static void *result_of(const struct om_cuda_alloc *req)
{
    if (req->runtime)
        return *(void **)req->dst;
    return (void *)(uintptr_t) * (CUdeviceptr *)req->dst;
}

static void set_result(const struct om_cuda_alloc *req, void *p)
{
    if (req->runtime)
        *(void **)req->dst = p;
    else
        *(CUdeviceptr *)req->dst = (CUdeviceptr)(uintptr_t)p;
}

OM_NOINLINE static int alloc_entered(const struct om_cuda_alloc *req)
{
    if (req->size == 0 || !req->dst ||
        __atomic_load_n(&om_cuda_state, __ATOMIC_ACQUIRE) != OM_CUDA_ON)
        return req->real(req);
    int ordinal = req->device;
    if (ordinal < 0)
        ordinal = current_device(req->runtime);
    else if (req->runtime && !tls_runtime_bound)
        bind_runtime();
    struct om_cuda_dev *d = om_cuda_device(ordinal);
    if (!d)
        return req->real(req);
    struct om_stack stack;
    om_stack_capture(&stack, om_cuda_depth, 2);
    CUstream s = stream_handle(req->stream, req->ptds);
    if (d->pool && req->kind != OM_CUDA_RECORDED && (req->kind == OM_CUDA_SYNC || !capturing(s))) {
        uintptr_t key = req->kind == OM_CUDA_ORDERED ? stream_key(s) : OM_STREAM_NONE;
        void *p = om_pool_alloc(d->pool, req->size, OM_CUDA_ALIGNMENT, 0, key, &stack);
        if (p) {
            set_result(req, p);
            return 0;
        }
    }
    int rc = req->real(req);
    void *p = rc == 0 ? result_of(req) : NULL;
    if (p)
        om_cuda_record_alloc(d, p, req->size, &stack);
    return rc;
}

int om_cuda_alloc_slow(const struct om_cuda_alloc *req)
{
    om_guard_enter();
    int rc = alloc_entered(req);
    om_checkpoint_note_request();
    om_guard_leave();
    return rc;
}

static void free_in_pool(struct om_cuda_dev *d, const struct om_cuda_free *req)
{
    if (!req->ordered) {
        /* As the real cudaFree: nothing queued before the free may still use the bytes.
         * Where the block's device cannot be synchronised, its bytes are never reused. */
        if (om_cuda_backend_sync(&d->backend) == 0)
            om_pool_free(d->pool, req->ptr, OM_STREAM_NONE);
        else
            om_pool_retire(d->pool, req->ptr);
        return;
    }
    CUstream s = stream_handle(req->stream, req->ptds);
    if (!capturing(s)) {
        om_pool_free(d->pool, req->ptr, stream_key(s));
        return;
    }
    /* The graph may touch the block at every replay: its bytes are never reused. */
    if (!__atomic_exchange_n(&capture_warned, 1, __ATOMIC_RELAXED))
        om_warn("a device block was freed while its stream captures a CUDA graph; such "
                "blocks are never reused");
    om_pool_retire(d->pool, req->ptr);
}

int om_cuda_free_slow(const struct om_cuda_free *req)
{
    int rc = 0;
    om_guard_enter();
    int state = __atomic_load_n(&om_cuda_state, __ATOMIC_ACQUIRE);
    struct om_cuda_dev *d = om_cuda_device_of(req->ptr);
    if (!d) {
        if (state == OM_CUDA_ON)
            om_cuda_record_free(req->ptr);
        rc = req->real(req);
    } else if (state == OM_CUDA_ON) {
        free_in_pool(d, req);
    }
    /* In a fork child the parent's arena blocks are left alone: its context is gone. */
    om_guard_leave();
    return rc;
}
