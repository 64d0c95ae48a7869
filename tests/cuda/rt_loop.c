/* A training-like loop of cudaMalloc/cudaFree: six device buffers of different sizes with
 * overlapping lifetimes, one living into the next iteration; every buffer is written with
 * cudaMemcpy or cudaMemset and checked before it is freed; a 512-byte request each iteration
 * stays the driver's, and a 64 KiB host buffer stages each iteration's checksum. Prints the
 * requests made and the most bytes live at once, which the device domain's report must match
 * exactly. usage: rt_loop [ITERATIONS] */
#include "cuda_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((size_t)1 << 10)
#define WARM 10

struct buf {
    void *p;
    size_t size;
    uint32_t seed;
    int byte; /* >= 0: written with cudaMemset */
};

static size_t live, max_live;
static unsigned long requests, corrupt;
static uint64_t checksum;
static int iteration;

/* One call site per buffer (different return addresses), as layers of a model would be. */
static __attribute__((noinline)) void alloc(struct buf *b, size_t size, int byte)
{
    *b = (struct buf){NULL, size, (uint32_t)(iteration * 8 + requests % 8), byte};
    CT_CHECK(cudaMalloc(&b->p, size));
    ct_placement(b->p, size, iteration >= WARM);
    if (byte < 0)
        ct_write(b->p, size, b->seed);
    else
        CT_CHECK(cudaMemset(b->p, byte, size));
    requests++;
    live += size;
    if (live > max_live)
        max_live = live;
}

static void release(struct buf *b)
{
    corrupt += ct_check(b->p, b->size, b->seed, b->byte, &checksum);
    CT_CHECK(cudaFree(b->p));
    live -= b->size;
    b->p = NULL;
}

/* Requests below OPTMEM_MIN_BYTES are the driver's, whoever serves the rest. */
static void small_request(void **small)
{
    CT_CHECK(cudaMalloc(small, 512));
    CT_EXPECT(fakeCudaIsDirectAllocation(*small), "a 512-byte request did not pass through");
    CT_CHECK(cudaMemset(*small, 1, 512));
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 200;
    struct buf a, b, c, d, e, f, carried = {0};
    void *none = &none, *small;
    int on_stack;
    CT_CHECK(cudaMalloc(&none, 0));
    CT_EXPECT(none == NULL, "cudaMalloc of 0 bytes gave %p", none);
    /* Not device memory: the driver's answer, with or without optmem. */
    printf("cudaFree of a host address: error %d\n", (int)cudaFree(&on_stack));
    for (iteration = 0; iteration < iterations; iteration++) {
        small_request(&small);
        alloc(&a, 256 * KiB, -1);
        if (carried.p)
            release(&carried);
        alloc(&b, 64 * KiB, (iteration * 7) & 0xff);
        alloc(&c, 1024 * KiB, -1);
        release(&b);
        alloc(&d, 48 * KiB, (iteration * 13 + 1) & 0xff);
        alloc(&e, 512 * KiB, -1);
        release(&a);
        alloc(&f, 96 * KiB, -1);
        release(&c);
        release(&d);
        release(&e);
        CT_CHECK(cudaFree(small));
        carried = f;
        unsigned char *host = malloc(64 * KiB); /* a host request of managed size */
        if (!host)
            ct_die("malloc of 64 KiB failed");
        memset(host, iteration & 0xff, 64 * KiB);
        checksum += host[(size_t)iteration % (64 * KiB)];
        free(host);
    }
    if (carried.p)
        release(&carried);
    CT_EXPECT(corrupt == 0, "%lu bytes of device buffers changed while they were live", corrupt);
    printf("iterations %d\nrequests %lu\nmax_live_bytes %zu\nchecksum %016llx\n", iterations,
           requests, max_live, (unsigned long long)checksum);
    return 0;
}
