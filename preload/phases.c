/* Plan mode's phase machine: learning a period, picking an iteration, installing plans (the
 * only caller of om_pool_install), judging the iterations served. */
#include "pool_internal.h"

#include "config.h"
#include "log.h"

#include <errno.h>
#include <string.h>

/* ---- the phases ---- */

void om_pool_learn(struct om_pool *pool)
{
    if (!pool->job_detached) /* a detached search's plan is kept when it ends */
        om_pool_plan_abandon(pool);
    pool->phase = LEARN;
    pool->generation++;
    pool->period = 0;
    pool->steady_from = UINT64_MAX;
    pool->plan_at = 0;
    pool->stale_iterations = pool->iteration_unknown = 0;
}

/* Clocks read outside the tracer's lock may come out of order by a little. */
static uint64_t span_ns(uint64_t from, uint64_t to)
{
    return to > from ? to - from : 0;
}

static void start_recording(struct om_pool *pool, const struct om_block *b, uint64_t ns)
{
    pool->next.log_cycle_start = b->log ? b->log - 1 : UINT64_MAX;
    pool->record_start_ns = ns;
    pool->phase = RECORD;
    pool->generation++;
    pool->next.nrecords = 0;
    pool->next.unrolled = 0;
    pool->cursor = 0;
}

static int period_failed(const struct om_pool *pool, uint64_t period, uint64_t evidence)
{
    for (unsigned i = 0; i < pool->nfailed && i < FAILED_PERIODS; i++)
        if (pool->failed[i].period == period && evidence < pool->failed[i].evidence)
            return 1;
    return 0;
}

/* A plan failed for its period: it is not planned again until it has repeated over twice
 * the requests it had when planned. */
static void remember_failed_period(struct om_pool *pool, const struct om_plan *plan)
{
    pool->failed[pool->nfailed % FAILED_PERIODS].period =
        plan->unrolled ? plan->period / 2 : plan->period;
    pool->failed[pool->nfailed++ % FAILED_PERIODS].evidence = 2 * plan->evidence;
}

/* A plan whose iterations keep making requests it has no slot for was made while the
 * program still changed (Python's interpreter specializes its calls over the first steps,
 * and numpy's requests come from other call sites then), and misses would resynchronize
 * the cursor around them every iteration. It is made again once, from a recent iteration. */
#define STALE_ITERATIONS 3

void om_pool_leave_plan(struct om_pool *pool, int keep)
{
    /* A plan that missed at once was for a wrong period, or for the right one while the
     * program still changed (Python's interpreter specializes its calls over the first
     * steps, and the call sites of numpy's requests change with them): the period is planned
     * again once it has repeated over twice as many requests, which a run of layers inside a
     * step soon cannot. One that held a while was right until the program changed, and its
     * period may well come back. */
    if (keep && pool->served_iterations < STEADY_ITERATIONS && !pool->kept_from)
        remember_failed_period(pool, &pool->plan);
    /* One served iteration shows the plan right for a phase, which may come back (an
     * evaluation phase of a few steps, planned in its last ones), and so does one followed
     * while it was searched (taken at the last boundary of its phase). One that did neither
     * does not come back (it was a part of a step, or another run's). */
    if (keep && (pool->served_iterations || pool->plan_followed))
        om_pool_keep_plan(pool, &pool->plan, !pool->served_iterations);
    else if (keep)
        om_pool_forget_kept(pool);
    pool->kept_from = 0;
}

