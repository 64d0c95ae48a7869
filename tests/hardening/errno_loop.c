/* A training-like loop that sets errno before every malloc and free and counts the calls
 * that changed it: malloc that succeeds and free leave errno alone, under glibc and so under
 * optmem, whatever optmem does inside (start a thread, plan, give pages back).
 * usage: errno_loop [ITERATIONS]; prints the count, exits 1 when it is not 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 12

static long changed;

static void *checked_malloc(size_t size)
{
    errno = 4242;
    void *p = malloc(size);
    changed += p && errno != 4242;
    if (p)
        memset(p, 1, size < 4096 ? size : 4096);
    return p;
}

static void checked_free(void *p)
{
    errno = 4242;
    free(p);
    changed += errno != 4242;
}

int main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 60;
    void *act[LAYERS];
    for (long it = 0; it < iterations; it++) {
        for (int l = 0; l < LAYERS; l++)
            act[l] = checked_malloc((size_t)(8 + l) << 12);
        void *scratch = checked_malloc((size_t)1 << 20); /* large: its pages go back */
        checked_free(scratch);
        for (int l = LAYERS - 1; l >= 0; l--) {
            void *grad = checked_malloc((size_t)(8 + l) << 12);
            checked_free(grad);
            checked_free(act[l]);
        }
    }
    printf("errno changed by %ld calls\n", changed);
    return changed != 0;
}
