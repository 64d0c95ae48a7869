/* Checks the fake CUDA itself, without optmem: deferred stream work, events, stream-ordered
 * frees, graph capture, the VMM API, cuGetProcAddress, devices, fork and sticky faults. The
 * tests of optmem are only as good as these semantics.
 * usage: fake_selftest (FAKE_CUDA_DEVICES, FAKE_CUDA_MEMORY, FAKE_CUDA_NO_VMM as for a run) */
#include "cuda_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static uint64_t sum;

static unsigned long env_ul(const char *name, unsigned long fallback)
{
    const char *s = getenv(name);
    return s && *s ? strtoul(s, NULL, 10) : fallback;
}

static void expect_bytes(const void *dev, size_t n, int byte, const char *what)
{
    unsigned long bad = ct_check(dev, n, 0, byte, &sum);
    CT_EXPECT(bad == 0, "%s: %lu of %zu bytes are not 0x%02x", what, bad, n, byte);
}

static void check_lookups(void)
{
    void *fn = (void *)1;
    int st = -1;
    CT_CHECK(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &st));
    CT_EXPECT(fn == (void *)cuMemAlloc_v2 && st == 0, "cuMemAlloc@12000 is not cuMemAlloc_v2");
    CT_EXPECT(cuGetProcAddress_v2("cuMemAlloc", &fn, 3010, 0, &st) == CUDA_ERROR_NOT_FOUND && !fn &&
                  st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "cuMemAlloc@3010 should be a version too old");
    CT_CHECK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 12000,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CT_EXPECT(fn == (void *)cuMemAllocAsync_ptsz, "per-thread cuMemAllocAsync is not _ptsz");
    CT_CHECK(cuGetProcAddress_v2("cuMemFreeAsync", &fn, 12000, 0, &st));
    CT_EXPECT(fn == (void *)cuMemFreeAsync, "cuMemFreeAsync is not itself");
    CT_CHECK(cuGetProcAddress_v2("cuStreamCreate", &fn, 12000,
                                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CT_EXPECT(fn == (void *)cuStreamCreate, "per-thread cuStreamCreate is not cuStreamCreate");
    CT_CHECK(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, &st));
    CT_EXPECT(fn == (void *)cuGetProcAddress_v2, "cuGetProcAddress@12000 is not _v2");
    CT_CHECK(cuGetProcAddress("cuGetProcAddress", &fn, 11030, 0));
    CT_EXPECT(fn == (void *)cuGetProcAddress, "cuGetProcAddress@11030 is not the first one");
    CT_EXPECT(cuGetProcAddress_v2("cuMemAlloc_v2", &fn, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND &&
                  st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
              "a versioned name should not be found");
    CT_EXPECT(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 8, &st) == CUDA_ERROR_INVALID_VALUE,
              "unknown flags should be refused");
}

static void check_runtime_lookups(void)
{
    void *fn = NULL;
    int st = -1;
    CT_CHECK(
        cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnablePerThreadDefaultStream, &st));
    CT_EXPECT(fn == (void *)cuMemAllocAsync_ptsz && st == 0, "entry point: not _ptsz");
    CT_CHECK(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &fn, cudaEnableDefault, &st));
    CT_EXPECT(fn == (void *)cuMemFreeAsync_ptsz, "entry point _ptsz: not _ptsz");
    CT_CHECK(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, &st));
    CT_EXPECT(fn == (void *)cuMemFree_v2, "entry point: cuMemFree is not _v2");
    CT_CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 3000, cudaEnableDefault, &st));
    CT_EXPECT(!fn && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "entry point by version: cuMemAlloc@3000 should be too old");
    CT_CHECK(cudaGetDriverEntryPointByVersion_ptsz("cuNoSuchFunction", &fn, 13000, 0, &st));
    CT_EXPECT(!fn && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "entry point: found a ghost");
}