void om_pool_end_of_served_iteration(struct om_pool *pool)
{
    /* A request whose slot lies behind the cursor begins the iteration anew. A program that
     * changed (an evaluation loop, some of whose requests are the training step's) does so
     * every few requests, each short run missing less than its share of a period: misses
     * are judged over a period's requests at least. */
    const struct om_plan *plan = &pool->plan;
    if (pool->window_requests < plan->period)
        return;
    pool->stale_iterations = pool->iteration_unknown ? pool->stale_iterations + 1 : 0;
    pool->iteration_unknown = 0;
    int stale = pool->stale_iterations >= STALE_ITERATIONS && !pool->stale_replanned;
    /* A plan of a part of the step (a run of layers repeats within it, and the detector
     * finds the whole step only some steps later) serves most requests of the step, so
     * rarely misses enough to be dropped, but turns some away in every window: once the
     * tracer knows a longer period for two of its iterations, that one is planned. */
    if (pool->window_turned_away && pool->tracer_stale) {
        om_tracer_settle(pool->domain, &pool->tracer_period, &pool->tracer_evidence);
        pool->tracer_stale = 0;
    }
    int outgrown = pool->window_turned_away && pool->tracer_period > plan->period &&
                   pool->tracer_period <= MAX_PERIOD &&
                   pool->tracer_evidence >= 2 * pool->tracer_period &&
                   !period_failed(pool, pool->tracer_period, pool->tracer_evidence);
    if (pool->grace) {
        pool->grace = 0;
    } else if (stale || outgrown ||
               om_misses_too_many(pool->iteration_misses, pool->window_requests)) {
        om_debug("%llu misses in %llu requests of an iteration of %llu%s: learning again",
                 (unsigned long long)pool->iteration_misses,
                 (unsigned long long)pool->window_requests, (unsigned long long)plan->period,
                 stale      ? ", and requests without a slot in each of the last ones"
                 : outgrown ? ", a part of the tracer's longer iteration"
                            : "");
        pool->stats.replans++;
        if (stale)
            pool->stale_replanned = 1;
        om_pool_leave_plan(pool, !stale && !outgrown);
        /* The plan's pages would stay resident beside the holes best fit fills again. A
         * slice a call: the whole arena's at once held this request for milliseconds. */
        om_pool_release_free_later(pool, 0, SIZE_MAX);
        om_pool_learn(pool);
        pool->outgrown_period = outgrown ? pool->tracer_period : 0;
    } else {
        /* Pages above the plan that this iteration's fallbacks used are used again by the
         * next one's: giving them back would fault them in again every iteration (and on a
         * device, synchronize it and remap them). */
        size_t keep = pool->fallback_end > plan->end ? pool->fallback_end : plan->end;
        pool->stats.released_bytes += om_arena_release_tail(&pool->arena, keep);
        if (++pool->served_iterations == STEADY_ITERATIONS)
            pool->nfailed = 0;
    }
    if (pool->phase == SERVE) {
        pool->stats.iteration_requests = pool->stats.serving_requests;
        pool->stats.iteration_served = pool->stats.served_from_plan;
    }
    pool->iteration_misses = pool->window_requests = pool->window_turned_away = 0;
    pool->fallback_end = 0;
    pool->failing = 0;
}

static void plan_failed(struct om_pool *pool, int rc)
{
    if (rc == -ENOENT) /* no block died within the period: a layer inside a step */
        remember_failed_period(pool, &pool->next);
    om_pool_learn(pool);
}

/* While the search runs, the requests are followed on the iteration searched: its tokens in
 * next's slots (place_arcs sets them again with the offsets), indexed. */
static int follow_start(struct om_pool *pool)
{
    struct om_plan *next = &pool->next;
    for (uint64_t r = 0; r < next->period; r++)
        next->slots[r] = (struct om_slot){.token = next->records[r].token,
                                          .len = next->records[r].len,
                                          .alignment = next->records[r].alignment};
    return om_slot_index_build(&next->index, next->slots, next->period);
}

/* Plans the iteration in next; serving goes on at the slot of the next request. The
 * search runs on the optmem-plan thread where it can (the host's pool, unless
 * OPTMEM_PLAN_THREAD=0), best fit serving meanwhile: its plan serves from the next iteration
 * boundary after it ends (the request whose slot is cursor) where the program still follows
 * the iteration (await_plan). Even a search that meets its lower bound at once held the request
 * that reached the quiet point for a millisecond and more with its setup and its faults; on the
 * thread the request only copies the arcs. Where a plan may be packed around live blocks (a device,
 * huge pages) the search needs the arena as it is, and stays inline. */
