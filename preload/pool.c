/* Plan mode's entry points and placement: a domain's pool, where each request goes (a planned
 * slot through the guard, a saved plan's prologue slot, best fit), and frees. */
#include "pool_internal.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define REDZONE 64 /* OPTMEM_VERIFY=1: bytes after each block, checked at free */
#define REDZONE_BYTE 0xa5
/* The process's first thread: a saved plan's prologue is its requests. */
static unsigned fork_generation = 1;
static __thread unsigned tls_generation;
static __thread int tls_main;

static int on_main_thread(void)
{
    if (tls_generation != fork_generation) {
        tls_main = gettid() == getpid();
        tls_generation = fork_generation;
    }
    return tls_main;
}

int om_pool_create(struct om_pool **out, const struct om_backend *backend, unsigned domain,
                   size_t reserve, const struct om_config *cfg)
{
    struct om_pool *pool = om_sys_map(sizeof *pool);
    if (!pool)
        return -ENOMEM;
    pool->lock = (struct om_lock){0};
    int rc = om_arena_init(&pool->arena, backend, reserve);
    if (rc == 0)
        rc = om_blockmap_init(&pool->blocks);
    if (rc == 0) {
        pool->ring = om_sys_map(RING * sizeof *pool->ring);
        pool->ring_cheap = om_sys_map(RING * sizeof *pool->ring_cheap);
        if (om_plan_map(&pool->plan, MAX_PERIOD) != 0 ||
            om_plan_map(&pool->next, MAX_PERIOD) != 0 || om_pool_pages_init(pool) != 0 ||
            !pool->ring || !pool->ring_cheap)
            rc = -ENOMEM;
    }
    if (rc != 0)
        return rc; /* what was mapped stays: address space of a process that goes on */
    pool->domain = domain;
    pool->host = backend->host_addressable;
    /* Host requests beyond a quarter of the reservation are the real allocator's; a device
     * arena may be one fixed block, and all of it serves. */
    pool->max_request = pool->host ? pool->arena.reserved / 4 : pool->arena.reserved;
    pool->redzone = cfg->verify && pool->host ? REDZONE : 0;
    pool->hugepages = cfg->hugepages && pool->host;
    pool->plan.log_cycle_start = pool->next.log_cycle_start = UINT64_MAX;
    pool->steady_from = UINT64_MAX;
    if (cfg->plan_file[0] && pool->host)
        om_pool_open_plan_file(pool, cfg);
    om_tracer_set_arena(domain, pool->arena.base, pool->arena.reserved);
    *out = pool;
    return 0;
}

void om_pool_range(const struct om_pool *pool, uintptr_t *lo, size_t *len)
{
    *lo = (uintptr_t)pool->arena.base;
    *len = pool->arena.reserved;
}

int om_pool_contains(const struct om_pool *pool, const void *p)
{
    return om_arena_contains(&pool->arena, p);
}

static size_t round16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* The guard: a planned offset is handed out only when the slot holds the request and no
 * live block overlaps it. */
static int take_planned(struct om_pool *pool, size_t offset, size_t slot_len, size_t len,
                        size_t alignment, uintptr_t stream)
{
    if (slot_len < len || (offset & (alignment - 1)))
        return 0;
    /* While the plan's pages are laid out, a slot that no move has reached yet takes free
     * pages no slot covers first, instead of faulting its own in beside them. */
    if (pool->layout_next && pool->moves_left && stream == OM_STREAM_NONE) {
        size_t moved =
            om_arena_move_onto(&pool->arena, offset, len, &pool->covered, &pool->moves_left);
        pool->stats.moved_bytes += moved;
        /* The pages moved hold what their old place held: below the arena's mark now, which
         * the take below raises over fresh pages too. */
        if (moved)
            pool->moved_end = pool->arena.touched;
    }
    int rc = stream != OM_STREAM_NONE && pool->pending.live
                 ? om_pending_take(&pool->pending, &pool->arena, offset, len, stream)
                 : om_arena_take(&pool->arena, offset, len);
    if (rc != 0) {
        pool->stats.guard_rejections++;
        return 0;
    }
    pool->stats.served_from_plan++;
    return 1;
}