static void check_streams(void)
{
    cudaStream_t a, b;
    cudaEvent_t e;
    void *x;
    CT_CHECK(cudaStreamCreate(&a));
    CT_CHECK(cudaStreamCreate(&b));
    CT_CHECK(cudaEventCreate(&e));
    unsigned long allocs = fakeCudaCalls("cuMemAlloc_v2");
    CT_CHECK(cudaMalloc(&x, MiB));
    CT_EXPECT(fakeCudaCalls("cuMemAlloc_v2") == allocs + 1, "cudaMalloc is not cuMemAlloc_v2");
    CT_EXPECT(fakeCudaIsDirectAllocation(x) && fakeCudaDeviceOf(x) == 0, "x is not direct");
    CT_EXPECT(fakeCudaDirectBase((char *)x + 100, NULL) == x, "x's base");
    CT_CHECK(cudaMemset(x, 0, MiB));

    CT_CHECK(fakeLaunchFill(x, MiB, 0xab, a));
    CT_EXPECT(fakeStreamPending(a) == 1, "the fill is not queued");
    expect_bytes(x, MiB, 0, "before the stream ran");
    CT_CHECK(cudaEventRecord(e, a));
    CT_EXPECT(cudaEventQuery(e) == cudaErrorNotReady, "event complete before its work ran");
    CT_EXPECT(fakeStreamRunOne(a) == 1 && fakeStreamRunOne(a) == 0, "run one");
    CT_CHECK(cudaEventQuery(e));
    expect_bytes(x, MiB, 0xab, "after fakeStreamRunOne");

    CT_CHECK(fakeLaunchFill(x, MiB, 0xcd, a));
    CT_CHECK(cudaEventRecord(e, a));
    CT_CHECK(fakeLaunchFill(x, MiB, 0xee, a));
    CT_CHECK(cudaEventSynchronize(e));
    expect_bytes(x, MiB, 0xcd, "after the event: only the work before it ran");
    CT_CHECK(cudaStreamSynchronize(a));
    expect_bytes(x, MiB, 0xee, "after cudaStreamSynchronize");
    CT_CHECK(fakeLaunchFill(x, MiB, 0x22, a));
    CT_CHECK(cudaDeviceSynchronize());
    expect_bytes(x, MiB, 0x22, "after cudaDeviceSynchronize");
    CT_CHECK(fakeLaunchFill(x, MiB, 0x33, b));
    CT_CHECK(cudaFree(x));
    CT_EXPECT(fakeStreamPending(b) == 0 && !fakeCudaIsDirectAllocation(x),
              "cudaFree did not synchronize, or did not free");
    CT_EXPECT(cudaMemcpy(x, &sum, sizeof sum, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "a copy into freed memory succeeded");

    /* Stream-ordered free: the memory outlives the free until the stream reaches it. */
    void *y, *z;
    CT_CHECK(cudaMallocAsync(&y, 64 << 10, a));
    CT_CHECK(cudaMemsetAsync(y, 0x5a, 64 << 10, a));
    CT_CHECK(cudaFreeAsync(y, a));
    CT_EXPECT(!fakeCudaIsDirectAllocation(y), "y is still live after cudaFreeAsync");
    CT_EXPECT(cudaFreeAsync(y, a) == cudaErrorInvalidValue, "double cudaFreeAsync");
    CT_EXPECT(fakeLaunchFill(y, 16, 1, a) == CUDA_ERROR_INVALID_VALUE, "launch on freed memory");
    CT_CHECK(cudaMallocAsync(&z, 64 << 10, b));
    CT_EXPECT(!ct_overlap(y, 64 << 10, z, 64 << 10), "the fake reused memory a stream still uses");
    CT_EXPECT(fakeStreamPending(a) == 2, "memset and free are not queued");
    CT_CHECK(cudaStreamSynchronize(a));
    CT_CHECK(cudaFreeAsync(z, b));
    CT_CHECK(cudaStreamSynchronize(b));

    /* Capture: work goes into the graph, which never runs; its events cannot be waited for. */
    void *c;
    int status = -1;
    cudaGraph_t graph = NULL;
    CT_EXPECT(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal) ==
                  cudaErrorStreamCaptureUnsupported,
              "captured the legacy stream");
    CT_CHECK(cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal));
    CT_EXPECT(cudaStreamBeginCapture(b, 0) == CUDA_ERROR_ILLEGAL_STATE, "captured twice");
    CT_CHECK(cudaStreamIsCapturing(b, &status));
    CT_EXPECT(status == cudaStreamCaptureStatusActive, "not capturing");
    CT_CHECK(cudaStreamIsCapturing_ptsz(a, &status));
    CT_EXPECT(status == cudaStreamCaptureStatusNone, "the other stream is capturing");
    CT_CHECK(cudaMallocAsync(&c, 64 << 10, b));
    CT_EXPECT(fakeCudaIsDirectAllocation(c), "capture allocation is not direct");
    CT_CHECK(fakeLaunchFill(c, 64 << 10, 7, b));
    CT_EXPECT(fakeStreamPending(b) == 0, "captured work was queued");
    CT_CHECK(cudaEventRecord(e, b));
    CT_EXPECT(cudaEventQuery(e) == cudaErrorCapturedEvent, "query of a captured event");
    CT_EXPECT(cudaStreamSynchronize(b) == cudaErrorStreamCaptureUnsupported, "sync in capture");
    CT_EXPECT(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported, "sync in capture");
    CT_CHECK(cudaFreeAsync(c, b));
    CT_EXPECT(!fakeCudaIsDirectAllocation(c), "capture free left c live");
    CT_CHECK(cudaStreamEndCapture(b, &graph));
    CT_EXPECT(graph != NULL, "no graph");
    CT_EXPECT(cudaStreamEndCapture(b, &graph) == CUDA_ERROR_ILLEGAL_STATE, "ended twice");
    CT_CHECK(cudaStreamIsCapturing(b, &status));
    CT_EXPECT(status == cudaStreamCaptureStatusNone, "still capturing");
    CT_CHECK(cudaEventRecord(e, b));
    CT_CHECK(cudaEventSynchronize(e));
    CT_CHECK(cudaEventDestroy(e));
    CT_CHECK(cudaStreamDestroy(a));
    CT_CHECK(cudaStreamDestroy(b));
    CT_EXPECT(cudaStreamSynchronize(a) == CUDA_ERROR_INVALID_HANDLE, "a destroyed stream");
}

