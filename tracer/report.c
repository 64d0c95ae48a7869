/* The lifetime report: versioned JSON (docs/report-schema.md), written atomically. */
#include "tracer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* 2: frames written once, in the top-level "frames" and "python_frames" tables, that sites
 * refer to by index. 3: only the sites a process used are listed, ids no longer dense
 * (a forked child's), with folds of sites seen once; the tables hold only their frames. */
#define REPORT_VERSION 3
#define PEAK_TOP 20
#define WRITE_BUF (64u * 1024)
#define CMDLINE_MAX (64u * 1024)
#define RESIDENT_MAX (1u << 16) /* live blocks listed in "resident"; the rest only counted */

struct om_resident_block {
    uint64_t site, size, birth, death;
};

/* What "resident" lists, gathered under the tracer's lock and written after it. */
struct om_resident {
    struct om_resident_block *blocks;
    uint64_t n, cap, omitted, omitted_bytes;
    int complete;
};

/* A call site as a report copies it: what changes (its counters), and the site itself for
 * what never does (frames, Python stack). */
struct snap_site {
    const struct om_site *site;
    uint64_t count, total_bytes, min_size, max_size, live_blocks, live_bytes, freed;
    uint64_t life_req_min, life_req_max, life_req_sum, life_ns_min, life_ns_max, life_ns_sum;
    uint64_t cat_bytes[OM_CAT_COUNT], live_cat_bytes[OM_CAT_COUNT];
    uint64_t mod_event, snap_for, snap_bytes, snap_blocks;
};

/* A domain as a report sees it, copied under the tracer's lock and written outside it: the
 * domain's fields, its call sites' counters, the sample's records, and each site's live bytes
 * by category. The buffers are kept from one report to the next: reports are rewritten every
 * few seconds (checkpoints), and pages mapped anew each time would be faulted in anew; and a
 * site whose counters have not changed since the last copy is not copied again. */
struct snap {
    struct om_domain d; /* records and resident point below; no sites, no live table */
    struct om_resident resident;
    struct snap_site *sites;
    uint32_t nsites;  /* sites copied: the domain's call sites and folds, by id, compact */
    size_t sites_cap; /* sites has room for this many */
    /* By id, the index in sites of the site, or fold, the id names (a folded site's names its
     * fold); nids ids when copied. A folded site costs a report these 4 bytes. */
    uint32_t *slot;
    uint32_t nids;
    size_t slot_cap;
    /* Which of sites the report lists (mark_listed): a byte each. */
    uint8_t *listed;
    size_t listed_cap;
    pid_t pid; /* the process that copied them: a forked child copies every site */
    /* The sites were copied ahead (om_report_precopy) since the folds last changed: a fold
     * is copied again only when stamped since, as any site. */
    int precopied;
    struct om_record *records;
};

/* The writer's buffers, mapped at the first report and kept: a report is rewritten every
 * few seconds (checkpoints), and mapping them anew each time cost the program about 70 page
 * faults a checkpoint. Reports are written one at a time (the tracer's dump lock). */
static char *write_buf, *cmdline_buf;

/* A buffer of the report's, its pages made resident in one call (where the kernel can, 5.14
 * on) instead of faulted in one by one as a report first writes them. */
static void *map_populated(size_t size)
{
    void *p = om_sys_map(size);
    if (p)
        (void)madvise(p, size, MADV_POPULATE_WRITE);
    return p;
}

static void kv_u64(struct om_json *w, const char *key, uint64_t v)
{
    om_json_key(w, key);
    om_json_u64(w, v);
}

static void kv_str(struct om_json *w, const char *key, const char *v)
{
    om_json_key(w, key);
    om_json_str(w, v);
}

static void write_process(struct om_json *w, const struct om_tracer_config *cfg,
                          struct om_domain *const *doms, unsigned ndoms)
{
    const struct om_domain *host = doms[OM_TRACER_HOST];
    om_json_key(w, "process");
    om_json_begin(w, '{');
    /* Whose the report is comes first: lineage.c reads it back from a report's first
     * bytes, whatever the length of argv. */
    kv_u64(w, "pid", (uint64_t)getpid());
    kv_u64(w, "ppid", (uint64_t)getppid());
    kv_u64(w, "start_time", cfg->lineage.self.start);
    kv_u64(w, "managed_requests", om_report_requests(doms, ndoms));
    om_json_key(w, "iterations_found");
    om_json_bool(w, om_report_iterations(doms, ndoms));
    om_json_key(w, "ancestors");
    om_json_begin(w, '[');
    for (unsigned i = 0; i < cfg->lineage.n; i++) {
        om_json_begin(w, '[');
        om_json_i64(w, cfg->lineage.up[i].pid);
        om_json_u64(w, cfg->lineage.up[i].start);
        om_json_end(w, ']');
    }
    om_json_end(w, ']');
    om_json_key(w, "rank");
    om_json_i64(w, cfg->rank);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe);
    om_json_key(w, "exe");
    if (n > 0 && (size_t)n < sizeof exe)
        om_json_strn(w, exe, (size_t)n);
    else
        om_json_null(w);
    om_json_key(w, "argv");
    om_json_begin(w, '[');
    char *cmd = cmdline_buf;
    if (cmd) {
        size_t len = om_sys_read_file("/proc/self/cmdline", cmd, CMDLINE_MAX);
        for (size_t i = 0; i < len;) {
            size_t arg = strnlen(cmd + i, len - i);
            om_json_strn(w, cmd + i, arg);
            i += arg + 1;
        }
    }
    om_json_end(w, ']');
    om_json_key(w, "forked_at_request");
    if (host->fork_seq)
        om_json_u64(w, host->fork_seq);
    else
        om_json_null(w);
    om_json_end(w, '}');
}

static void write_configuration(struct om_json *w, const struct om_tracer_config *cfg)
{
    om_json_key(w, "configuration");
    om_json_begin(w, '{');
    kv_str(w, "mode", cfg->mode_name);
    kv_u64(w, "min_bytes", cfg->min_bytes);
    kv_u64(w, "stack_depth", cfg->stack_depth);
    om_json_key(w, "warmup");
    if (cfg->warmup)
        om_json_u64(w, cfg->warmup);
    else
        om_json_str(w, "auto");
    kv_u64(w, "sample_capacity", OM_SAMPLE_RECORDS);
    om_json_end(w, '}');
}

