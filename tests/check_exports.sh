#!/usr/bin/env bash
# liboptmem.so must export every interposed entry point and the public API, and nothing
# else of its own.
set -u
lib=$1
expected="_Exit _exit aligned_alloc calloc cfree free free_aligned_sized free_sized malloc
malloc_usable_size memalign optmem_dump optmem_mode optmem_step optmem_version
posix_memalign pvalloc realloc reallocarray valloc
cudaFree cudaFreeAsync cudaFreeAsync_ptsz cudaGetDriverEntryPoint
cudaGetDriverEntryPoint_ptsz cudaGetDriverEntryPointByVersion
cudaGetDriverEntryPointByVersion_ptsz cudaMalloc cudaMallocAsync cudaMallocAsync_ptsz
cudaMallocFromPoolAsync cudaMallocFromPoolAsync_ptsz cudaMallocManaged
cuGetProcAddress cuGetProcAddress_v2 dlsym optmem_cuda_free optmem_cuda_malloc"
actual=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort)
status=0
for sym in $expected; do
    grep -qx "$sym" <<<"$actual" || { echo "FAIL: $sym is not exported"; status=1; }
done
for sym in $actual; do
    grep -qw "$sym" <<<"$expected" || { echo "FAIL: unexpected export $sym"; status=1; }
done
ldd "$lib" | grep -Eq 'libcuda|libcudart' && { echo "FAIL: linked against CUDA"; status=1; }
[ $status -eq 0 ] && echo "ok: $(wc -w <<<"$expected") entry points exported, nothing else"
exit $status