static void plan_now(struct om_pool *pool, uint64_t cursor)
{
    pool->next.period = pool->period;
    int rc = -EAGAIN;
    if (om_cfg.plan_thread != 0 && follow_start(pool) == 0) {
        rc = om_pool_plan_start(pool);
        if (rc == 0) {
            pool->phase = PLAN;
            pool->cursor = pool->follow_cursor = cursor;
            pool->follow_requests = pool->follow_misses = pool->followed = 0;
            return;
        }
    }
    if (rc != -ENOENT)
        rc = om_pool_plan(pool);
    if (rc == 0)
        rc = om_pool_install(pool, &pool->next, cursor, OM_PLAN_FRESH);
    if (rc != 0)
        plan_failed(pool, rc);
}

/* The search's plan, for a phase the program left, is kept for when the phase comes back. */
static void keep_found(struct om_pool *pool)
{
    if (om_pool_plan_take(pool, 1) != 0)
        return;
    pool->stats.plans++;
    /* The search may end after the program came back to its phase (a thread slow to get the
     * CPU): learning, held while it ran, would plan that phase again at this very request,
     * before the kept plan had followed the requests it needs to serve. */
    struct om_kept_plan *k = om_pool_keep_plan(pool, &pool->next, 1);
    if (k)
        om_pool_kept_catch_up(pool, k);
    om_debug("plan: the program left the %llu-request iteration while its plan was searched: "
             "the plan is kept for when the iteration comes back",
             (unsigned long long)pool->next.period);
}

/* The program's requests stopped following the iteration searched: its phase is over, and
 * the new one is learnt. Where the program followed the iteration over a window first, the
 * plan is right for that phase, which may come back (training after evaluation): it is kept
 * when the search ends, whenever that is, never installed in a phase it was not made for.
 * So what the program ends up with does not depend on how long the search took. */
static void leave_search(struct om_pool *pool)
{
    om_debug("%llu misses in %llu requests of the %llu-request iteration searched: learning "
             "again",
             (unsigned long long)pool->follow_misses, (unsigned long long)pool->follow_requests,
             (unsigned long long)pool->next.period);
    pool->stats.replans++;
    if (!pool->followed) { /* as a plan that missed at once */
        remember_failed_period(pool, &pool->next);
        om_pool_plan_abandon(pool);
    } else if (om_pool_plan_done(pool)) {
        keep_found(pool);
    } else {
        pool->job_detached = 1;
    }
    om_pool_learn(pool);
}

/* A request served by its full key (key and site not 0) at the place of rec in its iteration:
 * what a plan's slot for rec would learn of its cheap key, for the slot to start with
 * (docs/serving.md, "Served by cheap key"). */
static void record_cheap_key(struct om_pool *pool, struct record *rec, uint64_t key, uint64_t token,
                             uint32_t site)
{
    struct om_slot sl = {.token = rec->token,
                         .cheap = rec->cheap,
                         .site = rec->site,
                         .confirmed = rec->confirmed,
                         .ambiguous = rec->ambiguous};
    pool->stats.cheap_key_collisions += om_pool_cheap_learn(&sl, key, token, site);
    rec->cheap = sl.cheap;
    rec->site = sl.site;
    rec->confirmed = sl.confirmed;
    rec->ambiguous = sl.ambiguous;
}

/* A request while the search runs, followed on the iteration searched as a serving plan's
 * cursor follows it (a request of a token with no slot moves it on), its misses judged as a
 * serving plan's are: at the end of an iteration (the cursor wraps, or goes back), over a
 * period's requests at least. The plan serves from the first iteration boundary (the slot
 * after the quiet point, reached or passed) after the search ended, where the requests since
 * the last judgement still follow the iteration. */
