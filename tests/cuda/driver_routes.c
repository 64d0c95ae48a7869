/* The routes by which libraries reach the driver's allocation entry points at run time:
 * dlsym on libcuda.so.1, cuGetProcAddress (both versions, and the resolver a lookup returns),
 * cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion (and _ptsz). Where optmem
 * manages the device (CUDA_TEST_EXPECT=optmem) every allocation entry point and resolver found
 * must be liboptmem.so's and everything else the driver's own; otherwise all are the driver's.
 * Each allocation function found makes a few allocations, checked through the driver, so that
 * the report can be held to the exact count printed.
 * usage: driver_routes */
#include "cuda_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define ROUNDS 3

static unsigned long allocations, lookups;
static uint64_t checksum;
static CUstream stream;

static struct {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
} drv;

/* fn must come from liboptmem.so when interposed, else be the driver's `exported`. */
static void expect_owner(const char *route, const char *exported, void *fn, int interposed)
{
    Dl_info info;
    lookups++;
    CT_EXPECT(fn && dladdr(fn, &info) && info.dli_fname, "%s: %s: no function found", route,
              exported);
    const char *file = strrchr(info.dli_fname, '/');
    file = file ? file + 1 : info.dli_fname;
    if (interposed)
        CT_EXPECT(strncmp(file, "liboptmem", 9) == 0, "%s: %s resolves to %s (%s), not liboptmem",
                  route, exported, info.dli_sname ? info.dli_sname : "?", file);
    else
        CT_EXPECT(strcmp(file, "libcuda.so.1") == 0 && info.dli_sname &&
                      strcmp(info.dli_sname, exported) == 0,
                  "%s: %s resolves to %s in %s, not to the driver's own", route, exported,
                  info.dli_sname ? info.dli_sname : "?", file);
}

/* One allocation of a pair: written through the driver, its last bytes read back. */
static void check_bytes(const char *route, int i, CUdeviceptr p, size_t size, unsigned char byte)
{
    unsigned char back[64];
    CT_CHECK(drv.cuMemsetD8_v2(p, byte, size));
    CT_CHECK(drv.cuMemcpyDtoH_v2(back, p + size - sizeof back, sizeof back));
    for (size_t k = 0; k < sizeof back; k++)
        CT_EXPECT(back[k] == byte, "%s: allocation %d does not hold its bytes", route, i);
    checksum = checksum * 31 + byte;
    allocations++;
}

/* A pair of allocation functions: makes ROUNDS allocations, checks each, frees it with the
 * pair's free. */
static void use_sync(const char *route, void *alloc_fn, void *free_fn)
{
    om_cuMemAlloc_v2_fn alloc = (om_cuMemAlloc_v2_fn)alloc_fn;
    om_cuMemFree_v2_fn release = (om_cuMemFree_v2_fn)free_fn;
    for (int i = 0; i < ROUNDS; i++) {
        CUdeviceptr p = 0;
        size_t size = 64 * KiB + (size_t)i * 4 * KiB;
        CT_CHECK(alloc(&p, size));
        check_bytes(route, i, p, size, (unsigned char)(i + 1));
        CT_CHECK(release(p));
    }
}

static void use_async(const char *route, void *alloc_fn, void *free_fn)
{
    om_cuMemAllocAsync_fn alloc = (om_cuMemAllocAsync_fn)alloc_fn;
    om_cuMemFreeAsync_fn release = (om_cuMemFreeAsync_fn)free_fn;
    for (int i = 0; i < ROUNDS; i++) {
        CUdeviceptr p = 0;
        size_t size = 96 * KiB + (size_t)i * 4 * KiB;
        CT_CHECK(alloc(&p, size, stream));
        check_bytes(route, i, p, size, (unsigned char)(i + 7));
        CT_CHECK(release(p, stream));
        CT_CHECK(drv.cuStreamSynchronize(stream));
    }
}