static uint64_t site_peak_bytes(const struct om_domain *st, const struct snap_site *s,
                                uint64_t *blocks)
{
    if (s->mod_event <= st->peak_event) {
        *blocks = s->live_blocks;
        return s->live_bytes;
    }
    if (s->snap_for == st->peak_event + 1) {
        *blocks = s->snap_blocks;
        return s->snap_bytes;
    }
    *blocks = 0;
    return 0;
}

static void write_peak(struct om_json *w, const struct snap *sn)
{
    const struct om_domain *st = &sn->d;
    uint32_t top[PEAK_TOP];
    uint64_t top_bytes[PEAK_TOP], top_blocks[PEAK_TOP];
    unsigned ntop = 0;
    for (uint32_t i = 0; i < sn->nsites; i++) {
        uint64_t blocks, bytes = site_peak_bytes(st, &sn->sites[i], &blocks);
        if (bytes == 0 || (ntop == PEAK_TOP && bytes <= top_bytes[PEAK_TOP - 1]))
            continue;
        unsigned k = ntop < PEAK_TOP ? ntop++ : PEAK_TOP - 1;
        while (k > 0 && top_bytes[k - 1] < bytes) {
            top[k] = top[k - 1];
            top_bytes[k] = top_bytes[k - 1];
            top_blocks[k] = top_blocks[k - 1];
            k--;
        }
        top[k] = sn->sites[i].site->id;
        top_bytes[k] = bytes;
        top_blocks[k] = blocks;
    }
    om_json_key(w, "peak");
    om_json_begin(w, '{');
    kv_u64(w, "request", st->lower_bound_seq);
    kv_u64(w, "live_bytes", st->lower_bound);
    om_json_key(w, "sites");
    om_json_begin(w, '[');
    for (unsigned k = 0; k < ntop; k++) {
        om_json_begin(w, '{');
        kv_u64(w, "site", top[k]);
        kv_u64(w, "bytes", top_bytes[k]);
        kv_u64(w, "blocks", top_blocks[k]);
        om_json_end(w, '}');
    }
    om_json_end(w, ']');
    om_json_end(w, '}');
}

static uint64_t sample_first(const struct om_domain *st)
{
    uint64_t first = st->fork_seq;
    if (st->seq - first > OM_SAMPLE_RECORDS)
        first = st->seq - OM_SAMPLE_RECORDS;
    if (st->have_steady && st->first_steady_seq > first)
        first = st->first_steady_seq; /* earlier starts belong to warm-up or stray locks */
    /* Whole iterations: from the first iteration start inside the ring, if any. */
    uint64_t kept = st->nstarts < OM_STARTS ? st->nstarts : OM_STARTS;
    for (uint64_t k = st->nstarts - kept; k < st->nstarts; k++) {
        uint64_t s = st->starts[k % OM_STARTS];
        if (s >= first)
            return s < st->seq ? s : first;
    }
    return first;
}

static void write_iterations(struct om_json *w, const struct om_tracer_config *cfg,
                             const struct om_domain *st, uint64_t first)
{
    const struct om_iter_acct *a = cfg->warmup ? &st->acct : &st->best_acct;
    om_json_key(w, "iterations");
    om_json_begin(w, '{');
    kv_str(w, "method", cfg->warmup ? "marked" : "auto");
    om_json_key(w, "found");
    om_json_bool(w, st->have_steady);
    om_json_key(w, "period_requests");
    uint64_t period = cfg->warmup ? st->period_fixed : st->best_period;
    if (st->have_steady && period)
        om_json_u64(w, period);
    else
        om_json_null(w);
    om_json_key(w, "first_steady_request");
    if (st->have_steady)
        om_json_u64(w, st->first_steady_seq);
    else
        om_json_null(w);
    kv_u64(w, "starts_total", st->nstarts);
    om_json_key(w, "starts");
    om_json_begin(w, '[');
    uint64_t kept = st->nstarts < OM_STARTS ? st->nstarts : OM_STARTS;
    for (uint64_t k = st->nstarts - kept; k < st->nstarts; k++)
        if (st->starts[k % OM_STARTS] >= first)
            om_json_u64(w, st->starts[k % OM_STARTS]);
    om_json_end(w, ']');
    om_json_key(w, "detector");
    if (cfg->warmup) {
        om_json_null(w);
    } else {
        om_json_begin(w, '{');
        om_json_key(w, "thread");
        if (st->threads.det_tid == OM_ALL_THREADS)
            om_json_null(w);
        else
            om_json_u64(w, st->threads.det_tid);
        kv_u64(w, "thread_requests", st->det.n);
        om_json_key(w, "thread_period_requests");
        if (st->det.p)
            om_json_u64(w, st->det.p);
        else
            om_json_null(w);
        kv_u64(w, "locks", st->det.locks);
        kv_u64(w, "thread_switches", st->threads.switches);
        kv_u64(w, "iterations_in_reported_lock", st->best_starts);
        om_json_end(w, '}');
    }
    om_json_key(w, "marks");
    om_json_begin(w, '{');
    kv_u64(w, "count", st->nmarks);
    om_json_key(w, "requests");
    om_json_begin(w, '[');
    uint64_t mk = st->nmarks < OM_MARKS ? st->nmarks : OM_MARKS;
    for (uint64_t k = st->nmarks - mk; k < st->nmarks; k++)
        om_json_u64(w, st->marks[k % OM_MARKS]);
    om_json_end(w, ']');
    om_json_end(w, '}');
    om_json_end(w, '}');

    /* The categories of the last complete iteration. */
    om_json_key(w, "categories");
    if (!a->have_last) {
        om_json_null(w);
        return;
    }
    om_json_begin(w, '{');
    om_json_key(w, "iteration");
    om_json_begin(w, '[');
    om_json_u64(w, a->last_start);
    om_json_u64(w, a->last_end);
    om_json_end(w, ']');
    kv_u64(w, "lower_bound_bytes", a->last_peak);
    for (int c = 0; c < OM_CAT_COUNT; c++) {
        om_json_key(w, om_category_name(c));
        om_json_begin(w, '{');
        kv_u64(w, "bytes", a->last_bytes[c]);
        kv_u64(w, "blocks", a->last_blocks[c]);
        om_json_end(w, '}');
    }
    om_json_end(w, '}');
}

/* The Python frames a report lists, those its sites refer to: pyt.out[id] is a frame's index
 * in the report + 1, 0 for one left out; frames first seen after the marks (id >= pyt.n)
 * are left out. Kept from one report to the next; used under the dump lock only. */
