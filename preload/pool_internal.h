/* Plan mode's internals, shared by the pool's files: pool.c (entry points, placement),
 * phases.c (the phase machine), plan.c (making a plan), kept.c (plan values, kept plans),
 * pages.c (the page policy) and pool_saved.c (OPTMEM_PLAN_FILE). */
#ifndef OPTMEM_PRELOAD_POOL_INTERNAL_H
#define OPTMEM_PRELOAD_POOL_INTERNAL_H

#include "arena.h"
#include "om_common.h"
#include "blockmap.h"
#include "pending.h"
#include "pool.h"
#include "saved_plan.h"
#include "slots.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#define MAX_PERIOD (1u << 20) /* longer iterations are served by best fit only */
#define MIN_PERIOD 3 /* shorter "iterations" are runs of equal requests, not a training step */
#define FAILED_PERIODS 8
/* A plan that serves this many iterations proves the program steady again. */
#define STEADY_ITERATIONS 3
/* The most requests without a slot in a row that are taken as made instead of the plan's. */
#define SUB_RUN 4
/* The iteration-defining thread's last requests, while learning and while a plan serves:
 * once a period is known, the plan is made from an iteration already past whose next one is
 * past too, rather than from one recorded and one observed from then on, two iterations
 * later. Periods up to a third of it are planned at once, up to half of it at the end of an
 * iteration; longer ones (detected ones reach 32767) are recorded as they come. Its pages
 * are touched only as far as it is used. */
#define RING (1u << 15)
/* Page moves a plan may make: each may split the arena's mapping in up to four, and the
 * kernel caps a process's mappings (vm.max_map_count, 65530 by default). */
#define PAGE_MOVES_MAX 128
/* Bytes of pages a call may move or give back while a plan's pages are laid out: a whole
 * plan's at once (a hundred MiB and more) held the request that installed it for
 * milliseconds, and so did 8 MiB, given back or moved (docs/serving.md): a release slice. */
#define OM_LAYOUT_SLICE ((size_t)2 << 20)
/* Bytes of free pages a call may give back while a plan dropped or failing releases them: only
 * releases, with no move to share the slice, and 8 MiB of them took 1.1 to 1.7 ms of CPU time
 * in one call (docs/serving.md). */
#define OM_RELEASE_SLICE ((size_t)2 << 20)

/* Large blocks freed while a plan serves whose pages are still to go back (or move onto the
 * slots' first), oldest first; a burst of more merges into the newest. */
#define OM_DROPS 64

/* A freed block's pages waiting to go back: [off, off + len), page-aligned; move: they may
 * first move onto the slots' pages that are not resident (a block the plan did not place). */
struct om_page_drop {
    size_t off, len;
    int move;
};

/* A plan misses too often, the program having changed, where more than one request in
 * OM_MISS_SHARE of those judged missed: the test that drops a plan at the end of a window,
 * gives its pages back within one, and lets a kept plan replace the plan serving. */
#define OM_MISS_SHARE 8

static inline int om_misses_too_many(uint64_t misses, uint64_t requests)
{
    return misses * OM_MISS_SHARE > requests;
}

/* Learn: waiting for the tracer to find a period, the ring keeping the requests. Record:
 * one iteration's requests, for a period too long for the ring. Observe: the next
 * iteration, to see when the last blocks die. Plan: the optmem-plan thread searches for a
 * plan of the iteration in next while best fit goes on. Serve. Prologue: a saved plan
 * serves the main thread's requests before the iteration. */
enum phase { LEARN, RECORD, OBSERVE, PLAN, SERVE, PROLOGUE };

struct om_plan_job; /* plan.c */

struct record {
    uint64_t token, lower, upper; /* in the ring: indices among the requests learnt */
    size_t size, len, alignment;
    /* In the ring: the call site of a request served by its full key (its cheap key is in
     * ring_cheap), 0 for one served by its cheap key, which tells nothing. In an iteration
     * planned: what its slot starts with (docs/serving.md, "Served by cheap key"). */
    uint32_t site;
    union {
        uint32_t log; /* in the ring: the request's index + 1 in the request log, 0 for none */
        struct {
            uint8_t confirmed, ambiguous; /* in an iteration planned: as its slot's */
        };
    };
    union {
        uint64_t ns;    /* in the ring: when it was made (the tracer's clock) */
        uint64_t cheap; /* in an iteration planned: its slot's cheap key */
    };
};
/* A served request writes its record into the ring: one cache line. */
_Static_assert(sizeof(struct record) == 64, "a record is one cache line");

