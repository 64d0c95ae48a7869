/* Helpers of the CUDA domain's test programs (see cuda_test.h). */
#include "cuda_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGING (4u << 20)

static unsigned char staging[STAGING];

void ct_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

int ct_expect_optmem(void)
{
    const char *e = getenv("CUDA_TEST_EXPECT");
    return e && strcmp(e, "optmem") == 0;
}

static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)(seed * 2654435761u + i * 40503u + (i >> 8));
}

void ct_write(void *dev, size_t n, uint32_t seed)
{
    CT_EXPECT(n <= STAGING, "buffer of %zu bytes is larger than the staging buffer", n);
    for (size_t i = 0; i < n; i++)
        staging[i] = pattern(seed, i);
    CT_CHECK(cudaMemcpy(dev, staging, n, cudaMemcpyHostToDevice));
}

unsigned long ct_check(const void *dev, size_t n, uint32_t seed, int byte, uint64_t *checksum)
{
    CT_EXPECT(n <= STAGING, "buffer of %zu bytes is larger than the staging buffer", n);
    CT_CHECK(cudaMemcpy(staging, dev, n, cudaMemcpyDeviceToHost));
    unsigned long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += staging[i] != (byte < 0 ? pattern(seed, i) : (unsigned char)byte);
    for (size_t i = 0; i < n; i += 61)
        *checksum = *checksum * 31 + staging[i];
    return bad;
}

void ct_placement(const void *p, size_t size, int warm)
{
    static void *arena;
    if (!ct_expect_optmem()) {
        CT_EXPECT(fakeCudaIsDirectAllocation(p), "%p (%zu bytes) is not the fake's own allocation",
                  p, size);
        return;
    }
    if (!warm)
        return;
    size_t len = 0;
    void *base = fakeCudaDirectBase(p, &len);
    const char *no_vmm = getenv("FAKE_CUDA_NO_VMM");
    if (no_vmm && strcmp(no_vmm, "1") == 0) {
        CT_EXPECT(base && len > size,
                  "%p (%zu bytes) is not inside a larger fake allocation (an arena)", p, size);
        if (!arena)
            arena = base;
        CT_EXPECT(base == arena, "%p (%zu bytes) is in fake allocation %p, the arena was %p", p,
                  size, base, arena);
    } else {
        CT_EXPECT(!base, "%p (%zu bytes) is inside fake allocation %p (%zu bytes), not an arena", p,
                  size, base, len);
        CT_EXPECT(fakeCudaDeviceOf(p) >= 0, "%p (%zu bytes) is not mapped device memory", p, size);
    }
}

int ct_overlap(const void *a, size_t n, const void *b, size_t m)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + m && y < x + n;
}