int om_pool_take_planned(struct om_pool *pool, size_t offset, size_t slot_len, size_t len,
                         size_t alignment, uintptr_t stream)
{
    return take_planned(pool, offset, slot_len, len, alignment, stream);
}

/* Best fit among the free bytes and, for a request in stream order, the blocks freed on its
 * own stream whose fences have not passed: on a GPU the CPU runs ahead of the device, and a
 * block freed in stream order would otherwise stay out of use for a step or more. */
static int take_best_fit(struct om_pool *pool, size_t len, size_t alignment, size_t floor,
                         uintptr_t stream, size_t *off)
{
    if (stream != OM_STREAM_NONE && pool->pending.live &&
        om_pending_best_fit(&pool->pending, len, alignment, floor, stream, off) == 0 &&
        om_pending_take(&pool->pending, &pool->arena, *off, len, stream) == 0)
        return 0;
    int rc = om_arena_best_fit(&pool->arena, len, alignment, floor, off);
    return rc == 0 ? om_arena_take(&pool->arena, *off, len) : rc;
}

/* A request with a token the plan has no slot for, served with the cursor at its slot:
 * kept, with those just before it (after_unknown), until the next request says whether
 * they were made instead of the plan's. */
static void note_unknown(struct om_pool *pool, int after_unknown, uint64_t token, size_t len)
{
    if (!after_unknown)
        pool->nsub = 0;
    if (pool->nsub < SUB_RUN) {
        pool->sub[pool->nsub].token = token;
        pool->sub[pool->nsub].len = len;
        pool->sub[pool->nsub].slot = pool->cursor;
    }
    pool->nsub += pool->nsub <= SUB_RUN;
}

/* The request at slot s hit right after a run of requests without a slot, whose cursor
 * stood at the slots just before s: they were made instead of those slots' requests, the
 * same lengths from call sites whose stacks changed (Python's interpreter specializes its
 * calls over a program's first steps, and the native frames under a call change with it).
 * Each such slot, and every other slot of its token, takes the new token as its other one,
 * so that the next iterations hit there rather than miss at every one of them. Only a run
 * in the cursor's order: a request inserted, or found elsewhere, tells nothing of a slot. */
static void substituted(struct om_pool *pool, uint64_t s)
{
    struct om_plan *plan = &pool->plan;
    unsigned n = pool->nsub;
    pool->nsub = 0;
    if (n == 0 || n > SUB_RUN)
        return;
    for (unsigned i = 0; i < n; i++) {
        uint64_t at = (s + plan->period - n + i) % plan->period;
        if (pool->sub[i].slot != at || plan->slots[at].len != pool->sub[i].len)
            continue;
        size_t taken = om_slot_index_set_alt(&plan->index, plan->slots, plan->slots[at].token,
                                             pool->sub[i].len, pool->sub[i].token);
        if (taken)
            om_debug("plan: %zu slot(s) of the request at slot %llu take the token of the "
                     "request made there instead",
                     taken, (unsigned long long)at);
    }
}

