/* Plan mode's entry points: a domain's pool, placement (saved prologue, planned slots,
 * best fit), frees and page release. The phases are in phases.c. */
#include "pool_internal.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define REDZONE 64 /* OPTMEM_VERIFY=1: bytes after each block, checked at free */
#define REDZONE_BYTE 0xa5
/* While serving, freed blocks this large that were not planned give their pages back at
 * once, as glibc unmaps its mmap'd chunks; blocks at planned offsets keep their pages,
 * which the next iteration reuses. */
#define RELEASE_BLOCK_MIN ((size_t)64 << 10)
/* Before a plan: the last freed blocks of that size, oldest first, whose pages go back
 * when the arena holds more than 1/RESIDENT_SLACK above the most bytes ever live. */
#define FREED_RANGES 4096
#define RESIDENT_SLACK 128
/* Holes of at least this share of the peak (whole arrays) go back whenever they are idle
 * beyond the slack; smaller ones taken again after they went back widen the slack. */
#define LARGE_HOLE 16
#define LOG_CAPACITY ((size_t)1 << 20) /* main-thread requests logged for a saved plan */
/* A saved plan whose prologue misses more than half of its first requests is another
 * run's: it is dropped and the program is learnt as usual. */
#define PROLOGUE_PROBE 64
/* How many requests shorter than the saved one this run's prologue may be found to be. */
#define PROLOGUE_TAIL 64

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

/* Serves the saved plan from the first request: its iteration's slots are the plan, its
 * prologue is walked by a cursor of its own. */
static int install_saved_plan(struct om_pool *pool)
{
    const struct om_saved_plan *sp = &pool->saved;
    pool->period = sp->period;
    memcpy(pool->slots, sp->slots + sp->nprologue, sp->period * sizeof *pool->slots);
    if (om_slot_index_build(&pool->plan_index, pool->slots, pool->period) != 0 ||
        om_pool_cover_slots(pool) != 0)
        return -ENOMEM;
    pool->plan_end = sp->peak;
    pool->stats.plan_peak_bytes = sp->peak;
    pool->stats.plan_lower_bound_bytes = sp->lower_bound;
    pool->stats.plan_greedy_bytes = pool->stats.plan_proven_bound_bytes = 0;
    pool->stats.plan_time_us = 0;
    pool->stats.plan_slots = sp->period;
    pool->stats.saved_plan = 1;
    pool->phase = sp->nprologue ? PROLOGUE : SERVE;
    return 0;
}