/* How many periods of p a record's block spans: 0 within one (an arc a plan places), 1
 * within two (a plan of two iterations places it), 2 for more or a death not known yet. */
static inline int om_record_periods(const struct record *rec, uint64_t p)
{
    if (rec->upper == OM_NO_DEATH || rec->upper > rec->lower + 2 * p)
        return 2;
    return rec->upper > rec->lower + p;
}

/* One plan: the iteration it was made from and where each of its requests goes. The pool
 * holds the one it serves (plan) and the one being made (next); kept plans are copies. */
struct om_plan {
    struct om_slot *slots;      /* one per request of the iteration; 0 period: no plan */
    struct om_slot_index index; /* the slots by token */
    struct record *records;     /* the iteration planned, for a saved plan made at exit */
    size_t cap;                 /* the entries slots and records are mapped for */
    uint64_t period, nrecords;
    uint64_t log_cycle_start; /* its first request's index in the request log, or UINT64_MAX */
    uint64_t evidence;        /* requests its period was seen to repeat over when planned */
    size_t end;               /* its region ends here; fallbacks go above */
    int unrolled;             /* its iteration is two of the tracer's */
    /* As the plan_* figures of om_serving_stats. */
    uint64_t peak, lower_bound, greedy, proven_bound, nslots, time_us, on_thread;
};

/* Where a plan installed comes from. */
enum om_plan_origin { OM_PLAN_SAVED, OM_PLAN_FRESH, OM_PLAN_KEPT };

/* Plans kept for phases that come back (kept.c): a copy, and how far the requests seen
 * follow it. */
#define KEPT_PLANS 4
struct om_kept_plan {
    struct om_plan plan;      /* first: a kept plan is found from its plan */
    uint64_t cursor, matched; /* the requests seen follow it up to here, this many in a row */
    uint64_t run_misses;      /* the pool's misses when that run began */
    uint64_t last_served;     /* the pool's kept_clock when it last served */
    /* It has not served an iteration (searched for a phase the program left, or installed at
     * its last boundary): the blocks of its phase that outlive the phase never lay in its
     * slots, and no plan made since was laid around them. */
    int unserved;
};

