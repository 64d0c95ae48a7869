/* Plan mode's page policy: which free pages of the arena stay resident, move onto a plan's
 * slots, or go back to the kernel, before a plan, as one is laid out and while it serves. */
#include "pool_internal.h"

#include "guard.h"
#include "log.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* While serving, freed blocks this large that were not planned give their pages back at
 * once, as glibc unmaps its mmap'd chunks; blocks at planned offsets keep their pages,
 * which the next iteration reuses. */
#define RELEASE_BLOCK_MIN ((size_t)64 << 10)
/* Before a plan: the last freed blocks of that size, oldest first, whose pages go back
 * when the arena holds more than 1/RESIDENT_SLACK above the most bytes ever live. */
#define FREED_RANGES 4096
#define RESIDENT_SLACK 128
/* Holes of at least this share of the peak, or of a release slice (OM_RELEASE_SLICE), are
 * whole arrays: they go back whenever they are idle beyond the slack. Smaller ones given
 * back and taken again widen the slack once they add up to more than a large hole's worth
 * (the share of the peak), by one release slice at most: the size below which a hole is
 * fragmentation. */
#define LARGE_HOLE 16

int om_pool_pages_init(struct om_pool *pool)
{
    pool->freed = om_sys_map(FREED_RANGES * sizeof *pool->freed);
    return pool->freed ? 0 : -ENOMEM;
}

/* The ring of freed blocks empties: their pages went back with a wider release. */
static void forget_freed(struct om_pool *pool)
{
    pool->nfreed = 0;
    pool->freed_head_len = 0;
    pool->idle_due = 0;
}

void om_pool_release_free(struct om_pool *pool, size_t from, size_t to)
{
    pool->stats.released_bytes += om_arena_release_free(&pool->arena, from, to);
    forget_freed(pool);
}

void om_pool_release_free_later(struct om_pool *pool, size_t from, size_t to)
{
    if (!pool->host) { /* a device's requests are few and large: at once, as before */
        om_pool_release_free(pool, from, to);
        return;
    }
    forget_freed(pool);
    if (pool->release_next) { /* one under way: the union of both */
        from = from < pool->release_next - 1 ? from : pool->release_next - 1;
        to = to > pool->release_to ? to : pool->release_to;
    }
    pool->release_next = from + 1;
    pool->release_to = to;
    if (from == 0 && to >= pool->arena.top)
        pool->ndrops = 0; /* every freed block's pages go with the rest */
}

/* Whether a hole of len bytes is fragmentation rather than a whole array. */
static int small_hole(const struct om_arena *a, size_t len)
{
    return len < a->peak_used / LARGE_HOLE && len < OM_RELEASE_SLICE;
}

/* Best fit before a plan holds pages that no live block uses; once they exceed a small
 * share of the peak of live bytes, the holes freed longest ago, where still free, give
 * theirs back. A program whose holes fit its next requests keeps its pages and faults
 * nothing in again, where releasing every hole would refault each iteration. Pages of
 * small holes given back and taken again since were given back too soon, once they add up
 * to more than a large hole's worth: the slack is what they add up to beyond it, as glibc
 * keeps chunks below its trim and mmap thresholds in its heap and raises those to the
 * chunks it sees freed, so that a program whose small holes are fragmented beyond the
 * share pays one release and refault of each, not one per request; as glibc's thresholds
 * stop at a maximum, the slack stops at the largest hole still small (a release slice):
 * counted without end, a program whose warm-up refaults its small holes for a few
 * iterations held all it had refaulted at its peak until its plan served. A large hole (a
 * whole array) goes back whenever it is idle, its refault taken as the price of holding no
 * idle array at the peak, and small holes' refaults are taken up to as much: the slack's pages
 * are held at every later peak, where a program that gets a plan within a few iterations
 * would hold them for nothing. On the host only: a device's release synchronizes the
 * device and its remapping costs more than a fault, so a device arena keeps its pages
 * until a plan trims them or the device is full. */