static struct {
    uint32_t *out;
    uint32_t n, cap;
} pyt;

/* The index in python_frames of the frame of id (marked). */
static uint64_t py_index(uint32_t id)
{
    return id < pyt.n && pyt.out[id] ? pyt.out[id] - 1 : 0;
}

/* The Python frames, innermost first, as [python_frames index, native_index]: the index of
 * the native frame of the eval loop that runs it; the k-th such frame runs the k-th run of
 * Python frames, a run ending at a frame entered from C. Frames past the native ones captured
 * have a null index. */
static void write_python(struct om_json *w, const struct om_site *s)
{
    const uint32_t *py = NULL;
    unsigned n = 0;
    uint32_t f = 0;
    if (s->py_stack && om_py_stack(s->py_stack, &py, &n) != 0)
        n = 0;
    om_json_key(w, "python");
    om_json_begin(w, '[');
    if (s->fold && s->py_top) { /* its one Python frame, run by its last native frame */
        om_json_begin(w, '[');
        om_json_u64(w, py_index(s->py_top - 1));
        if (s->depth && om_py_is_eval((uintptr_t)s->frames[s->depth - 1]))
            om_json_u64(w, s->depth - 1);
        else
            om_json_null(w);
        om_json_end(w, ']');
    }
    for (unsigned p = 0; p < n; p++) {
        while (f < s->depth && !om_py_is_eval((uintptr_t)s->frames[f]))
            f++;
        om_json_begin(w, '[');
        om_json_u64(w, py_index(py[p] >> 1));
        if (f < s->depth)
            om_json_u64(w, f);
        else
            om_json_null(w);
        om_json_end(w, ']');
        if ((py[p] & 1) && f < s->depth)
            f++; /* the next run belongs to the next eval loop frame */
    }
    om_json_end(w, ']');
}

/* ---- the frame tables: each native frame once, for the sites of every domain ---- */

#define FRAMES_MIN 4096u /* frames the table first has room for */

/* Every return address of every call site, by id in order of first sight, with its module,
 * offset and function; kept from one report to the next (call sites are never dropped, so
 * every frame stays in use), so that each is resolved once. Used under the dump lock only. */
static struct {
    uintptr_t *addr;
    struct om_frame_info *info;
    uint32_t *slots; /* 2 cap of them: id + 1, 0 when free */
    uint32_t *out;   /* the frame's index in this report's table + 1, 0: not listed */
    uint32_t n, cap;
} ft;

static uint32_t frame_slot(const uint32_t *slots, uint32_t nslots, uintptr_t a)
{
    uint32_t i = (uint32_t)(((uint64_t)a * 0x9e3779b97f4a7c15ull) >> 32) & (nslots - 1);
    while (slots[i] && ft.addr[slots[i] - 1] != a)
        i = (i + 1) & (nslots - 1);
    return i;
}

static int frames_reserve(uint32_t want)
{
    if (want <= ft.cap)
        return 0;
    uint32_t cap = ft.cap ? ft.cap : FRAMES_MIN;
    while (cap < want)
        cap *= 2;
    uintptr_t *addr = map_populated(cap * sizeof *addr);
    struct om_frame_info *info = map_populated(cap * sizeof *info);
    uint32_t *slots = map_populated(2 * (size_t)cap * sizeof *slots);
    uint32_t *out = map_populated(cap * sizeof *out);
    if (!addr || !info || !slots || !out) {
        om_sys_unmap(addr, cap * sizeof *addr);
        om_sys_unmap(info, cap * sizeof *info);
        om_sys_unmap(slots, 2 * (size_t)cap * sizeof *slots);
        om_sys_unmap(out, cap * sizeof *out);
        return -ENOMEM;
    }
    if (ft.n) {
        memcpy(addr, ft.addr, ft.n * sizeof *addr);
        memcpy(info, ft.info, ft.n * sizeof *info);
    }
    om_sys_unmap(ft.addr, ft.cap * sizeof *ft.addr);
    om_sys_unmap(ft.info, ft.cap * sizeof *ft.info);
    om_sys_unmap(ft.slots, 2 * (size_t)ft.cap * sizeof *ft.slots);
    om_sys_unmap(ft.out, ft.cap * sizeof *ft.out);
    ft.addr = addr;
    ft.info = info;
    ft.slots = slots;
    ft.out = out;
    ft.cap = cap;
    for (uint32_t id = 0; id < ft.n; id++)
        slots[frame_slot(slots, 2 * cap, addr[id])] = id + 1;
    return 0;
}

/* The index in this report's frames of a frame the table holds (frames_collect added and
 * marked every frame of the sites listed). */
static uint32_t frame_id(uintptr_t a)
{
    return ft.out[ft.slots[frame_slot(ft.slots, 2 * ft.cap, a)] - 1] - 1;
}

/* Adds the frames of the sites listed not seen before and resolves them (modules, and with
 * names the functions of every frame still without one). */
static int frames_collect(struct snap *const *of, unsigned n, int with_names)
{
    uint32_t seen = ft.n;
    for (unsigned d = 0; d < n; d++) {
        for (uint32_t i = 0; i < of[d]->nsites; i++) {
            const struct om_site *s = of[d]->sites[i].site;
            if (!of[d]->listed[i])
                continue;
            for (uint32_t f = 0; f < s->depth; f++) {
                uintptr_t a = (uintptr_t)s->frames[f];
                if (ft.cap && ft.slots[frame_slot(ft.slots, 2 * ft.cap, a)])
                    continue;
                if (ft.n == ft.cap && frames_reserve(ft.n + 1) != 0)
                    return -ENOMEM;
                ft.addr[ft.n] = a;
                ft.info[ft.n] = (struct om_frame_info){NULL, 0, NULL};
                ft.slots[frame_slot(ft.slots, 2 * ft.cap, a)] = ++ft.n;
            }
        }
    }
    if (with_names)
        om_frames_symbolize(ft.addr, ft.info, ft.n, 1);
    else if (ft.n > seen)
        om_frames_symbolize(ft.addr + seen, ft.info + seen, ft.n - seen, 0);
    return 0;
}

/* Numbers the native and Python frames that the sites listed refer to, in the order of their
 * ids: the report's tables hold those only (the sites a forked child did not use, and those
 * folded, leave theirs out). */