struct om_pool {
    struct om_lock lock;
    struct om_arena arena;
    struct om_blockmap blocks;
    struct om_pending pending; /* stream-ordered frees; empty on the host */
    unsigned domain;
    int host; /* the host domain: zeroing, red zones, saved plans */
    /* Before a plan: a ring of freed blocks whose pages may still be resident. */
    struct om_extent *freed;
    size_t freed_head, nfreed;
    size_t freed_head_len; /* the head's length when freed, once part of it went back; else 0 */
    /* Read or written by every served request, in the line of the phase (the iteration's
     * misses and unknown requests are judged at its end, om_pool_end_of_served_iteration). */
    uint64_t iteration_misses;
    uint64_t window_requests;    /* requests served since the misses were last judged */
    uint64_t window_turned_away; /* of those, the ones the plan did not serve */
    int after_unknown;           /* the last request served had a token without a slot */
    int tracer_stale;            /* the last request of the cycle thread was only logged: the period
                                  * and evidence below are om_tracer_settle's to say */
    size_t max_request;          /* larger requests go to the real allocator */
    size_t redzone;
    int hugepages; /* OPTMEM_HUGEPAGES=1 on the host */
    enum phase phase;
    uint32_t generation; /* bumped whenever recording starts again */
    int grace;           /* the iteration after a saved plan's prologue: its misses do not count */
    uint64_t period;     /* the tracer's period followed while learning */
    uint64_t cursor, observed;
    /* The page work that calls do a slice of (om_pool_page_work), beside the phase and the
     * cursor that every request reads, so that a call with none to do reads one line. The
     * plan's pages being laid out: the next byte to look at + 1, 0 when none is. Free pages
     * of a plan dropped or failing going back: the next byte to look at + 1 (0 when none). */
    size_t layout_next, release_next;
    /* Large blocks freed while a plan served: their pages go back a slice a call, from the
     * free on (om_pool_release_block): a 12 MiB block's at once held its free for over a
     * millisecond. In drops (below), oldest first from drop_head. */
    unsigned drop_head, ndrops;
    int drop_thread; /* the optmem-pages thread goes on with them between calls */
    /* With none left it waits for more (drop_waiting) on the futex word drop_wake, which a
     * call that leaves some bumps: one thread for the process's life, not one per burst. */
    int drop_waiting, drop_wake;
    int idle_due; /* idle pages are to go back (om_pool_release_idle) */
    /* What calls made resident beyond what they gave back themselves (om_pool_page_work):
     * the optmem-pages thread gives it back while the program faults its pages in. */
    size_t owed;
    /* The bytes of small holes given back and taken again (idle_small: given back and not
     * yet counted so); what they add up to beyond a large hole's worth is kept resident
     * above the peak. The arena's unbacked and released bytes after the last such release:
     * where nothing else was released since, unbacked bytes that fell were taken again. */
    size_t idle_retaken, idle_small, idle_unbacked, idle_released;
    struct om_plan plan; /* the plan serving, or the last one that did */
    struct record *ring;
    /* The cheap keys of the ring's requests, written (and read) only where their record's
     * site is not 0: a request served by its cheap key touches no line of it. */
    uint64_t *ring_cheap;
    uint64_t learnt;      /* requests put in the ring: the index of the next */
    uint64_t ring_first;  /* the first after the last gap (requests not learnt) */
    uint64_t steady_from; /* the first known to repeat with period; UINT64_MAX: none */
    uint64_t plan_at;     /* the request after which to plan, + 1; 0: not chosen yet */
    size_t fallback_end;  /* the highest end of a fallback in this served iteration */
    /* Its counters that every served request writes share its first line (tracer.h). */
    struct om_serving_stats stats __attribute__((aligned(64)));
    uint64_t served_iterations;
    /* The period the tracer knew at the last request of the cycle thread, and over how many
     * requests it had repeated then. */
    uint64_t tracer_period, tracer_evidence;
    /* The tracer's period whose iterations a plan of a part of them served, just left: the
     * ring holds them, and it is planned at once rather than at its quietest request. */
    uint64_t outgrown_period;
    int failing; /* the plan missed too often in this window: its pages went */
    /* Requests of the iteration with a token the plan has no slot for; iterations in a row
     * that had such; whether a plan was already dropped for them. */
    uint64_t iteration_unknown, stale_iterations;
    int stale_replanned;
    /* The run of requests without a slot just served (after_unknown): their tokens and
     * lengths, and the slots the cursor expected for them; nsub > SUB_RUN: too long a run. */
    unsigned nsub;
    struct {
        uint64_t token, len, slot;
    } sub[SUB_RUN];
    /* How long the iteration to plan took, for the search's budget; when recording began. */
    uint64_t iteration_ns, record_start_ns;
    /* OPTMEM_PLAN_FILE (its name and the plan loaded: below) */
    uint64_t prologue_cursor, prologue_misses;
    struct om_request_log log;     /* not loaded: this run's main-thread requests */
    struct om_extents covered;     /* the bytes the iteration's slots cover */
    size_t moves_left;             /* page moves onto them the plan may still make */
    size_t moved_end;              /* where take_planned's moves for a request end, or 0 */
    struct om_move_run layout_run; /* where the layout's moves ended (layout_next) */
    size_t release_to;             /* the end of a release under way (release_next) */
    uint64_t main_requests;
    /* The search under way on the optmem-plan thread. In PLAN, the program's requests are
     * followed on the iteration searched (next's slots hold its tokens meanwhile):
     * follow_cursor, the slot expected next; follow_requests and follow_misses, those of the
     * window being judged (a period's requests, as a serving plan's); followed, the windows
     * that followed it (few misses). The plan serves from the iteration boundary (cursor, the
     * slot after the quiet point) reached after the search ended, where the program still
     * follows it. Detached: the program left the iteration while it was searched (the search
     * goes on, the pool learns the new phase); its plan, once found, is kept for when the
     * phase comes back, and next is not reused until then. */
    struct om_plan_job *job;
    int job_detached;
    uint64_t follow_cursor, follow_requests, follow_misses, followed;
    /* The plan serving was followed over a whole window while it was searched: right for a
     * phase of the program, as one that served an iteration. */
    int plan_followed;
    unsigned kept_from; /* the kept plan serving now + 1; 0: a plan made for this phase */
    uint64_t kept_clock;