size_t om_pool_release_idle(struct om_pool *pool, size_t need, size_t budget)
{
    struct om_arena *a = &pool->arena;
    size_t released = 0, unbacked = a->unbacked.bytes;
    /* Unbacked bytes fell with nothing else released since: taken again. */
    if (a->released == pool->idle_released && unbacked < pool->idle_unbacked) {
        size_t again = pool->idle_unbacked - unbacked;
        again = again < pool->idle_small ? again : pool->idle_small;
        pool->idle_retaken += again;
        pool->idle_small -= again;
    }
    size_t share = a->peak_used / RESIDENT_SLACK, tolerated = a->peak_used / LARGE_HOLE;
    size_t slack = pool->idle_retaken > tolerated ? pool->idle_retaken - tolerated : 0;
    if (slack > OM_RELEASE_SLICE)
        slack = OM_RELEASE_SLICE;
    size_t limit = a->peak_used + (share > slack ? share : slack);
    pool->idle_due = 0;
    while (pool->nfreed && om_arena_resident(a) > limit) {
        /* The rest later (one hole can be a hundred MiB), once budget bytes were looked at
         * and need bytes given back: holes whose pages went back already (a hole freed, taken
         * again and freed again is in the ring each time) cost a lookup each, no release
         * (om_arena_release_free), and the pages given back never exceed the larger of the
         * two. Left to optmem-pages instead, what the call made resident would stay resident
         * while the program's growth goes on, above the warm-up's peak. */
        if (!budget && released >= need) {
            pool->idle_due = 1;
            break;
        }
        size_t step = budget ? budget : need - released;
        struct om_extent *e = &pool->freed[pool->freed_head];
        size_t whole = pool->freed_head_len ? pool->freed_head_len : e->len;
        size_t from = e->off & ~(a->page - 1);
        size_t end = (e->off + e->len + a->page - 1) & ~(a->page - 1);
        size_t to = end - from > step ? from + step : end;
        size_t r = om_arena_release_free(a, from, to);
        budget -= to - from < budget ? to - from : budget;
        released += r;
        if (small_hole(a, whole))
            pool->idle_small += r;
        if (to < end) { /* the hole's rest stays at the head, still counted by its whole size */
            pool->freed_head_len = whole;
            e->len = e->off + e->len - to;
            e->off = to;
        } else {
            pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
            pool->freed_head_len = 0;
            pool->nfreed--;
        }
    }
    pool->idle_unbacked = a->unbacked.bytes;
    pool->idle_released = a->released;
    pool->stats.released_bytes += released;
    return released;
}

/* Before a plan, best fit leaves holes whose pages stay resident. Freed blocks are
 * remembered, oldest dropped first when the ring is full. */
static void remember_freed(struct om_pool *pool, size_t off, size_t len)
{
    if (len < RELEASE_BLOCK_MIN || !pool->freed)
        return;
    if (pool->nfreed == FREED_RANGES) {
        pool->freed_head = (pool->freed_head + 1) % FREED_RANGES;
        pool->freed_head_len = 0;
        pool->nfreed--;
    }
    pool->freed[(pool->freed_head + pool->nfreed++) % FREED_RANGES] = (struct om_extent){off, len};
}

void om_pool_pages_freed(struct om_pool *pool, const struct om_block *gone)
{
    /* A planned block's pages serve its slot again, as long as its plan does: a block of a
     * plan since dropped leaves a hole like any other. While a plan serves, a large block it
     * did not place keeps its pages only where the iteration's slots lie, and moves what it
     * can onto their pages not resident yet (blocks live when the plan was made, freed in its
     * first iteration: 800 faults in the CNN's). Once the iteration is served no request of a
     * saved plan's prologue comes again: such a block is treated alike, but moves nothing
     * (the model's weights, freed at teardown: kept, they held 4 MiB while libraries'
     * destructors touched their code pages). */
    int planned = (gone->flags & OM_BLOCK_PLANNED) && gone->generation == pool->generation;
    int prologue = planned && (gone->flags & OM_BLOCK_PROLOGUE);
    if ((prologue || !planned) && pool->phase == SERVE && gone->len >= RELEASE_BLOCK_MIN)
        om_pool_release_block(pool, gone->off, gone->len, !planned);
    else if (!planned && pool->phase != SERVE && pool->host)
        remember_freed(pool, gone->off, gone->len);
}

