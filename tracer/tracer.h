/* The tracer: lifetimes of managed blocks keyed by call-site stacks, iteration detection,
 * and the lifetime report. Called by the preload library; never calls back into it. */
#ifndef OPTMEM_TRACER_H
#define OPTMEM_TRACER_H

#include <stddef.h>
#include <stdint.h>

#define OM_TRACER_MAX_DEPTH 64

struct om_tracer_options {
    size_t min_bytes;            /* requests of at least this size are managed */
    unsigned stack_depth;        /* frames in a call-site key, 1..OM_TRACER_MAX_DEPTH */
    unsigned warmup;             /* 0: detect iterations; N: N optmem_step() iterations */
    const char *report_template; /* %p, %r, %%; NULL or "": no report at exit */
    const char *mode_name;       /* written into the report's configuration */
    int verify;
};

/* A captured call-site stack: return addresses, innermost first, and the calling thread's
 * Python stack (an id of the tracer's table of Python stacks; 0: none). */
struct om_stack {
    unsigned depth;
    void *frames[OM_TRACER_MAX_DEPTH];
    unsigned walked; /* a full walk of the stack found frames the fast walk did not know */
    unsigned full;   /* the stack came from a full walk, which read the unwind tables */
    uint32_t py_stack;
};

/* Zeroed, page-granular memory straight from mmap, never from malloc: the tables of the
 * tracer and of the preload library. om_sys_unmap takes the size given to om_sys_map. */
void *om_sys_map(size_t size);
void om_sys_unmap(void *ptr, size_t size);

/* Whether every thread of the process but the caller has exited (the main thread ended with
 * pthread_exit and is a zombie), read from /proc/self/stat. */
int om_sys_others_exited(void);

/* Called once, with the real allocator already resolved. Returns 0 or -errno; on an error
 * the caller runs in passthrough. */
int om_tracer_init(const struct om_tracer_options *options);

/* Memory domains: 0 is the host ("cpu"), always open once the tracer started; each device
 * opens its own ("cuda:0", ...). Each domain has its own blocks, call sites, iterations,
 * serving counters and report section; one lock covers them all. */
#define OM_TRACER_HOST 0u
#define OM_TRACER_DOMAINS 17u

/* Opens the domain called name (1 to 15 printable ASCII characters, no spaces), or finds
 * it if it is open. Returns its index, or -ENOSPC (all OM_TRACER_DOMAINS are open),
 * -ENOMEM, -EINVAL (a bad name), -ENOTSUP (the tracer is not running). */
int om_tracer_domain_open(const char *name);

/* Captures the caller's stack, skipping `skip` innermost frames. Takes no lock and does
 * not allocate through malloc, so it is called before any lock is taken. */
void om_stack_capture(struct om_stack *stack, unsigned depth, unsigned skip);
/* Bytes of stack below the caller's frame that a deep computation on the calling thread may
 * use: what its stack has left less a margin for the frames below (a signal handler's), at
 * least 16 KiB; 256 KiB where the thread's stack is not known. */
size_t om_stack_room(void);

/* A cheap key of the caller's call site, for a request of size bytes: the program's return
 * address into the library, the depth of its stack pointer in the thread's stack, and where
 * the thread's Python code is (its current frame and instruction), hashed; no unwinding. Two
 * call sites may share one (they differ only further up the stack): it names a site only
 * where a full capture said so. 0 where none can be had (the library's own frames are not
 * known, Python frames not yet checked): the caller captures the stack. */
uint64_t om_stack_cheap_key(size_t size);

