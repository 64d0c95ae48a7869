/* Helpers of the CUDA domain's test programs: failing loudly, device buffers with checked
 * contents, and where the run expects device pointers to come from. */
#ifndef OPTMEM_CUDA_TEST_H
#define OPTMEM_CUDA_TEST_H

#include "fake_cuda.h"

#include <stddef.h>
#include <stdint.h>

/* Prints "FAIL: ..." on stderr and exits with status 1. */
__attribute__((noreturn, format(printf, 1, 2))) void ct_die(const char *fmt, ...);

#define CT_CHECK(call)                                                                             \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        if (rc_ != 0)                                                                              \
            ct_die("%s:%d: %s: error %d (%s)", __FILE__, __LINE__, #call, rc_,                     \
                   cudaGetErrorString(rc_));                                                       \
    } while (0)

#define CT_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ct_die(__VA_ARGS__);                                                                   \
    } while (0)

/* CUDA_TEST_EXPECT=optmem: optmem manages the device domain in this run; anything else (the
 * plain run, OPTMEM_DEVICES=cpu) expects every device pointer to be the fake's own. */
int ct_expect_optmem(void);

/* Writes a pattern derived from seed with cudaMemcpy, synchronously. */
void ct_write(void *dev, size_t n, uint32_t seed);

/* Reads dev back: the bytes that differ from the pattern of seed (byte < 0) or from byte;
 * folds a sample of what was read into *checksum. */
unsigned long ct_check(const void *dev, size_t n, uint32_t seed, int byte, uint64_t *checksum);

/* Where p, a request of size bytes, must lie in this run: the fake's own allocation when
 * optmem does not manage the device; once warm, an optmem arena (a cuMemMap'ed range, or with
 * FAKE_CUDA_NO_VMM=1 the inside of one large fake allocation shared by every block). */
void ct_placement(const void *p, size_t size, int warm);

/* Whether [a, a + n) and [b, b + m) share a byte. */
int ct_overlap(const void *a, size_t n, const void *b, size_t m);

#endif
