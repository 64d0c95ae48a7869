/* A program of known call sites, built with -g -O2, for the symbolization test of optmem
 * report: check_report.py finds the expected lines through the LINE: markers below. */
#include <stdlib.h>
#include <string.h>

#define ITERATIONS 40
#define BYTES (64 * 1024)

void *outer_site(size_t n);

/* Inlined into outer_site, so that its frame exists only in the DWARF scopes. */
static inline __attribute__((always_inline)) void *inner_alloc(size_t n)
{
    void *p = malloc(n); /* LINE:inner */
    if (p)
        memset(p, 1, 64); /* keeps the call from being a tail call */
    return p;
}

__attribute__((noinline)) void *outer_site(size_t n)
{
    void *p = inner_alloc(n); /* LINE:outer */
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    unsigned sum = 0;
    for (int i = 0; i < ITERATIONS; i++) {
        unsigned char *p = outer_site(BYTES); /* LINE:main */
        sum += p ? p[1] : 0;
        free(p);
    }
    return sum == ITERATIONS ? 0 : 1;
}