/* What the tracer knows of a request once it is recorded. */
struct om_alloc_info {
    uint64_t seq;        /* its number among managed requests */
    int iteration_start; /* it begins an iteration of the cycle thread */
    uint64_t period;     /* requests per iteration of the cycle thread; 0 while unknown */
    /* Requests of the cycle thread, up to this one, known to repeat with period: back to
     * the start of the first steady iteration of a detected period (found after the fact,
     * it may lie periods back), or to the latest optmem_step() mark; 0 while no period is
     * known. (periodic - 1) % period is this request's place in its iteration. */
    uint64_t periodic;
    uint64_t ns;   /* when it was made, in ns since the tracer started */
    uint32_t site; /* its call site's id + 1, for om_tracer_on_alloc_site; 0: not recorded */
    /* om_tracer_log_alloc only: the request was logged, not recorded yet; seq,
     * iteration_start, period and periodic are then 0 (om_tracer_settle gives the last two) */
    int deferred;
};

/* Records the birth of a managed block; usable is what its allocator really holds for it
 * (the report's peak_live_bytes). info, when not NULL, receives what the tracer knows. */
void om_tracer_on_alloc(unsigned domain, void *ptr, size_t size, size_t usable, size_t alignment,
                        const struct om_stack *stack, struct om_alloc_info *info);

/* As om_tracer_on_alloc, for a request whose call site is known already: site is what
 * om_alloc_info.site said of an earlier request from it. The block is not recorded when
 * site names no call site. */
void om_tracer_on_alloc_site(unsigned domain, void *ptr, size_t size, size_t usable,
                             size_t alignment, uint32_t site, struct om_alloc_info *info);

/* The served path's log (docs/serving.md, "The served path's log"): a request whose call
 * site is known and a free are appended to their domain's log, and recorded in the log's
 * order before anything else reads or writes the domain's record (another request or free
 * recorded at once, a report, a checkpoint, an iteration mark, a fork), so that the record
 * is the one the calls made one by one would have left. The caller serialises the appends
 * to a domain (the pool's lock), and may hold that lock while it calls the tracer. */

/* As om_tracer_on_alloc_site. The request is logged (info->deferred) unless it cannot be:
 * a birth that the detector's thread test looks at, a shape the log cannot hold; it is then
 * recorded at once, as om_tracer_on_alloc_site does. */
void om_tracer_log_alloc(unsigned domain, void *ptr, size_t size, size_t usable, size_t alignment,
                         uint32_t site, struct om_alloc_info *info);

/* As om_tracer_on_free, logged; whether ptr was a live managed block is not said. */
void om_tracer_log_free(unsigned domain, void *ptr);

/* Records what the domain's log holds. *period and *periodic: what om_alloc_info would have
 * said of the last request logged (0 and 0 when none was). */
void om_tracer_settle(unsigned domain, uint64_t *period, uint64_t *periodic);

/* Whether the calling thread makes the requests that define iterations (the busiest
 * thread when iterations are detected; every thread when they are marked). */
int om_tracer_on_cycle_thread(unsigned domain);

/* What the pool did, for the report's "serving" section. */
struct om_serving_stats {
    uint64_t serving_requests; /* managed requests made while a plan was being served */
    uint64_t hits;             /* the request was the slot the cursor expected */
    uint64_t misses;           /* it was not: the cursor looked the token up */
    uint64_t served_from_plan; /* placed at a planned offset, after a hit or a lookup */
    /* Requests whose call site the cheap key named, without a stack captured; slots where
     * the cheap key was found to name two requests (served by full keys from then on) */
    uint64_t served_by_cheap_key, cheap_key_collisions;
    uint64_t fallbacks;        /* placed by best fit above the plan while serving */
    uint64_t guard_rejections; /* a planned offset that overlapped a live block */
    uint64_t plans, replans;   /* plans made; times the program drifted and was relearnt */
    uint64_t reused_plans;     /* kept plans that served again when their phase came back */
    uint64_t plan_slots, plan_peak_bytes, plan_lower_bound_bytes;
    /* The current plan's greedy-by-size peak (never exceeded) and the bound its search
     * proved (0 for a saved plan: not searched here), and how long planning took */
    uint64_t plan_greedy_bytes, plan_proven_bound_bytes, plan_time_us;
    uint64_t plan_on_thread; /* 1: the current plan was searched on the optmem-plan thread */
    uint64_t arena_top_bytes, released_bytes;
    uint64_t moved_bytes; /* free pages moved onto a plan's slots instead of released */
    uint64_t verify_violations, invalid_frees;
    uint64_t saved_plan;     /* 1 while a plan loaded from OPTMEM_PLAN_FILE is served */
    uint64_t retired_blocks; /* device blocks freed inside a graph capture: never reused */
    /* serving_requests and served_from_plan as they stood when the last served iteration
     * ended: the requests of the loop, without those the program makes after it */
    uint64_t iteration_requests, iteration_served;
    /* The last plan's pages laid out: over how many calls, how many bytes moved or given
     * back; the most bytes one call moved or gave back laying out any plan, and the longest
     * time one call spent on it */
    uint64_t layout_calls, layout_bytes, layout_max_bytes, layout_max_us;
};