/* Picks the offset of a request: the expected slot, a slot found by token, or best fit. */
static int place(struct om_pool *pool, size_t len, size_t alignment, uintptr_t stream,
                 uint64_t token, int cycle_thread, int main_thread, size_t *off, int *flags)
{
    int planned = 0, serve = 0; /* serve: the request goes to the iteration's cursor */
    *flags = 0;
    pool->stats.serving_requests += pool->phase == SERVE || pool->phase == PROLOGUE;
    if (pool->phase == PROLOGUE && main_thread) {
        int r = om_pool_place_in_prologue(pool, len, alignment, token, off);
        if (r > 0) {
            *flags = OM_BLOCK_PLANNED | OM_BLOCK_PROLOGUE;
            return 0;
        }
        serve = r < 0;
    } else if (pool->phase == SERVE && cycle_thread) {
        serve = 1;
    }
    if (serve && cycle_thread) {
        if (pool->grace && main_thread && pool->stats.saved_plan &&
            om_pool_place_in_prologue_left(pool, len, alignment, token, off)) {
            *flags = OM_BLOCK_PLANNED | OM_BLOCK_PROLOGUE;
            return 0;
        }
        struct om_plan *plan = &pool->plan;
        uint64_t s = pool->cursor;
        int after_unknown = pool->after_unknown, inserted = 0;
        pool->after_unknown = 0;
        if (plan->slots[s].token == token || plan->slots[s].alt == token) {
            pool->stats.hits++;
            if (after_unknown)
                substituted(pool, s);
        } else if (after_unknown && s > 0 &&
                   (plan->slots[s - 1].token == token || plan->slots[s - 1].alt == token)) {
            /* The request before, unknown, moved the cursor past this one's slot: it was
             * inserted, one miss (a lookup would find the slot behind the cursor and begin
             * the iteration anew). */
            s--;
            inserted = 1;
            pool->stats.hits++;
        } else {
            s = om_slot_index_find(&plan->index, plan->slots, token, pool->cursor);
            pool->stats.misses++;
            pool->iteration_misses++;
            pool->iteration_unknown += s == UINT64_MAX;
            pool->after_unknown = s == UINT64_MAX;
            if (s == UINT64_MAX)
                note_unknown(pool, after_unknown, token, len);
            om_pool_release_if_failing(pool);
        }
        /* An unknown request moves the cursor on: made instead of the slot's request, the
         * next request is the next slot's (a hit); inserted, it is this slot's (above). */
        uint64_t next = s == UINT64_MAX ? pool->cursor + 1 : s + 1;
        int anew = s != UINT64_MAX && s < pool->cursor && !inserted; /* the iteration began anew */
        planned = s != UINT64_MAX && take_planned(pool, plan->slots[s].offset, plan->slots[s].len,
                                                  len, alignment, stream);
        if (planned)
            *off = plan->slots[s].offset;
        pool->cursor = next < plan->period ? next : 0;
        pool->window_requests++;
        pool->window_turned_away += !planned;
        if (anew || next >= plan->period)
            om_pool_end_of_served_iteration(pool);
        if (planned) {
            *flags = OM_BLOCK_PLANNED;
            return 0;
        }
    }
    int serving = pool->phase == SERVE || pool->phase == PROLOGUE;
    size_t floor = serving ? pool->plan.end : 0;
    int rc = take_best_fit(pool, len, alignment, floor, stream, off);
    if (rc == -ENOMEM && !pool->host) {
        /* The device is full, and pages the arena holds idle may be why: give them back and
         * try once more, as a caching allocator empties its cache before it fails. */
        om_pool_release_free(pool, 0, SIZE_MAX);
        rc = take_best_fit(pool, len, alignment, floor, stream, off);
    }
    if (rc == 0 && serving) {
        pool->stats.fallbacks++;
        if (*off + len > pool->fallback_end)
            pool->fallback_end = *off + len;
    }
    return rc;
}

/* The cheap key's use (docs/serving.md, "Served by cheap key"): a slot's key names its
 * request alone once this many full serves after the one that set it agreed with it, and
 * then one serve of the slot in CHEAP_EVERY takes the full key again, to check it. */
#define CHEAP_CONFIRM 2
#define CHEAP_EVERY 64

/* The token of the request the slot's cheap key was learnt from. */
static uint64_t cheap_token(const struct om_slot *sl)
{
    return sl->cheap_alt ? sl->alt : sl->token;
}

/* Before a request served by its full key is placed, with the cursor at slot sl: a cheap key
 * that names the slot's request while this one is another is ambiguous, never trusted there
 * again. Marked now, before the request's miss may drop the plan (and keep it for a phase
 * that comes back). 1 where it was marked. */
static int cheap_check(struct om_slot *sl, uint64_t key, uint64_t token)
{
    if (sl->ambiguous || sl->cheap != key || cheap_token(sl) == token)
        return 0;
    sl->ambiguous = 1;
    return 1;
}

