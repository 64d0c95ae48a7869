/* What the replanner's benchmark programs share: a plain heap for the replanner and CPU time. */
#ifndef OM_RP_BENCH_H
#define OM_RP_BENCH_H

#include "rp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *rp_bench_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n);
}

static void rp_bench_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    (void)n;
    free(p);
}

static const om_rp_allocator heap = {rp_bench_alloc, rp_bench_release, NULL};

/* The thread's CPU time: on a shared machine the wall clock also counts other programs. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reads a lifetime CSV onto the heap; a failure gets one line naming prog: 0 or -errno. */
static int rp_bench_read(const char *prog, const char *path, om_rp_block **b, size_t *n,
                         uint64_t *period)
{
    char err[256] = "";
    int rc = om_rp_csv_read_instance(path, &heap, b, n, period, err, sizeof(err));

    if (rc < 0) {
        if (err[0])
            fprintf(stderr, "%s: %s\n", prog, err);
        else
            fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(-rc));
    }
    return rc;
}

#endif