static void await_plan(struct om_pool *pool, uint64_t token, uint64_t key, uint32_t site)
{
    const struct om_plan *next = &pool->next;
    uint64_t p = next->period, c = pool->follow_cursor, s = c;
    if (key && site) /* told to the slot expected, as a serving plan's */
        record_cheap_key(pool, &pool->next.records[c], key, token, site);
    if (next->slots[c].token != token) {
        s = om_slot_index_find(&next->index, next->slots, token, c);
        pool->follow_misses++;
    }
    int anew = s != UINT64_MAX && s < c;
    if (s == UINT64_MAX)
        s = c;
    pool->follow_cursor = s + 1 < p ? s + 1 : 0;
    uint64_t to_boundary = (pool->cursor + p - c) % p;
    int boundary = to_boundary >= 1 && to_boundary <= (s + p - c) % p + 1;
    if (++pool->follow_requests >= p && (anew || s + 1 >= p)) {
        if (om_misses_too_many(pool->follow_misses, pool->follow_requests)) {
            leave_search(pool);
            return;
        }
        pool->followed++;
        pool->follow_requests = pool->follow_misses = 0;
    }
    if (!boundary || om_misses_too_many(pool->follow_misses, pool->follow_requests) ||
        !om_pool_plan_done(pool))
        return;
    int rc = om_pool_plan_take(pool, 0);
    if (rc == 0)
        rc = om_pool_install(pool, &pool->next, pool->follow_cursor, OM_PLAN_FRESH);
    if (rc != 0)
        plan_failed(pool, rc);
    else
        pool->plan_followed = pool->followed != 0;
}

void om_pool_serve(struct om_pool *pool, uint64_t cursor)
{
    if (!pool->job_detached)
        om_pool_plan_abandon(pool);
    pool->phase = SERVE;
    pool->plan_followed = 0;
    pool->cursor = cursor;
    pool->iteration_misses = pool->window_requests = pool->served_iterations = 0;
    pool->window_turned_away = 0;
    pool->failing = 0;
    pool->after_unknown = 0;
}

int om_pool_install(struct om_pool *pool, struct om_plan *plan, uint64_t cursor,
                    enum om_plan_origin origin)
{
    if (plan == &pool->next) { /* moved in: no copy of its slots and records */
        struct om_plan old = pool->plan;
        pool->plan = pool->next;
        pool->next = old;
    } else if (om_plan_copy(&pool->plan, plan) != 0) {
        return -ENOMEM;
    }
    struct om_plan *p = &pool->plan;
    if (om_slot_index_build(&p->index, p->slots, p->period) != 0)
        return -ENOMEM;
    if (origin == OM_PLAN_SAVED && om_pool_cover_slots(pool) != 0)
        return -ENOMEM;
    /* Blocks the plan before placed give up their pages where this one's slots do not lie. */
    pool->generation++;
    pool->stats.plan_peak_bytes = p->peak;
    pool->stats.plan_lower_bound_bytes = p->lower_bound;
    pool->stats.plan_greedy_bytes = p->greedy;
    pool->stats.plan_proven_bound_bytes = p->proven_bound;
    pool->stats.plan_time_us = p->time_us;
    pool->stats.plan_on_thread = p->on_thread;
    pool->stats.plan_slots = p->nslots;
    pool->stats.plans += origin == OM_PLAN_FRESH;
    pool->stats.reused_plans += origin == OM_PLAN_KEPT;
    pool->stats.saved_plan |= origin == OM_PLAN_SAVED;
    /* The kept plan serving now, so that its match is not followed while it serves. */
    pool->kept_from =
        origin == OM_PLAN_KEPT ? (unsigned)((struct om_kept_plan *)plan - pool->kept) + 1 : 0;
    if (pool->kept_from) /* its blocks are laid among the live ones from now on */
        pool->kept[pool->kept_from - 1].unserved = 0;
    om_pool_serve(pool, cursor);
    pool->release_next = 0;      /* the layout gives back what the slots do not cover */
    if (origin != OM_PLAN_SAVED) /* a saved plan serves from the start: no page is there */
        om_pool_lay_out_pages(pool);
    return 0;
}

