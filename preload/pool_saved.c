/* OPTMEM_PLAN_FILE in the pool: the saved plan loaded at start and its prologue served, the
 * run's main-thread requests logged, and the whole-run plan saved at exit (the file's format
 * and the plan's build: saved_plan.c). */
#include "pool_internal.h"

#include "log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define LOG_CAPACITY ((size_t)1 << 20) /* main-thread requests logged for a saved plan */
/* A saved plan whose prologue misses more than half of its first requests is another
 * run's: it is dropped and the program is learnt as usual. */
#define PROLOGUE_PROBE 64
/* How many requests shorter than the saved one this run's prologue may be found to be. */
#define PROLOGUE_TAIL 64

void om_pool_open_plan_file(struct om_pool *pool, const struct om_config *cfg)
{
    if (om_path_expand(cfg->plan_file, (long)getpid(), om_env_rank(), pool->plan_file,
                       sizeof pool->plan_file) != 0) {
        om_warn("OPTMEM_PLAN_FILE=%s: the path is too long; no plan is saved", cfg->plan_file);
        pool->plan_file[0] = '\0';
        return;
    }
    char err[128] = "";
    int rc = om_saved_plan_read(pool->plan_file, om_saved_plan_program(), pool->arena.reserved,
                                &pool->saved, err, sizeof err);
    if (rc == 0 && pool->saved.period <= MAX_PERIOD && om_pool_start_saved(pool) == 0) {
        om_info("serving the saved plan %s (%llu prologue requests, an iteration of %llu)",
                pool->plan_file, (unsigned long long)pool->saved.nprologue,
                (unsigned long long)pool->saved.period);
        return;
    }
    om_saved_plan_free(&pool->saved);
    if (rc == -EINVAL)
        om_warn("OPTMEM_PLAN_FILE %s is ignored: %s; a new plan is written at exit",
                pool->plan_file, err);
    else if (rc != 0 && rc != -ENOENT)
        om_warn("OPTMEM_PLAN_FILE %s cannot be read (%s); a new plan is written at exit",
                pool->plan_file, strerror(-rc));
    if (om_request_log_init(&pool->log, LOG_CAPACITY) != 0)
        pool->plan_file[0] = '\0';
}

static void end_prologue(struct om_pool *pool)
{
    /* The iteration's cursor finds its place by token: one iteration's grace. */
    om_pool_serve(pool, 0);
    pool->grace = 1;
}

/* A main-thread request while a saved plan's prologue is served: the next slot of its
 * token, whatever the order the tokens come in. Returns 1 when served, 0 when not, -1
 * when this run's prologue was shorter than the saved one (a request that run made and
 * this one did not): the iteration's first token with no prologue slot left for it,
 * near the prologue's end, begins the iteration, which then serves it. */
int om_pool_place_in_prologue(struct om_pool *pool, size_t len, size_t alignment, uint64_t token,
                              size_t *off)
{
    uint64_t s = om_slot_index_take(&pool->saved.prologue, pool->saved.slots, token);
    if (s == UINT64_MAX && token == pool->plan.slots[0].token &&
        pool->prologue_cursor + PROLOGUE_TAIL >= pool->saved.nprologue) {
        end_prologue(pool);
        return -1;
    }
    if (s == UINT64_MAX) {
        pool->stats.misses++;
        pool->prologue_misses++;
    } else {
        pool->stats.hits++;
    }
    const struct om_slot *slot = &pool->saved.slots[s == UINT64_MAX ? 0 : s];
    int served = s != UINT64_MAX && om_pool_take_planned(pool, slot->offset, slot->len, len,
                                                         alignment, OM_STREAM_NONE);
    if (served)
        *off = slot->offset;
    if (++pool->prologue_cursor >= pool->saved.nprologue) {
        end_prologue(pool);
    } else if (pool->prologue_cursor == PROLOGUE_PROBE &&
               pool->prologue_misses * 2 > PROLOGUE_PROBE) {
        om_warn("the saved plan %s does not fit this run (%llu of its first %d requests "
                "differ); learning as usual, no plan is saved",
                pool->plan_file, (unsigned long long)pool->prologue_misses, PROLOGUE_PROBE);
        pool->stats.saved_plan = 0;
        om_pool_learn(pool);
    }
    return served;
}