static void check_vmm(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t gran = 0, free0, free1, total;
    CUdeviceptr base;
    CUmemGenericAllocationHandle h;
    if (env_ul("FAKE_CUDA_NO_VMM", 0) == 1) {
        CT_EXPECT(cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0) == CUDA_ERROR_NOT_SUPPORTED,
                  "FAKE_CUDA_NO_VMM=1 but cuMemAddressReserve works");
        return;
    }
    CT_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CT_EXPECT(gran == 2 * MiB, "granularity %zu", gran);
    CT_EXPECT(cuMemAddressReserve(&base, MiB, 0, 0, 0) == CUDA_ERROR_INVALID_VALUE,
              "reserved less than the granularity");
    CT_CHECK(cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0));
    CT_EXPECT(base % gran == 0, "reservation not aligned");
    void *p = (void *)(uintptr_t)base;
    CT_CHECK(cuMemGetInfo_v2(&free0, &total));
    CT_CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    CT_CHECK(cuMemGetInfo_v2(&free1, &total));
    CT_EXPECT(free0 - free1 == 2 * MiB, "cuMemCreate did not take 2 MiB");
    CT_CHECK(cuMemMap(base, 2 * MiB, 0, h, 0));
    CT_EXPECT(cudaMemset(p, 1, 4096) == cudaErrorInvalidValue, "memory usable before access");
    CT_CHECK(cuMemSetAccess(base, 2 * MiB, &rw, 1));
    CT_CHECK(cudaMemset(p, 0x44, 2 * MiB));
    CT_EXPECT(!fakeCudaIsDirectAllocation(p) && !fakeCudaDirectBase(p, NULL) &&
                  fakeCudaDeviceOf((char *)p + MiB) == 0,
              "mapped memory seen as a direct allocation, or not as device 0's");
    CT_CHECK(cuMemMap(base + 2 * MiB, 2 * MiB, 0, h, 0));
    CT_CHECK(cuMemSetAccess(base + 2 * MiB, 2 * MiB, &rw, 1));
    expect_bytes((char *)p + 2 * MiB, 2 * MiB, 0x44, "second mapping of one handle");
    CT_EXPECT(cuMemMap(base + 2 * MiB, 2 * MiB, 0, h, 0) == CUDA_ERROR_ALREADY_MAPPED,
              "mapped twice");
    CT_EXPECT(cudaMemset(p, 0, 4 * MiB + 1) == cudaErrorInvalidValue, "memset past the mapping");
    CT_EXPECT(cuMemUnmap(base, 6 * MiB) == CUDA_ERROR_INVALID_VALUE, "unmapped a gap");
    CT_EXPECT(cuMemUnmap(base, MiB) == CUDA_ERROR_INVALID_VALUE, "unmapped half a granule");
    CT_CHECK(cuMemRelease(h));
    CT_EXPECT(cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE, "released twice");
    CT_CHECK(cuMemGetInfo_v2(&free1, &total));
    CT_EXPECT(free0 - free1 == 2 * MiB, "released memory went while still mapped");
    expect_bytes(p, 2 * MiB, 0x44, "mapped memory after release of the handle");
    CT_CHECK(cuMemUnmap(base, 4 * MiB));
    CT_EXPECT(cudaMemset(p, 0, 16) == cudaErrorInvalidValue, "memset of unmapped memory");
    CT_CHECK(cuMemGetInfo_v2(&free1, &total));
    CT_EXPECT(free1 == free0, "physical memory not returned");
    CT_CHECK(cuMemAddressFree(base, 8 * MiB));
}

