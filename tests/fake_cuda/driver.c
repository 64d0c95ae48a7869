/* The fake CUDA driver, libcuda.so.1: device memory is host memory from mmap, streams are
 * queues of deferred work, events complete when the work queued before them has run, and the
 * VMM API maps memfd-backed physical allocations, so that optmem's device domain can be tested
 * without a GPU. One mutex guards everything. */
#include "fake_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_DEVICES 16
#define MAX_STREAMS 256 /* the first MAX_DEVICES are the devices' legacy default streams */
#define QUEUE_LEN 256
#define MAX_EVENTS 16384
#define MAX_DIRECT 16384
#define MAX_RESERVED 64
#define MAX_HANDLES 16384
#define MAX_MAPPINGS 16384
#define CTX_STACK 8
#define GRANULARITY ((size_t)2 << 20)
#define DRIVER_VERSION 13000
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* Entry points counted for fakeCudaCalls, by exported name. */
#define ENTRY_POINTS(X)                                                                            \
    X(cuInit)                                                                                      \
    X(cuDriverGetVersion)                                                                          \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceTotalMem_v2)                                                                         \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease_v2)                                                                \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxPushCurrent_v2)                                                                         \
    X(cuCtxPopCurrent_v2)                                                                          \
    X(cuCtxGetDevice)                                                                              \
    X(cuCtxSynchronize)                                                                            \
    X(cuMemGetInfo_v2)                                                                             \
    X(cuMemAlloc_v2)                                                                               \
    X(cuMemFree_v2)                                                                                \
    X(cuMemAllocManaged)                                                                           \
    X(cuMemAllocAsync)                                                                             \
    X(cuMemAllocAsync_ptsz)                                                                        \
    X(cuMemAllocFromPoolAsync)                                                                     \
    X(cuMemAllocFromPoolAsync_ptsz)                                                                \
    X(cuMemFreeAsync)                                                                              \
    X(cuMemFreeAsync_ptsz)                                                                         \
    X(cuMemcpyHtoD_v2)                                                                             \
    X(cuMemcpyDtoH_v2)                                                                             \
    X(cuMemcpyDtoD_v2)                                                                             \
    X(cuMemcpy)                                                                                    \
    X(cuMemsetD8_v2)                                                                               \
    X(cuMemsetD8Async)                                                                             \
    X(cuMemsetD8Async_ptsz)                                                                        \
    X(cuMemAddressReserve)                                                                         \
    X(cuMemAddressFree)                                                                            \
    X(cuMemCreate)                                                                                 \
    X(cuMemRelease)                                                                                \
    X(cuMemMap)                                                                                    \
    X(cuMemUnmap)                                                                                  \
    X(cuMemSetAccess)                                                                              \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventRecord_ptsz)                                                                          \
    X(cuEventQuery)                                                                                \
    X(cuEventSynchronize)                                                                          \
    X(cuEventDestroy_v2)                                                                           \
    X(cuStreamWaitEvent)                                                                           \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy_v2)                                                                          \
    X(cuStreamSynchronize)                                                                         \
    X(cuStreamSynchronize_ptsz)                                                                    \
    X(cuStreamIsCapturing)                                                                         \
    X(cuStreamIsCapturing_ptsz)                                                                    \
    X(cuStreamBeginCapture_v2)                                                                     \
    X(cuStreamEndCapture)                                                                          \
    X(cuGetProcAddress)                                                                            \
    X(cuGetProcAddress_v2)

#define AS_ENUM(name) E_##name,
#define AS_NAME(name) #name,
enum entry { ENTRY_POINTS(AS_ENUM) E_COUNT };
static const char *const entry_names[E_COUNT] = {ENTRY_POINTS(AS_NAME)};
static atomic_ulong entry_calls[E_COUNT];
#define COUNT(name) atomic_fetch_add_explicit(&entry_calls[E_##name], 1, memory_order_relaxed)

enum op_kind { OP_FILL, OP_CHECK, OP_FREE, OP_WAIT };

struct op {
    enum op_kind kind;
    unsigned char byte;
    uintptr_t dst;
    size_t len;
    /* OP_WAIT: the stream's work up to seq runs first, if the stream is still that one */
    struct CUstream_st *wait;
    unsigned wait_gen;
    unsigned long long seq;
};

struct CUstream_st {
    int used, device, capturing;
    unsigned gen; /* changes when the slot is destroyed, so old events see their work done */
    unsigned long long queued, done;
    struct op ring[QUEUE_LEN];
};

