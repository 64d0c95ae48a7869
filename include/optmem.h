/* optmem public API: optional calls a program may make into the preloaded library. */
#ifndef OPTMEM_H
#define OPTMEM_H

#ifdef __cplusplus
extern "C" {
#endif

#define OPTMEM_VERSION_MAJOR 0
#define OPTMEM_VERSION_MINOR 1
#define OPTMEM_VERSION_PATCH 0

/* Returns the library version as "MAJOR.MINOR.PATCH". */
const char *optmem_version(void);

/* Returns the active mode: "off", "trace" or "plan". */
const char *optmem_mode(void);

/* Marks the end of one training iteration (used when OPTMEM_WARMUP=N, and as a hint
 * otherwise). Safe to call from any thread, also from Python through ctypes.CDLL(None). */
void optmem_step(void);

/* Writes the lifetime report now to path (NULL: the OPTMEM_REPORT path). Returns 0 or -errno. */
int optmem_dump(const char *path);

/* PyTorch's CUDAPluggableAllocator entry points (stream is a cudaStream_t): device memory
 * served from optmem's plan for that device, in stream order. With OPTMEM_DEVICES lacking
 * cuda they call cudaMallocAsync and cudaFreeAsync. */
void *optmem_cuda_malloc(long size, int device, void *stream);
void optmem_cuda_free(void *ptr, long size, int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif
