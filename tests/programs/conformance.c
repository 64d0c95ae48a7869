/* Checks the malloc family's glibc semantics; prints one line per check so that runs with
 * and without liboptmem.so can be compared line by line. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The overflow checks pass impossible sizes on purpose. */
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="

static int failures;

static void check(int ok, const char *what, size_t size)
{
    printf("%s %s size=%zu\n", ok ? "ok" : "FAIL", what, size);
    if (!ok)
        failures++;
}

static int aligned(const void *p, size_t alignment)
{
    return ((uintptr_t)p & (alignment - 1)) == 0;
}

/* A size below and one above the default managed threshold, and a large one. */
static const size_t sizes[] = {1, 24, 4095, 4096, 10000, 1 << 20, 40u << 20};

static void check_malloc(size_t n)
{
    errno = 4242;
    unsigned char *p = malloc(n);
    check(p && errno == 4242, "malloc keeps errno", n);
    check(aligned(p, 16), "malloc 16-byte aligned", n);
    check(malloc_usable_size(p) >= n, "malloc_usable_size >= request", n);
    memset(p, 0x5a, n);
    errno = 4242;
    free(p);
    check(errno == 4242, "free keeps errno", n);
}

static void check_calloc(size_t n)
{
    /* Dirty a block, free it, and calloc the same size: reused bytes must read zero. */
    unsigned char *dirty = malloc(n);
    memset(dirty, 0xab, n);
    free(dirty);
    errno = 4242;
    unsigned char *p = calloc(1, n);
    int zero = p != NULL;
    for (size_t i = 0; p && i < n; i++)
        zero &= p[i] == 0;
    check(zero && errno == 4242, "calloc zeroed, errno kept", n);
    free(p);
}

static void check_realloc(size_t n)
{
    unsigned char *p = realloc(NULL, n);
    check(p != NULL, "realloc(NULL, n) allocates", n);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7);
    unsigned char *q = realloc(p, 2 * n + 100);
    int same = q != NULL;
    for (size_t i = 0; q && i < n; i++)
        same &= q[i] == (unsigned char)(i * 7);
    check(same, "realloc grow keeps contents", n);
    unsigned char *r = realloc(q, n / 2 + 1);
    same = r != NULL;
    for (size_t i = 0; r && i < n / 2 + 1; i++)
        same &= r[i] == (unsigned char)(i * 7);
    check(same, "realloc shrink keeps contents", n);
    errno = 4242;
    check(realloc(r, 0) == NULL && errno == 4242, "realloc(p, 0) frees, returns NULL", n);
}

static void check_aligned(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static const size_t alignments[] = {8, 16, 64, 4096, 1 << 16};
    for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++) {
        size_t a = alignments[i];
        void *p = (void *)0x1;
        errno = 4242;
        int rc = posix_memalign(&p, a, n);
        check(rc == 0 && aligned(p, a) && errno == 4242, "posix_memalign aligned", n);
        free(p);
        p = aligned_alloc(a, n);
        check(p && aligned(p, a), "aligned_alloc aligned", n);
        free(p);
        p = memalign(a, n);
        check(p && aligned(p, a) && malloc_usable_size(p) >= n, "memalign aligned", n);
        free(p);
    }
    void *p = memalign(48, n); /* glibc rounds a non-power-of-two up */
    check(p && aligned(p, 64), "memalign(48) rounds to 64", n);
    free(p);
    static const size_t bad[] = {0, 3, 24, 4, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *untouched = (void *)0x1234;
        check(posix_memalign(&untouched, bad[i], n) == EINVAL && untouched == (void *)0x1234,
              "posix_memalign bad alignment: EINVAL, output untouched", n);
    }
    p = valloc(n);
    check(p && aligned(p, page), "valloc page aligned", n);
    free(p);
    p = pvalloc(n);
    check(p && aligned(p, page) && malloc_usable_size(p) >= ((n + page - 1) & ~(page - 1)),
          "pvalloc page aligned, rounded up", n);
    free(p);
}

static void check_overflow(void)
{
    errno = 0;
    check(calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc overflow ENOMEM", 0);
    errno = 0;
    check(malloc(SIZE_MAX) == NULL && errno == ENOMEM, "malloc(SIZE_MAX) ENOMEM", 0);
    errno = 0;
    void *p = malloc(64);
    check(reallocarray(p, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM,
          "reallocarray overflow ENOMEM", 0);
    free(p);
    errno = 0;
    p = malloc(64);
    check(realloc(p, SIZE_MAX - 4096) == NULL && errno == ENOMEM, "realloc huge ENOMEM", 0);
    free(p);
    errno = 0;
    check(posix_memalign(&p, 64, SIZE_MAX - 4096) == ENOMEM, "posix_memalign huge ENOMEM", 0);
    p = malloc(0);
    check(p != NULL, "malloc(0) unique pointer", 0);
    free(p);
    free(NULL);
}

/* Entry points that only some allocators export: called when present. */
static void check_optional(void)
{
    void (*cfree_fn)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
    void (*sized)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*aligned_sized)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (cfree_fn)
            cfree_fn(malloc(sizes[i]));
        if (sized)
            sized(malloc(sizes[i]), sizes[i]);
        if (aligned_sized)
            aligned_sized(aligned_alloc(64, sizes[i]), 64, sizes[i]);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_malloc(sizes[i]);
        check_calloc(sizes[i]);
        check_realloc(sizes[i]);
        check_aligned(sizes[i]);
    }
    check_overflow();
    check_optional();
    printf("%d failures\n", failures);
    return failures != 0;
}