struct CUevent_st {
    int used, recorded, captured;
    struct CUstream_st *stream;
    unsigned gen;
    unsigned long long seq; /* complete once stream->done reaches it */
};

struct CUctx_st {
    int device;
};

struct direct {
    uintptr_t base;
    size_t size, maplen;
    int device, managed;
    int freeing; /* freed in stream order: unmapped when its stream reaches the free */
};

struct reservation {
    uintptr_t base;
    size_t len;
};

struct handle {
    int used, fd, device, released;
    size_t size;
    unsigned maps;
};

struct mapping {
    uintptr_t addr;
    size_t len;
    unsigned handle;
    int access;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int inited;
    pid_t pid;
    int devices;
    size_t memory, page;
    int no_vmm;
    unsigned long long fail_every, creates; /* FAKE_CUDA_FAIL_CREATE_EVERY */
    size_t used[MAX_DEVICES];
    size_t peak[MAX_DEVICES]; /* most of used since cuInit or fakeCudaPeakBytes' restart */
    CUresult sticky;          /* a deferred write hit memory that was not the device's */
    unsigned long mismatches; /* bytes queued checks found changed */
} g;
static struct CUctx_st contexts[MAX_DEVICES];
static struct CUstream_st streams[MAX_STREAMS];
static struct CUevent_st events[MAX_EVENTS];
static struct direct directs[MAX_DIRECT];
static size_t ndirect;
static struct reservation reservations[MAX_RESERVED];
static struct handle handles[MAX_HANDLES];
static struct mapping mappings[MAX_MAPPINGS];
static size_t nmappings;
static char graph_token;
static TLS CUcontext ctx_stack[CTX_STACK];
static TLS int ctx_depth;

static unsigned long long env_size(const char *name, unsigned long long fallback)
{
    const char *s = getenv(name);
    char *end;
    if (!s || !*s)
        return fallback;
    unsigned long long v = strtoull(s, &end, 10);
    return *end || v == 0 ? fallback : v;
}

/* A forked child cannot use its parent's driver state, as with the real driver. */
static CUresult ready(void)
{
    if (!__atomic_load_n(&g.inited, __ATOMIC_ACQUIRE) || g.pid != getpid())
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

/* Opens every entry point that needs cuInit: counts the call, then refuses it before any
 * argument is looked at, so that a call before cuInit or in a forked child fails the same way
 * whatever it passes (the static helpers the entry points share run after it). A macro
 * because it returns from the entry point. */
#define ENTER(name)                                                                                \
    do {                                                                                           \
        COUNT(name);                                                                               \
        CUresult not_ready = ready();                                                              \
        if (not_ready)                                                                             \
            return not_ready;                                                                      \
    } while (0)

static int current_device(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1]->device : -1;
}

static int valid_device(int dev)
{
    return dev >= 0 && dev < g.devices;
}

/* NULL, the legacy and the per-thread handles all name the current device's default stream
 * (the fake has no per-thread default streams of its own). */
static struct CUstream_st *stream_get(CUstream s)
{
    if (s == NULL || s == OM_CU_STREAM_LEGACY || s == OM_CU_STREAM_PER_THREAD) {
        int dev = current_device();
        return dev < 0 ? NULL : &streams[dev];
    }
    uintptr_t u = (uintptr_t)s, lo = (uintptr_t)&streams[MAX_DEVICES];
    if (u < lo || u >= (uintptr_t)&streams[MAX_STREAMS] || (u - lo) % sizeof streams[0])
        return NULL;
    struct CUstream_st *st = (struct CUstream_st *)s;
    return st->used ? st : NULL;
}

static CUresult no_stream(CUstream s)
{
    return s == NULL || s == OM_CU_STREAM_LEGACY || s == OM_CU_STREAM_PER_THREAD
               ? CUDA_ERROR_INVALID_CONTEXT
               : CUDA_ERROR_INVALID_HANDLE;
}

static struct CUevent_st *event_get(CUevent e)
{
    uintptr_t u = (uintptr_t)e, lo = (uintptr_t)&events[0];
    if (u < lo || u >= (uintptr_t)&events[MAX_EVENTS] || (u - lo) % sizeof events[0])
        return NULL;
    struct CUevent_st *ev = (struct CUevent_st *)e;
    return ev->used ? ev : NULL;
}