int om_pool_start_saved(struct om_pool *pool)
{
    const struct om_saved_plan *sp = &pool->saved;
    struct om_plan iteration = {.slots = sp->slots + sp->nprologue,
                                .period = sp->period,
                                .log_cycle_start = UINT64_MAX,
                                .end = sp->peak,
                                .peak = sp->peak,
                                .lower_bound = sp->lower_bound,
                                .nslots = sp->period};
    int rc = om_pool_install(pool, &iteration, 0, OM_PLAN_SAVED);
    if (rc == 0 && sp->nprologue)
        pool->phase = PROLOGUE;
    return rc;
}

/* A request followed on the kept plans: the one whose match it completes serves from the
 * next request on (1), the plan serving, if any, kept in turn. */
static int serve_kept(struct om_pool *pool, uint64_t token, const struct om_alloc_info *info)
{
    struct om_kept_plan *k = om_pool_match_kept(pool, token, info);
    if (!k)
        return 0;
    if (pool->phase == SERVE)
        om_pool_leave_plan(pool, 1);
    om_debug("plan: the plan of a %llu-request iteration made before serves again",
             (unsigned long long)k->plan.period);
    if (om_pool_install(pool, &k->plan, k->cursor, OM_PLAN_KEPT) != 0) {
        om_pool_release_free_later(pool, 0, SIZE_MAX);
        om_pool_learn(pool);
        return 0;
    }
    return 1;
}

/* Of the iterations in the ring, the latest in which fewest blocks outlived a period: a
 * block that lingers now and then (freed an iteration late) gets no slot in a plan made
 * from an iteration where it lingered, and every later iteration misses it; from one
 * where it did not, it gets its slot, and the guard turns it away when it lingers. A block
 * whose death is not known yet, or came two periods on, counts twice: one that lives
 * longer than a period in every iteration (a replaced weight) gets slots in a plan of two
 * iterations, from one where it has died already. */
static uint64_t pick_iteration(const struct om_pool *pool, uint64_t latest, uint64_t p,
                               uint64_t now)
{
    uint64_t best = latest, best_long = UINT64_MAX;
    for (uint64_t first = latest;; first -= p) {
        uint64_t lived_long = 0;
        for (uint64_t r = 0; r < p; r++) {
            const struct record *e = &pool->ring[(first + r) % RING];
            lived_long += (uint64_t)om_record_periods(e, p);
        }
        if (lived_long < best_long) {
            best = first;
            best_long = lived_long;
        }
        if (lived_long == 0 || first < pool->ring_first + p || first < pool->steady_from + p ||
            now - first + p >= RING)
            return best;
    }
}

/* Where the iteration in next holds fewest bytes of its own (a training step's end:
 * the optimizer's state and the weights live on, the activations are gone). Planned there,
 * the plan's region starts right above the blocks that outlive iterations, over the pages
 * that warm-up left free, and no block of the iteration stands in its way. */
static uint64_t quietest_request(const struct om_pool *pool, uint64_t p)
{
    uint64_t *delta = om_sys_map(2 * p * sizeof *delta), best = p - 1;
    if (!delta)
        return best;
    for (uint64_t r = 0; r < p; r++) {
        const struct record *rec = &pool->next.records[r];
        if (om_record_periods(rec, p) != 0)
            continue;
        delta[rec->lower] += rec->len;
        delta[rec->upper] -= rec->len; /* unsigned: the sums below come out right */
    }
    for (uint64_t t = 1; t < 2 * p; t++)
        delta[t] += delta[t - 1]; /* bytes live after request t, counting from lower */
    uint64_t least = UINT64_MAX;
    for (uint64_t c = 0; c < p; c++) {
        uint64_t live = delta[c] + delta[c + p]; /* arcs wrapped from the iteration before */
        if (live < least) {
            least = live;
            best = c;
        }
    }
    om_sys_unmap(delta, 2 * p * sizeof *delta);
    return best;
}

/* Blocks that live longer than a period but less than two (numpy code's weights: each
 * step's new array is freed at the next step's update) are no arcs of one iteration: the
 * iteration in next is planned twice over, on a circle of two periods where each such
 * block has two slots it takes in turns. */
