/* Two devices (FAKE_CUDA_DEVICES=2): every iteration allocates on device 0, then on device 1,
 * and frees device 0's blocks while device 1 is current (three requests per device and
 * iteration: optmem plans no shorter period). Each pointer must be memory of the
 * device it was asked for, and each device gets its own domain in the report.
 * usage: two_devices [ITERATIONS] */
#include "cuda_test.h"

#include <stdio.h>
#include <stdlib.h>

#define KiB ((size_t)1 << 10)
#define WARM 10

static unsigned long requests[2], corrupt;
static uint64_t checksum;

static __attribute__((noinline)) void *alloc(int dev, size_t size, uint32_t seed, int it)
{
    void *p;
    CT_CHECK(cudaSetDevice(dev));
    CT_CHECK(cudaMalloc(&p, size));
    CT_EXPECT(fakeCudaDeviceOf(p) == dev, "a request on device %d got memory of device %d", dev,
              fakeCudaDeviceOf(p));
    ct_placement(p, size, it >= WARM);
    ct_write(p, size, seed);
    requests[dev]++;
    return p;
}

static void release(void *p, size_t size, uint32_t seed)
{
    corrupt += ct_check(p, size, seed, -1, &checksum);
    CT_CHECK(cudaFree(p));
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 100;
    int count = 0;
    CT_CHECK(cudaGetDeviceCount(&count));
    CT_EXPECT(count >= 2, "%d device(s): run with FAKE_CUDA_DEVICES=2", count);
    for (int it = 0; it < iterations; it++) {
        uint32_t s = (uint32_t)it * 8;
        void *a0 = alloc(0, 192 * KiB, s, it);
        void *b0 = alloc(0, 64 * KiB, s + 1, it);
        void *a1 = alloc(1, 320 * KiB, s + 2, it);
        void *b1 = alloc(1, 32 * KiB, s + 3, it);
        void *c0 = alloc(0, 16 * KiB, s + 4, it);
        release(a0, 192 * KiB, s);
        void *c1 = alloc(1, 128 * KiB, s + 5, it);
        release(b1, 32 * KiB, s + 3);
        release(c1, 128 * KiB, s + 5);
        release(b0, 64 * KiB, s + 1);
        release(c0, 16 * KiB, s + 4);
        release(a1, 320 * KiB, s + 2);
    }
    CT_EXPECT(corrupt == 0, "%lu bytes changed while they were live", corrupt);
    printf("iterations %d\nrequests_dev0 %lu\nrequests_dev1 %lu\nchecksum %016llx\n", iterations,
           requests[0], requests[1], (unsigned long long)checksum);
    return 0;
}
