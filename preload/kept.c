/* Plans kept for phases that come back: a plan that held, dropped when the program changed
 * (training gave way to evaluation), serves again as soon as the program's requests follow
 * it again, instead of being learnt and planned anew. */
#include "pool_internal.h"

#include "log.h"

#include <string.h>

/* Requests in a row that must follow a kept plan (all of its iteration's, when fewer) before
 * it serves again. */
#define KEPT_MATCH 16

static uint64_t match_needed(const struct om_kept_plan *k)
{
    return k->period < KEPT_MATCH ? k->period : KEPT_MATCH;
}

static void forget(struct om_kept_plan *k)
{
    om_slot_index_free(&k->index);
    om_sys_unmap(k->slots, k->period * sizeof *k->slots);
    om_sys_unmap(k->records, k->period * sizeof *k->records);
    memset(k, 0, sizeof *k);
}

/* Whether k is the plan now in slots: the same iteration of the same requests. */
static int same_plan(const struct om_pool *pool, const struct om_kept_plan *k)
{
    return k->period == pool->period && k->plan_end == pool->plan_end &&
           memcmp(k->slots, pool->slots, k->period * sizeof *k->slots) == 0;
}

/* The entry a plan goes to: its own (a plan dropped again, or made again alike), an empty
 * one, or the one that served longest ago. */
static struct om_kept_plan *entry_for(struct om_pool *pool)
{
    struct om_kept_plan *oldest = &pool->kept[0];
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        if (k->period && same_plan(pool, k))
            return k;
    }
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        if (!k->period)
            return k;
        if (k->last_served < oldest->last_served)
            oldest = k;
    }
    forget(oldest);
    return oldest;
}

void om_pool_keep_plan(struct om_pool *pool)
{
    struct om_kept_plan *k = entry_for(pool);
    uint64_t p = pool->period;
    if (!k->period) {
        k->period = p;
        k->slots = om_sys_map(p * sizeof *k->slots);
        k->records = om_sys_map(p * sizeof *k->records);
        if (k->slots)
            memcpy(k->slots, pool->slots, p * sizeof *k->slots);
        if (!k->slots || !k->records || om_slot_index_build(&k->index, k->slots, p) != 0) {
            forget(k);
            return;
        }
    }
    /* A saved plan is made at exit from the records of the plan then serving. */
    memcpy(k->records, pool->records, p * sizeof *k->records);
    k->nrecords = pool->nrecords;
    k->log_cycle_start = pool->log_cycle_start;
    k->plan_end = pool->plan_end;
    k->unrolled = pool->unrolled;
    k->peak = pool->stats.plan_peak_bytes;
    k->lower_bound = pool->stats.plan_lower_bound_bytes;
    k->greedy = pool->stats.plan_greedy_bytes;
    k->proven_bound = pool->stats.plan_proven_bound_bytes;
    k->nslots = pool->stats.plan_slots;
    k->last_served = ++pool->kept_clock;
    k->cursor = k->matched = 0;
}

void om_pool_forget_kept(struct om_pool *pool)
{
    if (pool->kept_from)
        forget(&pool->kept[pool->kept_from - 1]);
    pool->kept_from = 0;
}

/* The kept plan serves from the slot after the request that completed its match. */
static void serve_again(struct om_pool *pool, struct om_kept_plan *k)
{
    uint64_t p = k->period;
    struct om_slot_index index = {0}; /* over k's slots: the same positions as their copy */
    if (om_slot_index_build(&index, k->slots, p) != 0) {
        k->matched = 0;
        return;
    }
    k->last_served = ++pool->kept_clock; /* not the entry the plan it replaces takes */
    if (pool->phase == SERVE)
        om_pool_leave_plan(pool, 1);
    /* Blocks the plan before placed give up their pages, where k's slots do not lie. */
    pool->generation++;
    om_slot_index_free(&pool->plan_index);
    pool->plan_index = index;
    memcpy(pool->slots, k->slots, p * sizeof *pool->slots);
    memcpy(pool->records, k->records, p * sizeof *pool->records);
    pool->nrecords = k->nrecords;
    pool->log_cycle_start = k->log_cycle_start;
    pool->period = p;
    pool->unrolled = k->unrolled;
    pool->plan_end = k->plan_end;
    pool->stats.plan_peak_bytes = k->peak;
    pool->stats.plan_lower_bound_bytes = k->lower_bound;
    pool->stats.plan_greedy_bytes = k->greedy;
    pool->stats.plan_proven_bound_bytes = k->proven_bound;
    pool->stats.plan_slots = k->nslots;
    pool->stats.reused_plans++;
    pool->kept_from = (unsigned)(k - pool->kept) + 1;
    om_debug("plan: the plan of a %llu-request iteration made before serves again",
             (unsigned long long)p);
    om_pool_serve(pool, k->cursor);
    om_pool_lay_out_pages(pool);
}

int om_pool_match_kept(struct om_pool *pool, uint64_t token, const struct om_alloc_info *info)
{
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        /* Where the tracer finds another period, the plan was for a part of it (a loop
         * inside a step, planned before the whole step repeated enough): that period is
         * learnt instead. */
        uint64_t p = k->unrolled ? k->period / 2 : k->period;
        if (!k->period || (info->periodic && info->period != p) || pool->kept_from == i + 1)
            continue;
        /* A slot without a token is a block that outlives the iteration: any request. */
        uint64_t s = k->cursor, expected = k->slots[s].token;
        if (expected != token && expected) {
            s = om_slot_index_find(&k->index, k->slots, token, k->cursor);
            k->matched = 0;
        }
        if (s == UINT64_MAX)
            continue;
        k->cursor = s + 1 < k->period ? s + 1 : 0;
        if (++k->matched == 1)
            k->run_misses = pool->stats.misses;
        /* While a plan serves, k replaces it only where it missed (a program that changed
         * phase), not where their requests are alike. */
        uint64_t missed = pool->stats.misses - k->run_misses;
        if (k->matched >= match_needed(k) && (pool->phase != SERVE || missed * 8 > k->matched)) {
            serve_again(pool, k);
            if (pool->phase == SERVE && pool->kept_from == i + 1)
                return 1;
        }
    }
    return 0;
}
