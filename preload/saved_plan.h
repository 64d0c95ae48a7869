/* OPTMEM_PLAN_FILE: the whole-run plan of a program (its prologue request by request, then
 * its iteration), built at exit from a log of the run, written to a file, and loaded by
 * the next run so that planned blocks are served from the very first request. */
#ifndef OPTMEM_PRELOAD_SAVED_PLAN_H
#define OPTMEM_PRELOAD_SAVED_PLAN_H

#include "om_common.h"
#include "replanner.h"
#include "slots.h"

#include <stddef.h>
#include <stdint.h>

/* One request of the main thread, in order from the start of the process. */
struct om_logged_request {
    uint64_t token, len, alignment;
    uint64_t death; /* main-thread requests made when it was freed; OM_NO_DEATH if live */
};

struct om_request_log {
    struct om_logged_request *entries;
    size_t n, cap;
};

struct om_saved_plan {
    uint64_t nprologue, period, peak, lower_bound;
    struct om_slot *slots; /* nprologue, then period */
    /* The prologue by token, once read: each token's slots are taken in their order, so
     * that requests which come in another interleaving still find theirs. */
    struct om_slot_index prologue;
};

/* The iteration's arcs, as the pool planned them (cyclic, period P). */
struct om_cycle_arc {
    uint64_t slot, token, lower, upper, len, alignment;
};

/* The replanner's memory inside the preload library: mmap, never malloc. */
extern const om_rp_allocator om_rp_mmap;

int om_request_log_init(struct om_request_log *log, size_t cap);
/* Returns index + 1 of the new entry, 0 when the log is full. */
uint32_t om_request_log_add(struct om_request_log *log, uint64_t token, uint64_t len,
                            uint64_t alignment);

/* Places the log's prologue [0, nprologue) and the arcs together: on the circle the arcs,
 * above every block of the prologue that outlives the first iteration (stacked by birth),
 * then the rest of the prologue on a line around them, part by part. Each of the two
 * searches may take budget_ms, and at least a short time of its own, and stack_bytes of the
 * calling thread's stack (om_rp_options; 0: no limit). The plan is checked whole before it
 * is returned. 0, -EINVAL (message in err) or -ENOMEM. */
int om_saved_plan_build(const struct om_request_log *log, uint64_t nprologue,
                        const struct om_cycle_arc *arcs, size_t narcs, uint64_t period,
                        uint32_t budget_ms, size_t stack_bytes, struct om_saved_plan *out,
                        char *err, size_t errlen);

/* Writes the plan atomically (temporary file, rename). 0 or -errno. */
int om_saved_plan_write(const char *path, uint64_t program, const struct om_saved_plan *plan);

/* Reads and checks a plan written for `program` whose blocks fit in arena_bytes. 0,
 * -ENOENT, or -EINVAL with the reason in err (corrupt, another program, too large). */
int om_saved_plan_read(const char *path, uint64_t program, uint64_t arena_bytes,
                       struct om_saved_plan *out, char *err, size_t errlen);

void om_saved_plan_free(struct om_saved_plan *plan);

/* What identifies the program: its executable's path. */
uint64_t om_saved_plan_program(void);

#endif
