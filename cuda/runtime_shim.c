/* The interposed CUDA runtime allocation entry points and PyTorch's pluggable-allocator
 * functions: each resolves the real function, passes small requests straight through, and
 * hands the rest to an out-of-line slow path. */
#include "glue.h"
#include "optmem.h"
#include "real_cuda.h"

#include <stddef.h>

/* No CUDA header is included: the exported prototypes are declared here. */
OM_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size);
OM_EXPORT cudaError_t cudaFree(void *ptr);
OM_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
OM_EXPORT cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream);
OM_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
OM_EXPORT cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream);
OM_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                              cudaStream_t stream);
OM_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                                   cudaStream_t stream);
OM_EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags);

/* The real calls, made with the caller's own arguments. */
static int call_malloc(const struct om_cuda_alloc *req)
{
    return ((om_cudaMalloc_fn)req->fn)(req->dst, req->size);
}

static int call_malloc_async(const struct om_cuda_alloc *req)
{
    return ((om_cudaMallocAsync_fn)req->fn)(req->dst, req->size, req->stream);
}

static int call_malloc_from_pool(const struct om_cuda_alloc *req)
{
    return ((om_cudaMallocFromPoolAsync_fn)req->fn)(req->dst, req->size, req->pool, req->stream);
}

static int call_malloc_managed(const struct om_cuda_alloc *req)
{
    return ((om_cudaMallocManaged_fn)req->fn)(req->dst, req->size, req->flags);
}

static int call_free(const struct om_cuda_free *req)
{
    return ((om_cudaFree_fn)req->fn)(req->ptr);
}

static int call_free_async(const struct om_cuda_free *req)
{
    return ((om_cudaFreeAsync_fn)req->fn)(req->ptr, req->stream);
}

OM_NOINLINE static cudaError_t malloc_slow(om_cudaMalloc_fn real, void **ptr, size_t size)
{
    struct om_cuda_alloc req = {.kind = OM_CUDA_SYNC,
                                .runtime = 1,
                                .device = -1,
                                .size = size,
                                .dst = ptr,
                                .fn = (void *)real,
                                .real = call_malloc};
    return om_cuda_alloc_slow(&req);
}

OM_NOINLINE static cudaError_t malloc_async_slow(om_cudaMallocAsync_fn real, void **ptr,
                                                 size_t size, cudaStream_t stream, int ptds)
{
    struct om_cuda_alloc req = {.kind = OM_CUDA_ORDERED,
                                .runtime = 1,
                                .device = -1,
                                .ptds = ptds,
                                .size = size,
                                .stream = stream,
                                .dst = ptr,
                                .fn = (void *)real,
                                .real = call_malloc_async};
    return om_cuda_alloc_slow(&req);
}

OM_NOINLINE static cudaError_t malloc_from_pool_slow(om_cudaMallocFromPoolAsync_fn real, void **ptr,
                                                     size_t size, cudaMemPool_t pool,
                                                     cudaStream_t stream)
{
    struct om_cuda_alloc req = {.kind = OM_CUDA_RECORDED,
                                .runtime = 1,
                                .device = -1,
                                .size = size,
                                .stream = stream,
                                .dst = ptr,
                                .fn = (void *)real,
                                .pool = pool,
                                .real = call_malloc_from_pool};
    return om_cuda_alloc_slow(&req);
}

OM_NOINLINE static cudaError_t free_slow(om_cudaFree_fn real, void *ptr)
{
    struct om_cuda_free req = {.ptr = ptr, .fn = (void *)real, .real = call_free};
    return om_cuda_free_slow(&req);
}

OM_NOINLINE static cudaError_t free_async_slow(om_cudaFreeAsync_fn real, void *ptr,
                                               cudaStream_t stream, int ptds)
{
    struct om_cuda_free req = {.ordered = 1,
                               .ptds = ptds,
                               .ptr = ptr,
                               .stream = stream,
                               .fn = (void *)real,
                               .real = call_free_async};
    return om_cuda_free_slow(&req);
}

OM_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    om_cudaMalloc_fn real = om_real_cudaMalloc();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size);
    return malloc_slow(real, ptr, size);
}