    /* Large, and seldom read while a plan serves: after the fields above, which requests and
     * frees touch, so that those lie in few lines (docs/serving.md, "Lines a request
     * touches"). */
    struct om_plan next; /* the iteration being learnt and planned: records, then slots */
    /* Periods whose plans missed: sub-periods (a layer repeated inside a step) that the
     * detector locks onto before the whole step. Not planned again until a plan holds, or
     * until the period has repeated over twice the requests it had when it was planned. */
    struct {
        uint64_t period, evidence; /* planned again once it repeats over this many requests */
    } failed[FAILED_PERIODS];
    unsigned nfailed;
    char plan_file[PATH_MAX];   /* OPTMEM_PLAN_FILE */
    struct om_saved_plan saved; /* loaded: its prologue is being served */
    struct om_page_drop drops[OM_DROPS];
    struct om_kept_plan kept[KEPT_PLANS];
    /* The pages the optmem-pages thread releases with the lock let go, out of the free space
     * meanwhile (om_arena_withhold): no call waits for a release it did not ask for. */
    struct om_release_batch batch;
};

/* ---- pool.c: the entry points and placement ---- */

/* What a request served by its full key, of cheap key key (not 0), token and call site
 * site, tells the slot that expected it (docs/serving.md, "Served by cheap key"): 1 where
 * the key is found to name another request there, which makes the slot ambiguous. */
int om_pool_cheap_learn(struct om_slot *sl, uint64_t key, uint64_t token, uint32_t site);

/* The guard: the planned offset is handed out when the slot holds the request and no live
 * block overlaps it (counted as served); 0 when not (a guard rejection counted). */
int om_pool_take_planned(struct om_pool *pool, size_t offset, size_t slot_len, size_t len,
                         size_t alignment, uintptr_t stream);

/* ---- phases.c: the phase machine ---- */

/* Learning starts over: what the ring holds was before a gap (served, or recorded). */
void om_pool_learn(struct om_pool *pool);

/* Serving starts from the plan installed: the next request is expected at slot cursor. */
void om_pool_serve(struct om_pool *pool, uint64_t cursor);

/* The one way a plan comes to serve (only the phase machine calls it): the plan made,
 * pool->next, is moved in (next takes the buffers of the plan it replaces); a saved plan's
 * iteration or a kept plan is copied. Its index built, its figures in the stats, serving
 * from slot cursor on, its pages laid out (a saved plan's, at start: only the slots'
 * bytes). 0 or -ENOMEM, nothing served from it. */
int om_pool_install(struct om_pool *pool, struct om_plan *plan, uint64_t cursor,
                    enum om_plan_origin origin);

/* Serving starts from the saved plan loaded (pool->saved): its prologue, then its
 * iteration. 0 or -ENOMEM. */
int om_pool_start_saved(struct om_pool *pool);

/* A served iteration ended: once a period's requests at least were served since the last
 * judgement, a replan when they missed too often. */
void om_pool_end_of_served_iteration(struct om_pool *pool);

/* The plan serving is dropped, for good (stale) or, unless keep is 0, kept for when the
 * program comes back to the phase it planned where it served an iteration. */
void om_pool_leave_plan(struct om_pool *pool, int keep);

/* Advances the phase after a request of the iteration-defining thread was placed; key: its
 * cheap key where its full key was computed, else 0. */
void om_pool_after_cycle_request(struct om_pool *pool, struct om_block *b, uint64_t token,
                                 size_t alignment, uint64_t key, const struct om_alloc_info *info);

/* ---- plan.c: making a plan ---- */

/* How long a search for a plan may take: as long as the iteration took (iteration_ns), at
 * least least_ms, at most 2 s. */
uint32_t om_pool_search_budget_ms(const struct om_pool *pool, uint32_t least_ms);

/* Plans the iteration in next inline, with its whole budget, and places the plan over the
 * arena as it is now: next's slots, end and figures set, for om_pool_install. 0, or -errno:
 * -ENOENT when no block of the iteration dies within it. */
