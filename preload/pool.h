/* Plan mode: managed blocks live in a domain's arena; one observed iteration becomes a plan,
 * and later iterations are served from it by a cursor, with a guard before every hand-out.
 * One pool per domain: the host's, and one per device. */
#ifndef OPTMEM_PRELOAD_POOL_H
#define OPTMEM_PRELOAD_POOL_H

#include "backend.h"
#include "config.h"
#include "tracer.h"

#include <stddef.h>
#include <stdint.h>

struct om_pool;

/* Creates the pool of a domain: reserves `reserve` bytes through backend (which must
 * outlive the pool) and records into tracer domain `domain`. OPTMEM_PLAN_FILE and
 * OPTMEM_VERIFY's red zones apply to host-addressable domains. 0 or -errno. */
int om_pool_create(struct om_pool **out, const struct om_backend *backend, unsigned domain,
                   size_t reserve, const struct om_config *cfg);

/* Whether p points into the arena: an O(1) range test. */
int om_pool_contains(const struct om_pool *pool, const void *p);

/* The arena's address range, for the shim's own range test. */
void om_pool_range(const struct om_pool *pool, uintptr_t *lo, size_t *len);

/* Serves a managed request made in stream order on `stream` (OM_STREAM_NONE: none): a
 * planned slot when the token matches, else a best-fit block. Records the request with the
 * tracer. NULL when the arena cannot hold it (the caller falls back to the real call). */
void *om_pool_alloc(struct om_pool *pool, size_t size, size_t alignment, int zero, uintptr_t stream,
                    const struct om_stack *stack);

/* As om_pool_alloc, for a host request whose cheap key (om_stack_cheap_key; 0: none) is
 * key: served at the slot the cursor expects, the request tells the slot what its cheap
 * key names. */
void *om_pool_alloc_keyed(struct om_pool *pool, size_t size, size_t alignment, int zero,
                          uintptr_t stream, const struct om_stack *stack, uint64_t key);

/* A host request served by its cheap key alone, without its stack: where the plan serves and
 * the slot the cursor expects knows key for its request's (docs/serving.md), *taken is 1
 * and the request is placed and recorded as that request (NULL when the arena cannot hold
 * it). Otherwise *taken is 0 and nothing happened: the caller captures the stack and calls
 * om_pool_alloc_keyed. */
void *om_pool_alloc_cheap(struct om_pool *pool, size_t size, size_t alignment, int zero,
                          uint64_t key, int *taken);

/* Frees an arena block (recorded first). On a stream, the bytes go to requests on other
 * streams only after work queued there before the free has completed. */
void om_pool_free(struct om_pool *pool, void *p, uintptr_t stream);

/* Keeps an arena block's bytes out of use for good (freed where no fence can be recorded,
 * such as inside a CUDA graph capture); it is recorded as freed. */
void om_pool_retire(struct om_pool *pool, void *p);

/* Requested size of an arena block, rounded to 16: its usable size; 0 if not a block. */
size_t om_pool_usable_size(struct om_pool *pool, const void *p);

/* Hands the serving counters to the tracer for the report. */
void om_pool_publish(struct om_pool *pool);

/* A copy of the serving counters as om_pool_publish hands them over (the arena's top
 * included): read-only, for tests and tools that drive a pool themselves. */
void om_pool_stats(struct om_pool *pool, struct om_serving_stats *out);

/* OPTMEM_PLAN_FILE: at exit, writes the whole-run plan of this run (when none was loaded). */
void om_pool_save_plan(struct om_pool *pool);

/* Fork discipline: the parent holds the lock across fork; the child releases it. */
void om_pool_lock(struct om_pool *pool);
void om_pool_unlock(struct om_pool *pool);
void om_pool_atfork_child(struct om_pool *pool);

#endif
