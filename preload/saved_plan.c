/* The whole-run plan: building it from the request log, and its file, written atomically
 * and checked field by field when read, since a plan file may be stale or corrupt. */
#include "saved_plan.h"
#include "replanner.h"
#include "tracer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "OPTMPLN1"
#define MAX_SLOTS ((uint64_t)1 << 24)
#define BUILD_BUDGET_MS 200 /* at exit, once: a better plan is worth a little time */

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

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

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
    *s = (struct om_slot){token, offset, b->size, b->align};
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

int om_saved_plan_build(const struct om_request_log *log, uint64_t nprologue,
                        const struct om_cycle_arc *arcs, size_t narcs, uint64_t period,
                        struct om_saved_plan *out, char *err, size_t errlen)
{
    /* The circle holds the arcs and up to the whole prologue; the line two copies of
     * every arc, and the whole prologue. */
    size_t cap = 2 * nprologue + 3 * narcs;
    size_t nslots = nprologue + period;
    om_rp_block *in = om_sys_map(cap * sizeof *in);
    uint64_t *off = om_sys_map(cap * sizeof *off);
    size_t *arc_at = om_sys_map(period * sizeof *arc_at); /* slot -> arc index + 1 */
    uint64_t *arc_off = om_sys_map(narcs * sizeof *arc_off);
    memset(out, 0, sizeof *out);
    out->slots = om_sys_map(nslots * sizeof *out->slots);
    int rc = -ENOMEM;
    if (!in || !off || !arc_at || !arc_off || !out->slots || nprologue > log->n)
        goto out;

    /* The circle: the arcs, then the persistent prologue blocks all the way round. */
    size_t n = 0;
    for (size_t a = 0; a < narcs; a++) {
        in[n++] = (om_rp_block){.id = a,
                                .lower = arcs[a].lower,
                                .upper = arcs[a].upper,
                                .size = arcs[a].len,
                                .align = arcs[a].alignment};
        arc_at[arcs[a].slot] = a + 1;
    }
    for (uint64_t i = 0; i < nprologue; i++)
        if (persists(&log->entries[i], nprologue, period))
            in[n++] = (om_rp_block){.id = narcs + i,
                                    .lower = 0,
                                    .upper = period,
                                    .size = log->entries[i].len,
                                    .align = log->entries[i].alignment};
    om_rp_options opt = {.period = period,
                         .budget_ms = BUILD_BUDGET_MS,
                         .alloc = om_rp_mmap,
                         .err = err,
                         .errlen = errlen};
    om_rp_result circle, line;
    rc = om_rp_plan(in, n, &opt, off, &circle);
    if (rc != 0)
        goto out;

    /* The line up to two iterations into the cycle: what the circle placed is fixed (the
     * arcs twice, the persistent blocks from their birth), and so are the warm-up
     * iterations' copies of the arcs; the prologue's other blocks go around them. */
    uint64_t horizon = nprologue + 2 * period;
    size_t m = n;
    for (size_t k = 0; k < n; k++) {
        om_rp_block b = in[k];
        b.offset = off[k];
        b.fixed = 1;
        if (b.id >= narcs) {
            uint64_t i = b.id - narcs;
            set_slot(&out->slots[i], log->entries[i].token, off[k], &b);
            b.lower = i;
            b.upper = horizon;
            in[m++] = b;
            continue;
        }
        arc_off[b.id] = off[k];
        set_slot(&out->slots[nprologue + arcs[b.id].slot], arcs[b.id].token, off[k], &b);
        for (uint64_t it = 0; it < 2; it++) {
            b.lower = nprologue + it * period + in[k].lower;
            b.upper = nprologue + it * period + in[k].upper;
            if (b.upper > horizon)
                b.upper = horizon;
            if (b.lower < b.upper)
                in[m++] = b;
        }
    }
    for (uint64_t i = 0; i < nprologue; i++) {
        const struct om_logged_request *e = &log->entries[i];
        if (persists(e, nprologue, period))
            continue;
        size_t a = copy_of(log, i, nprologue, period, arcs, arc_at);
        in[m] = (om_rp_block){.id = narcs + i,
                              .lower = i,
                              .upper = e->death,
                              .size = a ? arcs[a - 1].len : e->len,
                              .align = e->alignment,
                              .offset = a ? arc_off[a - 1] : 0,
                              .fixed = a != 0};
        if (a)
            set_slot(&out->slots[i], e->token, arc_off[a - 1], &in[m]);
        m++;
    }
    opt.period = 0;
    rc = om_rp_plan(in + n, m - n, &opt, off + n, &line);
    if (rc != 0)
        goto out;
    for (size_t k = n; k < m; k++)
        if (!in[k].fixed)
            set_slot(&out->slots[in[k].id - narcs], log->entries[in[k].id - narcs].token, off[k],
                     &in[k]);
    out->nprologue = nprologue;
    out->period = period;
    out->peak = circle.peak > line.peak ? circle.peak : line.peak;
    out->lower_bound =
        circle.lower_bound > line.lower_bound ? circle.lower_bound : line.lower_bound;
    rc = 0;
out:
    om_sys_unmap(in, cap * sizeof *in);
    om_sys_unmap(off, cap * sizeof *off);
    om_sys_unmap(arc_at, period * sizeof *arc_at);
    om_sys_unmap(arc_off, narcs * sizeof *arc_off);
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
    return fnv(0xcbf29ce484222325ull, exe, len > 0 ? (size_t)len : 0);
}

static int write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

struct write_job {
    const struct file_header *header;
    const struct om_saved_plan *plan;
};

static int fill_plan(int fd, void *ctx)
{
    const struct write_job *job = ctx;
    int rc = write_all(fd, job->header, sizeof *job->header);
    if (rc == 0)
        rc = write_all(fd, job->plan->slots,
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
                            fnv(0xcbf29ce484222325ull, plan->slots, bytes)};
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
        fnv(0xcbf29ce484222325ull, out->slots, bytes) != h.checksum) {
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