/* The pool's arena: sample records of blocks inside it carry their offset. */
void om_tracer_set_arena(unsigned domain, const void *base, size_t size);

/* Keeps a copy of stats for the next report. */
void om_tracer_set_serving(unsigned domain, const struct om_serving_stats *stats);

/* Records the death of ptr if it is a live managed block, before its memory is handed
 * back. Returns 1 when it was one, 0 otherwise. */
int om_tracer_on_free(unsigned domain, void *ptr);

/* Size requested for a live managed block; 0 when ptr is not one. */
size_t om_tracer_block_size(unsigned domain, const void *ptr);

/* One iteration ended (optmem_step()): marked in every domain. */
void om_tracer_step(void);

/* Writes the report atomically to path (NULL: the configured template). 0 or -errno. */
int om_tracer_dump(const char *path);

/* pthread_atfork discipline: prepare takes every tracer lock, parent and child release
 * them; the child also starts its own lifetimes and report (new pid). */
void om_tracer_atfork_prepare(void);
void om_tracer_atfork_parent(void);
void om_tracer_atfork_child(void);

/* Process exit: writes the report. Later frees keep working. */
void om_tracer_at_exit(void);

/* A checkpoint of the configured report, so that a killed process leaves one: written when
 * a plan was made since the last, or when requests were made since and interval_ns has
 * passed. Never after the report written at exit. 0 or -errno. */
int om_tracer_checkpoint(uint64_t interval_ns);

/* Where a report is configured: the memory its checkpoints use (about 1.2 MiB: the writer's
 * buffers and the copy of the host's record that a report is written from) is mapped and
 * faulted in now, by the caller (the checkpoint thread, as it starts), rather than by the
 * first checkpoint, which comes when the first plan is made and would fault it in while
 * the plan serves its first iterations. */
void om_tracer_report_prepare(void);

/* Expands %p, %r, %% of tmpl (a report's or a plan's path) into out. Returns 0, -EINVAL or
 * -ENAMETOOLONG. */
int om_path_expand(const char *tmpl, long pid, long rank, char *out, size_t outlen);
/* RANK, else LOCAL_RANK, else 0. */
long om_env_rank(void);

/* Raised by each checkpoint: the program's next managed request reads the rank that the next
 * checkpoint's path and report show (om_tracer_rank_refresh, on the program's thread). */
extern int om_tracer_rank_wanted;
void om_tracer_rank_refresh(void);
static inline void om_tracer_rank_poll(void)
{
    if (__builtin_expect(__atomic_load_n(&om_tracer_rank_wanted, __ATOMIC_RELAXED), 0))
        om_tracer_rank_refresh();
}

/* Replaces the file at path atomically: fill(fd, ctx) writes a temporary file next to it,
 * which is renamed over path only if everything was written. A path that exists and is not
 * a regular file (/dev/null, /dev/stderr, a FIFO) is written in place instead: renaming over
 * it would replace the device or pipe with a file. 0 or -errno. */
int om_file_replace(const char *path, int (*fill)(int fd, void *ctx), void *ctx);
/* Whether path exists and is not a regular file (after symbolic links). */
int om_file_is_special(const char *path);

#endif
