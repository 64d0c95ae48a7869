/* CUDA graph capture, while a plan serves the stream: a request on a capturing stream passes
 * through to the driver (the fake's own allocation) while the same request outside capture is
 * served by optmem; a pool block freed inside a capture is retired (counted in
 * serving.retired_blocks) and its bytes are never handed out again.
 * usage: capture */
#include "cuda_test.h"

#include <stdio.h>

#define KiB ((size_t)1 << 10)
#define WARMUP 40
#define RETIRED 3
#define AFTER 40

static uint64_t checksum;
static unsigned long corrupt, requests;

static __attribute__((noinline)) void *alloc(size_t size, cudaStream_t s, int ptsz)
{
    void *p = NULL;
    CT_CHECK(ptsz ? cudaMallocAsync_ptsz(&p, size, s) : cudaMallocAsync(&p, size, s));
    requests++;
    return p;
}

static void capture_begin(cudaStream_t s)
{
    int status = -1;
    CT_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CT_CHECK(cudaStreamIsCapturing(s, &status));
    CT_EXPECT(status == cudaStreamCaptureStatusActive, "stream is not capturing");
}

static void capture_end(cudaStream_t s)
{
    cudaGraph_t graph;
    CT_CHECK(cudaStreamEndCapture(s, &graph));
}

int main(void)
{
    cudaStream_t s, t;
    CT_CHECK(cudaStreamCreate(&s));
    CT_CHECK(cudaStreamCreate(&t));
    for (int it = 0; it < WARMUP; it++) {
        void *a = alloc(64 * KiB, s, 0), *b = alloc(128 * KiB, s, 0);
        ct_placement(a, 64 * KiB, it >= 10);
        ct_placement(b, 128 * KiB, it >= 10);
        CT_CHECK(cudaMemsetAsync(a, it, 64 * KiB, s));
        CT_CHECK(cudaMemsetAsync(b, it + 1, 128 * KiB, s));
        CT_CHECK(cudaStreamSynchronize(s));
        corrupt += ct_check(a, 64 * KiB, 0, it, &checksum);
        CT_CHECK(cudaFreeAsync(a, s));
        void *c = alloc(32 * KiB, s, 0);
        ct_placement(c, 32 * KiB, it >= 10);
        CT_CHECK(cudaMemsetAsync(c, it + 2, 32 * KiB, s));
        CT_CHECK(cudaStreamSynchronize(s));
        corrupt += ct_check(b, 128 * KiB, 0, it + 1, &checksum);
        corrupt += ct_check(c, 32 * KiB, 0, it + 2, &checksum);
        CT_CHECK(cudaFreeAsync(b, s));
        CT_CHECK(cudaFreeAsync(c, s));
    }
    CT_CHECK(cudaStreamSynchronize(s));

    /* Inside a capture: the driver's own memory, whichever entry point asks. */
    for (int ptsz = 0; ptsz < 2; ptsz++) {
        capture_begin(s);
        void *p = alloc(64 * KiB, s, ptsz);
        CT_EXPECT(fakeCudaIsDirectAllocation(p),
                  "cudaMallocAsync%s on a capturing stream did not pass through (%p)",
                  ptsz ? "_ptsz" : "", p);
        CT_CHECK(ptsz ? cudaFreeAsync_ptsz(p, s) : cudaFreeAsync(p, s));
        capture_end(s);
    }
    void *q = alloc(64 * KiB, s, 0);
    ct_placement(q, 64 * KiB, 1);
    CT_CHECK(cudaFreeAsync(q, s));
    CT_CHECK(cudaStreamSynchronize(s));

    /* Blocks allocated outside, freed inside a capture: the graph may touch them at every
     * replay, so nothing may get their bytes again. */
    void *retired[RETIRED];
    for (int k = 0; k < RETIRED; k++) {
        retired[k] = alloc(128 * KiB, s, 0);
        ct_placement(retired[k], 128 * KiB, 1);
        CT_CHECK(cudaMemsetAsync(retired[k], 0x70 + k, 128 * KiB, s));
        CT_CHECK(cudaStreamSynchronize(s));
        capture_begin(s);
        CT_CHECK(cudaFreeAsync(retired[k], s));
        capture_end(s);
    }
    unsigned long reused = 0;
    for (int it = 0; it < AFTER; it++) {
        cudaStream_t on = it % 2 ? t : s;
        void *a = alloc(128 * KiB, on, 0), *b = alloc(128 * KiB, on, 0);
        for (int k = 0; k < RETIRED; k++)
            reused += ct_overlap(a, 128 * KiB, retired[k], 128 * KiB) +
                      ct_overlap(b, 128 * KiB, retired[k], 128 * KiB);
        ct_write(a, 128 * KiB, (uint32_t)it);
        ct_write(b, 128 * KiB, (uint32_t)it + 1000);
        corrupt += ct_check(a, 128 * KiB, (uint32_t)it, -1, &checksum);
        corrupt += ct_check(b, 128 * KiB, (uint32_t)it + 1000, -1, &checksum);
        CT_CHECK(cudaFreeAsync(a, on));
        CT_CHECK(cudaFreeAsync(b, on));
        CT_CHECK(cudaStreamSynchronize(on));
    }
    CT_EXPECT(reused == 0, "%lu blocks overlap a block freed inside a capture", reused);
    CT_EXPECT(corrupt == 0, "%lu bytes of device buffers changed while they were live", corrupt);
    CT_CHECK(cudaStreamDestroy(s));
    CT_CHECK(cudaStreamDestroy(t));
    printf("requests %lu\nretired %d\nchecksum %016llx\n", requests, RETIRED,
           (unsigned long long)checksum);
    return 0;
}
