/* The bottom of the library: the per-thread re-entry guard and the branch and inlining hints
 * that the shim, the engine and the CUDA entry points share. Includes nothing of optmem's. */
#ifndef OPTMEM_PRELOAD_GUARD_H
#define OPTMEM_PRELOAD_GUARD_H

#define OM_LIKELY(x) __builtin_expect(!!(x), 1)
#define OM_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A slow path kept out of its entry point, so that the entry point stays a test and a call. */
#define OM_NOINLINE __attribute__((noinline))
/* As OM_NOINLINE, for a path taken once or almost never (laid out away from the hot code). */
#define OM_COLD __attribute__((noinline, cold))

/* Depth of optmem's own calls on this thread: while it is non-zero, what the thread allocates
 * (the stack walk, a report, a plan's search, optmem's calls into CUDA) goes to the real
 * allocators unmanaged. */
extern __thread int om_guard_depth;

static inline void om_guard_enter(void)
{
    om_guard_depth++;
}

static inline void om_guard_leave(void)
{
    om_guard_depth--;
}

/* Whether this thread is inside optmem (entered and not yet left). */
static inline int om_guard_inside(void)
{
    return om_guard_depth;
}

/* Called first by each thread of optmem's own: names it and, where batch, runs it
 * SCHED_BATCH, so that waking it (the end of a checkpoint's sleep) never preempts the
 * program's running thread: the scheduler gives it the CPU at the next tick instead, with
 * the same share. optmem-pages is not one: the pages it gives back at once on waking keep
 * the program's growth from faulting in new ones first, which waiting for the tick would
 * not (the peak is the point). */
void om_guard_own_thread(const char *name, int batch);

#endif