static int frames_number(struct snap *const *of, unsigned n)
{
    uint32_t npy = 0;
    const char *file, *function;
    uint32_t line;
    while (om_py_frame(npy, &file, &function, &line) == 0)
        npy++;
    if (npy > pyt.cap) {
        uint32_t cap = pyt.cap ? pyt.cap : FRAMES_MIN;
        while (cap < npy)
            cap *= 2;
        uint32_t *out = om_sys_map(cap * sizeof *out);
        if (!out)
            return -ENOMEM;
        om_sys_unmap(pyt.out, pyt.cap * sizeof *pyt.out);
        pyt.out = out;
        pyt.cap = cap;
    }
    pyt.n = npy;
    if (npy)
        memset(pyt.out, 0, npy * sizeof *pyt.out);
    if (ft.n)
        memset(ft.out, 0, ft.n * sizeof *ft.out);
    for (unsigned d = 0; d < n; d++) {
        for (uint32_t i = 0; i < of[d]->nsites; i++) {
            const struct om_site *s = of[d]->sites[i].site;
            if (!of[d]->listed[i])
                continue;
            for (uint32_t f = 0; f < s->depth; f++)
                ft.out[ft.slots[frame_slot(ft.slots, 2 * ft.cap, (uintptr_t)s->frames[f])] - 1] = 1;
            const uint32_t *py = NULL;
            unsigned np = 0;
            if (s->py_stack && om_py_stack(s->py_stack, &py, &np) != 0)
                np = 0;
            for (unsigned p = 0; p < np; p++)
                if ((py[p] >> 1) < npy)
                    pyt.out[py[p] >> 1] = 1;
            if (s->fold && s->py_top && s->py_top - 1 < npy)
                pyt.out[s->py_top - 1] = 1;
        }
    }
    for (uint32_t id = 0, k = 0; id < ft.n; id++)
        if (ft.out[id])
            ft.out[id] = ++k;
    for (uint32_t id = 0, k = 0; id < npy; id++)
        if (pyt.out[id])
            pyt.out[id] = ++k;
    return 0;
}

static void write_frame_tables(struct om_json *w)
{
    om_json_key(w, "frames");
    om_json_begin(w, '[');
    for (uint32_t id = 0; id < ft.n; id++) {
        const struct om_frame_info *info = &ft.info[id];
        if (!ft.out[id])
            continue;
        om_json_begin(w, '{');
        om_json_key(w, "address");
        om_json_hex(w, ft.addr[id]);
        kv_str(w, "module", info->module);
        om_json_key(w, "offset");
        if (info->module)
            om_json_hex(w, info->offset);
        else
            om_json_null(w);
        kv_str(w, "function", info->function);
        om_json_end(w, '}');
    }
    om_json_end(w, ']');
    /* Python frames have ids of their own, dense from 0 (pyframes.c). */
    om_json_key(w, "python_frames");
    om_json_begin(w, '[');
    const char *file, *function;
    uint32_t line;
    for (uint32_t id = 0; id < pyt.n && om_py_frame(id, &file, &function, &line) == 0; id++) {
        if (!pyt.out[id])
            continue;
        om_json_begin(w, '{');
        kv_str(w, "file", file);
        kv_u64(w, "line", line);
        kv_str(w, "function", function);
        om_json_end(w, '}');
    }
    om_json_end(w, ']');
}

static void write_lifetime(struct om_json *w, const char *key, uint64_t min, uint64_t max,
                           uint64_t sum, uint64_t n)
{
    om_json_key(w, key);
    if (n == 0) {
        om_json_null(w);
        return;
    }
    om_json_begin(w, '{');
    kv_u64(w, "min", min);
    kv_u64(w, "max", max);
    om_json_key(w, "mean");
    om_json_ratio(w, sum, n);
    om_json_end(w, '}');
}

static void write_sites(struct om_json *w, const struct snap *sn)
{
    om_json_key(w, "sites");
    om_json_begin(w, '[');
    for (uint32_t i = 0; i < sn->nsites; i++) {
        const struct snap_site *s = &sn->sites[i];
        if (!sn->listed[i])
            continue;
        om_json_begin(w, '{');
        kv_u64(w, "id", s->site->id);
        if (s->site->fold)
            kv_u64(w, "folded", s->site->nfolded);
        om_json_key(w, "frames");
        om_json_begin(w, '[');
        for (uint32_t f = 0; f < s->site->depth; f++)
            om_json_u64(w, frame_id((uintptr_t)s->site->frames[f]));
        om_json_end(w, ']');
        write_python(w, s->site);
        kv_u64(w, "count", s->count);
        kv_u64(w, "total_bytes", s->total_bytes);
        om_json_key(w, "min_size");
        s->count ? om_json_u64(w, s->min_size) : om_json_null(w);
        om_json_key(w, "max_size");
        s->count ? om_json_u64(w, s->max_size) : om_json_null(w);
        kv_u64(w, "live_blocks", s->live_blocks);
        kv_u64(w, "live_bytes", s->live_bytes);
        kv_u64(w, "freed", s->freed);
        write_lifetime(w, "lifetime_requests", s->life_req_min, s->life_req_max, s->life_req_sum,
                       s->freed);
        write_lifetime(w, "lifetime_ns", s->life_ns_min, s->life_ns_max, s->life_ns_sum, s->freed);
        int best = -1;
        uint64_t best_bytes = 0;
        om_json_key(w, "category_bytes");
        om_json_begin(w, '{');
        for (int c = 0; c < OM_CAT_COUNT; c++) {
            uint64_t b = s->cat_bytes[c] + s->live_cat_bytes[c];
            kv_u64(w, om_category_name(c), b);
            if (b > best_bytes) {
                best = c;
                best_bytes = b;
            }
        }
        om_json_end(w, '}');
        kv_str(w, "category", best >= 0 ? om_category_name(best) : NULL);
        om_json_end(w, '}');
    }
    om_json_end(w, ']');
}

/* The id a report gives the site of id: its fold's, where it was folded. */
static uint64_t listed_id(const struct snap *sn, uint64_t id)
{
    return id < sn->nids ? sn->sites[sn->slot[id]].site->id : id;
}