OM_EXPORT cudaError_t cudaFree(void *ptr)
{
    om_cudaFree_fn real = om_real_cudaFree();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_watches(ptr)))
        return real(ptr);
    return free_slow(real, ptr);
}

OM_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream)
{
    om_cudaMallocAsync_fn real = om_real_cudaMallocAsync();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size, stream);
    return malloc_async_slow(real, ptr, size, stream, 0);
}

OM_EXPORT cudaError_t cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t stream)
{
    om_cudaMallocAsync_fn real = om_real_cudaMallocAsync_ptsz();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size, stream);
    return malloc_async_slow(real, ptr, size, stream, 1);
}

OM_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    om_cudaFreeAsync_fn real = om_real_cudaFreeAsync();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_watches(ptr)))
        return real(ptr, stream);
    return free_async_slow(real, ptr, stream, 0);
}

OM_EXPORT cudaError_t cudaFreeAsync_ptsz(void *ptr, cudaStream_t stream)
{
    om_cudaFreeAsync_fn real = om_real_cudaFreeAsync_ptsz();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_watches(ptr)))
        return real(ptr, stream);
    return free_async_slow(real, ptr, stream, 1);
}

OM_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                              cudaStream_t stream)
{
    om_cudaMallocFromPoolAsync_fn real = om_real_cudaMallocFromPoolAsync();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size, pool, stream);
    return malloc_from_pool_slow(real, ptr, size, pool, stream);
}

OM_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                                   cudaStream_t stream)
{
    om_cudaMallocFromPoolAsync_fn real = om_real_cudaMallocFromPoolAsync_ptsz();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size, pool, stream);
    return malloc_from_pool_slow(real, ptr, size, pool, stream);
}

OM_NOINLINE static cudaError_t malloc_managed_slow(om_cudaMallocManaged_fn real, void **ptr,
                                                   size_t size, unsigned int flags)
{
    struct om_cuda_alloc req = {.kind = OM_CUDA_RECORDED,
                                .runtime = 1,
                                .device = -1,
                                .size = size,
                                .dst = ptr,
                                .fn = (void *)real,
                                .flags = flags,
                                .real = call_malloc_managed};
    return om_cuda_alloc_slow(&req);
}

OM_EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags)
{
    om_cudaMallocManaged_fn real = om_real_cudaMallocManaged();
    if (OM_UNLIKELY(!real))
        return cudaErrorInitializationError;
    if (OM_LIKELY(!om_cuda_takes(size)))
        return real(ptr, size, flags);
    return malloc_managed_slow(real, ptr, size, flags);
}

/* PyTorch's CUDAPluggableAllocator: served like cudaMallocAsync on stream, for device (the
 * current one when PyTorch calls). */
OM_NOINLINE static void *pluggable_malloc_slow(om_cudaMallocAsync_fn real, size_t size, int device,
                                               cudaStream_t stream)
{
    void *p = NULL;
    struct om_cuda_alloc req = {.kind = OM_CUDA_ORDERED,
                                .runtime = 1,
                                .device = device,
                                .size = size,
                                .stream = stream,
                                .dst = &p,
                                .fn = (void *)real,
                                .real = call_malloc_async};
    return om_cuda_alloc_slow(&req) == cudaSuccess ? p : NULL;
}

OM_EXPORT void *optmem_cuda_malloc(long size, int device, void *stream)
{
    om_cudaMallocAsync_fn real = om_real_cudaMallocAsync();
    void *p = NULL;
    if (size <= 0 || !real)
        return NULL;
    if (OM_LIKELY(!om_cuda_takes((size_t)size)))
        return real(&p, (size_t)size, (cudaStream_t)stream) == cudaSuccess ? p : NULL;
    return pluggable_malloc_slow(real, (size_t)size, device, (cudaStream_t)stream);
}

OM_EXPORT void optmem_cuda_free(void *ptr, long size, int device, void *stream)
{
    om_cudaFreeAsync_fn real = om_real_cudaFreeAsync();
    if (OM_UNLIKELY(!real))
        return;
    if (OM_LIKELY(!om_cuda_watches(ptr))) {
        real(ptr, (cudaStream_t)stream);
        return;
    }
    free_async_slow(real, ptr, (cudaStream_t)stream, 0);
}
