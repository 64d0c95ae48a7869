/* Managed requests and frees with the caches flushed between calls, as a training step's
 * kernels flush them: run under callgrind's cache simulation it counts the lines each call
 * touches, and under calltime.so it times calls that find none of them cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Through volatile pointers: GCC pairs up and deletes a malloc and a free otherwise. */
static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;

/* One iteration: these sizes from one call site, freed in reverse order. */
static const size_t sizes[] = {64 << 10,  96 << 10, 128 << 10, 64 << 10,
                               192 << 10, 80 << 10, 256 << 10, 72 << 10};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static unsigned char *junk;
static size_t junk_bytes;

/* Writes a line in each 64 bytes of junk: everything cached before is evicted when junk is
 * larger than the cache. */
__attribute__((noinline)) static void flush(void)
{
    for (size_t i = 0; i < junk_bytes; i += 64)
        junk[i]++;
}

__attribute__((noinline)) static void *request(size_t size)
{
    return malloc_fn(size);
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) < 1 || atol(argv[2]) < 1) {
        fprintf(stderr, "usage: %s ITERATIONS FLUSH_KIB\n", argv[0]);
        return 1;
    }
    long iterations = atol(argv[1]);
    junk_bytes = (size_t)atol(argv[2]) << 10;
    junk = malloc(junk_bytes);
    if (!junk) {
        fprintf(stderr, "%s: no memory for %zu bytes\n", argv[0], junk_bytes);
        return 1;
    }
    memset(junk, 1, junk_bytes);
    unsigned long sink = 0;
    for (long it = 0; it < iterations; it++) {
        unsigned char *p[NSIZES];
        for (size_t i = 0; i < NSIZES; i++) {
            flush();
            p[i] = request(sizes[i]);
            if (!p[i]) {
                fprintf(stderr, "%s: malloc(%zu) failed\n", argv[0], sizes[i]);
                return 1;
            }
            p[i][0] = 1;
        }
        for (size_t i = NSIZES; i-- > 0;) {
            flush();
            sink += p[i][0];
            free_fn(p[i]);
        }
    }
    printf("requests %ld sink %lu\n", iterations * (long)NSIZES, sink);
    free(junk);
    return 0;
}