static void write_sample(struct om_json *w, const struct snap *sn, uint64_t first)
{
    const struct om_domain *st = &sn->d;
    om_json_key(w, "sample");
    om_json_begin(w, '{');
    kv_u64(w, "first_request", first);
    kv_u64(w, "end_request", st->seq);
    om_json_key(w, "fields");
    om_json_begin(w, '[');
    static const char *const fields[] = {"site",     "size",     "birth_request", "death_request",
                                         "birth_ns", "death_ns", "offset"};
    for (unsigned k = 0; k < 7; k++)
        om_json_str(w, fields[k]);
    om_json_end(w, ']');
    om_json_key(w, "lifetimes");
    om_json_begin(w, '[');
    for (uint64_t q = first; q < st->seq; q++) {
        const struct om_record *r = &st->records[q % OM_SAMPLE_RECORDS];
        om_json_begin(w, '[');
        if (r->birth_seq != q) { /* a request that could not be recorded (out of memory) */
            om_json_end(w, ']');
            continue;
        }
        om_json_u64(w, listed_id(sn, r->site));
        om_json_u64(w, r->size);
        om_json_u64(w, r->birth_seq);
        r->death_seq == OM_NO_DEATH ? om_json_null(w) : om_json_u64(w, r->death_seq);
        om_json_u64(w, r->birth_ns);
        r->death_seq == OM_NO_DEATH ? om_json_null(w) : om_json_u64(w, r->death_ns);
        if (r->ptr - st->arena_base < st->arena_size)
            om_json_u64(w, r->ptr - st->arena_base);
        else
            om_json_null(w);
        om_json_end(w, ']');
    }
    om_json_end(w, ']');
    om_json_key(w, "live_bytes");
    om_json_begin(w, '[');
    for (uint64_t q = first; q < st->seq; q++)
        om_json_u64(w, st->records[q % OM_SAMPLE_RECORDS].live_after);
    om_json_end(w, ']');
    om_json_end(w, '}');

    om_json_key(w, "timeline");
    om_json_begin(w, '{');
    kv_u64(w, "first_request", st->fork_seq);
    kv_u64(w, "requests_per_point", st->timeline.width);
    om_json_key(w, "max_live_bytes");
    om_json_begin(w, '[');
    for (uint32_t k = 0; k < st->timeline.used; k++)
        om_json_u64(w, st->timeline.max[k]);
    om_json_end(w, ']');
    om_json_end(w, '}');
}

/* Room for want blocks (at most RESIDENT_MAX), made by mapping, never by malloc: before a
 * copy, outside the tracer's lock, or under it where a copy finds more than was foreseen. */
static void resident_room(struct om_resident *r, uint64_t want)
{
    if (want <= r->cap || r->cap >= RESIDENT_MAX)
        return;
    uint64_t cap = r->cap ? r->cap * 2 : 256;
    while (cap < want && cap < RESIDENT_MAX)
        cap *= 2;
    struct om_resident_block *blocks = om_sys_map(cap * sizeof *blocks);
    if (!blocks)
        return;
    if (r->n)
        memcpy(blocks, r->blocks, r->n * sizeof *blocks);
    om_sys_unmap(r->blocks, r->cap * sizeof *r->blocks);
    r->blocks = blocks;
    r->cap = cap;
}

static void resident_add(struct om_resident *r, const struct om_resident_block *b)
{
    if (r->n == r->cap)
        resident_room(r, r->n + 1);
    if (r->n < r->cap) {
        r->blocks[r->n++] = *b;
    } else {
        r->omitted++;
        r->omitted_bytes += b->size;
    }
}

/* The blocks live at the sample's first request that were born before it: what the sample
 * cannot show of the memory that each iteration finds in place (parameters, optimizer
 * state), for optmem report's breakdown. They are live now, or died later with their
 * record still in the ring, or died after their record had left it (old_deaths). Under the
 * tracer's lock. */
static void collect_resident(const struct om_domain *st, uint64_t first, struct om_resident *r)
{
    r->n = r->omitted = r->omitted_bytes = 0;
    r->complete = 1;
    for (uint64_t k = 0; k < st->live_cap; k++) {
        const struct om_live *e = &st->live[k];
        if (e->ptr && e->birth_seq < first)
            resident_add(
                r, &(struct om_resident_block){e->site->id, e->size, e->birth_seq, OM_NO_DEATH});
    }
    uint64_t ring = st->seq > OM_SAMPLE_RECORDS ? st->seq - OM_SAMPLE_RECORDS : 0;
    for (uint64_t q = ring > st->fork_seq ? ring : st->fork_seq; q < first; q++) {
        const struct om_record *rec = &st->records[q % OM_SAMPLE_RECORDS];
        if (rec->birth_seq != q || rec->death_seq == OM_NO_DEATH || rec->death_seq <= first)
            continue;
        resident_add(r, &(struct om_resident_block){rec->site, rec->size, q, rec->death_seq});
    }
    uint64_t kept = st->nold_deaths < OM_OLD_DEATHS ? st->nold_deaths : OM_OLD_DEATHS;
    for (uint64_t k = st->nold_deaths - kept; k < st->nold_deaths; k++) {
        const struct om_old_death *o = &st->old_deaths[k % OM_OLD_DEATHS];
        if (o->death_seq <= first || o->birth_seq >= first)
            continue;
        /* Older deaths inside the sample were overwritten when the oldest kept is one. */
        if (k == st->nold_deaths - kept && st->nold_deaths > OM_OLD_DEATHS)
            r->complete = 0;
        resident_add(r, &(struct om_resident_block){o->site, o->size, o->birth_seq, o->death_seq});
    }
}

static void write_resident(struct om_json *w, const struct snap *sn)
{
    const struct om_resident *r = &sn->resident;
    om_json_key(w, "resident");
    om_json_begin(w, '{');
    om_json_key(w, "blocks");
    om_json_begin(w, '[');
    for (uint64_t i = 0; i < r->n; i++) {
        const struct om_resident_block *b = &r->blocks[i];
        om_json_begin(w, '[');
        om_json_u64(w, listed_id(sn, b->site));
        om_json_u64(w, b->size);
        om_json_u64(w, b->birth);
        b->death == OM_NO_DEATH ? om_json_null(w) : om_json_u64(w, b->death);
        om_json_end(w, ']');
    }
    om_json_end(w, ']');
    kv_u64(w, "omitted_blocks", r->omitted);
    kv_u64(w, "omitted_bytes", r->omitted_bytes);
    om_json_key(w, "complete");
    om_json_bool(w, r->complete);
    om_json_end(w, '}');
}

