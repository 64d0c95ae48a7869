/* A device arena's bytes (a VMM reservation backed chunk by chunk, or one cuMemAlloc_v2) and
 * the events that order reuse across streams. The pool calls it under its lock, with the
 * engine entered, so the driver substitutes pass these calls through. */
#include "backend_cuda.h"
#include "arena.h"
#include "glue.h"
#include "real_cuda.h"
#include "tracer.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

/* Events of passed fences kept for reuse; more are destroyed. */
#define EVENTS_KEPT 1024

enum { CHUNK_UNMAPPED = 0, CHUNK_MAPPED = 1, CHUNK_NEW = 2 /* mapped by the current call */ };

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) & ~(a - 1);
}

static void device_prop(const struct om_cuda_backend *b, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = b->ordinal;
}

/* The chunk size of physical memory, or 0 where the driver has no VMM (or a granularity the
 * arena's page masks cannot use). */
static size_t granularity(const struct om_cuda_backend *b)
{
    om_cuMemGetAllocationGranularity_fn query = om_real_cuMemGetAllocationGranularity();
    CUmemAllocationProp prop;
    size_t g = 0;
    device_prop(b, &prop);
    if (!query || query(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return 0;
    return g && !(g & (g - 1)) ? g : 0;
}

static int vmm_functions_present(void)
{
    return om_real_cuMemAddressReserve() && om_real_cuMemAddressFree() && om_real_cuMemCreate() &&
           om_real_cuMemRelease() && om_real_cuMemMap() && om_real_cuMemUnmap() &&
           om_real_cuMemSetAccess();
}

static int reserve_vmm(struct om_cuda_backend *b, size_t *len, uintptr_t *base)
{
    if (!vmm_functions_present())
        return -ENOSYS;
    size_t page = b->ops.page;
    size_t align = page > OM_ARENA_ALIGNMENT ? page : OM_ARENA_ALIGNMENT;
    size_t want = align_up(*len, align);
    CUdeviceptr ptr;
    if (om_real_cuMemAddressReserve()(&ptr, want, align, 0, 0) != CUDA_SUCCESS)
        return -ENOMEM;
    int rc = -EINVAL;
    if (ptr & (align - 1))
        goto unreserve;
    rc = -ENOMEM;
    b->nchunks = want / page;
    b->chunks = om_sys_map(b->nchunks * sizeof *b->chunks);
    if (!b->chunks)
        goto unreserve;
    b->base = ptr;
    b->len = want;
    *len = want;
    *base = (uintptr_t)ptr;
    return 0;
unreserve:
    om_real_cuMemAddressFree()(ptr, want);
    return rc;
}

/* Without VMM the arena is 90 % of the free memory, allocated once and never given back. */
static int reserve_single(struct om_cuda_backend *b, size_t *len, uintptr_t *base)
{
    om_cuMemGetInfo_v2_fn info = om_real_cuMemGetInfo_v2();
    om_cuMemAlloc_v2_fn alloc = om_real_cuMemAlloc_v2();
    size_t free_bytes, total;
    if (!info || !alloc)
        return -ENOSYS;
    if (info(&free_bytes, &total) != CUDA_SUCCESS)
        return -ENODEV;
    size_t want = (free_bytes / 10 * 9) & ~(OM_ARENA_ALIGNMENT - 1);
    if (want > *len)
        want = *len;
    if (want < 2 * OM_ARENA_ALIGNMENT) /* room to align the start */
        return -ENOMEM;
    CUdeviceptr ptr;
    if (alloc(&ptr, want) != CUDA_SUCCESS)
        return -ENOMEM;
    uintptr_t start = align_up((uintptr_t)ptr, OM_ARENA_ALIGNMENT);
    b->single = ptr;
    b->single_len = want;
    *base = start;
    *len = ((uintptr_t)ptr + want - start) & ~(OM_ARENA_ALIGNMENT - 1);
    return 0;
}

static int reserve(void *ctx, size_t *len, uintptr_t *base)
{
    struct om_cuda_backend *b = ctx;
    if (b->vmm && reserve_vmm(b, len, base) == 0)
        return 0;
    b->vmm = 0;
    b->ops.map = NULL;
    b->ops.release = NULL;
    return reserve_single(b, len, base);
}

static int map_chunk(struct om_cuda_backend *b, size_t i, const CUmemAllocationProp *prop,
                     const CUmemAccessDesc *access)
{
    size_t page = b->ops.page;
    CUdeviceptr at = b->base + i * page;
    CUmemGenericAllocationHandle h;
    if (om_real_cuMemCreate()(&h, page, prop, 0) != CUDA_SUCCESS)
        return -ENOMEM;
    if (om_real_cuMemMap()(at, page, 0, h, 0) != CUDA_SUCCESS)
        goto release;
    if (om_real_cuMemSetAccess()(at, page, access, 1) != CUDA_SUCCESS)
        goto unmap;
    b->chunks[i].handle = h;
    return 0;
unmap:
    om_real_cuMemUnmap()(at, page);
release:
    om_real_cuMemRelease()(h);
    return -ENOMEM;
}

static int unmap_chunk(struct om_cuda_backend *b, size_t i)
{
    CUdeviceptr at = b->base + i * b->ops.page;
    if (om_real_cuMemUnmap()(at, b->ops.page) != CUDA_SUCCESS)
        return -EIO;
    b->chunks[i].mapped = CHUNK_UNMAPPED;
    return om_real_cuMemRelease()(b->chunks[i].handle) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Chunks [*first, *end) that [addr, addr + len) touches (outer) or wholly covers (inner). */
static int chunk_span(const struct om_cuda_backend *b, uintptr_t addr, size_t len, int outer,
                      size_t *first, size_t *end)
{
    size_t page = b->ops.page;
    if (addr < b->base || addr - b->base > b->len || len > b->len - (addr - b->base))
        return -EINVAL;
    size_t off = addr - b->base;
    *first = outer ? off / page : align_up(off, page) / page;
    *end = outer ? align_up(off + len, page) / page : (off + len) / page;
    return 0;
}

static int map(void *ctx, uintptr_t addr, size_t len)
{
    struct om_cuda_backend *b = ctx;
    size_t first, end, i;
    if (chunk_span(b, addr, len, 1, &first, &end) != 0)
        return -EINVAL;
    CUmemAllocationProp prop;
    device_prop(b, &prop);
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (i = first; i < end; i++) {
        if (b->chunks[i].mapped)
            continue;
        if (map_chunk(b, i, &prop, &access) != 0)
            goto undo;
        b->chunks[i].mapped = CHUNK_NEW;
    }
    for (i = first; i < end; i++)
        if (b->chunks[i].mapped == CHUNK_NEW)
            b->chunks[i].mapped = CHUNK_MAPPED;
    return 0;
undo:
    /* Nothing of a failed request stays mapped: the caller falls back to the real call. */
    for (size_t j = first; j < i; j++)
        if (b->chunks[j].mapped == CHUNK_NEW)
            unmap_chunk(b, j);
    return -ENOMEM;
}

static int release(void *ctx, uintptr_t addr, size_t len)
{
    struct om_cuda_backend *b = ctx;
    size_t first, end, i;
    if (chunk_span(b, addr, len, 0, &first, &end) != 0)
        return -EINVAL;
    for (i = first; i < end && !b->chunks[i].mapped; i++)
        ;
    if (i == end)
        return 0;
    /* cuMemUnmap does not wait for queued kernels in every case (PyTorch's expandable
     * segments synchronise for the same reason), and a block freed in stream order may
     * still be in use there. */
    if (om_cuda_backend_sync(b) != 0)
        return -EBUSY;
    int rc = 0;
    for (; i < end; i++)
        if (b->chunks[i].mapped && unmap_chunk(b, i) != 0)
            rc = -EIO;
    return rc;
}

static void lock_events(struct om_cuda_backend *b)
{
    while (__atomic_exchange_n(&b->events_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void unlock_events(struct om_cuda_backend *b)
{
    __atomic_store_n(&b->events_lock, 0, __ATOMIC_RELEASE);
}

static CUevent take_event(struct om_cuda_backend *b)
{
    CUevent ev = NULL;
    lock_events(b);
    if (b->nevents)
        ev = b->events[--b->nevents];
    unlock_events(b);
    return ev;
}

static void keep_event(struct om_cuda_backend *b, CUevent ev)
{
    lock_events(b);
    int kept = b->nevents < EVENTS_KEPT;
    if (kept)
        b->events[b->nevents++] = ev;
    unlock_events(b);
    if (!kept && om_real_cuEventDestroy_v2())
        om_real_cuEventDestroy_v2()(ev);
}

/* The stream a pool's stream key names: this thread's per-thread default stream has a key
 * of its own (glue.c), the others are their handles. */
static CUstream cu_stream(uintptr_t key)
{
    return key == om_cuda_thread_stream_key() ? OM_CU_STREAM_PER_THREAD : (CUstream)key;
}

/* Events belong to the context current when they are made, and may only be recorded on its
 * streams: a fence is refused while another device is current. */
static int fence_record(void *ctx, uintptr_t stream, uintptr_t *fence)
{
    struct om_cuda_backend *b = ctx;
    CUstream s = cu_stream(stream);
    CUdevice current;
    if (om_real_cuCtxGetDevice()(&current) != CUDA_SUCCESS || current != b->ordinal)
        return -EXDEV;
    CUevent ev = take_event(b);
    if (!ev && om_real_cuEventCreate()(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return -ENOMEM;
    if (om_real_cuEventRecord()(ev, s) != CUDA_SUCCESS) {
        keep_event(b, ev);
        return -EIO;
    }
    *fence = (uintptr_t)ev;
    return 0;
}

static int fence_passed(void *ctx, uintptr_t fence)
{
    return om_real_cuEventQuery()((CUevent)fence) == CUDA_SUCCESS;
}

/* The device orders the waiting stream's later work after the fence; the CPU does not wait
 * (what the driver's own pools do for reuse across streams). */
static int fence_wait(void *ctx, uintptr_t stream, uintptr_t fence)
{
    om_cuStreamWaitEvent_fn wait = om_real_cuStreamWaitEvent();
    CUstream s = cu_stream(stream);
    return wait && wait(s, (CUevent)fence, 0) == CUDA_SUCCESS ? 0 : -EIO;
}

static void fence_drop(void *ctx, uintptr_t fence)
{
    keep_event(ctx, (CUevent)fence);
}

int om_cuda_backend_init(struct om_cuda_backend *b, int ordinal, const char *name,
                         size_t *reserve_len)
{
    memset(b, 0, sizeof *b);
    om_cuDeviceTotalMem_v2_fn total_mem = om_real_cuDeviceTotalMem_v2();
    if (!total_mem || !om_real_cuCtxGetDevice() || !om_real_cuCtxSynchronize() ||
        !om_real_cuEventCreate() || !om_real_cuEventRecord() || !om_real_cuEventQuery())
        return -ENOSYS;
    size_t total;
    if (total_mem(&total, ordinal) != CUDA_SUCCESS || total == 0)
        return -ENODEV;
    if (total > (SIZE_MAX - OM_ARENA_ALIGNMENT) / 2)
        return -EOVERFLOW;
    b->events = om_sys_map(EVENTS_KEPT * sizeof *b->events);
    if (!b->events)
        return -ENOMEM;
    b->ordinal = ordinal;
    strncpy(b->ops.name, name, sizeof b->ops.name - 1);
    b->ops.host_addressable = 0;
    b->ops.ctx = b;
    b->ops.reserve = reserve;
    b->ops.map = map;
    b->ops.release = release;
    b->ops.fence_record = fence_record;
    b->ops.fence_passed = fence_passed;
    b->ops.fence_wait = fence_wait;
    b->ops.fence_drop = fence_drop;
    size_t page = granularity(b);
    b->vmm = page != 0;
    /* Without VMM nothing is mapped or released: the page only rounds what the arena
     * computes, and the arena's own alignment is the natural unit. */
    b->ops.page = page ? page : OM_ARENA_ALIGNMENT;
    if (om_real_cuCtxGetCurrent())
        om_real_cuCtxGetCurrent()(&b->ctx);
    *reserve_len = align_up(2 * total, OM_ARENA_ALIGNMENT);
    return 0;
}

void om_cuda_backend_destroy(struct om_cuda_backend *b)
{
    if (b->chunks) {
        for (size_t i = 0; i < b->nchunks; i++)
            if (b->chunks[i].mapped)
                unmap_chunk(b, i);
        om_real_cuMemAddressFree()(b->base, b->len);
        om_sys_unmap(b->chunks, b->nchunks * sizeof *b->chunks);
        b->chunks = NULL;
    }
    if (b->single && om_real_cuMemFree_v2())
        om_real_cuMemFree_v2()(b->single);
    b->single = 0;
    if (b->events) {
        om_cuEventDestroy_v2_fn destroy = om_real_cuEventDestroy_v2();
        for (size_t i = 0; destroy && i < b->nevents; i++)
            destroy(b->events[i]);
        om_sys_unmap(b->events, EVENTS_KEPT * sizeof *b->events);
        b->events = NULL;
    }
}

int om_cuda_backend_sync(struct om_cuda_backend *b)
{
    CUdevice current;
    if (om_real_cuCtxGetDevice()(&current) == CUDA_SUCCESS && current == b->ordinal) {
        om_real_cuCtxSynchronize()();
        return 0;
    }
    om_cuCtxPushCurrent_v2_fn push = om_real_cuCtxPushCurrent_v2();
    om_cuCtxPopCurrent_v2_fn pop = om_real_cuCtxPopCurrent_v2();
    if (!b->ctx || !push || !pop || push(b->ctx) != CUDA_SUCCESS)
        return -EXDEV;
    om_real_cuCtxSynchronize()();
    CUcontext popped;
    pop(&popped);
    return 0;
}
