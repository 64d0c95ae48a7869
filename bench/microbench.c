/* Nanoseconds per malloc+free pair, small (passthrough) or managed (a repeating iteration). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Called through volatile pointers so the compiler cannot pair up and delete a malloc
 * and a free whose memory is never used (GCC does that at -O2). */
static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;

/* The managed case's iteration: several sizes, all from one call site, allocated in
 * order and freed in reverse, as a training step's temporaries are; the tracer sees the
 * same (site, size) tokens every iteration, so plan mode can detect and plan it. */
static const size_t managed_sizes[] = {64 << 10,  96 << 10, 128 << 10, 64 << 10,
                                       192 << 10, 80 << 10, 256 << 10, 72 << 10};
#define NMANAGED (sizeof managed_sizes / sizeof managed_sizes[0])

struct job {
    int managed;
    long warmup, iterations; /* iterations: untimed, then timed */
    size_t small_size;
    double ns;
    unsigned long sink;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One iteration of the small case: NMANAGED pairs of one small size, so both cases time
 * the same number of pairs per iteration. */
__attribute__((noinline)) static unsigned long small_iteration(size_t size)
{
    unsigned long sink = 0;
    for (size_t i = 0; i < NMANAGED; i++) {
        unsigned char *p = malloc_fn(size);
        p[0] = (unsigned char)i; /* one touch: a real use, one cache line */
        sink += p[0];
        free_fn(p);
    }
    return sink;
}

__attribute__((noinline)) static void *managed_alloc(size_t size)
{
    return malloc_fn(size);
}

__attribute__((noinline)) static unsigned long managed_iteration(void)
{
    unsigned char *p[NMANAGED];
    unsigned long sink = 0;
    for (size_t i = 0; i < NMANAGED; i++) {
        p[i] = managed_alloc(managed_sizes[i]);
        p[i][0] = (unsigned char)i;
    }
    for (size_t i = NMANAGED; i-- > 0;) {
        sink += p[i][0];
        free_fn(p[i]);
    }
    return sink;
}

static void *run_job(void *arg)
{
    struct job *j = arg;
    for (long i = 0; i < j->warmup; i++)
        j->sink += j->managed ? managed_iteration() : small_iteration(j->small_size);
    double t0 = now_ns();
    for (long i = 0; i < j->iterations; i++)
        j->sink += j->managed ? managed_iteration() : small_iteration(j->small_size);
    j->ns = (now_ns() - t0) / ((double)j->iterations * NMANAGED);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "small") != 0 && strcmp(argv[1], "managed") != 0)) {
        fprintf(stderr, "usage: %s small|managed ITERATIONS [WARMUP [THREADS [SMALL_BYTES]]]\n",
                argv[0]);
        return 2;
    }
    long iterations = atol(argv[2]);
    long warmup = argc > 3 ? atol(argv[3]) : iterations / 10;
    int threads = argc > 4 ? atoi(argv[4]) : 1;
    size_t small_size = argc > 5 ? (size_t)atol(argv[5]) : 64;
    if (iterations < 1 || warmup < 0 || threads < 1 || threads > 64 || small_size < 1) {
        fprintf(stderr, "microbench: bad arguments\n");
        return 2;
    }
    struct job jobs[64];
    pthread_t tids[64];
    for (int t = 0; t < threads; t++)
        jobs[t] =
            (struct job){strcmp(argv[1], "managed") == 0, warmup, iterations, small_size, 0, 0};
    /* One thread runs on the main thread itself: the tracer follows the busiest thread,
     * and a single-threaded run should look like an ordinary program. */
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tids[t], NULL, run_job, &jobs[t]) != 0) {
            fprintf(stderr, "microbench: pthread_create failed\n");
            return 1;
        }
    run_job(&jobs[0]);
    double sum = jobs[0].ns;
    unsigned long sink = jobs[0].sink;
    for (int t = 1; t < threads; t++) {
        pthread_join(tids[t], NULL);
        sum += jobs[t].ns;
        sink += jobs[t].sink;
    }
    printf("case %s threads %d pairs_per_thread %ld ns_per_pair %.2f sink %lu\n", argv[1], threads,
           iterations * (long)NMANAGED, sum / threads, sink);
    return 0;
}