static struct direct *direct_at(uintptr_t p, int containing)
{
    for (size_t i = 0; i < ndirect; i++) {
        struct direct *d = &directs[i];
        if (containing ? p >= d->base && p - d->base < d->size : p == d->base)
            return d;
    }
    return NULL;
}

static struct mapping *mapping_at(uintptr_t p)
{
    for (size_t i = 0; i < nmappings; i++)
        if (p >= mappings[i].addr && p - mappings[i].addr < mappings[i].len)
            return &mappings[i];
    return NULL;
}

/* Whether [p, p + n) is device memory the program may touch: inside one live direct
 * allocation (or one being freed in stream order, for work queued before the free), or
 * covered by mapped ranges whose access was set. */
static int device_range(uintptr_t p, size_t n, int allow_freeing)
{
    if (n == 0 || p + n < p)
        return n == 0;
    struct direct *d = direct_at(p, 1);
    if (d)
        return (allow_freeing || !d->freeing) && n <= d->size - (p - d->base);
    for (uintptr_t at = p; at < p + n;) {
        struct mapping *m = mapping_at(at);
        if (!m || !m->access)
            return 0;
        at = m->addr + m->len;
    }
    return 1;
}

static void used_add(int device, size_t len)
{
    g.used[device] += len;
    if (g.used[device] > g.peak[device])
        g.peak[device] = g.used[device];
}

static CUresult direct_alloc(CUdeviceptr *dptr, size_t size, int device, int managed)
{
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > g.memory || ndirect == MAX_DIRECT)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = (size + g.page - 1) / g.page * g.page;
    if (!managed && g.used[device] + len > g.memory)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    directs[ndirect++] = (struct direct){(uintptr_t)p, size, len, device, managed, 0};
    if (!managed)
        used_add(device, len);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Forgets a direct allocation; unmap says whether its memory goes too (a free captured into
 * a graph leaves it to the graph, which the fake never launches nor destroys). */
static void direct_drop(struct direct *d, int unmap)
{
    if (unmap) {
        munmap((void *)d->base, d->maplen);
        if (!d->managed)
            g.used[d->device] -= d->maplen;
    }
    *d = directs[--ndirect];
}

static void run_one(struct CUstream_st *st)
{
    struct op *op = &st->ring[st->done % QUEUE_LEN];
    if (op->kind == OP_FILL || op->kind == OP_CHECK) {
        if (!device_range(op->dst, op->len, 1)) {
            g.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
        } else if (op->kind == OP_FILL) {
            memset((void *)op->dst, op->byte, op->len);
        } else {
            const unsigned char *b = (const unsigned char *)op->dst;
            for (size_t i = 0; i < op->len; i++)
                g.mismatches += b[i] != op->byte;
        }
    } else if (op->kind == OP_WAIT) {
        st->done++; /* before the other stream runs: it may wait on this one in turn */
        if (op->wait->gen == op->wait_gen)
            while (op->wait->done < op->seq)
                run_one(op->wait);
        return;
    } else {
        struct direct *d = direct_at(op->dst, 0);
        if (d && d->freeing)
            direct_drop(d, 1);
    }
    st->done++;
}

static void run_until(struct CUstream_st *st, unsigned long long seq)
{
    while (st->done < seq)
        run_one(st);
}

/* Work queued on a capturing stream goes into the graph, which the fake never launches. A
 * full queue runs its oldest operation, as a device would make progress on its own. */
static void enqueue(struct CUstream_st *st, struct op op)
{
    if (st->capturing)
        return;
    if (st->queued - st->done == QUEUE_LEN)
        run_one(st);
    st->ring[st->queued % QUEUE_LEN] = op;
    st->queued++;
}

static int event_done(const struct CUevent_st *ev)
{
    return !ev->recorded || ev->gen != ev->stream->gen || ev->stream->done >= ev->seq;
}

/* ---- initialisation, devices, contexts ---- */