/* What plan mode did: how many requests the plan served and what it cost. */
static void write_serving(struct om_json *w, const struct om_serving_stats *v)
{
    om_json_key(w, "serving");
    om_json_begin(w, '{');
    kv_u64(w, "serving_requests", v->serving_requests);
    kv_u64(w, "hits", v->hits);
    kv_u64(w, "misses", v->misses);
    kv_u64(w, "served_from_plan", v->served_from_plan);
    kv_u64(w, "fallbacks", v->fallbacks);
    kv_u64(w, "guard_rejections", v->guard_rejections);
    kv_u64(w, "plans", v->plans);
    kv_u64(w, "replans", v->replans);
    kv_u64(w, "reused_plans", v->reused_plans);
    kv_u64(w, "plan_slots", v->plan_slots);
    kv_u64(w, "plan_peak_bytes", v->plan_peak_bytes);
    kv_u64(w, "plan_lower_bound_bytes", v->plan_lower_bound_bytes);
    kv_u64(w, "plan_greedy_bytes", v->plan_greedy_bytes);
    kv_u64(w, "plan_proven_bound_bytes", v->plan_proven_bound_bytes);
    kv_u64(w, "plan_time_us", v->plan_time_us);
    kv_u64(w, "plan_on_thread", v->plan_on_thread);
    kv_u64(w, "arena_top_bytes", v->arena_top_bytes);
    kv_u64(w, "released_bytes", v->released_bytes);
    kv_u64(w, "moved_bytes", v->moved_bytes);
    kv_u64(w, "verify_violations", v->verify_violations);
    kv_u64(w, "invalid_frees", v->invalid_frees);
    kv_u64(w, "saved_plan", v->saved_plan);
    kv_u64(w, "retired_blocks", v->retired_blocks);
    kv_u64(w, "iteration_requests", v->iteration_requests);
    kv_u64(w, "iteration_served", v->iteration_served);
    kv_u64(w, "layout_calls", v->layout_calls);
    kv_u64(w, "layout_bytes", v->layout_bytes);
    kv_u64(w, "layout_max_bytes", v->layout_max_bytes);
    kv_u64(w, "layout_max_us", v->layout_max_us);
    kv_u64(w, "served_by_cheap_key", v->served_by_cheap_key);
    kv_u64(w, "cheap_key_collisions", v->cheap_key_collisions);
    om_json_end(w, '}');
}

/* The sections every domain has, with the same keys at the top level (the host) and in
 * each entry of device_domains. */
static void write_domain(struct om_json *w, const struct om_tracer_config *cfg,
                         const struct snap *sn)
{
    const struct om_domain *d = &sn->d;
    uint64_t first = sample_first(d);
    om_json_key(w, "counters");
    om_json_begin(w, '{');
    kv_u64(w, "managed_requests", d->seq - d->fork_seq);
    kv_u64(w, "managed_frees", d->frees);
    kv_u64(w, "live_blocks", d->live_blocks);
    kv_u64(w, "live_bytes", d->live_bytes);
    uint64_t listed = 0, folded = 0;
    for (uint32_t i = 0; i < sn->nsites; i++) {
        listed += sn->listed[i];
        folded += sn->listed[i] && sn->sites[i].site->fold ? sn->sites[i].site->nfolded : 0;
    }
    kv_u64(w, "call_sites", listed);
    kv_u64(w, "folded_sites", folded);
    om_json_end(w, '}');
    kv_u64(w, "lower_bound_bytes", d->lower_bound);
    kv_u64(w, "peak_live_bytes", d->peak_usable);
    write_peak(w, sn);
    if (d->have_serving)
        write_serving(w, &d->serving);
    write_iterations(w, cfg, d, first);
    write_sites(w, sn);
    write_sample(w, sn, first);
    write_resident(w, sn);
}

static void write_report(struct om_json *w, const struct om_tracer_config *cfg,
                         struct snap *const *snaps_of, unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    struct om_domain *doms[OM_TRACER_DOMAINS];
    for (unsigned i = 0; i < n; i++)
        doms[i] = &snaps_of[i]->d;
    om_json_begin(w, '{');
    kv_str(w, "schema", "optmem-report");
    kv_u64(w, "version", REPORT_VERSION);
    write_process(w, cfg, doms, n);
    write_configuration(w, cfg);
    om_json_key(w, "domains");
    om_json_begin(w, '[');
    for (unsigned i = 0; i < n; i++)
        om_json_str(w, doms[i]->name);
    om_json_end(w, ']');
    kv_u64(w, "duration_ns", now - cfg->t0_ns);
    write_frame_tables(w);
    /* The host stays at the top level, where readers of earlier reports look for it. */
    write_domain(w, cfg, snaps_of[OM_TRACER_HOST]);
    om_json_key(w, "device_domains");
    om_json_begin(w, '[');
    for (unsigned i = OM_TRACER_HOST + 1; i < n; i++) {
        om_json_begin(w, '{');
        kv_str(w, "name", doms[i]->name);
        write_domain(w, cfg, snaps_of[i]);
        om_json_end(w, '}');
    }
    om_json_end(w, ']');
    om_json_end(w, '}');
    om_json_raw(w, "\n", 1);
}

uint64_t om_report_requests(struct om_domain *const *doms, unsigned n)
{
    uint64_t requests = 0;
    for (unsigned i = 0; i < n; i++)
        requests += doms[i]->seq - doms[i]->fork_seq;
    return requests;
}

int om_report_iterations(struct om_domain *const *doms, unsigned n)
{
    int found = 0;
    for (unsigned i = 0; i < n; i++)
        found |= doms[i]->have_steady;
    return found;
}

/* ---- the snapshot ---- */

static struct snap *snaps[OM_TRACER_DOMAINS];

/* Room for nsites: grown with mremap, so that the pages already in use move rather than
 * being copied into new ones, and only the pages the sites take are made resident (a buffer
 * populated whole, or copied, faulted in twice or four times what it held). */
static int snap_reserve(struct snap *sn, uint32_t nsites)
{
    if (nsites <= sn->sites_cap)
        return 0;
    size_t cap = sn->sites_cap ? sn->sites_cap : 256;
    while (cap < nsites)
        cap *= 2;
    size_t had = sn->sites_cap * sizeof *sn->sites, want = cap * sizeof *sn->sites;
    struct snap_site *sites;
    if (sn->sites) {
        void *p = mremap(sn->sites, had, want, MREMAP_MAYMOVE);
        if (p == MAP_FAILED)
            return -ENOMEM;
        sites = p;
    } else if (!(sites = om_sys_map(want))) {
        return -ENOMEM;
    }
    uintptr_t from = ((uintptr_t)sites + had) & ~(uintptr_t)4095;
    uintptr_t to = (uintptr_t)sites + (size_t)nsites * sizeof *sites;
    if (to > from)
        (void)madvise((void *)from, to - from, MADV_POPULATE_WRITE);
    sn->sites = sites;
    sn->sites_cap = cap;
    return 0;
}

