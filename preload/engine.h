/* The engine behind managed requests: records them through the tracer (trace mode) and
 * serves them from the planned pool (plan mode). */
#ifndef OPTMEM_PRELOAD_ENGINE_H
#define OPTMEM_PRELOAD_ENGINE_H

#include "config.h"

#include <stddef.h>
#include <stdint.h>

/* Returns 0 when managed requests will be handled, or -errno (then: passthrough). */
int om_engine_init(const struct om_config *cfg);

/* Whether the engine runs (in any domain: host requests may pass through). */
int om_engine_running(void);

/* Whether this thread may enter the engine now (not re-entered from inside it). */
int om_engine_accepts(size_t size);

/* A managed request: alignment 0 means malloc's; zero asks for calloc's zeroed bytes. */
void *om_engine_alloc(size_t size, size_t alignment, int zero);

/* Takes ptr if it is managed. Returns 0 when the engine released it, -ENOENT when the
 * caller must hand it to the real allocator (after the engine recorded its death). */
int om_engine_free(void *ptr);

/* Whether ptr is a live managed block. */
int om_engine_owns(void *ptr);

/* Usable size of a block the engine placed itself; 0 for any other pointer. */
size_t om_engine_usable_size(void *ptr);

/* The re-entry guard, shared with the device domain's entry points: while a thread is
 * inside, what it allocates goes to the real allocators unmanaged. Nests. */
void om_engine_enter(void);
void om_engine_leave(void);
int om_engine_inside(void);

/* optmem_step() and optmem_dump(). */
void om_engine_step(void);
int om_engine_dump(const char *path);

/* Fork and exit discipline. */
void om_engine_atfork_prepare(void);
void om_engine_atfork_parent(void);
void om_engine_atfork_child(void);
void om_engine_at_exit(void);

/* From the checkpoint thread: the pools' counters, then a checkpoint of the report. */
void om_engine_checkpoint(uint64_t interval_ns);

#endif