/* The iteration after a saved plan's prologue: a prologue longer than the saved one (this
 * run made a request that run did not) ended its count early, and its last requests come
 * here. Each takes the prologue slot of its token still unused, where the plan meant it to
 * be, instead of falling back, and with it the first iteration's blocks that meet it. */
int om_pool_place_in_prologue_left(struct om_pool *pool, size_t len, size_t alignment,
                                   uint64_t token, size_t *off)
{
    uint64_t s = om_slot_index_take(&pool->saved.prologue, pool->saved.slots, token);
    if (s == UINT64_MAX)
        return 0;
    const struct om_slot *slot = &pool->saved.slots[s];
    if (!om_pool_take_planned(pool, slot->offset, slot->len, len, alignment, OM_STREAM_NONE))
        return 0;
    pool->stats.hits++;
    *off = slot->offset;
    return 1;
}

void om_pool_save_plan(struct om_pool *pool)
{
    if (!pool->plan_file[0] || !pool->log.entries)
        return;
    /* Under the lock, what the build reads (the served plan's arcs, the log as it is now:
     * a free writes its entries' deaths); the build (a search of up to its budget) and the
     * file's write with the lock let go, so that other threads' calls at exit do not wait
     * for them. */
    om_lock(&pool->lock);
    const struct om_plan *served = &pool->plan;
    uint64_t n0 = served->log_cycle_start, period = served->period;
    struct om_cycle_arc *arcs = NULL;
    size_t narcs = 0, bytes = (served->nrecords ? served->nrecords : 1) * sizeof *arcs;
    struct om_request_log log = {0};
    struct om_saved_plan plan = {0};
    char err[256] = "", path[sizeof pool->plan_file];
    uint32_t budget_ms = om_pool_search_budget_ms(pool, 0);
    int rc = -ENOENT;
    snprintf(path, sizeof path, "%s", pool->plan_file);
    if (pool->phase == PLAN) { /* its search is abandoned with the process */
        snprintf(err, sizeof err, "the plan was still being made at exit");
        goto unlock;
    }
    if (pool->phase != SERVE || n0 == UINT64_MAX || n0 >= pool->log.n) {
        snprintf(err, sizeof err, "no steady iteration of the main thread was learnt");
        goto unlock;
    }
    rc = -ENOMEM;
    if (!(arcs = om_sys_map(bytes)) || om_request_log_init(&log, pool->log.n) != 0)
        goto unlock;
    memcpy(log.entries, pool->log.entries, pool->log.n * sizeof *log.entries);
    log.n = pool->log.n;
    for (size_t r = 0; r < served->nrecords; r++) {
        const struct record *rec = &served->records[r];
        if (om_record_periods(rec, period) == 0)
            arcs[narcs++] = (struct om_cycle_arc){r,          rec->token, rec->lower,
                                                  rec->upper, rec->len,   rec->alignment};
    }
    rc = 0;
unlock:
    om_unlock(&pool->lock);
    if (rc == 0)
        rc = om_saved_plan_build(&log, n0, arcs, narcs, period, budget_ms, om_stack_room(), &plan,
                                 err, sizeof err);
    if (rc == 0 && (rc = om_saved_plan_write(path, om_saved_plan_program(), &plan)))
        snprintf(err, sizeof err, "%s", strerror(-rc));
    if (rc == 0)
        om_info("plan saved to %s: %llu prologue requests and an iteration of %llu, peak %.1f "
                "MiB (%.3f of its lower bound)",
                path, (unsigned long long)n0, (unsigned long long)period, plan.peak / 1048576.0,
                plan.lower_bound ? (double)plan.peak / (double)plan.lower_bound : 1.0);
    else
        om_warn("no plan saved to %s: %s", path, err);
    om_saved_plan_free(&plan);
    if (arcs)
        om_sys_unmap(arcs, bytes);
    if (log.entries)
        om_sys_unmap(log.entries, log.cap * sizeof *log.entries);
}
