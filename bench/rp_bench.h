/* What the replanner's benchmark programs share: a plain heap for the replanner and CPU time. */
#ifndef OM_RP_BENCH_H
#define OM_RP_BENCH_H

#include "rp_internal.h"

#include <stdlib.h>
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

#endif