static void site_copy(struct snap_site *c, const struct om_site *s)
{
    *c = (struct snap_site){.site = s,
                            .count = s->count,
                            .total_bytes = s->total_bytes,
                            .min_size = s->min_size,
                            .max_size = s->max_size,
                            .live_blocks = s->live_blocks,
                            .live_bytes = s->live_bytes,
                            .freed = s->freed,
                            .life_req_min = s->life_req_min,
                            .life_req_max = s->life_req_max,
                            .life_req_sum = s->life_req_sum,
                            .life_ns_min = s->life_ns_min,
                            .life_ns_max = s->life_ns_max,
                            .life_ns_sum = s->life_ns_sum,
                            .mod_event = s->mod_event,
                            .snap_for = s->snap_for,
                            .snap_bytes = s->snap_bytes,
                            .snap_blocks = s->snap_blocks};
    memcpy(c->cat_bytes, s->cat_bytes, sizeof c->cat_bytes);
}

/* What a domain's copy found it had no room for, when it could not map (om_report_reserve
 * maps it). */
static struct {
    uint32_t ids, sites;
    uint64_t resident;
} wants[OM_TRACER_DOMAINS];

/* Room in the domain's copy for nids ids, nsites sites and resident blocks. */
static int snap_room(struct snap **slot, uint32_t nids, uint32_t nsites, uint64_t resident)
{
    if (!*slot && !(*slot = map_populated(sizeof **slot)))
        return -ENOMEM;
    struct snap *sn = *slot;
    if (!sn->records && !(sn->records = map_populated(OM_SAMPLE_RECORDS * sizeof *sn->records)))
        return -ENOMEM;
    if (nids > sn->slot_cap) {
        size_t cap = sn->slot_cap ? sn->slot_cap : 1024;
        while (cap < nids)
            cap *= 2;
        uint32_t *slots = om_sys_map(cap * sizeof *slots);
        if (!slots)
            return -ENOMEM;
        om_sys_unmap(sn->slot, sn->slot_cap * sizeof *sn->slot);
        sn->slot = slots;
        sn->slot_cap = cap;
    }
    resident_room(&sn->resident, resident);
    return snap_reserve(sn, nsites);
}

static int snap_domain(unsigned di, const struct om_domain *d, int can_map)
{
    struct snap **slot = &snaps[di];
    uint32_t nids = d->sites.count, nsites = 0;
    for (uint32_t i = 0; i < nids; i++)
        nsites += d->sites.by_id[i]->id == i;
    /* The blocks live now bound the resident ones but for those that died since the
     * sample began: a few more. */
    uint64_t resident = d->live_used + 64;
    struct snap *had = *slot;
    if (!can_map && (!had || !had->records || nids > had->slot_cap || nsites > had->sites_cap ||
                     (resident > had->resident.cap && had->resident.cap < RESIDENT_MAX))) {
        wants[di].ids = nids;
        wants[di].sites = nsites;
        wants[di].resident = resident;
        return -EAGAIN;
    }
    int rc = snap_room(slot, nids, nsites, 0);
    if (rc != 0)
        return rc;
    struct snap *sn = *slot;
    /* Every change of a site's counters stamps it with the domain's event count (site_change
     * in tracer.c), so sites not stamped since the last copy still hold what it copied. A
     * forked child, or a record started anew (events back to fewer), copies every site. */
    pid_t pid = getpid();
    int same = sn->pid == pid && d->events >= sn->d.events;
    uint64_t copied_at = same ? sn->d.events : 0;
    uint32_t copied = same ? sn->nsites : 0;
    for (uint32_t i = 0, k = 0; i < nids; i++) {
        const struct om_site *s = d->sites.by_id[i];
        if (s->id != i)
            continue;
        /* A site's place moves when sites before it were folded: it is copied again. */
        if (k >= copied || sn->sites[k].site != s || s->mod_event > copied_at ||
            (s->fold && !sn->precopied))
            site_copy(&sn->sites[k], s);
        memset(sn->sites[k].live_cat_bytes, 0, sizeof sn->sites[k].live_cat_bytes);
        sn->slot[i] = k++;
    }
    for (uint32_t i = 0; i < nids; i++) /* a fold may have an id above its sites' */
        if (d->sites.by_id[i]->id != i)
            sn->slot[i] = sn->slot[d->sites.by_id[i]->id];
    sn->nsites = nsites;
    sn->nids = nids;
    sn->pid = pid;
    sn->precopied = 0;
    sn->d = *d;
    sn->d.sites = (struct om_sites){0};
    /* A live block that has crossed two boundaries is persistent already; one that crossed
     * one is taken as an arc over the boundary; a younger one is not classified yet. */
    if (d->acct.iter_no > 0) {
        for (uint64_t k = 0; k < d->live_cap; k++) {
            const struct om_live *e = &d->live[k];
            uint64_t crossed = d->acct.iter_no - e->birth_iter;
            if (e->ptr && crossed >= 1 && e->site->id < nids)
                sn->sites[sn->slot[e->site->id]]
                    .live_cat_bytes[crossed >= 2 ? OM_CAT_PERSISTENT : OM_CAT_PER_ITERATION] +=
                    e->size;
        }
    }
    collect_resident(d, sample_first(d), &sn->resident);
    sn->d.resident = &sn->resident;
    sn->d.old_deaths = NULL;
    sn->d.nold_deaths = 0;
    sn->d.live = NULL;
    sn->d.live_cap = sn->d.live_used = 0;
    /* The sample's records only, at their places in the ring. */
    for (uint64_t q = sample_first(d); q < d->seq;) {
        uint64_t at = q % OM_SAMPLE_RECORDS, n = OM_SAMPLE_RECORDS - at;
        if (n > d->seq - q)
            n = d->seq - q;
        memcpy(&sn->records[at], &d->records[at], n * sizeof *sn->records);
        q += n;
    }
    sn->d.records = sn->records;
    return 0;
}