static void unroll_twice(struct om_pool *pool)
{
    struct om_plan *next = &pool->next;
    uint64_t p = next->nrecords;
    int needed = 0;
    for (uint64_t r = 0; r < p && !needed; r++)
        needed = om_record_periods(&next->records[r], p) == 1;
    if (!needed || 2 * p > MAX_PERIOD)
        return;
    for (uint64_t r = 0; r < p; r++) {
        struct record *copy = &next->records[r + p];
        *copy = next->records[r];
        copy->lower += p;
        if (copy->upper != OM_NO_DEATH)
            copy->upper += p;
    }
    next->nrecords = pool->period = 2 * p;
    next->unrolled = 1;
}

/* A request into the ring, its death to come. The ring goes on while a plan serves: a plan
 * of a layer repeated inside the step serves until the tracer finds the whole step, and
 * the step is then planned from the iterations just past rather than from two learnt from
 * then on. */
static uint64_t ring_put(struct om_pool *pool, struct om_block *b, uint64_t token, size_t alignment,
                         uint64_t key, const struct om_alloc_info *info)
{
    uint64_t now = pool->learnt++;
    pool->ring[now % RING] = (struct record){.token = token,
                                             .lower = now,
                                             .upper = OM_NO_DEATH,
                                             .size = b->size,
                                             .len = b->len,
                                             .alignment = alignment,
                                             .site = key ? info->site : 0,
                                             .log = b->log,
                                             .ns = info->ns};
    if (key) /* only where site says it is there: a request served by its cheap key writes none */
        pool->ring_cheap[now % RING] = key;
    b->record = (uint32_t)now + 1;
    b->flags |= OM_BLOCK_RING;
    return now;
}

/* The iteration in next, copied from the ring at first, learns of the cheap keys of its
 * requests' places in the iterations the ring holds that repeat it (from steady_from on, up
 * to now), in their order; requests served by their cheap keys tell nothing. */
static void learn_cheap_keys(struct om_pool *pool, uint64_t first, uint64_t p, uint64_t now)
{
    uint64_t from = pool->steady_from > pool->ring_first ? pool->steady_from : pool->ring_first;
    if (from > first)
        from = first;
    if (now >= RING && now - RING + 1 > from) /* the entries still in the ring */
        from = now - RING + 1;
    uint64_t back = (first - from) / p; /* iterations before first: first - back * p >= from */
    for (uint64_t r = 0; r < p; r++) {
        for (uint64_t at = first + r - back * p; at <= now; at += p) {
            const struct record *e = &pool->ring[at % RING];
            if (e->site)
                record_cheap_key(pool, &pool->next.records[r], pool->ring_cheap[at % RING],
                                 e->token, e->site);
        }
    }
}

/* A request learnt. Where the tracer knows the requests to repeat with a period far
 * enough back, the last iteration whose next one is past as well is planned: every block
 * it made has died, or lives longer than a period. */
