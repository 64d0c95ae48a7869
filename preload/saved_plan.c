/* The whole-run plan: building it from the request log, and its file, written atomically
 * and checked field by field when read, since a plan file may be stale or corrupt. */
#include "saved_plan.h"
#include "plan_dump.h"
#include "replanner.h"
#include "tracer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "OPTMPLN1"
#define MAX_SLOTS ((uint64_t)1 << 24)
/* At exit, once: a better plan is worth a little time. Each search stops at its bound,
 * which the bundled workloads reach in 30 to 100 ms all told; the circle's least budget is
 * four times what the largest one's arcs (1883) need alone, so that a loaded machine still
 * gets there, and the line has at least LINE_BUDGET_MS whatever the circle took. Each may
 * take as long as the caller's budget, which plan mode's search had too (the time an
 * iteration took): the transformer at 16 x the bundled batch (24925 arcs, 3 s an
 * iteration) was saved at 1.054 of its bound within these alone. */
#define CIRCLE_BUDGET_MS 250
#define LINE_BUDGET_MS 150
/* Within this share of its lower bound a plan is good enough: alignment keeps many a plan a
 * few bytes above its bound, and proving that the last bytes cannot go would take the search
 * its whole budget. */
#define CLOSE_ENOUGH(lb) ((lb) + (lb) / 1024)

struct file_header {
    char magic[8];
    uint64_t program, nprologue, period, peak, lower_bound, checksum;
};

static void *rp_alloc(void *ctx, size_t n)
{
    return om_sys_map(n);
}

static void rp_release(void *ctx, void *p, size_t n)
{
    om_sys_unmap(p, n);
}

const om_rp_allocator om_rp_mmap = {rp_alloc, rp_release, NULL};

int om_request_log_init(struct om_request_log *log, size_t cap)
{
    log->entries = om_sys_map(cap * sizeof *log->entries);
    log->n = 0;
    log->cap = log->entries ? cap : 0;
    return log->entries ? 0 : -ENOMEM;
}

uint32_t om_request_log_add(struct om_request_log *log, uint64_t token, uint64_t len,
                            uint64_t alignment)
{
    if (log->n == log->cap)
        return 0;
    log->entries[log->n] = (struct om_logged_request){token, len, alignment, OM_NO_DEATH};
    return (uint32_t)++log->n;
}

/* Outlives the first iteration of the cycle: lives on the circle like a parameter. */
static int persists(const struct om_logged_request *e, uint64_t nprologue, uint64_t period)
{
    return e->death == OM_NO_DEATH || e->death > nprologue + period;
}

static void set_slot(struct om_slot *s, uint64_t token, uint64_t offset, const om_rp_block *b)
{
    *s = (struct om_slot){.token = token, .offset = offset, .len = b->size, .alignment = b->align};
}

/* The warm-up iterations before the cycle repeat it: a prologue request at the same place
 * of an earlier iteration, with the token of the arc there, no larger and dead by the
 * arc's end, takes the arc's offset. Returns the arc's index + 1 for request i, or 0. */
static size_t copy_of(const struct om_request_log *log, uint64_t i, uint64_t nprologue,
                      uint64_t period, const struct om_cycle_arc *arcs, const size_t *arc_at)
{
    uint64_t back = (nprologue - i + period - 1) / period; /* iterations before the cycle */
    uint64_t base = nprologue - back * period, slot = i - base;
    size_t a = arc_at[slot];
    const struct om_logged_request *e = &log->entries[i];
    if (!a || e->death == OM_NO_DEATH)
        return 0;
    const struct om_cycle_arc *arc = &arcs[a - 1];
    int same = arc->token == e->token && e->len <= arc->len && e->death - base <= arc->upper;
    return same ? a : 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return a > 1 ? (x + a - 1) & ~(a - 1) : x;
}

/*
 * The line: the prologue up to two iterations into the cycle. Its blocks, each group by
 * birth: [0, npinned) the fixed blocks of the warm-up copies and the arcs, [npinned,
 * nmovable0) the persistent blocks (stacked by birth, so each ends above the ones before),
 * [nmovable0, n) the prologue's other blocks, which the line places.
 */
struct line {
    om_rp_block *b;
    uint64_t *off;
    size_t npinned, nmovable0, n;
    uint64_t longest; /* the longest lifetime of a pinned block */
};

