/* Plan values and the plans kept for phases that come back: a plan that held, dropped when
 * the program changed (training gave way to evaluation), serves again as soon as the
 * program's requests follow it again, instead of being learnt and planned anew. */
#include "pool_internal.h"

#include <errno.h>
#include <string.h>

/* Requests in a row that must follow a kept plan (all of its iteration's, when fewer) before
 * it serves again. */
#define KEPT_MATCH 16

void om_plan_unmap(struct om_plan *plan)
{
    om_slot_index_free(&plan->index);
    om_sys_unmap(plan->slots, plan->cap * sizeof *plan->slots);
    om_sys_unmap(plan->records, plan->cap * sizeof *plan->records);
    memset(plan, 0, sizeof *plan);
}

int om_plan_map(struct om_plan *plan, size_t cap)
{
    plan->cap = cap;
    plan->slots = om_sys_map(cap * sizeof *plan->slots);
    plan->records = om_sys_map(cap * sizeof *plan->records);
    if (plan->slots && plan->records)
        return 0;
    om_plan_unmap(plan);
    return -ENOMEM;
}

int om_plan_copy(struct om_plan *dst, const struct om_plan *src)
{
    size_t need = src->period > src->nrecords ? src->period : src->nrecords;
    if (dst->cap < need) {
        om_plan_unmap(dst);
        if (om_plan_map(dst, need) != 0)
            return -ENOMEM;
    }
    struct om_plan v = *src;
    v.slots = dst->slots;
    v.records = dst->records;
    v.cap = dst->cap;
    v.index = dst->index;
    memcpy(v.slots, src->slots, src->period * sizeof *v.slots);
    if (src->nrecords)
        memcpy(v.records, src->records, src->nrecords * sizeof *v.records);
    *dst = v;
    return 0;
}

static uint64_t match_needed(const struct om_kept_plan *k)
{
    return k->plan.period < KEPT_MATCH ? k->plan.period : KEPT_MATCH;
}

static void forget(struct om_kept_plan *k)
{
    om_plan_unmap(&k->plan);
    memset(k, 0, sizeof *k);
}

/* Whether a and b are the same iteration of the same requests, placed alike. */
static int same_plan(const struct om_plan *a, const struct om_plan *b)
{
    if (a->period != b->period || a->end != b->end)
        return 0;
    /* What each slot learnt of the cheap keys is not the plan. */
    for (uint64_t s = 0; s < a->period; s++) {
        const struct om_slot *x = &a->slots[s], *y = &b->slots[s];
        if (x->token != y->token || x->offset != y->offset || x->len != y->len ||
            x->alignment != y->alignment)
            return 0;
    }
    return 1;
}

/* The entry a plan goes to: its own (a plan dropped again, or made again alike), an empty
 * one, or the one that served longest ago (not the one serving now). */
static struct om_kept_plan *entry_for(struct om_pool *pool, const struct om_plan *plan)
{
    struct om_kept_plan *oldest = NULL;
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        if (k->plan.period && same_plan(plan, &k->plan))
            return k;
    }
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        if (!k->plan.period)
            return k;
        if (pool->kept_from != i + 1 && (!oldest || k->last_served < oldest->last_served))
            oldest = k;
    }
    forget(oldest);
    return oldest;
}

struct om_kept_plan *om_pool_keep_plan(struct om_pool *pool, const struct om_plan *plan,
                                       int unserved)
{
    struct om_kept_plan *k = entry_for(pool, plan);
    int same = k->plan.period != 0; /* its slots and index are those of the plan already */
    if (om_plan_copy(&k->plan, plan) != 0 ||
        ((!same || !k->plan.index.cap) &&
         om_slot_index_build(&k->plan.index, k->plan.slots, k->plan.period) != 0)) {
        forget(k);
        return NULL;
    }
    k->last_served = ++pool->kept_clock;
    k->cursor = k->matched = 0;
    k->unserved = unserved;
    return k;
}

/* Where a plan's slots begin (a slot without a token has no offset). */
static size_t plan_start(const struct om_plan *plan)
{
    size_t start = plan->end;
    for (uint64_t s = 0; s < plan->period; s++)
        if (plan->slots[s].token && plan->slots[s].offset < start)
            start = plan->slots[s].offset;
    return start;
}

size_t om_pool_kept_clash(const struct om_pool *pool, size_t off, size_t len, int all)
{
    size_t above = 0;
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        const struct om_kept_plan *k = &pool->kept[i];
        if (!k->plan.period || (!all && !k->unserved))
            continue;
        if (off < k->plan.end && plan_start(&k->plan) - off < len && k->plan.end > above)
            above = k->plan.end;
    }
    return above;
}

void om_pool_forget_kept(struct om_pool *pool)
{
    if (pool->kept_from)
        forget(&pool->kept[pool->kept_from - 1]);
    pool->kept_from = 0;
}

/* A request followed on k: 1 where k has a slot for it, its cursor then past that slot and
 * the run of requests that follow k one longer (the first of a run where k expected another). */
static int follow_kept(struct om_pool *pool, struct om_kept_plan *k, uint64_t token)
{
    const struct om_plan *plan = &k->plan;
    /* A slot without a token is a block that outlives the iteration: any request. */
    uint64_t s = k->cursor, expected = plan->slots[s].token;
    if (expected != token && expected) {
        s = om_slot_index_find(&plan->index, plan->slots, token, k->cursor);
        k->matched = 0;
    }
    if (s == UINT64_MAX)
        return 0;
    k->cursor = s + 1 < plan->period ? s + 1 : 0;
    if (++k->matched == 1)
        k->run_misses = pool->stats.misses;
    return 1;
}

void om_pool_kept_catch_up(struct om_pool *pool, struct om_kept_plan *k)
{
    uint64_t n = match_needed(k), from = pool->ring_first;
    if (pool->learnt - from > n)
        from = pool->learnt - n;
    for (uint64_t r = from; r < pool->learnt; r++)
        follow_kept(pool, k, pool->ring[r % RING].token);
}

struct om_kept_plan *om_pool_match_kept(struct om_pool *pool, uint64_t token,
                                        const struct om_alloc_info *info)
{
    for (unsigned i = 0; i < KEPT_PLANS; i++) {
        struct om_kept_plan *k = &pool->kept[i];
        const struct om_plan *plan = &k->plan;
        /* Where the tracer finds another period, the plan was for a part of it (a loop
         * inside a step, planned before the whole step repeated enough): that period is
         * learnt instead. */
        uint64_t p = plan->unrolled ? plan->period / 2 : plan->period;
        if (!plan->period || (info->periodic && info->period != p) || pool->kept_from == i + 1 ||
            !follow_kept(pool, k, token))
            continue;
        /* While a plan serves, k replaces it only where it missed (a program that changed
         * phase), not where their requests are alike. */
        uint64_t missed = pool->stats.misses - k->run_misses;
        if (k->matched >= match_needed(k) &&
            (pool->phase != SERVE || om_misses_too_many(missed, k->matched))) {
            k->last_served = ++pool->kept_clock; /* not the entry the plan it replaces takes */
            return k;
        }
    }
    return NULL;
}