/* Once the request is recorded, of call site site: what its cheap key names at the slot. */
static int cheap_note(struct om_slot *sl, uint64_t key, uint64_t token, uint32_t site)
{
    if (sl->ambiguous || !site)
        return 0;
    if (sl->cheap == key) { /* the same token: see cheap_check */
        if (sl->site != site) {
            sl->ambiguous = 1;
            return 1;
        }
        sl->confirmed += sl->confirmed < CHEAP_CONFIRM;
        sl->since = 0;
    } else if (sl->token == token || sl->alt == token) {
        sl->cheap = key;
        sl->site = site;
        sl->since = sl->confirmed = 0;
        sl->cheap_alt = sl->token != token;
    }
    return 0;
}

int om_pool_cheap_learn(struct om_slot *sl, uint64_t key, uint64_t token, uint32_t site)
{
    int ambiguous = cheap_check(sl, key, token);
    return ambiguous | cheap_note(sl, key, token, site);
}

/* Whether the tracer may only log a request served by its cheap key, placed under
 * generation (docs/serving.md, "The served path's log"): what the phase machine reads of
 * the tracer's answer (om_pool_after_cycle_request) is then its time alone, while the plan
 * that placed it serves on and this iteration has missed nothing. */
static int loggable(const struct om_pool *pool, uint32_t generation, int cycle_thread)
{
    return pool->host && cycle_thread && pool->phase == SERVE && pool->generation == generation &&
           !pool->iteration_misses;
}

/* Under the lock: places and records a request of the token given, of the call site stack
 * names, or (stack NULL: served by its cheap key) of site. len and alignment as placed. */
static void *alloc_locked(struct om_pool *pool, size_t size, size_t len, size_t alignment, int zero,
                          uintptr_t stream, uint64_t token, const struct om_stack *stack,
                          uint32_t site, uint64_t key, int cycle_thread, int main_thread)
{
    if (pool->pending.live)
        om_pending_settle(&pool->pending, &pool->arena, om_pool_settled, pool);
    size_t touched = pool->arena.touched, resident = om_arena_resident(&pool->arena), off;
    /* The plan's that places the block: a request that ends a window may leave the plan. */
    uint32_t generation = pool->generation;
    /* The slot the cursor expects, which a request served by its full key tells what its
     * cheap key names. */
    uint64_t expected =
        stack && key && pool->phase == SERVE && cycle_thread ? pool->cursor : UINT64_MAX;
    if (expected != UINT64_MAX)
        pool->stats.cheap_key_collisions += cheap_check(&pool->plan.slots[expected], key, token);
    int flags;
    pool->moved_end = 0;
    if (place(pool, len, alignment, stream, token, cycle_thread, main_thread, &off, &flags) != 0)
        return NULL;
    if (pool->moved_end > touched) /* pages moved onto the slot: not fresh, though above */
        touched = pool->moved_end;
    /* The pages this request makes resident: the page work below gives back at least as
     * many, where pages wait to go, so that it never lags behind the program's growth. */
    size_t grown =
        om_arena_resident(&pool->arena) > resident ? om_arena_resident(&pool->arena) - resident : 0;
    if (pool->phase != SERVE && pool->host && grown)
        pool->idle_due = 1; /* om_pool_page_work, below */
    struct om_block b = {off, len, size, 0, generation, 0, flags};
    /* A saved plan needs the run's main-thread requests from the start until a plan has
     * held (a plan for a wrong period may serve an iteration or two before it misses):
     * logged by index, so logging stops for good at the first gap. */
    if (main_thread) {
        if (pool->log.n == pool->main_requests &&
            (pool->phase != SERVE || pool->served_iterations < STEADY_ITERATIONS))
            b.log = om_request_log_add(&pool->log, token, len, alignment);
        pool->main_requests++;
    }
    struct om_block *placed;
    if (om_blockmap_put(&pool->blocks, &b, &placed) != 0) {
        om_arena_give(&pool->arena, off, len);
        return NULL;
    }
    unsigned char *p = pool->arena.base + off;
    if (zero && pool->host && off < touched) /* above `touched`: fresh pages, zero */
        memset(p, 0, touched - off < size ? touched - off : size);
    if (pool->redzone)
        memset(p + round16(size), REDZONE_BYTE, pool->redzone);
    struct om_alloc_info info;
    if (stack)
        om_tracer_on_alloc(pool->domain, p, size, round16(size), alignment, stack, &info);
    else if (loggable(pool, generation, cycle_thread))
        om_tracer_log_alloc(pool->domain, p, size, round16(size), alignment, site, &info);
    else
        om_tracer_on_alloc_site(pool->domain, p, size, round16(size), alignment, site, &info);
    if (expected != UINT64_MAX && pool->generation == generation)
        pool->stats.cheap_key_collisions +=
            cheap_note(&pool->plan.slots[expected], key, token, info.site);
    /* Before the phase machine: a plan it installs now lays its pages out from the next
     * call, and this request's pages, placed by best fit, are matched by idle ones first. */
    om_pool_page_work(pool, grown);
    if (cycle_thread)
        om_pool_after_cycle_request(pool, placed, token, alignment, stack ? key : 0, &info);
    return p;
}