/* The movable blocks [first, end) of the line, which no movable block outside them meets. */
struct part {
    size_t first, end;
    uint64_t upper, peak, lower_bound;
    int optimal;
};

/* The first block of [lo, hi) born at or after t (the group is by birth). */
static size_t born_from(const om_rp_block *b, size_t lo, size_t hi, uint64_t t)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].lower < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * One part's instance, on its own span [A, B) of the line: its movable blocks first, then
 * the fixed blocks live in the span, clipped to it. The persistent blocks born before A
 * fill [0, top) and are one block here: thousands of parameters under every block of
 * the prologue made the line's search spend its budget stepping over them.
 */
static size_t part_instance(const struct line *l, const struct part *p, om_rp_block *pb)
{
    uint64_t a = l->b[p->first].lower, z = p->upper;
    size_t k = 0, j = born_from(l->b, l->npinned, l->nmovable0, a);
    for (size_t x = p->first; x < p->end; x++)
        pb[k++] = l->b[x];
    if (j > l->npinned)
        pb[k++] = (om_rp_block){.id = UINT64_MAX,
                                .lower = a,
                                .upper = z,
                                .size = l->off[j - 1] + l->b[j - 1].size,
                                .fixed = 1};
    for (; j < l->nmovable0 && l->b[j].lower < z; j++) {
        pb[k] = l->b[j];
        pb[k++].upper = z;
    }
    j = born_from(l->b, 0, l->npinned, a > l->longest ? a - l->longest : 0);
    for (; j < l->npinned && l->b[j].lower < z; j++) {
        if (l->b[j].upper <= a)
            continue;
        pb[k] = l->b[j];
        pb[k].lower = pb[k].lower > a ? pb[k].lower : a;
        pb[k].upper = pb[k].upper < z ? pb[k].upper : z;
        k++;
    }
    return k;
}

/* Plans part p: its movable blocks' offsets in poff, first to last, when it returns 0;
 * kept (in l->off) only if the plan is lower than the part's before, if any. */
static int plan_part(struct line *l, struct part *p, om_rp_block *pb, uint64_t *poff,
                     const om_rp_options *opt)
{
    om_rp_result res;
    size_t n = part_instance(l, p, pb);
    if (!p->peak) /* its first search; the others are the same instance */
        om_plan_dump(OM_TRACER_HOST, pb, n, 0, "a part of a saved plan's line for up to %u ms",
                     opt->budget_ms);
    int rc = om_rp_plan(pb, n, opt, poff, &res);
    if (rc != 0 || (p->peak && res.peak >= p->peak))
        return rc;
    for (size_t x = p->first; x < p->end; x++)
        l->off[x] = poff[x - p->first];
    p->peak = res.peak;
    p->lower_bound = res.lower_bound;
    p->optimal = res.optimal;
    return 0;
}

/*
 * Places the line's movable blocks part by part (no part meets another: smaller searches,
 * the branch and bound for most), aiming at the circle's peak, below which nothing is
 * gained. First a share of the time each; then the rest goes to the highest part while it
 * is above every part's lower bound and improves.
 */
static int plan_line(struct line *l, struct part *parts, size_t nparts, om_rp_block *pb,
                     uint64_t *poff, uint64_t goal, uint64_t deadline, om_rp_options *opt)
{
    for (size_t x = 0; x < nparts; x++) {
        uint64_t now = now_ns(), left = now < deadline ? (deadline - now) / 1000000u : 0;
        opt->algo = left ? OM_RP_ALGO_AUTO : OM_RP_ALGO_GREEDY;
        opt->budget_ms = (uint32_t)(left / 2 / (nparts - x) + 1);
        opt->goal = goal;
        int rc = plan_part(l, &parts[x], pb, poff, opt);
        if (rc != 0)
            return rc;
    }
    uint64_t target = 0;
    for (size_t x = 0; x < nparts; x++)
        target = parts[x].lower_bound > target ? parts[x].lower_bound : target;
    target = CLOSE_ENOUGH(target) > goal ? CLOSE_ENOUGH(target) : goal;
    opt->algo = OM_RP_ALGO_AUTO;
    opt->goal = target;
    for (;;) {
        struct part *worst = NULL;
        for (size_t x = 0; x < nparts; x++)
            if (!parts[x].optimal && parts[x].peak > target &&
                (!worst || parts[x].peak > worst->peak))
                worst = &parts[x];
        uint64_t now = now_ns(), before;
        if (!worst || now + 2000000u >= deadline)
            return 0;
        before = worst->peak;
        opt->budget_ms = (uint32_t)((deadline - now) / 1000000u);
        opt->seed++;
        int rc = plan_part(l, worst, pb, poff, opt);
        if (rc != 0)
            return rc;
        if (worst->peak == before)
            worst->optimal = 1; /* no lower plan within the time: the others' turn */
    }
}