static void open_plan_file(struct om_pool *pool, const struct om_config *cfg)
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
    if (rc == 0 && pool->saved.period <= MAX_PERIOD && install_saved_plan(pool) == 0) {
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

int om_pool_create(struct om_pool **out, const struct om_backend *backend, unsigned domain,
                   size_t reserve, const struct om_config *cfg)
{
    struct om_pool *pool = om_sys_map(sizeof *pool);
    if (!pool)
        return -ENOMEM;
    pthread_mutex_init(&pool->lock, NULL);
    int rc = om_arena_init(&pool->arena, backend, reserve);
    if (rc == 0)
        rc = om_blockmap_init(&pool->blocks);
    if (rc == 0) {
        pool->records = om_sys_map(MAX_PERIOD * sizeof *pool->records);
        pool->slots = om_sys_map(MAX_PERIOD * sizeof *pool->slots);
        pool->freed = om_sys_map(FREED_RANGES * sizeof *pool->freed);
        pool->ring = om_sys_map(RING * sizeof *pool->ring);
        if (!pool->records || !pool->slots || !pool->freed || !pool->ring)
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
    pool->log_cycle_start = UINT64_MAX;
    pool->steady_from = UINT64_MAX;
    if (cfg->plan_file[0] && pool->host)
        open_plan_file(pool, cfg);
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

/* A block freed in stream order, back in the arena once its fence passed: while a plan
 * serves, its pages that no slot covers go back, as a block freed at once gives them (the
 * slots' pages stay: they serve the next iteration). */
static void settled(void *ctx, size_t off, size_t len)
{
    struct om_pool *pool = ctx;
    if (pool->phase == SERVE && len >= RELEASE_BLOCK_MIN)
        om_pool_release_block(pool, off, len, 0);
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
static int place_in_prologue(struct om_pool *pool, size_t len, size_t alignment, uint64_t token,
                             size_t *off)
{
    uint64_t s = om_slot_index_take(&pool->saved.prologue, pool->saved.slots, token);
    if (s == UINT64_MAX && token == pool->slots[0].token &&
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
    int served = s != UINT64_MAX &&
                 take_planned(pool, slot->offset, slot->len, len, alignment, OM_STREAM_NONE);
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
static int place_in_prologue_left(struct om_pool *pool, size_t len, size_t alignment,
                                  uint64_t token, size_t *off)
{
    uint64_t s = om_slot_index_take(&pool->saved.prologue, pool->saved.slots, token);
    if (s == UINT64_MAX)
        return 0;
    const struct om_slot *slot = &pool->saved.slots[s];
    if (!take_planned(pool, slot->offset, slot->len, len, alignment, OM_STREAM_NONE))
        return 0;
    pool->stats.hits++;
    *off = slot->offset;
    return 1;
}

/* The plan misses more than one request in eight, and has for this many: the program went
 * on to another phase (an evaluation step under the training plan). The free pages of its
 * region go back at once: while requests fell back above the plan until a period had passed
 * and it was dropped, those pages stayed resident beside theirs, and the CNN's first
 * evaluation step at twice the batch peaked 96 MiB above its training steps. */
#define FAILING_MISSES 4

static void release_failing_plan(struct om_pool *pool)
{
    pool->failing = 1;
    pool->moves_left = 0; /* blocks freed now would move their pages back onto the slots' */
    if (pool->covered.n)
        om_pool_release_free(pool, pool->covered.v[0].off, pool->plan_end);
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

/* Picks the offset of a request: the expected slot, a slot found by token, or best fit. */
static int place(struct om_pool *pool, size_t len, size_t alignment, uintptr_t stream,
                 uint64_t token, int cycle_thread, int main_thread, size_t *off, int *flags)
{
    int planned = 0, serve = 0; /* serve: the request goes to the iteration's cursor */
    *flags = 0;
    pool->stats.serving_requests += pool->phase == SERVE || pool->phase == PROLOGUE;
    if (pool->phase == PROLOGUE && main_thread) {
        int r = place_in_prologue(pool, len, alignment, token, off);
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
            place_in_prologue_left(pool, len, alignment, token, off)) {
            *flags = OM_BLOCK_PLANNED | OM_BLOCK_PROLOGUE;
            return 0;
        }
        uint64_t s = pool->cursor;
        if (pool->slots[s].token != token) {
            s = om_slot_index_find(&pool->plan_index, pool->slots, token, pool->cursor);
            pool->stats.misses++;
            pool->iteration_misses++;
            pool->iteration_unknown += s == UINT64_MAX;
            if (pool->iteration_misses >= FAILING_MISSES && !pool->failing && !pool->grace &&
                pool->iteration_misses * 8 > pool->window_requests)
                release_failing_plan(pool);
        } else {
            pool->stats.hits++;
        }
        uint64_t next = s == UINT64_MAX ? pool->cursor + 1 : s + 1;
        int anew = s != UINT64_MAX && s < pool->cursor; /* the iteration began anew */
        planned = s != UINT64_MAX && take_planned(pool, pool->slots[s].offset, pool->slots[s].len,
                                                  len, alignment, stream);
        if (planned)
            *off = pool->slots[s].offset;
        pool->cursor = next < pool->period ? next : 0;
        pool->window_requests++;
        pool->window_turned_away += !planned;
        if (anew || next >= pool->period)
            om_pool_end_of_served_iteration(pool);
        if (planned) {
            *flags = OM_BLOCK_PLANNED;
            return 0;
        }
    }
    int serving = pool->phase == SERVE || pool->phase == PROLOGUE;
    size_t floor = serving ? pool->plan_end : 0;
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

/* ---- the entry points ---- */

/* Best fit before a plan holds pages that no live block uses; once they exceed a small
 * share of the peak of live bytes, the holes freed longest ago, where still free, give
 * theirs back. A program whose holes fit its next requests keeps its pages and faults
 * nothing in again, where releasing every hole would refault each iteration. Pages of
 * small holes (below 1/LARGE_HOLE of the peak) given back and taken again since were
 * given back too soon: the slack grows by them, as glibc keeps chunks below its trim and
 * mmap thresholds in its heap and raises those to the chunks it sees freed, so that a
 * program whose small holes are fragmented beyond the share pays one release and refault
 * of each, not one per request; a large hole (whole arrays) still goes back. On the host
 * only: a device's release synchronizes the device and its remapping costs more than a
 * fault, so a device arena keeps its pages until a plan trims them or the device is full. */
static void release_idle(struct om_pool *pool)
{
    size_t released = 0, unbacked = pool->arena.unbacked.bytes;
    /* Unbacked bytes fell with nothing else released since: taken again. */
    if (pool->arena.released == pool->idle_released && unbacked < pool->idle_unbacked) {
        size_t again = pool->idle_unbacked - unbacked;
        again = again < pool->idle_small ? again : pool->idle_small;
        pool->idle_slack += again;
        pool->idle_small -= again;
    }
    size_t share = pool->arena.peak_used / RESIDENT_SLACK;
    size_t limit = pool->arena.peak_used + (share > pool->idle_slack ? share : pool->idle_slack);
    while (pool->nfreed && om_arena_resident(&pool->arena) > limit) {
        struct om_extent e = pool->freed[pool->freed_head];
        pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
        pool->nfreed--;
        size_t r = om_arena_release_range(&pool->arena, e.off, e.len);
        released += r;
        if (e.len < pool->arena.peak_used / LARGE_HOLE)
            pool->idle_small += r;
    }
    pool->idle_unbacked = pool->arena.unbacked.bytes;
    pool->idle_released = pool->arena.released;
    pool->stats.released_bytes += released;
}

void *om_pool_alloc(struct om_pool *pool, size_t size, size_t alignment, int zero, uintptr_t stream,
                    const struct om_stack *stack)
{
    if (size > pool->max_request || alignment > OM_ARENA_ALIGNMENT)
        return NULL; /* the real allocator says what happens to such a request */
    uint64_t token = om_token_of(stack, size);
    size_t len = round16(size) + pool->redzone;
    if (alignment < 16)
        alignment = 16;
    int cycle_thread = om_tracer_on_cycle_thread(pool->domain), main_thread = on_main_thread();
    pthread_mutex_lock(&pool->lock);
    if (pool->pending.live)
        om_pending_settle(&pool->pending, &pool->arena, settled, pool);
    size_t touched = pool->arena.touched, resident = om_arena_resident(&pool->arena), off;
    /* The plan's that places the block: a request that ends a window may leave the plan. */
    uint32_t generation = pool->generation;
    int flags;
    if (place(pool, len, alignment, stream, token, cycle_thread, main_thread, &off, &flags) != 0)
        goto fail;
    if (pool->phase != SERVE && pool->host && om_arena_resident(&pool->arena) > resident)
        release_idle(pool);
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
    if (om_blockmap_put(&pool->blocks, &b) != 0) {
        om_arena_give(&pool->arena, off, len);
        goto fail;
    }
    unsigned char *p = pool->arena.base + off;
    if (zero && pool->host && off < touched) /* above `touched`: fresh pages, zero */
        memset(p, 0, touched - off < size ? touched - off : size);
    if (pool->redzone)
        memset(p + round16(size), REDZONE_BYTE, pool->redzone);
    struct om_alloc_info info;
    om_tracer_on_alloc(pool->domain, p, size, round16(size), alignment, stack, &info);
    if (cycle_thread)
        om_pool_after_cycle_request(pool, om_blockmap_get(&pool->blocks, off), token, alignment,
                                    &info);
    if (pool->layout_next)
        om_pool_lay_out_slice(pool);
    pthread_mutex_unlock(&pool->lock);
    return p;
fail:
    pthread_mutex_unlock(&pool->lock);
    return NULL;
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
    om_tracer_on_free(pool->domain, p);
    if (b->flags & OM_BLOCK_RING) {
        /* Unless a later request took its place in the ring. */
        struct record *e = &pool->ring[(b->record - 1) % RING];
        if ((uint32_t)e->lower == b->record - 1 && e->upper == NO_DEATH)
            e->upper = pool->learnt;
    } else if (b->record && b->generation == pool->generation &&
               (pool->phase == RECORD || pool->phase == OBSERVE)) {
        pool->records[b->record - 1].upper =
            pool->phase == RECORD ? pool->nrecords : pool->period + pool->observed;
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

/* Before a plan, best fit leaves holes whose pages stay resident. Freed blocks are
 * remembered, oldest dropped first when the ring is full. */
static void remember_freed(struct om_pool *pool, size_t off, size_t len)
{
    if (len < RELEASE_BLOCK_MIN || !pool->freed)
        return;
    if (pool->nfreed == FREED_RANGES) {
        pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
        pool->nfreed--;
    }
    pool->freed[(pool->freed_head + pool->nfreed++) % FREED_RANGES] = (struct om_extent){off, len};
}

void om_pool_free(struct om_pool *pool, void *p, uintptr_t stream)
{
    int found;
    pthread_mutex_lock(&pool->lock);
    struct om_block gone = take_block(pool, p, &found);
    if (!found)
        goto out;
    if (stream != OM_STREAM_NONE && pool->arena.backend->fence_record) {
        if (free_in_stream_order(pool, &gone, stream) != 0)
            pool->stats.retired_blocks++;
        goto out;
    }
    om_arena_give(&pool->arena, gone.off, gone.len);
    /* A planned block's pages serve its slot again, as long as its plan does: a block of a
     * plan since dropped leaves a hole like any other. While a plan serves, a large block it
     * did not place keeps its pages only where the iteration's slots lie, and moves what it
     * can onto their pages not resident yet (blocks live when the plan was made, freed in its
     * first iteration: 800 faults in the CNN's). Once the iteration is served no request of a
     * saved plan's prologue comes again: such a block is treated alike, but moves nothing
     * (the model's weights, freed at teardown: kept, they held 4 MiB while libraries'
     * destructors touched their code pages). */
    int planned = (gone.flags & OM_BLOCK_PLANNED) && gone.generation == pool->generation;
    int prologue = planned && (gone.flags & OM_BLOCK_PROLOGUE);
    if ((prologue || !planned) && pool->phase == SERVE && gone.len >= RELEASE_BLOCK_MIN)
        om_pool_release_block(pool, gone.off, gone.len, !planned);
    else if (!planned && pool->phase != SERVE && pool->host)
        remember_freed(pool, gone.off, gone.len);
    if (pool->layout_next)
        om_pool_lay_out_slice(pool);
    if (pool->redzone && om_arena_check(&pool->arena) != 0) {
        pool->stats.verify_violations++;
        om_warn("verify: the arena's free extents are inconsistent");
    }
out:
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_retire(struct om_pool *pool, void *p)
{
    int found;
    pthread_mutex_lock(&pool->lock);
    take_block(pool, p, &found);
    pool->stats.retired_blocks += found;
    pthread_mutex_unlock(&pool->lock);
}

size_t om_pool_usable_size(struct om_pool *pool, const void *p)
{
    size_t off = (size_t)((const unsigned char *)p - pool->arena.base);
    pthread_mutex_lock(&pool->lock);
    struct om_block *b = om_blockmap_get(&pool->blocks, off);
    size_t usable = b ? round16(b->size) : 0;
    pthread_mutex_unlock(&pool->lock);
    return usable;
}

void om_pool_publish(struct om_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stats.arena_top_bytes = pool->arena.top;
    om_tracer_set_serving(pool->domain, &pool->stats);
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_save_plan(struct om_pool *pool)
{
    if (!pool->plan_file[0] || !pool->log.entries)
        return;
    pthread_mutex_lock(&pool->lock);
    uint64_t n0 = pool->log_cycle_start;
    struct om_cycle_arc *arcs = NULL;
    size_t narcs = 0, bytes = (pool->nrecords ? pool->nrecords : 1) * sizeof *arcs;
    struct om_saved_plan plan = {0};
    char err[256] = "";
    int rc = -ENOENT;
    if (pool->phase == PLAN) { /* its search is abandoned with the process */
        snprintf(err, sizeof err, "the plan was still being made at exit");
        goto out;
    }
    if (pool->phase != SERVE || n0 == UINT64_MAX || n0 >= pool->log.n) {
        snprintf(err, sizeof err, "no steady iteration of the main thread was learnt");
        goto out;
    }
    rc = -ENOMEM;
    if (!(arcs = om_sys_map(bytes)))
        goto out;
    for (size_t r = 0; r < pool->nrecords; r++) {
        const struct record *rec = &pool->records[r];
        if (om_record_periods(rec, pool->period) == 0)
            arcs[narcs++] = (struct om_cycle_arc){r,          rec->token, rec->lower,
                                                  rec->upper, rec->len,   rec->alignment};
    }
    rc = om_saved_plan_build(&pool->log, n0, arcs, narcs, pool->period,
                             om_pool_search_budget_ms(pool, 0), &plan, err, sizeof err);
    if (rc == 0 && (rc = om_saved_plan_write(pool->plan_file, om_saved_plan_program(), &plan)))
        snprintf(err, sizeof err, "%s", strerror(-rc));
out:
    if (rc == 0)
        om_info("plan saved to %s: %llu prologue requests and an iteration of %llu, peak %.1f "
                "MiB (%.3f of its lower bound)",
                pool->plan_file, (unsigned long long)n0, (unsigned long long)pool->period,
                plan.peak / 1048576.0,
                plan.lower_bound ? (double)plan.peak / (double)plan.lower_bound : 1.0);
    else
        om_warn("no plan saved to %s: %s", pool->plan_file, err);
    om_saved_plan_free(&plan);
    om_sys_unmap(arcs, bytes);
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_lock(struct om_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
}

void om_pool_unlock(struct om_pool *pool)
{
    pthread_mutex_unlock(&pool->lock);
}

void om_pool_atfork_child(struct om_pool *pool)
{
    fork_generation++;
    pool->plan_file[0] = '\0'; /* the parent saves the plan; a child's run is another */
    om_pool_plan_atfork_child(pool);
    pthread_mutex_unlock(&pool->lock);
}