static void learn_request(struct om_pool *pool, struct om_block *b, uint64_t now,
                          const struct om_alloc_info *info)
{
    uint64_t p = info->period;
    if (p < MIN_PERIOD || p > MAX_PERIOD || !info->periodic ||
        period_failed(pool, p, info->periodic)) {
        pool->period = 0;
        pool->plan_at = 0;
        return;
    }
    if (p != pool->period) {
        pool->period = p;
        pool->steady_from = UINT64_MAX;
        pool->plan_at = 0;
    }
    uint64_t from = info->periodic > now ? 0 : now + 1 - info->periodic;
    if (from < pool->steady_from)
        pool->steady_from = from;
    if (pool->job) /* next holds a detached search's iteration until its plan is kept */
        return;
    if (2 * p > RING) { /* recorded as it comes, from the next iteration start */
        if (info->iteration_start)
            start_recording(pool, b, info->ns);
        return;
    }
    uint64_t place = (now - pool->steady_from) % p;
    uint64_t back = place + (place == p - 1 ? p : 2 * p); /* to the latest iteration planned */
    if (back >= RING || back > now - pool->ring_first || now + 1 < pool->plan_at)
        return;
    uint64_t first = pick_iteration(pool, now - back, p, now);
    for (uint64_t r = 0; r < p; r++) {
        const struct record *e = &pool->ring[(first + r) % RING];
        uint64_t upper = e->upper == OM_NO_DEATH ? OM_NO_DEATH : e->upper - first;
        pool->next.records[r] = (struct record){.token = e->token,
                                                .lower = r,
                                                .upper = upper,
                                                .size = e->size,
                                                .len = e->len,
                                                .alignment = e->alignment};
    }
    pool->next.nrecords = p;
    /* first + p <= now: the next iteration's first request is in the ring too. */
    pool->iteration_ns = span_ns(pool->ring[first % RING].ns, pool->ring[(first + p) % RING].ns);
    if (!pool->plan_at && p != pool->outgrown_period) {
        uint64_t quiet = 3 * p > RING ? p - 1 : quietest_request(pool, p);
        pool->plan_at = now + 1 + (quiet + p - place) % p;
        if (now + 1 < pool->plan_at)
            return;
    }
    pool->plan_at = pool->outgrown_period = 0;
    uint32_t log = pool->ring[first % RING].log;
    pool->next.log_cycle_start = log ? log - 1 : UINT64_MAX;
    pool->next.evidence = info->periodic;
    pool->next.unrolled = 0;
    learn_cheap_keys(pool, first, p, now);
    unroll_twice(pool);
    plan_now(pool, (back + 1) % pool->period);
}

void om_pool_after_cycle_request(struct om_pool *pool, struct om_block *b, uint64_t token,
                                 size_t alignment, uint64_t key, const struct om_alloc_info *info)
{
    /* A request only logged leaves them to be asked for where they are read. */
    pool->tracer_stale = info->deferred;
    if (!info->deferred) {
        pool->tracer_period = info->period;
        pool->tracer_evidence = info->periodic;
    }
    if (pool->job_detached && om_pool_plan_done(pool))
        keep_found(pool);
    uint64_t now = pool->learnt;
    if (pool->phase == LEARN || pool->phase == SERVE || pool->phase == PLAN)
        now = ring_put(pool, b, token, alignment, key, info);
    else
        pool->ring_first = pool->learnt; /* a gap: the ring's iterations end here */
    if (pool->phase == PROLOGUE)
        return;
    if (pool->phase == PLAN) {
        await_plan(pool, token, key, info->site);
        return;
    }
    if (pool->phase == SERVE) {
        /* A plan that misses: the program may have come back to a kept plan's phase. */
        if (pool->iteration_misses)
            serve_kept(pool, token, info);
        return;
    }
    if (serve_kept(pool, token, info))
        return;
    if (pool->phase == LEARN) {
        learn_request(pool, b, now, info);
        if (pool->phase != RECORD)
            return;
    }
    if (pool->phase == RECORD) {
        struct om_plan *next = &pool->next;
        struct record *rec = &next->records[next->nrecords];
        *rec = (struct record){.token = token,
                               .lower = next->nrecords,
                               .upper = OM_NO_DEATH,
                               .size = b->size,
                               .len = b->len,
                               .alignment = alignment};
        if (key && info->site)
            record_cheap_key(pool, rec, key, token, info->site);
        b->record = (uint32_t)++next->nrecords;
        b->flags &= ~OM_BLOCK_RING;
        b->generation = pool->generation;
        if (next->nrecords == pool->period) {
            pool->phase = OBSERVE;
            pool->observed = 0;
        }
    } else if (pool->phase == OBSERVE) {
        if (++pool->observed == 1) /* the next iteration's first request */
            pool->iteration_ns = span_ns(pool->record_start_ns, info->ns);
        if (pool->observed == pool->period) {
            pool->next.evidence = info->periodic;
            plan_now(pool, 0);
        }
    }
}