/* The build's arrays, all in one mapping. */
struct build {
    om_rp_block *circle;
    uint64_t *circle_off;
    struct line line;
    om_rp_block *pb; /* one part's instance */
    uint64_t *poff;
    struct part *parts;
    size_t *arc_at;   /* slot -> arc index + 1 */
    size_t *by_birth; /* arcs by their lower end */
    size_t *count;
};

/* Points b's arrays into base (or sets them NULL); returns the bytes they take. */
static size_t layout(struct build *b, char *base, uint64_t nprologue, size_t narcs, uint64_t period)
{
    size_t at = 0, nline = nprologue + 2 * narcs + 1;
#define CARVE(field, n)                                                                            \
    (b->field = (void *)(base ? base + at : NULL),                                                 \
     at += ((n) * sizeof *b->field + 15) & ~(size_t)15)
    CARVE(circle, narcs + nprologue + 1);
    CARVE(circle_off, narcs + nprologue + 1);
    CARVE(line.b, nline);
    CARVE(line.off, nline);
    CARVE(pb, nline + 1);
    CARVE(poff, nline + 1);
    CARVE(parts, nprologue + 1);
    CARVE(arc_at, period);
    CARVE(by_birth, narcs + 1);
    CARVE(count, period + 1);
#undef CARVE
    return at;
}

/*
 * The circle: the arcs, planned on their own, over the persistent prologue blocks stacked
 * by birth. Blocks live all the time lose nothing at the bottom (each other block lies
 * wholly above or below them in any plan), and in this order the stack only grows during
 * the prologue: at any time the persistent blocks born so far fill [0, top), the prologue's
 * other blocks have everything above, and the line's lower bound stays within reach.
 * Planned with the arcs, they went anywhere on the circle (on cnn_bn_adam up to its top,
 * and with 3 s instead of 200 ms, another optimal circle put 255 of its 525 above 100 MiB),
 * fixed from their birth they split the room of the first iteration's large blocks (1.106
 * of the lower bound, 1.28 with 3 s), and the transformer's 2400 were too many for the search.
 */
static int plan_circle(struct build *b, const struct om_request_log *log, uint64_t nprologue,
                       const struct om_cycle_arc *arcs, size_t narcs, uint64_t period,
                       om_rp_options *opt, size_t *n, om_rp_result *res, char *err, size_t errlen)
{
    uint64_t top = 0, amax = 1;
    for (size_t a = 0; a < narcs; a++) {
        b->circle[a] = (om_rp_block){.id = a,
                                     .lower = arcs[a].lower,
                                     .upper = arcs[a].upper,
                                     .size = arcs[a].len,
                                     .align = arcs[a].alignment};
        amax = arcs[a].alignment > amax ? arcs[a].alignment : amax;
    }
    uint64_t lb;
    int rc = om_rp_lower_bound(b->circle, narcs, period, &om_rp_mmap, &lb, err, errlen);
    if (rc != 0)
        return rc;
    opt->goal = CLOSE_ENOUGH(lb);
    om_plan_dump(OM_TRACER_HOST, b->circle, narcs, period,
                 "a saved plan's circle: the iteration's arcs, for up to %u ms", opt->budget_ms);
    if ((rc = om_rp_plan(b->circle, narcs, opt, b->circle_off, res)) != 0)
        return rc;
    *n = narcs;
    for (uint64_t i = 0; i < nprologue; i++) {
        const struct om_logged_request *e = &log->entries[i];
        if (!persists(e, nprologue, period))
            continue;
        b->circle[*n] = (om_rp_block){
            .id = narcs + i, .lower = 0, .upper = period, .size = e->len, .align = e->alignment};
        top = align_up(top, e->alignment);
        b->circle_off[(*n)++] = top;
        top += e->len;
    }
    top = align_up(top, amax);
    for (size_t a = 0; a < narcs; a++)
        b->circle_off[a] += top;
    res->peak = om_rp_peak(b->circle, *n, b->circle_off);
    rc = om_rp_check(b->circle, *n, period, b->circle_off, &om_rp_mmap, err, errlen);
    if (rc == 0)
        rc = om_rp_lower_bound(b->circle, *n, period, &om_rp_mmap, &res->lower_bound, err, errlen);
    return rc;
}