/* A block freed in stream order, back in the arena once its fence passed: while a plan
 * serves, its pages that no slot covers go back, as a block freed at once gives them (the
 * slots' pages stay: they serve the next iteration). */
void om_pool_settled(void *ctx, size_t off, size_t len)
{
    struct om_pool *pool = ctx;
    if (pool->phase == SERVE && len >= RELEASE_BLOCK_MIN)
        om_pool_release_block(pool, off, len, 0);
}

/* The plan misses more than one request in eight, and has for this many: the program went
 * on to another phase (an evaluation step under the training plan). The free pages of its
 * region go back at once: while requests fell back above the plan until a period had passed
 * and it was dropped, those pages stayed resident beside theirs, and the CNN's first
 * evaluation step at twice the batch peaked 96 MiB above its training steps. */
#define FAILING_MISSES 4

void om_pool_release_if_failing(struct om_pool *pool)
{
    if (pool->iteration_misses < FAILING_MISSES || pool->failing || pool->grace ||
        !om_misses_too_many(pool->iteration_misses, pool->window_requests))
        return;
    pool->failing = 1;
    pool->moves_left = 0; /* blocks freed now would move their pages back onto the slots' */
    if (pool->covered.n)
        om_pool_release_free_later(pool, pool->covered.v[0].off, pool->plan.end);
}

void om_pool_advise_huge(struct om_pool *pool, size_t from, size_t to)
{
    /* The region is dense and every iteration reuses it: huge pages make its first touch
     * a few hundred faults instead of one per page, and cost at most one partly used huge
     * page. Opt-in: with the kernel's default defrag=madvise, a huge page fault may wait
     * for compaction when memory is fragmented. A refusal leaves small pages. */
    struct om_arena *a = &pool->arena;
    if (!pool->hugepages)
        return;
    size_t lo = from & ~(a->page - 1);
    size_t len = ((to + OM_ARENA_ALIGNMENT - 1) & ~(OM_ARENA_ALIGNMENT - 1)) - lo;
    if (len > a->reserved - lo) /* never beyond the arena's own mapping */
        len = a->reserved - lo;
    (void)madvise(a->base + lo, len, MADV_HUGEPAGE);
}

int om_pool_cover_slots(struct om_pool *pool)
{
    pool->moves_left = om_pool_pages_move(pool) ? PAGE_MOVES_MAX : 0;
    om_extents_destroy(&pool->covered);
    if (om_extents_init(&pool->covered) != 0)
        return -ENOMEM;
    const struct om_plan *plan = &pool->plan;
    for (uint64_t s = 0; s < plan->period; s++)
        if (plan->slots[s].len &&
            om_extents_add(&pool->covered, plan->slots[s].offset, plan->slots[s].len) != 0) {
            om_extents_destroy(&pool->covered);
            return -ENOMEM;
        }
    return 0;
}

void om_pool_release_uncovered(struct om_pool *pool, size_t from, size_t to)
{
    const struct om_extents *c = &pool->covered;
    ptrdiff_t i = om_extents_at_or_below(c, from);
    size_t gap = from;
    for (size_t k = i < 0 ? 0 : (size_t)i; k < c->n && c->v[k].off < to; k++) {
        if (c->v[k].off > gap)
            om_pool_release_free(pool, gap, c->v[k].off);
        if (c->v[k].off + c->v[k].len > gap)
            gap = c->v[k].off + c->v[k].len;
    }
    if (to > gap)
        om_pool_release_free(pool, gap, to);
}

