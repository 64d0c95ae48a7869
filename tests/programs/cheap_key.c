/* Two call sites that share a cheap key (docs/serving.md): both request through one helper,
 * at one stack depth, one size, and differ only in the frame above it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE (96 << 10)

/* Through a volatile pointer, so that the compiler neither pairs up nor moves requests. */
static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;
/* Read at run time, so that the loop over the two requests stays a loop (one call
 * instruction for both: unrolled, each would be a call site of its own). */
static volatile int nfirst = 2, nmore = 14; /* nmore: MORE */
volatile unsigned long cheap_key_calls_a, cheap_key_calls_b;

void *cheap_key_helper(size_t n);
void *cheap_key_site_a(size_t n);
void *cheap_key_site_b(size_t n);

/* Not static, and the program exports its symbols: the report names these frames. The
 * empty asm statements keep each call a call (no tail call, no merged functions). */
__attribute__((noinline)) void *cheap_key_helper(size_t n)
{
    void *p = malloc_fn(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *cheap_key_site_a(size_t n)
{
    void *p = cheap_key_helper(n);
    cheap_key_calls_a++;
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *cheap_key_site_b(size_t n)
{
    void *p = cheap_key_helper(n);
    cheap_key_calls_b++;
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

/* One iteration: the two requests of first[] through one call instruction (so that each
 * site's stack is the same in both phases), then MORE of its own: the iteration is long
 * enough that one miss in it is not a drift (docs/serving.md). */
#define MORE 14
__attribute__((noinline)) static void iteration(void *(*const first[2])(size_t))
{
    unsigned char *p[2], *q[MORE];
    for (int k = 0; k < nfirst; k++) {
        p[k] = first[k](SIZE);
        __asm__ volatile("" ::"r"(p[k]) : "memory");
    }
    for (int k = 0; k < nmore; k++)
        q[k] = malloc_fn((size_t)(k + 2) * SIZE / 2);
    for (int k = 0; k < 2; k++) {
        if (!p[k]) {
            fprintf(stderr, "cheap_key: out of memory\n");
            exit(1);
        }
        memset(p[k], k + 1, SIZE);
    }
    for (int k = MORE; k-- > 0;) {
        if (!q[k]) {
            fprintf(stderr, "cheap_key: out of memory\n");
            exit(1);
        }
        q[k][0] = (unsigned char)k;
        free_fn(q[k]);
    }
    free_fn(p[1]);
    free_fn(p[0]);
}

/* Usage: cheap_key N1 N2: N1 iterations of a then b, then N2 of b twice. */
int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cheap_key N1 N2\n");
        return 2;
    }
    long n1 = atol(argv[1]), n2 = atol(argv[2]);
    static void *(*const a_then_b[2])(size_t) = {cheap_key_site_a, cheap_key_site_b};
    static void *(*const b_twice[2])(size_t) = {cheap_key_site_b, cheap_key_site_b};
    /* One call instruction for both phases: the requests' stacks differ only in first[]. */
    for (long i = 0; i < n1 + n2; i++)
        iteration(i < n1 ? a_then_b : b_twice);
    printf("cheap_key: site a %lu, site b %lu\n", cheap_key_calls_a, cheap_key_calls_b);
    return 0;
}