/* The arcs by their lower end (a counting sort: lower < period), for the line's groups. */
static void sort_arcs(struct build *b, const struct om_cycle_arc *arcs, size_t narcs,
                      uint64_t period)
{
    memset(b->count, 0, (period + 1) * sizeof *b->count);
    for (size_t a = 0; a < narcs; a++)
        b->count[arcs[a].lower + 1]++;
    for (uint64_t t = 0; t < period; t++)
        b->count[t + 1] += b->count[t];
    for (size_t a = 0; a < narcs; a++)
        b->by_birth[b->count[arcs[a].lower]++] = a;
}

/* Adds a fixed block to the line; pinned blocks are kept by birth, so callers add them so. */
static void pin(struct line *l, om_rp_block blk, uint64_t offset)
{
    blk.fixed = 1;
    blk.offset = offset;
    l->off[l->n] = offset;
    l->b[l->n++] = blk;
    if (blk.upper - blk.lower > l->longest)
        l->longest = blk.upper - blk.lower;
}

/*
 * The line up to two iterations into the cycle. Fixed: the warm-up iterations' copies of
 * the arcs and the arcs of the cycle's first two iterations, at the arcs' offsets, and the
 * persistent blocks, from their birth on; the prologue's other blocks go around them.
 */
static void make_line(struct build *b, const struct om_request_log *log, uint64_t nprologue,
                      const struct om_cycle_arc *arcs, size_t narcs, uint64_t period,
                      size_t ncircle, struct om_saved_plan *out)
{
    struct line *l = &b->line;
    uint64_t horizon = nprologue + 2 * period;
    *l = (struct line){b->line.b, b->line.off, 0, 0, 0, 0};
    for (uint64_t i = 0; i < nprologue; i++) {
        const struct om_logged_request *e = &log->entries[i];
        size_t a = persists(e, nprologue, period)
                       ? 0
                       : copy_of(log, i, nprologue, period, arcs, b->arc_at);
        if (!a)
            continue;
        pin(l,
            (om_rp_block){.id = narcs + i,
                          .lower = i,
                          .upper = e->death,
                          .size = arcs[a - 1].len,
                          .align = e->alignment},
            b->circle_off[a - 1]);
        set_slot(&out->slots[i], e->token, b->circle_off[a - 1], &l->b[l->n - 1]);
    }
    for (uint64_t it = 0; it < 2; it++)
        for (size_t x = 0; x < narcs; x++) {
            size_t a = b->by_birth[x];
            uint64_t lower = nprologue + it * period + arcs[a].lower;
            uint64_t upper = nprologue + it * period + arcs[a].upper;
            if (upper > horizon)
                upper = horizon;
            if (lower < upper)
                pin(l,
                    (om_rp_block){.id = a,
                                  .lower = lower,
                                  .upper = upper,
                                  .size = arcs[a].len,
                                  .align = arcs[a].alignment},
                    b->circle_off[a]);
        }
    l->npinned = l->n;
    for (size_t k = narcs; k < ncircle; k++) {
        om_rp_block c = b->circle[k];
        uint64_t i = c.id - narcs;
        c.lower = i;
        c.upper = horizon;
        pin(l, c, b->circle_off[k]);
        set_slot(&out->slots[i], log->entries[i].token, b->circle_off[k], &c);
    }
    l->nmovable0 = l->n;
    for (uint64_t i = 0; i < nprologue; i++) {
        const struct om_logged_request *e = &log->entries[i];
        if (!persists(e, nprologue, period) && !copy_of(log, i, nprologue, period, arcs, b->arc_at))
            l->b[l->n++] = (om_rp_block){.id = narcs + i,
                                         .lower = i,
                                         .upper = e->death,
                                         .size = e->len,
                                         .align = e->alignment};
    }
}