/* Gives back every free page that no slot of the plan covers: the plan's region is resident
 * from warm-up only where the plan will touch it anyway. Pages about to go back first move
 * where slots lie on pages not resident, so that the first iteration served faults none of
 * them in (the transformer: 12 thousand faults, 133 thousand at 4 x its batch). A slice a
 * call, bottom up, in windows of OM_LAYOUT_SLICE bytes: each page of a window is moved or
 * given back at most once, and a call goes on to the next window only while those it looked
 * at had no such page. Each slice works on the arena as it is then, under the pool's lock:
 * only pages free at that moment move or go back. The free tail's pages go back with their
 * windows; what becomes resident above the plan again goes at the end of the iteration. */
#define LAYOUT_WINDOWS 4 /* windows a call may look at */

void om_pool_lay_out_pages(struct om_pool *pool)
{
    pool->stats.layout_calls = pool->stats.layout_bytes = 0;
    pool->layout_next = 0;
    if (om_pool_cover_slots(pool) != 0) {
        pool->stats.released_bytes += om_arena_release_tail(&pool->arena, pool->plan.end);
        return;
    }
    if (!pool->host) {
        /* A device's requests are few and large (an iteration of 32 in a replayed snapshot):
         * slices would keep its uncovered chunks mapped beside the plan's for iterations,
         * above the plan's peak. They go at once, as before. */
        size_t released = pool->stats.released_bytes;
        pool->stats.moved_bytes +=
            om_arena_move_into(&pool->arena, 0, SIZE_MAX, &pool->covered, &pool->moves_left, NULL);
        om_pool_release_uncovered(pool, 0, SIZE_MAX);
        pool->stats.released_bytes += om_arena_release_tail(&pool->arena, pool->plan.end);
        pool->stats.layout_calls = 1;
        pool->stats.layout_bytes = pool->stats.released_bytes - released;
        if (pool->stats.layout_bytes > pool->stats.layout_max_bytes)
            pool->stats.layout_max_bytes = pool->stats.layout_bytes;
        return;
    }
    pool->layout_next = 1; /* the byte looked at next, + 1 */
    pool->ndrops = 0;      /* the layout looks at every free page */
    pool->layout_run = (struct om_move_run){0, 0};
}

/* The first free byte at or above off, or top where none lies between them. */
static size_t next_free(const struct om_arena *a, size_t off)
{
    ptrdiff_t i = om_extents_at_or_below(&a->free, off);
    if (i >= 0 && a->free.v[i].off + a->free.v[i].len > off)
        return off;
    size_t k = (size_t)(i + 1);
    return k < a->free.n ? a->free.v[k].off : a->top;
}

void om_pool_lay_out_slice(struct om_pool *pool)
{
    struct om_arena *a = &pool->arena;
    size_t window = OM_LAYOUT_SLICE > a->page ? OM_LAYOUT_SLICE : a->page, work = 0;
    if (pool->phase != SERVE) { /* the plan went: so do its pages (om_pool_release_free_later) */
        pool->layout_next = 0;
        return;
    }
    pool->stats.layout_calls++;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned w = 0; w < LAYOUT_WINDOWS && !work; w++) {
        size_t at = next_free(a, pool->layout_next - 1);
        if (at >= a->top) {
            pool->layout_next = 0;
            break;
        }
        size_t from = at & ~(a->page - 1), to = from + window;
        size_t released = pool->stats.released_bytes;
        size_t moved = om_arena_move_into(a, from, to, &pool->covered, &pool->moves_left,
                                          pool->failing ? NULL : &pool->layout_run);
        pool->stats.moved_bytes += moved;
        om_pool_release_uncovered(pool, from, to);
        work = moved + (pool->stats.released_bytes - released);
        pool->layout_next = to + 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int64_t ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    uint64_t us = ns > 0 ? (uint64_t)ns / 1000 : 0;
    pool->stats.layout_bytes += work;
    if (work > pool->stats.layout_max_bytes)
        pool->stats.layout_max_bytes = work;
    if (us > pool->stats.layout_max_us)
        pool->stats.layout_max_us = us;
}