static void check_memory_and_devices(void)
{
    size_t free0, total;
    int count = 0, dev = -1;
    void *p, *q;
    CT_CHECK(cuMemGetInfo_v2(&free0, &total));
    CT_EXPECT(total == env_ul("FAKE_CUDA_MEMORY", 1ul << 30), "total memory %zu", total);
    CT_EXPECT(cudaMalloc(&p, total + 1) == cudaErrorMemoryAllocation, "allocated beyond memory");
    CT_CHECK(cudaMalloc(&p, total / 2));
    CT_EXPECT(cudaMalloc(&q, total / 2 + 4096) == cudaErrorMemoryAllocation, "over-committed");
    CT_CHECK(cudaFree(p));
    CT_CHECK(cudaMallocManaged(&p, 1 << 20, cudaMemAttachGlobal));
    memset(p, 3, 1 << 20);
    CT_EXPECT(fakeCudaIsDirectAllocation(p), "managed memory is not the fake's");
    CT_CHECK(cudaFree(p));
    CT_CHECK(cudaMallocFromPoolAsync(&p, 1 << 20, NULL, NULL));
    CT_EXPECT(fakeCudaIsDirectAllocation(p), "pool memory is not the fake's");
    CT_CHECK(cudaFreeAsync(p, NULL));
    CT_CHECK(cudaDeviceSynchronize());

    CT_CHECK(cudaGetDeviceCount(&count));
    CT_EXPECT(count == (int)env_ul("FAKE_CUDA_DEVICES", 1), "%d devices", count);
    CT_EXPECT(cudaSetDevice(count) == cudaErrorInvalidDevice, "set a device that is not there");
    if (count < 2)
        return;
    CT_CHECK(cudaSetDevice(1));
    CT_CHECK(cuCtxGetDevice(&dev));
    CT_EXPECT(dev == 1, "the runtime did not make device 1 current");
    CT_CHECK(cudaMalloc(&p, 1 << 20));
    CT_EXPECT(fakeCudaDeviceOf(p) == 1, "allocation on device %d", fakeCudaDeviceOf(p));
    CT_CHECK(cudaSetDevice(0));
    CT_CHECK(cudaFree(p));
}

