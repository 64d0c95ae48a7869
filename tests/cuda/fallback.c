/* Requests the device arena cannot hold fall back to the driver and are still recorded. Run
 * with FAKE_CUDA_NO_VMM=1 FAKE_CUDA_MEMORY=67108864: optmem's arena is then one allocation of
 * 90 % of the free 64 MiB (57.6 MiB); after 40 + 12 MiB in it, 6 MiB fit only outside it, in
 * the 6.4 MiB the driver still has. The driver's allocation path then runs inside optmem's
 * cudaMalloc and must not be taken for a second request.
 *
 * `fallback full`, with VMM and FAKE_CUDA_MEMORY=67108864: 24 + 24 MiB, the first freed,
 * then 32 MiB, which fits beside the second only once the arena gives back the first one's
 * pages (a device arena keeps a freed block's pages mapped): the 32 MiB must still be
 * optmem's, not a failure.
 * usage: fallback [ITERATIONS | full] */
#include "cuda_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static unsigned long requests, corrupt;
static uint64_t checksum;

static __attribute__((noinline)) void *alloc(size_t size, int byte)
{
    void *p;
    CT_CHECK(cudaMalloc(&p, size));
    CT_CHECK(cudaMemset(p, byte, size));
    requests++;
    return p;
}

/* Head and tail: the staging buffer is smaller than these blocks. */
static void release(void *p, size_t size, int byte)
{
    corrupt += ct_check(p, MiB, 0, byte, &checksum);
    corrupt += ct_check((char *)p + size - MiB, MiB, 0, byte, &checksum);
    CT_CHECK(cudaFree(p));
}

static int device_full(void)
{
    void *a = alloc(24 * MiB, 0x21), *b = alloc(24 * MiB, 0x22);
    ct_placement(a, 24 * MiB, 1);
    ct_placement(b, 24 * MiB, 1);
    release(a, 24 * MiB, 0x21);
    void *c = alloc(32 * MiB, 0x23);
    ct_placement(c, 32 * MiB, 1);
    release(c, 32 * MiB, 0x23);
    release(b, 24 * MiB, 0x22);
    CT_EXPECT(corrupt == 0, "%lu bytes changed while they were live", corrupt);
    printf("requests %lu\nchecksum %016llx\n", requests, (unsigned long long)checksum);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "full") == 0)
        return device_full();
    int iterations = argc > 1 ? atoi(argv[1]) : 20;
    void *big = alloc(40 * MiB, 0x11);
    ct_placement(big, 40 * MiB, 1);
    for (int it = 0; it < iterations; it++) {
        void *a = alloc(12 * MiB, it & 0x7f);
        ct_placement(a, 12 * MiB, 1);
        void *b = alloc(6 * MiB, (it & 0x7f) + 1);
        CT_EXPECT(fakeCudaIsDirectAllocation(b),
                  "6 MiB beside a full arena: %p is not the driver's own allocation", b);
        release(b, 6 * MiB, (it & 0x7f) + 1);
        release(a, 12 * MiB, it & 0x7f);
    }
    release(big, 40 * MiB, 0x11);
    CT_EXPECT(corrupt == 0, "%lu bytes changed while they were live", corrupt);
    printf("requests %lu\nchecksum %016llx\n", requests, (unsigned long long)checksum);
    return 0;
}