/*
 * Cuts the line's movable blocks where none spans the cut: those are independent parts.
 * Runs of small parts are then planned as one, so that a prologue of many short-lived
 * blocks, each alone in time, is not as many plans (each costs some mappings and a pass
 * over the fixed blocks); a large part stays alone, its search unburdened.
 */
#define PART_SMALL 64

static size_t find_parts(struct build *b)
{
    const struct line *l = &b->line;
    size_t nparts = 0, merged = 0;
    for (size_t x = l->nmovable0; x < l->n; x++) {
        struct part *p = &b->parts[nparts - (nparts > 0)];
        if (nparts && l->b[x].lower < p->upper) {
            p->end = x + 1;
            p->upper = l->b[x].upper > p->upper ? l->b[x].upper : p->upper;
        } else {
            b->parts[nparts++] = (struct part){.first = x, .end = x + 1, .upper = l->b[x].upper};
        }
    }
    for (size_t x = 0; x < nparts; x++) {
        struct part *p = &b->parts[x], *q = merged ? &b->parts[merged - 1] : NULL;
        if (q && q->end - q->first < PART_SMALL && p->end - p->first < PART_SMALL) {
            q->end = p->end;
            q->upper = p->upper;
        } else {
            b->parts[merged++] = *p;
        }
    }
    return merged;
}

static uint32_t at_least(uint32_t ms, uint32_t least)
{
    return ms > least ? ms : least;
}

int om_saved_plan_build(const struct om_request_log *log, uint64_t nprologue,
                        const struct om_cycle_arc *arcs, size_t narcs, uint64_t period,
                        uint32_t budget_ms, size_t stack_bytes, struct om_saved_plan *out,
                        char *err, size_t errlen)
{
    size_t nslots = nprologue + period, ncircle;
    struct build b;
    size_t bytes = layout(&b, NULL, nprologue, narcs, period);
    char *base = om_sys_map(bytes);
    memset(out, 0, sizeof *out);
    out->slots = om_sys_map(nslots * sizeof *out->slots);
    int rc = -ENOMEM;
    if (!base || !out->slots || nprologue > log->n)
        goto out;
    layout(&b, base, nprologue, narcs, period);
    for (size_t a = 0; a < narcs; a++)
        b.arc_at[arcs[a].slot] = a + 1;

    om_rp_options opt = {.period = period,
                         .budget_ms = at_least(budget_ms, CIRCLE_BUDGET_MS),
                         .stack_bytes = stack_bytes,
                         .alloc = om_rp_mmap,
                         .err = err,
                         .errlen = errlen};
    om_rp_result circle;
    rc = plan_circle(&b, log, nprologue, arcs, narcs, period, &opt, &ncircle, &circle, err, errlen);
    if (rc != 0)
        goto out;
    for (size_t a = 0; a < narcs; a++)
        set_slot(&out->slots[nprologue + arcs[a].slot], arcs[a].token, b.circle_off[a],
                 &b.circle[a]);
    sort_arcs(&b, arcs, narcs, period);
    make_line(&b, log, nprologue, arcs, narcs, period, ncircle, out);

    struct line *l = &b.line;
    size_t nparts = find_parts(&b);
    opt.period = 0;
    rc = plan_line(l, b.parts, nparts, b.pb, b.poff, circle.peak,
                   now_ns() + (uint64_t)at_least(budget_ms, LINE_BUDGET_MS) * 1000000u, &opt);
    if (rc != 0)
        goto out;
    for (size_t x = l->nmovable0; x < l->n; x++) {
        uint64_t i = l->b[x].id - narcs;
        set_slot(&out->slots[i], log->entries[i].token, l->off[x], &l->b[x]);
    }
    /* Whatever the parts did, the whole line must hold before a run trusts it. */
    uint64_t line_lb;
    rc = om_rp_check(l->b, l->n, 0, l->off, &om_rp_mmap, err, errlen);
    if (rc == 0)
        rc = om_rp_lower_bound(l->b, l->n, 0, &om_rp_mmap, &line_lb, err, errlen);
    if (rc != 0)
        goto out;
    uint64_t line_peak = om_rp_peak(l->b, l->n, l->off);
    out->nprologue = nprologue;
    out->period = period;
    out->peak = circle.peak > line_peak ? circle.peak : line_peak;
    out->lower_bound = circle.lower_bound > line_lb ? circle.lower_bound : line_lb;
out:
    om_sys_unmap(base, bytes);
    if (rc != 0 && out->slots) {
        om_sys_unmap(out->slots, nslots * sizeof *out->slots);
        out->slots = NULL;
    }
    return rc;
}