CUresult cuInit(unsigned int flags)
{
    COUNT(cuInit);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!g.inited) {
        g.devices = (int)env_size("FAKE_CUDA_DEVICES", 1);
        if (g.devices > MAX_DEVICES)
            g.devices = MAX_DEVICES;
        g.memory = (size_t)env_size("FAKE_CUDA_MEMORY", (size_t)1 << 30);
        const char *no_vmm = getenv("FAKE_CUDA_NO_VMM");
        g.no_vmm = no_vmm && strcmp(no_vmm, "1") == 0;
        g.fail_every = env_size("FAKE_CUDA_FAIL_CREATE_EVERY", 0);
        g.page = (size_t)sysconf(_SC_PAGESIZE);
        for (int d = 0; d < g.devices; d++) {
            contexts[d].device = d;
            streams[d] = (struct CUstream_st){.used = 1, .device = d};
        }
        g.pid = getpid();
        __atomic_store_n(&g.inited, 1, __ATOMIC_RELEASE);
    } else if (g.pid != getpid()) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuDriverGetVersion(int *version)
{
    COUNT(cuDriverGetVersion);
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    ENTER(cuDeviceGetCount);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = g.devices;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER(cuDeviceGet);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTER(cuDeviceTotalMem_v2);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = g.memory;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRetain);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = &contexts[dev];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRelease_v2);
    return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static int valid_context(CUcontext ctx)
{
    uintptr_t u = (uintptr_t)ctx, lo = (uintptr_t)&contexts[0];
    return u >= lo && u < (uintptr_t)&contexts[g.devices] && (u - lo) % sizeof contexts[0] == 0;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER(cuCtxSetCurrent);
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!valid_context(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    ENTER(cuCtxGetCurrent);
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    *ctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER(cuCtxPushCurrent_v2);
    if (!valid_context(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    ENTER(cuCtxPopCurrent_v2);
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext top = ctx_stack[--ctx_depth];
    if (ctx)
        *ctx = top;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    ENTER(cuCtxGetDevice);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = current_device();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = dev;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    ENTER(cuCtxSynchronize);
    int dev = current_device();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS && !rc; i++)
        if (streams[i].used && streams[i].device == dev && streams[i].capturing)
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    for (int i = 0; i < MAX_STREAMS && !rc; i++)
        if (streams[i].used && streams[i].device == dev)
            run_until(&streams[i], streams[i].queued);
    if (!rc)
        rc = g.sticky;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- memory ---- */

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER(cuMemGetInfo_v2);
    int dev = current_device();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *free = g.memory - g.used[dev];
    *total = g.memory;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

static CUresult alloc_on_current(CUdeviceptr *dptr, size_t size, int managed)
{
    int dev = current_device();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult rc = direct_alloc(dptr, size, dev, managed);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    ENTER(cuMemAlloc_v2);
    return alloc_on_current(dptr, size, 0);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    ENTER(cuMemAllocManaged);
    return alloc_on_current(dptr, size, 1);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(cuMemFree_v2);
    if (dptr == 0)
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct direct *d = direct_at((uintptr_t)dptr, 0);
    if (d && !d->freeing)
        direct_drop(d, 1);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Fresh memory needs no stream order: it is mapped at once, on the stream's device. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    CUresult rc = st ? direct_alloc(dptr, size, st->device, 0) : no_stream(stream);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    ENTER(cuMemAllocAsync);
    return alloc_async(dptr, size, stream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    ENTER(cuMemAllocAsync_ptsz);
    return alloc_async(dptr, size, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
    ENTER(cuMemAllocFromPoolAsync);
    return alloc_async(dptr, size, stream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                      CUstream stream)
{
    ENTER(cuMemAllocFromPoolAsync_ptsz);
    return alloc_async(dptr, size, stream);
}

/* The memory stays mapped until the stream reaches the free, so that work queued before it
 * still lands there; a free captured into a graph leaves the memory to the graph. */
static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    struct direct *d = direct_at((uintptr_t)dptr, 0);
    if (!st)
        rc = no_stream(stream);
    else if (!d || d->freeing)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (st->capturing)
        direct_drop(d, 0);
    else {
        d->freeing = 1;
        enqueue(st, (struct op){.kind = OP_FREE, .dst = d->base});
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    ENTER(cuMemFreeAsync);
    return free_async(dptr, stream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    ENTER(cuMemFreeAsync_ptsz);
    return free_async(dptr, stream);
}

/* Synchronous copies and sets happen at once; they report an earlier deferred fault. */
static CUresult copy(void *dst, const void *src, size_t n, int dst_dev, int src_dev)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if ((dst_dev && !device_range((uintptr_t)dst, n, 0)) ||
        (src_dev && !device_range((uintptr_t)src, n, 0)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(rc = g.sticky))
        memmove(dst, src, n);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    ENTER(cuMemcpyHtoD_v2);
    return copy((void *)(uintptr_t)dst, src, n, 1, 0);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    ENTER(cuMemcpyDtoH_v2);
    return copy(dst, (const void *)(uintptr_t)src, n, 0, 1);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    ENTER(cuMemcpyDtoD_v2);
    return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, 1, 1);
}

/* Unified addressing: either side may be host memory, so neither is checked. */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    ENTER(cuMemcpy);
    return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, 0, 0);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    ENTER(cuMemsetD8_v2);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!device_range((uintptr_t)dst, n, 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(rc = g.sticky))
        memset((void *)(uintptr_t)dst, value, n);
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult queue_bytes(enum op_kind kind, uintptr_t dst, unsigned char value, size_t n,
                            CUstream stream)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (!st)
        rc = no_stream(stream);
    else if (!device_range(dst, n, 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        enqueue(st, (struct op){.kind = kind, .byte = value, .dst = dst, .len = n});
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult fill_async(uintptr_t dst, unsigned char value, size_t n, CUstream stream)
{
    return queue_bytes(OP_FILL, dst, value, n, stream);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)
{
    ENTER(cuMemsetD8Async);
    return fill_async((uintptr_t)dst, value, n, stream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)
{
    ENTER(cuMemsetD8Async_ptsz);
    return fill_async((uintptr_t)dst, value, n, stream);
}

/* ---- virtual memory management ---- */

static int granular(size_t v)
{
    return v % GRANULARITY == 0;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    ENTER(cuMemAddressReserve);
    if (g.no_vmm)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!ptr || size == 0 || !granular(size) || (alignment & (alignment - 1)) || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < GRANULARITY)
        alignment = GRANULARITY;
    if (size + alignment < size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct reservation *r = NULL;
    for (int i = 0; i < MAX_RESERVED && !r; i++)
        if (!reservations[i].len)
            r = &reservations[i];
    void *p = r ? mmap(NULL, size + alignment, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        uintptr_t raw = (uintptr_t)p, base = (raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (base > raw)
            munmap(p, base - raw);
        if (raw + alignment > base)
            munmap((void *)(base + size), raw + alignment - base);
        *r = (struct reservation){base, size};
        *ptr = (CUdeviceptr)base;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static void handle_unref(unsigned h)
{
    struct handle *hd = &handles[h];
    if (--hd->maps == 0 && hd->released) {
        g.used[hd->device] -= hd->size;
        hd->used = 0;
    }
}

static void mapping_drop(struct mapping *m)
{
    handle_unref(m->handle);
    *m = mappings[--nmappings];
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER(cuMemAddressFree);
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < MAX_RESERVED; i++) {
        struct reservation *r = &reservations[i];
        if (r->len && r->base == (uintptr_t)ptr && r->len == size) {
            for (size_t j = nmappings; j-- > 0;)
                if (mappings[j].addr >= r->base && mappings[j].addr - r->base < r->len)
                    mapping_drop(&mappings[j]);
            munmap((void *)r->base, r->len);
            r->len = 0;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTER(cuMemCreate);
    if (!handle || !prop || size == 0 || !granular(size) || flags ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    int dev = prop->location.id;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    unsigned h = 0;
    while (h < MAX_HANDLES && handles[h].used)
        h++;
    int fd = -1;
    int injected = g.fail_every && ++g.creates % g.fail_every == 0;
    if (injected || h == MAX_HANDLES || size > g.memory - g.used[dev] ||
        (fd = memfd_create("fake-cuda-physical", MFD_CLOEXEC)) < 0 ||
        ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0)
            close(fd);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        handles[h] = (struct handle){1, fd, dev, 0, size, 0};
        used_add(dev, size);
        *handle = h + 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static struct handle *handle_get(CUmemGenericAllocationHandle h)
{
    return h >= 1 && h <= MAX_HANDLES && handles[h - 1].used && !handles[h - 1].released
               ? &handles[h - 1]
               : NULL;
}

/* The physical memory goes once it is neither referenced by the handle nor mapped. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER(cuMemRelease);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct handle *hd = handle_get(handle);
    if (!hd) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        close(hd->fd);
        hd->released = 1;
        if (hd->maps == 0) {
            g.used[hd->device] -= hd->size;
            hd->used = 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int reserved(uintptr_t p, size_t n)
{
    for (int i = 0; i < MAX_RESERVED; i++) {
        const struct reservation *r = &reservations[i];
        if (r->len && p >= r->base && p - r->base <= r->len && n <= r->len - (p - r->base))
            return 1;
    }
    return 0;
}

/* Mapped memory is not accessible until cuMemSetAccess, as on a device. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    ENTER(cuMemMap);
    uintptr_t p = (uintptr_t)ptr;
    if (size == 0 || !granular(p) || !granular(size) || !granular(offset) || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct handle *hd = handle_get(handle);
    if (!hd || offset > hd->size || size > hd->size - offset || !reserved(p, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (nmappings == MAX_MAPPINGS) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        for (size_t i = 0; i < nmappings && !rc; i++)
            if (mappings[i].addr < p + size && p < mappings[i].addr + mappings[i].len)
                rc = CUDA_ERROR_ALREADY_MAPPED;
        if (!rc && mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, hd->fd,
                        (off_t)offset) == MAP_FAILED)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (!rc) {
            mappings[nmappings++] = (struct mapping){p, size, (unsigned)(hd - handles), 0};
            hd->maps++;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Whether [p, p + n) is covered by whole mappings, with no gap: what cuMemUnmap and
 * cuMemSetAccess require. */
static int whole_mappings(uintptr_t p, size_t n)
{
    for (uintptr_t at = p; at < p + n;) {
        struct mapping *m = mapping_at(at);
        if (!m || m->addr < p || m->len > p + n - m->addr)
            return 0;
        at = m->addr + m->len;
    }
    return 1;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER(cuMemUnmap);
    uintptr_t p = (uintptr_t)ptr;
    if (size == 0 || !granular(p) || !granular(size))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!whole_mappings(p, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* Back to reserved address space, so that a stray access faults. */
        mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0);
        for (size_t i = nmappings; i-- > 0;)
            if (mappings[i].addr >= p && mappings[i].addr - p < size)
                mapping_drop(&mappings[i]);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    ENTER(cuMemSetAccess);
    uintptr_t p = (uintptr_t)ptr;
    if (!desc || count == 0 || size == 0 || !granular(p) || !granular(size))
        return CUDA_ERROR_INVALID_VALUE;
    int access = 0;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !valid_device(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != 0 && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        access |= desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!whole_mappings(p, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        mprotect((void *)p, size, access ? PROT_READ | PROT_WRITE : PROT_NONE);
        for (size_t i = 0; i < nmappings; i++)
            if (mappings[i].addr >= p && mappings[i].addr - p < size)
                mappings[i].access = access;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       int option)
{
    ENTER(cuMemGetAllocationGranularity);
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
}

/* ---- events ---- */

CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    ENTER(cuEventCreate);
    if (!event)
        return CUDA_ERROR_INVALID_VALUE;
    if (current_device() < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    static size_t hint;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t n = 0; n < MAX_EVENTS; n++) {
        struct CUevent_st *ev = &events[(hint + n) % MAX_EVENTS];
        if (!ev->used) {
            *ev = (struct CUevent_st){.used = 1};
            *event = ev;
            hint = (size_t)(ev - events) + 1;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* An event recorded on a capturing stream becomes a node of the graph: the real driver then
 * refuses to query or wait for it. */
static CUresult event_record(CUevent event, CUstream stream)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUevent_st *ev = event_get(event);
    struct CUstream_st *st = stream_get(stream);
    if (!ev)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!st)
        rc = no_stream(stream);
    else if (st->capturing)
        *ev = (struct CUevent_st){.used = 1, .recorded = 0, .captured = 1};
    else
        *ev = (struct CUevent_st){1, 1, 0, st, st->gen, st->queued};
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Work queued on stream after this call runs only after the event's work: queued as an
 * operation that runs the event's stream up to it. */
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    ENTER(cuStreamWaitEvent);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUevent_st *ev = event_get(event);
    struct CUstream_st *st = stream_get(stream);
    if (!ev || flags)
        rc = ev ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    else if (!st)
        rc = no_stream(stream);
    else if (!event_done(ev) && ev->stream != st)
        enqueue(st, (struct op){
                        .kind = OP_WAIT, .wait = ev->stream, .wait_gen = ev->gen, .seq = ev->seq});
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuEventRecord(CUevent event, CUstream stream)
{
    ENTER(cuEventRecord);
    return event_record(event, stream);
}

CUresult cuEventRecord_ptsz(CUevent event, CUstream stream)
{
    ENTER(cuEventRecord_ptsz);
    return event_record(event, stream);
}

CUresult cuEventQuery(CUevent event)
{
    ENTER(cuEventQuery);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUevent_st *ev = event_get(event);
    if (!ev)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (ev->captured)
        rc = CUDA_ERROR_CAPTURED_EVENT;
    else if (!event_done(ev))
        rc = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuEventSynchronize(CUevent event)
{
    ENTER(cuEventSynchronize);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUevent_st *ev = event_get(event);
    if (!ev) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (ev->captured) {
        rc = CUDA_ERROR_CAPTURED_EVENT;
    } else {
        if (!event_done(ev))
            run_until(ev->stream, ev->seq);
        rc = g.sticky;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuEventDestroy_v2(CUevent event)
{
    ENTER(cuEventDestroy_v2);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUevent_st *ev = event_get(event);
    if (ev)
        ev->used = 0;
    else
        rc = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- streams ---- */

CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    ENTER(cuStreamCreate);
    if (!stream)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = current_device();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = MAX_DEVICES; i < MAX_STREAMS; i++) {
        struct CUstream_st *st = &streams[i];
        if (!st->used) {
            st->used = 1;
            st->device = dev;
            st->capturing = 0;
            st->queued = st->done = 0;
            *stream = st;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The stream's queued work still runs, as on a device; events recorded on it then count as
 * complete. */
CUresult cuStreamDestroy_v2(CUstream stream)
{
    ENTER(cuStreamDestroy_v2);
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (!st || st < &streams[MAX_DEVICES]) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        run_until(st, st->queued);
        st->used = 0;
        st->gen++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static CUresult stream_sync(CUstream stream)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (!st) {
        rc = no_stream(stream);
    } else if (st->capturing) {
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else {
        run_until(st, st->queued);
        rc = g.sticky;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuStreamSynchronize(CUstream stream)
{
    ENTER(cuStreamSynchronize);
    return stream_sync(stream);
}

CUresult cuStreamSynchronize_ptsz(CUstream stream)
{
    ENTER(cuStreamSynchronize_ptsz);
    return stream_sync(stream);
}

static CUresult is_capturing(CUstream stream, int *status)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (st)
        *status = st->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    else
        rc = no_stream(stream);
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuStreamIsCapturing(CUstream stream, int *status)
{
    ENTER(cuStreamIsCapturing);
    return is_capturing(stream, status);
}

CUresult cuStreamIsCapturing_ptsz(CUstream stream, int *status)
{
    ENTER(cuStreamIsCapturing_ptsz);
    return is_capturing(stream, status);
}

CUresult cuStreamBeginCapture_v2(CUstream stream, int mode)
{
    ENTER(cuStreamBeginCapture_v2);
    if (mode < 0 || mode > 2)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (!st)
        rc = no_stream(stream);
    else if (st < &streams[MAX_DEVICES])
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (st->capturing)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else
        st->capturing = 1;
    pthread_mutex_unlock(&lock);
    return rc;
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    ENTER(cuStreamEndCapture);
    if (!graph)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    if (!st)
        rc = no_stream(stream);
    else if (!st->capturing)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else {
        st->capturing = 0;
        *graph = (CUgraph)(void *)&graph_token;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- cuGetProcAddress ---- */

/* Base names as cuGetProcAddress takes them. A name listed twice resolves to the first entry
 * whose version the caller's cudaVersion reaches; ptsz is the per-thread-stream variant. */
struct proc {
    const char *name;
    int since;
    void *fn, *ptsz;
};

#define PROC(name, since, fn)                                                                      \
    {                                                                                              \
        name, since, (void *)fn, NULL                                                              \
    }
#define PROC_PTSZ(name, since, fn)                                                                 \
    {                                                                                              \
        name, since, (void *)fn, (void *)fn##_ptsz                                                 \
    }
static const struct proc procs[] = {
    PROC("cuInit", 2000, cuInit),
    PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    PROC("cuDeviceGet", 2000, cuDeviceGet),
    PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    PROC("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    PROC("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    PROC("cuMemFree", 3020, cuMemFree_v2),
    PROC("cuMemAllocManaged", 6000, cuMemAllocManaged),
    PROC_PTSZ("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PROC_PTSZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PROC_PTSZ("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PROC("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    PROC("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    PROC("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    PROC("cuMemcpy", 4000, cuMemcpy),
    PROC("cuMemsetD8", 3020, cuMemsetD8_v2),
    PROC_PTSZ("cuMemsetD8Async", 3020, cuMemsetD8Async),
    PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    PROC("cuMemCreate", 10020, cuMemCreate),
    PROC("cuMemRelease", 10020, cuMemRelease),
    PROC("cuMemMap", 10020, cuMemMap),
    PROC("cuMemUnmap", 10020, cuMemUnmap),
    PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    PROC("cuEventCreate", 2000, cuEventCreate),
    PROC_PTSZ("cuEventRecord", 2000, cuEventRecord),
    PROC("cuEventQuery", 2000, cuEventQuery),
    PROC("cuStreamWaitEvent", 2000, cuStreamWaitEvent),
    PROC("cuEventSynchronize", 2000, cuEventSynchronize),
    PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
    PROC("cuStreamCreate", 2000, cuStreamCreate),
    PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PROC_PTSZ("cuStreamSynchronize", 2000, cuStreamSynchronize),
    PROC_PTSZ("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    PROC("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    PROC("cuStreamEndCapture", 10000, cuStreamEndCapture),
    PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    PROC("cuGetProcAddress", 11030, cuGetProcAddress),
};

/* Works before cuInit and in a forked child: the runtime looks cuInit itself up this way.
 * Addresses are the library's own (it is linked -Bsymbolic-functions), never an interposer's. */
static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    int st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn || (flags & ~(cuuint64_t)3))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->name, symbol) != 0)
            continue;
        if (p->since > version) {
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            continue;
        }
        *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && p->ptsz ? p->ptsz : p->fn;
        st = CU_GET_PROC_ADDRESS_SUCCESS;
        break;
    }
    if (status)
        *status = st;
    return st == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    COUNT(cuGetProcAddress);
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             int *symbolStatus)
{
    COUNT(cuGetProcAddress_v2);
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ---- test-only calls ---- */

CUresult fakeLaunchFill(void *dst, size_t len, int byte, CUstream stream)
{
    CUresult rc = ready();
    return rc ? rc : fill_async((uintptr_t)dst, (unsigned char)byte, len, stream);
}

CUresult fakeLaunchCheck(const void *src, size_t len, int byte, CUstream stream)
{
    CUresult rc = ready();
    return rc ? rc : queue_bytes(OP_CHECK, (uintptr_t)src, (unsigned char)byte, len, stream);
}

unsigned long fakeCudaMismatches(void)
{
    pthread_mutex_lock(&lock);
    unsigned long n = g.mismatches;
    pthread_mutex_unlock(&lock);
    return n;
}

int fakeStreamRunOne(CUstream stream)
{
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    int ran = !st ? -1 : st->done < st->queued;
    if (ran == 1)
        run_one(st);
    pthread_mutex_unlock(&lock);
    return ran;
}

unsigned long fakeStreamPending(CUstream stream)
{
    pthread_mutex_lock(&lock);
    struct CUstream_st *st = stream_get(stream);
    unsigned long n = st ? (unsigned long)(st->queued - st->done) : 0;
    pthread_mutex_unlock(&lock);
    return n;
}

int fakeCudaIsDirectAllocation(const void *p)
{
    pthread_mutex_lock(&lock);
    struct direct *d = direct_at((uintptr_t)p, 0);
    int yes = d && !d->freeing;
    pthread_mutex_unlock(&lock);
    return yes;
}

void *fakeCudaDirectBase(const void *p, size_t *len)
{
    pthread_mutex_lock(&lock);
    struct direct *d = direct_at((uintptr_t)p, 1);
    void *base = d && !d->freeing ? (void *)d->base : NULL;
    if (base && len)
        *len = d->size;
    pthread_mutex_unlock(&lock);
    return base;
}

int fakeCudaDeviceOf(const void *p)
{
    pthread_mutex_lock(&lock);
    struct direct *d = direct_at((uintptr_t)p, 1);
    struct mapping *m = d ? NULL : mapping_at((uintptr_t)p);
    int dev = d ? d->device : m ? handles[m->handle].device : -1;
    pthread_mutex_unlock(&lock);
    return dev;
}

size_t fakeCudaPeakBytes(int device, int restart)
{
    pthread_mutex_lock(&lock);
    size_t peak = 0;
    if (device >= 0 && device < MAX_DEVICES) {
        peak = g.peak[device];
        if (restart)
            g.peak[device] = g.used[device];
    }
    pthread_mutex_unlock(&lock);
    return peak;
}

unsigned long fakeCudaCalls(const char *name)
{
    for (int i = 0; i < E_COUNT; i++)
        if (name && strcmp(entry_names[i], name) == 0)
            return atomic_load_explicit(&entry_calls[i], memory_order_relaxed);
    return (unsigned long)-1;
}