static void *other_thread(void *arg)
{
    CUdevice dev;
    int *ok = arg;
    *ok = cuCtxGetDevice(&dev) == CUDA_ERROR_INVALID_CONTEXT && cudaGetDevice(&dev) == 0 &&
          cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == 0;
    return NULL;
}

static void check_threads_and_fork(void)
{
    pthread_t t;
    int ok = 0;
    pthread_create(&t, NULL, other_thread, &ok);
    pthread_join(t, NULL);
    CT_EXPECT(ok, "a new thread has a context before the runtime gave it one");

    void *p;
    CT_CHECK(cudaMalloc(&p, 1 << 20));
    pid_t pid = fork();
    if (pid == 0) {
        void *q;
        int dead = cudaMalloc(&q, 1 << 20) == cudaErrorInitializationError &&
                   cuInit(0) == CUDA_ERROR_NOT_INITIALIZED &&
                   cudaFree(p) == cudaErrorInitializationError;
        _exit(dead ? 0 : 1);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CT_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "CUDA usable in a forked child");
    CT_CHECK(cudaFree(p));
}

/* The peak counter: the most held at once, direct and physical allocations alike, and a
 * restart that begins the next window at what is held then. */
static void check_peak(void)
{
    size_t free0, total, gran = 2u << 20;
    CT_CHECK(cuMemGetInfo_v2(&free0, &total));
    size_t held = total - free0;
    (void)fakeCudaPeakBytes(0, 1);
    CT_EXPECT(fakeCudaPeakBytes(0, 0) == held, "a restarted window does not start at what is held");
    void *a, *b;
    CT_CHECK(cudaMalloc(&a, 3 << 20));
    CT_CHECK(cudaMalloc(&b, 1 << 20));
    CT_CHECK(cudaFree(b));
    CT_EXPECT(fakeCudaPeakBytes(0, 0) == held + (4u << 20), "peak %zu, want %zu",
              fakeCudaPeakBytes(0, 0), held + (4u << 20));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CT_CHECK(cuMemCreate(&h, 2 * gran, &prop, 0));
    CT_EXPECT(fakeCudaPeakBytes(0, 1) == held + (3u << 20) + 2 * gran,
              "a physical allocation is not counted");
    CT_CHECK(cuMemRelease(h));
    CT_CHECK(cudaFree(a));
    CT_EXPECT(fakeCudaPeakBytes(0, 0) == held + (3u << 20) + 2 * gran,
              "frees lowered the peak of the window");
    CT_EXPECT(fakeCudaPeakBytes(1 << 20, 0) == 0, "a peak for a device that does not exist");
}

/* Last: a fault poisons the context for good. */
static void check_sticky_fault(void)
{
    void *w;
    cudaStream_t a;
    CT_CHECK(cudaStreamCreate(&a));
    CT_CHECK(cudaMalloc(&w, 1 << 20));
    CT_CHECK(fakeLaunchFill(w, 1 << 20, 9, a));
    CT_CHECK(cuMemFree_v2((CUdeviceptr)(uintptr_t)w));
    CT_EXPECT(cudaStreamSynchronize(a) == cudaErrorIllegalAddress, "write to freed memory ran");
    CT_EXPECT(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "the fault is not sticky");
}

int main(void)
{
    check_lookups();
    unsigned long lookups = fakeCudaCalls("cuGetProcAddress_v2");
    CT_EXPECT(fakeCudaCalls("cuNoSuchFunction") == (unsigned long)-1, "counted a ghost");
    CT_CHECK(cudaFree(NULL));
    CT_EXPECT(fakeCudaCalls("cuGetProcAddress_v2") >= lookups + 30 && fakeCudaCalls("cuInit") == 1,
              "the runtime did not resolve the driver through cuGetProcAddress_v2");
    check_runtime_lookups();
    check_streams();
    check_vmm();
    check_memory_and_devices();
    check_threads_and_fork();
    check_peak();
    check_sticky_fault();
    printf("fake cuda self-test ok (checksum %llx)\n", (unsigned long long)sum);
    return 0;
}