int om_pool_plan(struct om_pool *pool);

/* The search for a plan of the iteration in next starts on the optmem-plan thread, from a
 * copy of the arcs: 0 (job set), -ENOENT when no block of the iteration dies within it,
 * -ENOTSUP where the plan may be packed around live blocks (a device, huge pages), or
 * -EAGAIN / -ENOMEM where no thread or no memory could be had: then the plan is made
 * inline (om_pool_plan). */
int om_pool_plan_start(struct om_pool *pool);

/* The search's plan placed over the arena as it is now, as om_pool_plan does (kept: for a
 * phase the program left, above every live block and the plan serving): 0, -EINPROGRESS
 * while it runs (nothing changed), or -errno with the search gone. */
int om_pool_plan_take(struct om_pool *pool, int kept);

/* The search under way, if any, is dropped: the thread unmaps it when it ends. */
void om_pool_plan_abandon(struct om_pool *pool);

/* Whether the search under way has ended (its result waits for om_pool_plan_take). */
int om_pool_plan_done(const struct om_pool *pool);

/* In a fork child: the search under way was the parent's thread's; learning starts again. */
void om_pool_plan_atfork_child(struct om_pool *pool);

/* ---- kept.c: plan values, and the plans kept for phases that come back ---- */

/* Maps a plan's slots and records for cap entries: 0 or -ENOMEM (then it holds none). */
int om_plan_map(struct om_plan *plan, size_t cap);

/* Unmaps what a plan holds; it is then empty. */
void om_plan_unmap(struct om_plan *plan);

/* dst takes src's value: its slots, records and figures, into dst's buffers (mapped again
 * when too small); not the index. 0 or -ENOMEM (dst is then empty). */
int om_plan_copy(struct om_plan *dst, const struct om_plan *src);

/* A plan that served (the one serving), or one found for a phase the program left while it
 * was searched (next), is kept: a copy; unserved where it served no iteration. Its entry, or
 * NULL where no memory could be had for the copy. */
struct om_kept_plan *om_pool_keep_plan(struct om_pool *pool, const struct om_plan *plan,
                                       int unserved);

/* A plan kept just now follows the last requests the ring holds since its last gap (as many as
 * its match needs): where its phase came back already, the next request may complete the match,
 * as it would have if the plan had been kept before the phase came back. */
void om_pool_kept_catch_up(struct om_pool *pool, struct om_kept_plan *k);

/* The end of the highest region of a kept plan (only those unserved, unless all) that
 * [off, off + len) overlaps, or 0. */
size_t om_pool_kept_clash(const struct om_pool *pool, size_t off, size_t len, int all);

/* The kept plan now serving did not hold: it is forgotten. */
void om_pool_forget_kept(struct om_pool *pool);

/* A request of the iteration-defining thread while no plan serves, or while the plan serving
 * misses, followed on the kept plans: the kept plan whose match it completes (while serving,
 * over requests of which the plan serving missed more than one in eight), which is to serve
 * from its cursor on, or NULL. */
struct om_kept_plan *om_pool_match_kept(struct om_pool *pool, uint64_t token,
                                        const struct om_alloc_info *info);

/* ---- pages.c: the page policy ---- */

/* Maps the ring of freed blocks whose pages may go back before a plan. 0 or -ENOMEM. */
int om_pool_pages_init(struct om_pool *pool);

/* Whether free pages move onto a plan's instead of going back: where the backend can move
 * them, and not with huge pages, which fault 2 MiB at a time and which small pages moved
 * in would split. */
static inline int om_pool_pages_move(const struct om_pool *pool)
{
    return pool->arena.backend->move && !pool->hugepages;
}

/* Free pages in [from, to) go back; the ring of freed blocks waiting for release empties
 * with them. */
void om_pool_release_free(struct om_pool *pool, size_t from, size_t to);

/* Free pages in [from, to) are to go back (a plan dropped, or missing too often): on the host
 * a slice a call (om_pool_release_slice) from this call on, a device's at once. The ring of
 * freed blocks waiting for release empties. */
void om_pool_release_free_later(struct om_pool *pool, size_t from, size_t to);

/* One slice of the release under way, if any: pages given back until budget bytes went
 * back, from a window of OM_RELEASE_SLICE bytes at most (or the next few, where one held
 * no resident free page). A plan installed meanwhile ends it (its layout gives back what
 * its slots do not cover). */
