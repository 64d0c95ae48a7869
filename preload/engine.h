/* The engine behind managed requests: records them through the tracer (trace mode) and
 * serves them from the planned pool (plan mode); walks the registered memory domains at fork,
 * before reports and at exit. */
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

/* A memory domain as the engine walks it: the host's pool, the CUDA domain's device set-up,
 * each device's pool. Ops left NULL are skipped; publish and save_plan run with the guard
 * entered. */
struct om_domain_ops {
    void (*lock)(void *ctx);         /* fork, in the parent: held across it */
    void (*unlock)(void *ctx);       /* after fork, in the parent */
    void (*atfork_child)(void *ctx); /* after fork, in the child: lock's hold released */
    void (*publish)(void *ctx);      /* serving counters into the tracer, before a report */
    void (*save_plan)(void *ctx);    /* at exit, before the last report */
};

/* The lock order is the registration order, and it is written down here only:
 *   1. the host's pool (registered by om_engine_init),
 *   2. the CUDA device set-up lock (by the CUDA kind's start, right after),
 *   3. each device's pool, in the order the devices are set up (under the set-up lock),
 * then the tracer's locks, after every domain's: pools record into the tracer and a
 * device's set-up opens its tracer domain while holding theirs. Before fork the parent
 * takes every domain's lock in this order, the tracer's last, and gives them back in
 * reverse; the child releases them, the tracer's first. A domain registers at engine start
 * or while it holds the lock of a domain registered before it, so a fork that holds every
 * lock sees every domain. 0, or -ENOSPC when the table is full. */
#define OM_ENGINE_DOMAINS 32
int om_engine_register(const struct om_domain_ops *ops, void *ctx);

/* A kind of domain besides the host's (the CUDA domain): started by om_engine_init after the
 * tracer and the host's pool; 0 or -errno (its memory is then not managed). */
struct om_domain_kind {
    const char *name;
    int (*start)(const struct om_config *cfg);
};

/* The kinds linked into the library, NULL-terminated, started in this order: defined by the
 * module that brings them (cuda/device.c), so that the engine starts them without naming
 * them; weak, so that a library without one links and starts none. */
extern const struct om_domain_kind *const om_domain_kinds[] __attribute__((weak));

#endif