/* Whether the pool takes a request of size and *alignment (else the real allocator says
 * what happens to it); *len and *alignment as it places them. */
static int request_shape(const struct om_pool *pool, size_t size, size_t *alignment, size_t *len)
{
    if (size > pool->max_request || *alignment > OM_ARENA_ALIGNMENT)
        return 0;
    *len = round16(size) + pool->redzone;
    if (*alignment < 16)
        *alignment = 16;
    return 1;
}

void *om_pool_alloc_keyed(struct om_pool *pool, size_t size, size_t alignment, int zero,
                          uintptr_t stream, const struct om_stack *stack, uint64_t key)
{
    size_t len;
    if (!request_shape(pool, size, &alignment, &len))
        return NULL;
    uint64_t token = om_token_of(stack, size);
    int cycle_thread = om_tracer_on_cycle_thread(pool->domain), main_thread = on_main_thread();
    om_lock(&pool->lock);
    void *p = alloc_locked(pool, size, len, alignment, zero, stream, token, stack, 0, key,
                           cycle_thread, main_thread);
    om_unlock(&pool->lock);
    return p;
}

void *om_pool_alloc(struct om_pool *pool, size_t size, size_t alignment, int zero, uintptr_t stream,
                    const struct om_stack *stack)
{
    return om_pool_alloc_keyed(pool, size, alignment, zero, stream, stack, 0);
}

void *om_pool_alloc_cheap(struct om_pool *pool, size_t size, size_t alignment, int zero,
                          uint64_t key, int *taken)
{
    *taken = 0;
    size_t len;
    if (!key || !request_shape(pool, size, &alignment, &len) ||
        !om_tracer_on_cycle_thread(pool->domain))
        return NULL;
    void *p = NULL;
    om_lock(&pool->lock);
    struct om_slot *sl =
        pool->phase == SERVE && !pool->grace ? &pool->plan.slots[pool->cursor] : NULL;
    if (sl && sl->cheap == key && !sl->ambiguous && sl->confirmed >= CHEAP_CONFIRM &&
        sl->since + 1 < CHEAP_EVERY) {
        sl->since++;
        *taken = 1;
        pool->stats.served_by_cheap_key++;
        p = alloc_locked(pool, size, len, alignment, zero, OM_STREAM_NONE, cheap_token(sl), NULL,
                         sl->site, key, 1, on_main_thread());
    }
    om_unlock(&pool->lock);
    return p;
}

static void check_redzone(struct om_pool *pool, const struct om_block *b)
{
    const unsigned char *z = pool->arena.base + b->off + round16(b->size);
    for (size_t i = 0; i < pool->redzone; i++) {
        if (z[i] != REDZONE_BYTE) {
            pool->stats.verify_violations++;
            om_warn("verify: a block of %zu bytes at %p was written past its end (byte %zu)",
                    b->size, (void *)(pool->arena.base + b->off), round16(b->size) + i);
            return;
        }
    }
}