void om_report_prepare(void)
{
    if (!write_buf)
        write_buf = map_populated(WRITE_BUF);
    if (!cmdline_buf)
        cmdline_buf = om_sys_map(CMDLINE_MAX); /* read into as far as argv goes */
    if (!snaps[OM_TRACER_HOST])
        snaps[OM_TRACER_HOST] = map_populated(sizeof *snaps[OM_TRACER_HOST]);
    struct snap *sn = snaps[OM_TRACER_HOST];
    if (sn && !sn->records)
        sn->records = map_populated(OM_SAMPLE_RECORDS * sizeof *sn->records);
    if (sn)
        (void)snap_reserve(sn, 1);
    (void)frames_reserve(FRAMES_MIN);
}

int om_report_snapshot(struct om_domain *const *domains, unsigned n, struct om_domain **out,
                       int can_map)
{
    int again = 0;
    for (unsigned i = 0; i < n && i < OM_TRACER_DOMAINS; i++) {
        int rc = snap_domain(i, domains[i], can_map);
        if (rc == -EAGAIN) {
            again = 1;
            continue;
        }
        if (rc != 0)
            return rc;
        out[i] = &snaps[i]->d;
    }
    return again ? -EAGAIN : 0;
}

int om_report_precopy(unsigned di, const struct om_domain *d, struct om_precopy *pc)
{
    pc->copied = 0;
    if (di >= OM_TRACER_DOMAINS)
        return 1;
    struct snap *sn = snaps[di];
    if (!pc->end) {
        if (!sn || !sn->records || d->sites.count > sn->slot_cap) {
            wants[di].ids = d->sites.count ? d->sites.count : 1;
            wants[di].sites = sn ? sn->nsites : 0;
            return -EAGAIN;
        }
        pid_t pid = getpid();
        int same = sn->pid == pid && d->events >= sn->d.events;
        *pc = (struct om_precopy){.end = d->sites.count,
                                  .events = d->events,
                                  .copied_at = same ? sn->d.events : 0,
                                  .had = same ? sn->nsites : 0};
        sn->precopied = 0;
    }
    for (; pc->next < pc->end && pc->copied < OM_PRECOPY_SLICE; pc->next++) {
        const struct om_site *s = d->sites.by_id[pc->next];
        if (s->id != pc->next)
            continue;
        if (pc->k >= sn->sites_cap) {
            wants[di].ids = pc->end;
            wants[di].sites = pc->k + OM_PRECOPY_SLICE;
            return -EAGAIN; /* this site again, once there is room */
        }
        struct snap_site *c = &sn->sites[pc->k];
        if (pc->k >= pc->had || c->site != s || s->mod_event > pc->copied_at || s->fold) {
            site_copy(c, s);
            pc->copied++;
        }
        pc->k++;
    }
    if (pc->next < pc->end)
        return 0;
    /* What the copy finds as copied when, since folding is over until it is made. */
    sn->nsites = pc->k;
    sn->d.events = pc->events;
    sn->pid = getpid();
    sn->precopied = 1;
    return 1;
}

void om_report_reserve(void)
{
    for (unsigned i = 0; i < OM_TRACER_DOMAINS; i++) {
        if (wants[i].ids)
            (void)snap_room(&snaps[i], wants[i].ids, wants[i].sites, wants[i].resident);
        wants[i].ids = wants[i].sites = 0;
        wants[i].resident = 0;
    }
}

/* Marks the sites the report lists: those this process requested from (a forked child's own,
 * not every site it inherited), those holding live blocks or bytes at the peak, and those
 * the sample and the resident blocks name. Outside the tracer's lock. 0 or -ENOMEM. */
static int mark_listed(struct snap *sn)
{
    if (sn->nsites > sn->listed_cap) {
        size_t cap = sn->listed_cap ? sn->listed_cap : 4096;
        while (cap < sn->nsites)
            cap *= 2;
        uint8_t *listed = om_sys_map(cap);
        if (!listed)
            return -ENOMEM;
        om_sys_unmap(sn->listed, sn->listed_cap);
        sn->listed = listed;
        sn->listed_cap = cap;
    }
    if (!sn->listed && !(sn->listed = om_sys_map(sn->listed_cap = 4096)))
        return -ENOMEM;
    memset(sn->listed, 0, sn->nsites);
    for (uint32_t i = 0; i < sn->nsites; i++) {
        const struct snap_site *s = &sn->sites[i];
        uint64_t blocks;
        if (s->count || s->live_blocks || site_peak_bytes(&sn->d, s, &blocks))
            sn->listed[i] = 1;
    }
    for (uint64_t k = 0; k < sn->resident.n; k++)
        if (sn->resident.blocks[k].site < sn->nids)
            sn->listed[sn->slot[sn->resident.blocks[k].site]] = 1;
    const struct om_domain *d = &sn->d;
    for (uint64_t q = sample_first(d); q < d->seq; q++) {
        const struct om_record *r = &d->records[q % OM_SAMPLE_RECORDS];
        if (r->birth_seq == q && r->site < sn->nids)
            sn->listed[sn->slot[r->site]] = 1;
    }
    return 0;
}

struct report_job {
    const struct om_tracer_config *cfg;
    struct snap *const *snaps;
    unsigned ndoms;
    char *buf;
};

static int fill_report(int fd, void *ctx)
{
    struct report_job *job = ctx;
    struct om_json w;
    om_json_init(&w, fd, job->buf, WRITE_BUF);
    write_report(&w, job->cfg, job->snaps, job->ndoms);
    return om_json_flush(&w);
}

int om_report_write(const struct om_tracer_config *cfg, struct om_domain *const *domains,
                    unsigned ndomains, const char *path, int with_names)
{
    struct snap *of[OM_TRACER_DOMAINS];
    if (ndomains > OM_TRACER_DOMAINS)
        return -EINVAL;
    for (unsigned i = 0; i < ndomains; i++) {
        if (!snaps[i] || domains[i] != &snaps[i]->d)
            return -EINVAL; /* not the copies om_report_snapshot made */
        of[i] = snaps[i];
    }
    if (!write_buf && !(write_buf = map_populated(WRITE_BUF)))
        return -ENOMEM;
    if (!cmdline_buf)
        cmdline_buf = om_sys_map(CMDLINE_MAX); /* without it, argv is written empty */
    int rc = 0;
    for (unsigned i = 0; i < ndomains && rc == 0; i++)
        rc = mark_listed(of[i]);
    if (rc == 0)
        rc = frames_collect(of, ndomains, with_names);
    if (rc == 0)
        rc = frames_number(of, ndomains);
    if (rc != 0)
        return rc;
    struct report_job job = {cfg, of, ndomains, write_buf};
    return om_file_replace(path, fill_report, &job);
}