void om_pool_release_slice(struct om_pool *pool, size_t budget)
{
    struct om_arena *a = &pool->arena;
    size_t window = OM_RELEASE_SLICE > a->page ? OM_RELEASE_SLICE : a->page, released = 0;
    /* Windows with no resident free page cost a lookup each: a few of them are looked at. */
    for (unsigned w = 0; w < LAYOUT_WINDOWS && !released && budget; w++) {
        size_t at = next_free(a, pool->release_next - 1);
        if (at >= a->top || at >= pool->release_to) {
            pool->release_next = 0;
            break;
        }
        size_t from = at & ~(a->page - 1), len = window < budget ? window : budget;
        len = len > a->page ? len : a->page;
        size_t to = pool->release_to - from > len ? from + len : pool->release_to;
        size_t r = om_arena_release_free(a, from, to);
        released += r;
        budget -= r < budget ? r : budget;
        pool->stats.released_bytes += r;
        pool->release_next = to + 1;
        if (to >= pool->release_to) {
            pool->release_next = 0;
            break;
        }
    }
}

/* A freed block's window [from, to) of pages, under the plan serving: moved onto the
 * slots' (with move) or given back where no slot lies; with no plan serving (it was dropped
 * since), given back like any free page. */
static void drop_pages(struct om_pool *pool, size_t from, size_t to, int move)
{
    if (pool->phase != SERVE && pool->phase != PROLOGUE) {
        om_pool_release_free(pool, from, to);
        return;
    }
    if (move)
        pool->stats.moved_bytes +=
            om_arena_move_into(&pool->arena, from, to, &pool->covered, &pool->moves_left, NULL);
    om_pool_release_uncovered(pool, from, to);
}

void om_pool_release_block(struct om_pool *pool, size_t off, size_t len, int move)
{
    size_t page = pool->arena.page;
    size_t from = off & ~(page - 1), to = (off + len + page - 1) & ~(page - 1);
    if (!pool->host) { /* a device's requests are few and large: at once, as before */
        drop_pages(pool, from, to, move);
        return;
    }
    if (pool->ndrops == OM_DROPS) { /* merged into the newest: what lies between goes too */
        struct om_page_drop *d = &pool->drops[(pool->drop_head + OM_DROPS - 1) % OM_DROPS];
        size_t end = d->off + d->len > to ? d->off + d->len : to;
        d->off = d->off < from ? d->off : from;
        d->len = end - d->off;
        d->move |= move;
        return;
    }
    pool->drops[(pool->drop_head + pool->ndrops++) % OM_DROPS] =
        (struct om_page_drop){from, to - from, move};
}

/* One slice of the freed blocks' pages: at most budget bytes of them looked at, oldest
 * first. The pages of a block taken again meanwhile stay (only free pages go), and save a
 * release and a refault. Returns whether any page went back or moved. */
static int drop_slice(struct om_pool *pool, size_t budget)
{
    size_t before = pool->stats.released_bytes + pool->stats.moved_bytes;
    budget = budget > pool->arena.page ? budget : pool->arena.page;
    while (pool->ndrops && budget) {
        struct om_page_drop *d = &pool->drops[pool->drop_head];
        size_t n = d->len < budget ? d->len : budget;
        drop_pages(pool, d->off, d->off + n, d->move);
        budget -= n;
        d->off += n;
        d->len -= n;
        if (!d->len) {
            pool->drop_head = (pool->drop_head + 1) % OM_DROPS;
            pool->ndrops--;
        }
    }
    return pool->stats.released_bytes + pool->stats.moved_bytes != before;
}

/* Bytes of freed blocks' pages the optmem-pages thread looks at a time under the pool's lock
 * (their release comes after, with the lock let go), and its pause between two, in which a
 * call waiting for the lock takes it. */
#define DROP_CHUNK ((size_t)1 << 20)
#define DROP_PAUSE_NS 50000

/* What calls owe, a release slice at a time: the page work of each under the lock (the
 * books) is short, its release done with the lock let go. */
#define OWED_CHUNK OM_RELEASE_SLICE

/* Whether there are pages a call can owe: a dropped plan's free pages, or idle holes
 * before a plan. */