static void route_dlsym(void *lib, int managed)
{
    static const char *const interposed[] = {
        "cuMemAlloc_v2",  "cuMemFree_v2",        "cuMemAllocAsync",  "cuMemAllocAsync_ptsz",
        "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuGetProcAddress", "cuGetProcAddress_v2"};
    static const char *const own[] = {"cuInit",
                                      "cuStreamCreate",
                                      "cuMemGetInfo_v2",
                                      "cuEventRecord",
                                      "cuMemAllocManaged",
                                      "cuMemCreate",
                                      "cuMemsetD8_v2",
                                      "cuMemcpyDtoH_v2",
                                      "cuCtxSetCurrent",
                                      "cuStreamSynchronize"};
    for (size_t i = 0; i < sizeof interposed / sizeof *interposed; i++)
        expect_owner("dlsym", interposed[i], dlsym(lib, interposed[i]), managed);
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        expect_owner("dlsym", own[i], dlsym(lib, own[i]), 0);
    CT_EXPECT(dlsym(lib, "cuNoSuchFunction") == NULL, "dlsym found a function that is not there");
    use_sync("dlsym", dlsym(lib, "cuMemAlloc_v2"), dlsym(lib, "cuMemFree_v2"));
    use_async("dlsym", dlsym(lib, "cuMemAllocAsync"), dlsym(lib, "cuMemFreeAsync"));
    use_async("dlsym _ptsz", dlsym(lib, "cuMemAllocAsync_ptsz"), dlsym(lib, "cuMemFreeAsync_ptsz"));
}