void om_saved_plan_free(struct om_saved_plan *plan)
{
    om_sys_unmap(plan->slots, (plan->nprologue + plan->period) * sizeof *plan->slots);
    om_slot_index_free(&plan->prologue);
    memset(plan, 0, sizeof *plan);
}

uint64_t om_saved_plan_program(void)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe);
    return om_fnv1a(OM_FNV_OFFSET, exe, len > 0 ? (size_t)len : 0);
}

struct write_job {
    const struct file_header *header;
    const struct om_saved_plan *plan;
};

static int fill_plan(int fd, void *ctx)
{
    const struct write_job *job = ctx;
    int rc = om_write_all(fd, job->header, sizeof *job->header);
    if (rc == 0)
        rc = om_write_all(fd, job->plan->slots,
                          (job->plan->nprologue + job->plan->period) * sizeof *job->plan->slots);
    return rc;
}

int om_saved_plan_write(const char *path, uint64_t program, const struct om_saved_plan *plan)
{
    size_t bytes = (plan->nprologue + plan->period) * sizeof *plan->slots;
    struct file_header h = {{0},
                            program,
                            plan->nprologue,
                            plan->period,
                            plan->peak,
                            plan->lower_bound,
                            om_fnv1a(OM_FNV_OFFSET, plan->slots, bytes)};
    memcpy(h.magic, MAGIC, sizeof h.magic);
    struct write_job job = {&h, plan};
    return om_file_replace(path, fill_plan, &job);
}

static int bad(char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s", why);
    return -EINVAL;
}

int om_saved_plan_read(const char *path, uint64_t program, uint64_t arena_bytes,
                       struct om_saved_plan *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct file_header h;
    struct stat st;
    int rc;
    if (fstat(fd, &st) != 0 || read(fd, &h, sizeof h) != (ssize_t)sizeof h ||
        memcmp(h.magic, MAGIC, sizeof h.magic) != 0) {
        rc = bad(err, errlen, "not an optmem plan file");
        goto out;
    }
    if (h.program != program) {
        rc = bad(err, errlen, "written for another program");
        goto out;
    }
    if (h.nprologue > MAX_SLOTS || h.period > MAX_SLOTS || h.period == 0 ||
        (uint64_t)st.st_size != sizeof h + (h.nprologue + h.period) * sizeof *out->slots) {
        rc = bad(err, errlen, "truncated or inconsistent");
        goto out;
    }
    size_t bytes = (h.nprologue + h.period) * sizeof *out->slots;
    out->slots = om_sys_map(bytes);
    if (!out->slots) {
        rc = -ENOMEM;
        goto out;
    }
    if (read(fd, out->slots, bytes) != (ssize_t)bytes ||
        om_fnv1a(OM_FNV_OFFSET, out->slots, bytes) != h.checksum) {
        rc = bad(err, errlen, "corrupt (checksum)");
        goto out;
    }
    for (uint64_t i = 0; i < h.nprologue + h.period; i++) {
        const struct om_slot *s = &out->slots[i];
        if (s->token &&
            (s->len == 0 || s->offset > arena_bytes || s->len > arena_bytes - s->offset ||
             (s->alignment & (s->alignment - 1)) || (s->alignment && s->offset % s->alignment))) {
            rc = bad(err, errlen, "a slot lies outside the arena or is misaligned");
            goto out;
        }
    }
    out->nprologue = h.nprologue;
    out->period = h.period;
    out->peak = h.peak;
    out->lower_bound = h.lower_bound;
    rc = om_slot_index_build(&out->prologue, out->slots, out->nprologue);
out:
    close(fd);
    if (rc != 0 && out->slots) {
        out->nprologue = h.nprologue;
        out->period = h.period;
        om_saved_plan_free(out);
    }
    return rc;
}