static int payable(const struct om_pool *pool)
{
    return pool->release_next || (pool->phase != SERVE && pool->nfreed);
}

/* Whether pages are still to go that a call left: a dropped plan's, or idle holes' beyond
 * the slack before a plan. */
static int more_due(const struct om_pool *pool)
{
    return pool->release_next || (pool->phase != SERVE && pool->idle_due && pool->nfreed);
}

/* A chunk of what calls owe. Where none are left to go back, nothing is owed any more. */
static void pay_owed(struct om_pool *pool)
{
    /* A whole chunk looked at even where less is owed: a page owed, looked for a page at a
     * time through holes given back already, took thousands of rounds. */
    size_t before = pool->arena.released;
    if (pool->release_next)
        om_pool_release_slice(pool, OWED_CHUNK);
    else if (payable(pool))
        (void)om_pool_release_idle(pool, 0, OWED_CHUNK);
    size_t gone = pool->arena.released - before;
    pool->owed = more_due(pool) && gone < pool->owed ? pool->owed - gone : 0;
}

/* One round of optmem-pages under the pool's lock: the books say which free pages go back
 * (a slice of the freed blocks' pages, or of what calls owe), and those pages leave the free
 * space until their release, done by the caller with the lock let go, is over. So a call
 * never waits for a release it did not ask for, and no request is placed on pages being
 * released: those pages were free when recorded, and stay out of reach until they are
 * back. Page moves stay under the lock (a slot's request may be placed on their
 * destination any time). */
static size_t drop_round(struct om_pool *pool)
{
    size_t before = pool->stats.released_bytes;
    pool->arena.defer = &pool->batch;
    if (pool->ndrops)
        drop_slice(pool, DROP_CHUNK);
    else if (pool->owed)
        pay_owed(pool);
    pool->arena.defer = NULL;
    om_arena_withhold(&pool->arena, &pool->batch);
    /* The report counts them once they are released. */
    size_t later = pool->stats.released_bytes - before;
    pool->stats.released_bytes = before;
    return later;
}

/* How long optmem-pages waits for work before it ends. A waiting thread would keep a process
 * whose main thread ended with pthread_exit alive (glibc ends it with its last thread,
 * docs/hardening.md); ending once idle needs no look at the process (a descriptor opened
 * by a thread of optmem's could take the number the program's next open expects), and a
 * training loop's bursts come far more often. */
#define IDLE_END_S 1

/* optmem-pages: the freed blocks' pages that the calls' slices left, and what calls owe,
 * given back while the program computes, not in its calls (a 32 MiB block freed a slice a
 * call kept its pages resident for sixteen calls, beside those the next blocks faulted
 * in). Once none are left it waits for the next call that leaves some, up to IDLE_END_S, so
 * that a call does not map a stack and clone a thread for every burst while the program
 * waits. */
static void *drop_thread(void *arg)
{
    struct om_pool *pool = arg;
    om_guard_enter(); /* what this thread allocates is none of the program's */
    om_guard_own_thread("optmem-pages", 0);
    size_t released = 0;
    om_lock(&pool->lock);
    for (;;) {
        while (pool->ndrops || pool->owed || pool->batch.n) {
            if (!pool->batch.n) /* else pieces still out of the free space: put back first */
                released = drop_round(pool);
            om_unlock(&pool->lock);
            om_arena_release_batch(&pool->arena, &pool->batch);
            om_lock(&pool->lock);
            pool->stats.released_bytes += released;
            released = 0;
            int stuck = om_arena_restore(&pool->arena, &pool->batch) != 0;
            om_unlock(&pool->lock);
            struct timespec pause = {0, DROP_PAUSE_NS * (stuck ? 20 : 1)};
            nanosleep(&pause, NULL);
            om_lock(&pool->lock);
        }
        int seen = pool->drop_wake;
        pool->drop_waiting = 1;
        om_unlock(&pool->lock);
        /* A call that bumped the word since is seen here, and the wait returns at once. */
        struct timespec idle = {IDLE_END_S, 0};
        long rc = syscall(SYS_futex, &pool->drop_wake, FUTEX_WAIT_PRIVATE, seen, &idle, NULL, 0);
        int timed_out = rc != 0 && errno == ETIMEDOUT;
        om_lock(&pool->lock);
        if (timed_out && pool->drop_waiting) /* no call woke it meanwhile */
            break;
    }
    pool->drop_thread = pool->drop_waiting = 0;
    om_unlock(&pool->lock);
    return NULL;
}

