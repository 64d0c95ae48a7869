/* Requests optmem passes through but records in the device's domain: cudaMallocManaged
 * (unified memory, touched by the host here) and cudaMallocFromPoolAsync (+_ptsz). Every
 * pointer must be the fake's own allocation, in every run.
 * usage: managed */
#include "cuda_test.h"

#include <stdio.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define ROUNDS 20

static unsigned long requests, corrupt;
static uint64_t checksum;

static void expect_direct(const char *what, void *p)
{
    CT_EXPECT(fakeCudaIsDirectAllocation(p), "%s returned %p, not the driver's own allocation",
              what, p);
    requests++;
}

int main(void)
{
    cudaStream_t s;
    CT_CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < ROUNDS; i++) {
        size_t size = 64 * KiB + (size_t)(i % 4) * 16 * KiB;
        unsigned char *m;
        CT_CHECK(cudaMallocManaged((void **)&m, size, cudaMemAttachGlobal));
        expect_direct("cudaMallocManaged", m);
        memset(m, i, size);
        for (size_t k = 0; k < size; k += 509)
            corrupt += m[k] != (unsigned char)i;
        checksum = checksum * 31 + m[size - 1];

        void *p, *q = NULL;
        CT_CHECK(cudaMallocFromPoolAsync(&p, size, NULL, s));
        expect_direct("cudaMallocFromPoolAsync", p);
        if (i % 2) {
            CT_CHECK(cudaMallocFromPoolAsync_ptsz(&q, 32 * KiB, NULL, s));
            expect_direct("cudaMallocFromPoolAsync_ptsz", q);
            CT_CHECK(cudaMemsetAsync(q, 5, 32 * KiB, s));
        }
        CT_CHECK(cudaMemsetAsync(p, i + 1, size, s));
        CT_CHECK(cudaStreamSynchronize(s));
        corrupt += ct_check(p, size, 0, i + 1, &checksum);
        if (q) {
            corrupt += ct_check(q, 32 * KiB, 0, 5, &checksum);
            CT_CHECK(cudaFreeAsync(q, s));
        }
        CT_CHECK(cudaFreeAsync(p, s));
        CT_CHECK(cudaFree(m));
    }
    CT_CHECK(cudaStreamSynchronize(s));
    CT_EXPECT(corrupt == 0, "%lu bytes changed while they were live", corrupt);
    printf("requests %lu\nchecksum %016llx\n", requests, (unsigned long long)checksum);
    return 0;
}