/* Takes the live block at p out of the map and the recording; *found says if p was one. */
static struct om_block take_block(struct om_pool *pool, void *p, int *found)
{
    size_t off = (size_t)((unsigned char *)p - pool->arena.base);
    struct om_block *b = om_blockmap_get(&pool->blocks, off), gone = {0};
    *found = b != NULL;
    if (!b) {
        pool->stats.invalid_frees++;
        om_warn("free(%p): not a live block of the pool (double free?); ignored", p);
        return gone;
    }
    if (pool->redzone)
        check_redzone(pool, b);
    if (pool->host) /* recorded in order with the requests logged */
        om_tracer_log_free(pool->domain, p);
    else
        om_tracer_on_free(pool->domain, p);
    if (b->flags & OM_BLOCK_RING) {
        /* Unless a later request took its place in the ring. */
        struct record *e = &pool->ring[(b->record - 1) % RING];
        if ((uint32_t)e->lower == b->record - 1 && e->upper == OM_NO_DEATH)
            e->upper = pool->learnt;
    } else if (b->record && b->generation == pool->generation &&
               (pool->phase == RECORD || pool->phase == OBSERVE)) {
        pool->next.records[b->record - 1].upper =
            pool->phase == RECORD ? pool->next.nrecords : pool->period + pool->observed;
    }
    gone = *b;
    if (gone.log)
        pool->log.entries[gone.log - 1].death = pool->main_requests;
    om_blockmap_remove(&pool->blocks, b);
    return gone;
}

/* A block freed on a stream: pending behind a fence; where none can be recorded, out of
 * use for good rather than reused too early. */
static int free_in_stream_order(struct om_pool *pool, const struct om_block *b, uintptr_t stream)
{
    const struct om_backend *be = pool->arena.backend;
    uintptr_t fence;
    if (be->fence_record(be->ctx, stream, &fence) != 0)
        return -EIO;
    if (om_pending_add(&pool->pending, b->off, b->len, stream, fence) != 0) {
        be->fence_drop(be->ctx, fence);
        return -ENOMEM;
    }
    return 0;
}

void om_pool_free(struct om_pool *pool, void *p, uintptr_t stream)
{
    int found;
    om_lock(&pool->lock);
    struct om_block gone = take_block(pool, p, &found);
    if (!found)
        goto out;
    if (stream != OM_STREAM_NONE && pool->arena.backend->fence_record) {
        if (free_in_stream_order(pool, &gone, stream) != 0)
            pool->stats.retired_blocks++;
        goto out;
    }
    om_arena_give(&pool->arena, gone.off, gone.len);
    om_pool_pages_freed(pool, &gone);
    om_pool_page_work(pool, 0);
    if (pool->redzone && om_arena_check(&pool->arena) != 0) {
        pool->stats.verify_violations++;
        om_warn("verify: the arena's free extents are inconsistent");
    }
out:
    om_unlock(&pool->lock);
}

void om_pool_retire(struct om_pool *pool, void *p)
{
    int found;
    om_lock(&pool->lock);
    take_block(pool, p, &found);
    pool->stats.retired_blocks += found;
    om_unlock(&pool->lock);
}

size_t om_pool_usable_size(struct om_pool *pool, const void *p)
{
    size_t off = (size_t)((const unsigned char *)p - pool->arena.base);
    om_lock(&pool->lock);
    struct om_block *b = om_blockmap_get(&pool->blocks, off);
    size_t usable = b ? round16(b->size) : 0;
    om_unlock(&pool->lock);
    return usable;
}

void om_pool_publish(struct om_pool *pool)
{
    om_lock(&pool->lock);
    pool->stats.arena_top_bytes = pool->arena.top;
    om_tracer_set_serving(pool->domain, &pool->stats);
    om_unlock(&pool->lock);
}

void om_pool_stats(struct om_pool *pool, struct om_serving_stats *out)
{
    om_lock(&pool->lock);
    *out = pool->stats;
    out->arena_top_bytes = pool->arena.top;
    om_unlock(&pool->lock);
}

void om_pool_lock(struct om_pool *pool)
{
    om_lock(&pool->lock);
}

void om_pool_unlock(struct om_pool *pool)
{
    om_unlock(&pool->lock);
}

void om_pool_atfork_child(struct om_pool *pool)
{
    fork_generation++;
    pool->plan_file[0] = '\0'; /* the parent saves the plan; a child's run is another */
    om_pool_plan_atfork_child(pool);
    om_pool_pages_atfork_child(pool);
    om_unlock(&pool->lock);
}