/* Wakes optmem-pages where it waits for work, or starts it (detached, every signal blocked,
 * naming itself) where the process has none yet; where no thread can be had, the calls'
 * slices alone go on with the work. Under the pool's lock. */
static void start_drop_thread(struct om_pool *pool)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    if (pool->drop_thread) {
        if (pool->drop_waiting) {
            int saved = errno; /* malloc and free leave it as it was */
            pool->drop_waiting = 0;
            __atomic_add_fetch(&pool->drop_wake, 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, &pool->drop_wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
            errno = saved;
        }
        return;
    }
    if (pthread_attr_init(&attr) != 0)
        return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, &attr, drop_thread, pool);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        om_debug("no optmem-pages thread (%s): freed blocks' pages go back in calls only",
                 strerror(rc));
        return;
    }
    pool->drop_thread = 1;
}

void om_pool_pages_atfork_child(struct om_pool *pool)
{
    /* The thread did not come along: the next call that leaves pages waiting starts one. */
    pool->drop_thread = pool->drop_waiting = 0;
    /* Pages it had out of the free space, maybe not released yet in this process: released
     * here, then free again (what does not fit back stays out: address space only). */
    pool->arena.defer = NULL;
    om_arena_release_batch(&pool->arena, &pool->batch);
    (void)om_arena_restore(&pool->arena, &pool->batch);
}

/* What of need is left once the bytes given back rose from before. */
static size_t need_left(const struct om_pool *pool, size_t need, size_t before)
{
    size_t gone = pool->stats.released_bytes - before;
    return gone < need ? need - gone : 0;
}

void om_pool_page_work(struct om_pool *pool, size_t need)
{
    if (!need && !pool->layout_next && !pool->release_next && !pool->ndrops && !pool->owed &&
        !pool->idle_due)
        return; /* nothing to do, seen in one line (pool_internal.h) */
    /* A host call gives back at most a slice of what it made resident (a 16 MiB madvise is
     * over a millisecond), counted by the bytes it looks at; the optmem-pages thread gives
     * back the rest at once, beside the program faulting its pages in. With no pages to
     * give, there is nothing to owe (and no thread to start for it). */
    size_t allowance = SIZE_MAX;
    if (pool->host) {
        if (need > OM_RELEASE_SLICE) {
            if (payable(pool))
                pool->owed += need - OM_RELEASE_SLICE;
            need = OM_RELEASE_SLICE;
        }
        allowance = OM_RELEASE_SLICE;
    }
    size_t before = pool->stats.released_bytes;
    if (pool->layout_next)
        om_pool_lay_out_slice(pool);
    if (pool->release_next)
        om_pool_release_slice(pool, allowance);
    /* One release slice a call, or what the call made resident: the layout and a dropped
     * plan's release sweep the freed blocks' pages too, and are done first. */
    int dropped = pool->ndrops && !pool->layout_next && !pool->release_next &&
                  drop_slice(pool, need > OM_RELEASE_SLICE ? need : OM_RELEASE_SLICE);
    size_t spent = pool->stats.released_bytes - before;
    if (pool->idle_due && pool->phase != SERVE && (!dropped || need_left(pool, need, before)) &&
        spent < allowance)
        (void)om_pool_release_idle(pool, need_left(pool, need, before), allowance - spent);
    /* What this call made resident and did not give back, the thread does, where pages wait
     * to go. */
    if (pool->host && more_due(pool))
        pool->owed += need_left(pool, need, before);
    if (pool->ndrops || pool->owed)
        start_drop_thread(pool);
}
