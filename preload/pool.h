/* Plan mode: managed blocks live in the arena; one observed iteration becomes a plan, and
 * later iterations are served from it by a cursor, with a guard before every hand-out. */
#ifndef OPTMEM_PRELOAD_POOL_H
#define OPTMEM_PRELOAD_POOL_H

#include "config.h"
#include "tracer.h"

#include <stddef.h>
#include <stdint.h>

/* Reserves the arena. 0 or -errno (then the engine records without serving). */
int om_pool_init(const struct om_config *cfg);

/* Whether p points into the arena: an O(1) range test. */
int om_pool_contains(const void *p);

/* The arena's address range, for the shim's own range test. */
void om_pool_range(uintptr_t *lo, size_t *len);

/* Serves a managed request: a planned slot when the token matches, else a best-fit block.
 * Records the request with the tracer. NULL when the arena cannot hold it. */
void *om_pool_alloc(size_t size, size_t alignment, int zero, const struct om_stack *stack);

/* Frees an arena block (recorded first). */
void om_pool_free(void *p);

/* Usable size of an arena block. */
size_t om_pool_usable_size(const void *p);

/* Hands the serving counters to the tracer for the report. */
void om_pool_publish(void);

/* The serving counters, if the pool's lock is free (from a signal handler). 0 or -EBUSY. */
int om_pool_try_stats(struct om_serving_stats *stats);

/* OPTMEM_PLAN_FILE: at exit, writes the whole-run plan of this run (when none was loaded). */
void om_pool_save_plan(void);

/* Fork discipline: the parent holds the lock across fork; the child releases it. */
void om_pool_lock(void);
void om_pool_unlock(void);
void om_pool_atfork_child(void);

#endif