/* One resolver (cuGetProcAddress_v2's signature) through which every lookup is checked. */
static void route_resolver(const char *route, om_cuGetProcAddress_v2_fn get, int managed)
{
    const cuuint64_t ptsz = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    void *alloc, *release, *fn;
    int st;
    CT_CHECK(get("cuMemAlloc", &alloc, 12000, 0, &st));
    expect_owner(route, "cuMemAlloc_v2", alloc, managed);
    CT_CHECK(get("cuMemFree", &release, 12000, 0, &st));
    expect_owner(route, "cuMemFree_v2", release, managed);
    use_sync(route, alloc, release);
    CT_CHECK(get("cuMemAllocAsync", &alloc, 12000, 0, &st));
    expect_owner(route, "cuMemAllocAsync", alloc, managed);
    CT_CHECK(get("cuMemFreeAsync", &release, 12000, 0, &st));
    expect_owner(route, "cuMemFreeAsync", release, managed);
    use_async(route, alloc, release);
    CT_CHECK(get("cuMemAllocAsync", &alloc, 12000, ptsz, &st));
    expect_owner(route, "cuMemAllocAsync_ptsz", alloc, managed);
    CT_CHECK(get("cuMemFreeAsync", &release, 12000, ptsz, &st));
    expect_owner(route, "cuMemFreeAsync_ptsz", release, managed);
    use_async(route, alloc, release);
    CT_CHECK(get("cuStreamCreate", &fn, 12000, 0, &st));
    expect_owner(route, "cuStreamCreate", fn, 0);
    CT_CHECK(get("cuStreamSynchronize", &fn, 12000, ptsz, &st));
    expect_owner(route, "cuStreamSynchronize_ptsz", fn, 0);
    /* Failed lookups stay failed, whatever asks. */
    fn = (void *)1;
    CT_EXPECT(get("cuMemAlloc", &fn, 3010, 0, &st) == CUDA_ERROR_NOT_FOUND && !fn &&
                  st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "%s: cuMemAlloc at version 3010 should not be found", route);
    CT_EXPECT(get("cuNoSuchFunction", &fn, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND && !fn &&
                  st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
              "%s: a missing function was found", route);
    lookups += 2;
}

static void route_get_proc_address(void *lib, int managed)
{
    om_cuGetProcAddress_v2_fn v2 = (om_cuGetProcAddress_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    om_cuGetProcAddress_fn v1 = (om_cuGetProcAddress_fn)dlsym(lib, "cuGetProcAddress");
    route_resolver("cuGetProcAddress_v2", v2, managed);

    void *alloc, *release, *resolver;
    CT_CHECK(v1("cuMemAlloc", &alloc, 12000, 0));
    expect_owner("cuGetProcAddress", "cuMemAlloc_v2", alloc, managed);
    CT_CHECK(v1("cuMemFree", &release, 12000, 0));
    expect_owner("cuGetProcAddress", "cuMemFree_v2", release, managed);
    use_sync("cuGetProcAddress", alloc, release);
    CT_CHECK(v1("cuMemAllocAsync", &alloc, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    expect_owner("cuGetProcAddress", "cuMemAllocAsync_ptsz", alloc, managed);

    /* A resolver found through a resolver is interposed too. */
    int st;
    CT_CHECK(v2("cuGetProcAddress", &resolver, 12000, 0, &st));
    expect_owner("cuGetProcAddress_v2", "cuGetProcAddress_v2", resolver, managed);
    route_resolver("resolver from cuGetProcAddress_v2", (om_cuGetProcAddress_v2_fn)resolver,
                   managed);
    CT_CHECK(v2("cuGetProcAddress", &resolver, 11030, 0, &st));
    expect_owner("cuGetProcAddress_v2", "cuGetProcAddress", resolver, managed);
}

static void route_runtime(int managed)
{
    void *alloc, *release, *fn;
    int st;
    CT_CHECK(cudaGetDriverEntryPoint("cuMemAlloc", &alloc, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPoint", "cuMemAlloc_v2", alloc, managed);
    CT_CHECK(cudaGetDriverEntryPoint("cuMemFree", &release, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPoint", "cuMemFree_v2", release, managed);
    use_sync("cudaGetDriverEntryPoint", alloc, release);
    CT_CHECK(
        cudaGetDriverEntryPoint("cuMemAllocAsync", &alloc, cudaEnablePerThreadDefaultStream, &st));
    expect_owner("cudaGetDriverEntryPoint", "cuMemAllocAsync_ptsz", alloc, managed);
    CT_CHECK(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &release, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPoint_ptsz", "cuMemFreeAsync_ptsz", release, managed);
    use_async("cudaGetDriverEntryPoint", alloc, release);
    CT_CHECK(cudaGetDriverEntryPoint("cuStreamCreate", &fn, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPoint", "cuStreamCreate", fn, 0);

    CT_CHECK(
        cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &alloc, 12000, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPointByVersion", "cuMemAllocAsync", alloc, managed);
    CT_CHECK(cudaGetDriverEntryPointByVersion("cuMemFreeAsync", &release, 12000, cudaEnableDefault,
                                              &st));
    expect_owner("cudaGetDriverEntryPointByVersion", "cuMemFreeAsync", release, managed);
    use_async("cudaGetDriverEntryPointByVersion", alloc, release);
    CT_CHECK(
        cudaGetDriverEntryPointByVersion_ptsz("cuMemAlloc", &alloc, 12000, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPointByVersion_ptsz", "cuMemAlloc_v2", alloc, managed);
    CT_CHECK(cudaGetDriverEntryPointByVersion_ptsz("cuMemFree", &release, 12000, cudaEnableDefault,
                                                   &st));
    use_sync("cudaGetDriverEntryPointByVersion_ptsz", alloc, release);
    CT_CHECK(
        cudaGetDriverEntryPointByVersion("cuGetProcAddress", &fn, 12000, cudaEnableDefault, &st));
    expect_owner("cudaGetDriverEntryPointByVersion", "cuGetProcAddress_v2", fn, managed);
    fn = (void *)1;
    CT_CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 3000, cudaEnableDefault, &st));
    CT_EXPECT(!fn && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "cudaGetDriverEntryPointByVersion: cuMemAlloc at 3000 should not be found");
    lookups++;
}

int main(void)
{
    int managed = ct_expect_optmem();
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CT_EXPECT(lib, "dlopen libcuda.so.1: %s", dlerror());
    *(void **)&drv.cuInit = dlsym(lib, "cuInit");
    *(void **)&drv.cuDevicePrimaryCtxRetain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&drv.cuCtxSetCurrent = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&drv.cuStreamCreate = dlsym(lib, "cuStreamCreate");
    *(void **)&drv.cuStreamSynchronize = dlsym(lib, "cuStreamSynchronize");
    *(void **)&drv.cuMemsetD8_v2 = dlsym(lib, "cuMemsetD8_v2");
    *(void **)&drv.cuMemcpyDtoH_v2 = dlsym(lib, "cuMemcpyDtoH_v2");
    CUcontext ctx;
    CT_CHECK(drv.cuInit(0));
    CT_CHECK(drv.cuDevicePrimaryCtxRetain(&ctx, 0));
    CT_CHECK(drv.cuCtxSetCurrent(ctx));
    CT_CHECK(drv.cuStreamCreate(&stream, 0));

    route_dlsym(lib, managed);
    route_get_proc_address(lib, managed);
    route_runtime(managed);
    printf("lookups checked %lu\ndriver_allocations %lu\nchecksum %016llx\n", lookups, allocations,
           (unsigned long long)checksum);
    return 0;
}