void om_pool_release_slice(struct om_pool *pool, size_t budget);

/* Before a plan (host only), after a request that made pages resident: the holes freed
 * longest ago give their pages back while the resident pages exceed the peak of live bytes
 * by more than a small share, budget bytes of them looked at (a call's: what is left of its
 * OM_RELEASE_SLICE) and beyond until need bytes went back (the pages the call made
 * resident, a slice at most); idle_due says that more are to go. Returns the bytes given
 * back. */
size_t om_pool_release_idle(struct om_pool *pool, size_t need, size_t budget);

/* A block freed at once, back in the arena: what becomes of its pages. */
void om_pool_pages_freed(struct om_pool *pool, const struct om_block *gone);

/* A block freed in stream order, back in the arena once its fence passed (om_pending's
 * callback; ctx: the pool). */
void om_pool_settled(void *ctx, size_t off, size_t len);

/* After a miss: a plan that has missed too often in this window gives the free pages of its
 * region back at once, and makes no more page moves. */
void om_pool_release_if_failing(struct om_pool *pool);

/* OPTMEM_HUGEPAGES=1: the plan's region [from, to) is advised huge pages. */
void om_pool_advise_huge(struct om_pool *pool, size_t from, size_t to);

/* Sets covered to the bytes of the iteration's slots, and the moves onto them the plan may
 * make. 0 or -ENOMEM (then it is empty). */
int om_pool_cover_slots(struct om_pool *pool);

/* Free pages in [from, to) that no slot of the iteration covers go back. */
void om_pool_release_uncovered(struct om_pool *pool, size_t from, size_t to);

/* The free pages of [off, off + len), a block freed while serving, that no slot of the
 * iteration covers go back; with move, those that can first move onto the slots' pages that
 * are not resident, while moves are left. On the host a slice a call (om_pool_page_work),
 * from this call on, and on the optmem-pages thread between calls; a device's at once. */
void om_pool_release_block(struct om_pool *pool, size_t off, size_t len, int move);

/* In a fork child: the optmem-pages thread was the parent's; the calls' slices go on with
 * the freed blocks' pages until it is started again. */
void om_pool_pages_atfork_child(struct om_pool *pool);

/* The page work under way, a bounded slice of it: the layout's, a dropped plan's release,
 * the freed blocks' (om_pool_release_block), the idle holes'; on the host one release slice
 * looked at in all. Called once by every call into the pool; need: the bytes of pages the
 * call made resident (its block's pages that were not), which go back while pages wait to
 * go, what the slice did not give back on the optmem-pages thread (owed), so that the work
 * pending never lets the resident pages grow (0 for a free). */
void om_pool_page_work(struct om_pool *pool, size_t need);

/* The plan installed is to be laid over the arena's pages: the free pages no slot covers
 * move onto those slots' pages that are not resident, or go back, and so does the free tail.
 * The work is done a slice a call (om_pool_lay_out_slice), from this call on. */
void om_pool_lay_out_pages(struct om_pool *pool);

/* One slice of the layout under way, if any: at most OM_LAYOUT_SLICE bytes of pages moved
 * or given back. A plan no longer served ends it. Called once by every call into the pool. */
void om_pool_lay_out_slice(struct om_pool *pool);

/* ---- pool_saved.c: OPTMEM_PLAN_FILE in the pool ---- */

/* Loads the plan file cfg names and serves it from the first request, or logs this run's
 * main-thread requests for the plan saved at exit. */
void om_pool_open_plan_file(struct om_pool *pool, const struct om_config *cfg);

/* A main-thread request while a saved plan's prologue is served: 1 when served at its
 * token's next prologue slot, 0 when not, -1 when it begins the iteration (this run's
 * prologue was shorter than the saved one), which then serves it. */
int om_pool_place_in_prologue(struct om_pool *pool, size_t len, size_t alignment, uint64_t token,
                              size_t *off);

/* In the grace iteration after the prologue: 1 when the request took its token's prologue
 * slot still unused (this run's prologue was longer than the saved one). */
int om_pool_place_in_prologue_left(struct om_pool *pool, size_t len, size_t alignment,
                                   uint64_t token, size_t *off);

#endif
