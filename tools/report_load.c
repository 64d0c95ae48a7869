/* optmem report: reads a lifetime report (docs/report-schema.md) with jansson and checks it. */
#include "report_domain.h"
#include "om_common.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const om_cat_names[OM_NCAT] = {"temporary", "per_iteration", "persistent"};

/* The first problem found; later ones are not reported, so that the user sees one line. */
struct loader {
    const char *path;
    char *err;
    size_t errlen;
    int failed;
    int code;           /* -errno of the failure: -EINVAL unless said otherwise */
    const char *domain; /* a device domain whose sections are being read, for the message */
    /* Version 2: the top-level tables that sites[].frames and sites[].python index. */
    json_t *frames, *python_frames;
    int version;
};

static void fail(struct loader *l, const char *fmt, ...)
{
    if (l->failed)
        return;
    l->failed = 1;
    int n = snprintf(l->err, l->errlen, "%s: ", l->path);
    if (n < 0 || (size_t)n >= l->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    if (l->domain && m >= 0 && (size_t)(n + m) < l->errlen)
        snprintf(l->err + n + m, l->errlen - (size_t)(n + m), " (domain %s)", l->domain);
}

static json_t *get(struct loader *l, json_t *obj, const char *where, const char *key,
                   json_type type)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        fail(l, "not a valid optmem report: %s%s is missing", where, key);
        return NULL;
    }
    if (json_typeof(v) != type && !(type == JSON_TRUE && json_is_boolean(v))) {
        fail(l, "not a valid optmem report: %s%s has the wrong type", where, key);
        return NULL;
    }
    return v;
}

static uint64_t as_u64(struct loader *l, json_t *v, const char *where, const char *key)
{
    if (json_is_null(v))
        return OM_NO_VALUE;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(l, "not a valid optmem report: %s%s is not a non-negative integer", where, key);
        return 0;
    }
    return (uint64_t)json_integer_value(v);
}

/* A required integer; with nullable, null gives OM_NO_VALUE. */
static uint64_t get_u64(struct loader *l, json_t *obj, const char *where, const char *key,
                        bool nullable)
{
    json_t *v = json_object_get(obj, key);
    if (!v || (json_is_null(v) && !nullable)) {
        fail(l, "not a valid optmem report: %s%s is missing", where, key);
        return 0;
    }
    return as_u64(l, v, where, key);
}

static char *dup_str(struct loader *l, json_t *v)
{
    if (!json_is_string(v))
        return NULL;
    char *s = strdup(json_string_value(v));
    if (!s)
        fail(l, "out of memory");
    return s;
}

static uint64_t *u64_array(struct loader *l, json_t *arr, const char *what, size_t *n)
{
    *n = json_array_size(arr);
    uint64_t *out = calloc(*n ? *n : 1, sizeof *out);
    if (!out) {
        fail(l, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < *n; i++)
        out[i] = as_u64(l, json_array_get(arr, i), what, "[]");
    return out;
}

static void load_process(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *p = get(l, root, "", "process", JSON_OBJECT);
    if (!p)
        return;
    r->pid = (int64_t)get_u64(l, p, "process.", "pid", false);
    r->ppid = (int64_t)get_u64(l, p, "process.", "ppid", false);
    json_t *rank = get(l, p, "process.", "rank", JSON_INTEGER);
    r->rank = rank ? json_integer_value(rank) : 0;
    json_t *up = json_object_get(p, "ancestors");
    for (size_t i = 0; json_is_array(up) && i < json_array_size(up) &&
                       r->nancestors < sizeof r->ancestors / sizeof r->ancestors[0];
         i++) {
        json_t *pid = json_array_get(json_array_get(up, i), 0);
        if (!json_is_integer(pid)) {
            fail(l, "process.ancestors[%zu]: expected [pid, start_time]", i);
            return;
        }
        r->ancestors[r->nancestors++] = json_integer_value(pid);
    }
    r->exe = dup_str(l, json_object_get(p, "exe"));
    json_t *argv = get(l, p, "process.", "argv", JSON_ARRAY);
    if (!argv)
        return;
    r->argv = calloc(json_array_size(argv) + 1, sizeof *r->argv);
    if (!r->argv) {
        fail(l, "out of memory");
        return;
    }
    for (size_t i = 0; i < json_array_size(argv); i++) {
        char *a = dup_str(l, json_array_get(argv, i));
        if (a)
            r->argv[r->argc++] = a;
    }
}

static void load_peak(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *peak = get(l, root, "", "peak", JSON_OBJECT);
    json_t *sites = peak ? get(l, peak, "peak.", "sites", JSON_ARRAY) : NULL;
    if (!sites)
        return;
    r->peak_request = get_u64(l, peak, "peak.", "request", false);
    r->npeak = json_array_size(sites);
    r->peak = calloc(r->npeak ? r->npeak : 1, sizeof *r->peak);
    if (!r->peak) {
        fail(l, "out of memory");
        return;
    }
    for (size_t i = 0; i < r->npeak; i++) {
        json_t *e = json_array_get(sites, i);
        r->peak[i].site = get_u64(l, e, "peak.sites[].", "site", false);
        r->peak[i].bytes = get_u64(l, e, "peak.sites[].", "bytes", false);
        r->peak[i].blocks = get_u64(l, e, "peak.sites[].", "blocks", false);
    }
}

static void load_iterations(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *it = get(l, root, "", "iterations", JSON_OBJECT);
    if (!it)
        return;
    r->method = dup_str(l, get(l, it, "iterations.", "method", JSON_STRING));
    json_t *found = get(l, it, "iterations.", "found", JSON_TRUE);
    r->found = found && json_is_true(found);
    r->period = get_u64(l, it, "iterations.", "period_requests", true);
    r->first_steady = get_u64(l, it, "iterations.", "first_steady_request", true);
    json_t *starts = get(l, it, "iterations.", "starts", JSON_ARRAY);
    if (starts)
        r->starts = u64_array(l, starts, "iterations.starts", &r->nstarts);

    json_t *cat = json_object_get(root, "categories");
    if (!cat || json_is_null(cat))
        return;
    if (!json_is_object(cat)) {
        fail(l, "not a valid optmem report: categories has the wrong type");
        return;
    }
    r->have_categories = true;
    json_t *iter = get(l, cat, "categories.", "iteration", JSON_ARRAY);
    for (size_t k = 0; iter && k < 2; k++)
        r->cat_iter[k] = as_u64(l, json_array_get(iter, k), "categories.", "iteration");
    r->cat_lower_bound = get_u64(l, cat, "categories.", "lower_bound_bytes", false);
    for (int c = 0; c < OM_NCAT; c++) {
        json_t *o = get(l, cat, "categories.", om_cat_names[c], JSON_OBJECT);
        if (!o)
            return;
        r->cat_bytes[c] = get_u64(l, o, "categories.", "bytes", false);
        r->cat_blocks[c] = get_u64(l, o, "categories.", "blocks", false);
    }
}

static void load_serving(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *s = json_object_get(root, "serving");
    struct om_rserving *v = &r->serving;
    if (!s)
        return;
    if (!json_is_object(s)) {
        fail(l, "not a valid optmem report: serving has the wrong type");
        return;
    }
    v->present = true;
    static const struct {
        const char *key;
        size_t at;
    } keys[] = {
        {"hits", offsetof(struct om_rserving, hits)},
        {"misses", offsetof(struct om_rserving, misses)},
        {"served_from_plan", offsetof(struct om_rserving, served_from_plan)},
        {"fallbacks", offsetof(struct om_rserving, fallbacks)},
        {"guard_rejections", offsetof(struct om_rserving, guard_rejections)},
        {"plans", offsetof(struct om_rserving, plans)},
        {"replans", offsetof(struct om_rserving, replans)},
        {"plan_slots", offsetof(struct om_rserving, plan_slots)},
        {"plan_peak_bytes", offsetof(struct om_rserving, plan_peak_bytes)},
        {"plan_lower_bound_bytes", offsetof(struct om_rserving, plan_lower_bound_bytes)},
        {"arena_top_bytes", offsetof(struct om_rserving, arena_top_bytes)},
        {"released_bytes", offsetof(struct om_rserving, released_bytes)},
        {"verify_violations", offsetof(struct om_rserving, verify_violations)},
        {"invalid_frees", offsetof(struct om_rserving, invalid_frees)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        *(uint64_t *)((char *)v + keys[i].at) = get_u64(l, s, "serving.", keys[i].key, false);
    /* Reports written before serving_requests existed still load; the share is then unknown. */
    json_t *req = json_object_get(s, "serving_requests");
    v->serving_requests = req ? as_u64(l, req, "serving.", "serving_requests") : OM_NO_VALUE;
    static const struct {
        const char *key;
        size_t at;
    } later[] = {
        {"reused_plans", offsetof(struct om_rserving, reused_plans)},
        {"plan_greedy_bytes", offsetof(struct om_rserving, plan_greedy_bytes)},
        {"plan_proven_bound_bytes", offsetof(struct om_rserving, plan_proven_bound_bytes)},
        {"plan_time_us", offsetof(struct om_rserving, plan_time_us)},
        {"plan_on_thread", offsetof(struct om_rserving, plan_on_thread)},
    };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        json_t *x = json_object_get(s, later[i].key);
        *(uint64_t *)((char *)v + later[i].at) = x ? as_u64(l, x, "serving.", later[i].key) : 0;
    }
}

/* A frame of sites[].frames: an object (version 1), or the index of one in the top-level
 * "frames" (version 2). */
static json_t *native_frame(struct loader *l, json_t *fr)
{
    if (!l->frames)
        return fr;
    if (!json_is_integer(fr) || json_integer_value(fr) < 0 ||
        (size_t)json_integer_value(fr) >= json_array_size(l->frames)) {
        fail(l, "not a valid optmem report: sites[].frames[] is not an index of frames");
        return NULL;
    }
    return json_array_get(l->frames, (size_t)json_integer_value(fr));
}

static void load_frames(struct loader *l, json_t *arr, struct om_rsite *site)
{
    site->nframes = json_array_size(arr);
    site->frames = calloc(site->nframes ? site->nframes : 1, sizeof *site->frames);
    if (!site->frames) {
        fail(l, "out of memory");
        return;
    }
    for (size_t f = 0; f < site->nframes; f++) {
        json_t *fr = native_frame(l, json_array_get(arr, f));
        if (!fr)
            return;
        struct om_rframe *o = &site->frames[f];
        json_t *addr = json_object_get(fr, "address"), *off = json_object_get(fr, "offset");
        if (!json_is_object(fr) || !json_is_string(addr)) {
            fail(l, "not a valid optmem report: %sframes[].address is missing",
                 l->frames ? "" : "sites[].");
            return;
        }
        o->address = strtoull(json_string_value(addr), NULL, 16);
        o->module = dup_str(l, json_object_get(fr, "module"));
        o->offset = json_is_string(off) ? strtoull(json_string_value(off), NULL, 16) : OM_NO_VALUE;
        o->function = dup_str(l, json_object_get(fr, "function"));
    }
}

/* A Python frame's address: a hash of what it says, so that equal frames merge across
 * processes (a source frame has no module). */
static uint64_t python_key(const char *file, const char *function, uint64_t line)
{
    uint64_t h = om_fnv1a_str(om_fnv1a_str(OM_FNV_OFFSET, file), function ? function : "");
    return om_fnv1a_word(h, line);
}

/* sites[].python merged into the native frames the way py-spy --native shows a stack: each
 * native frame of the eval loop gives way to the Python frames it runs; those past the
 * captured native frames follow them. */
static void load_python(struct loader *l, json_t *arr, struct om_rsite *site)
{
    size_t np = json_array_size(arr), n = site->nframes, o = 0, p = 0;
    if (np == 0)
        return;
    struct om_rframe *py = calloc(np, sizeof *py), *merged = calloc(n + np, sizeof *merged);
    uint64_t *at = calloc(np, sizeof *at);
    if (!py || !merged || !at) {
        fail(l, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < np && !l->failed; k++) {
        json_t *fr = json_array_get(arr, k);
        if (l->python_frames) {
            /* Version 2: [index in python_frames, native_index]. */
            json_t *id = json_array_get(fr, 0);
            if (!json_is_array(fr) || json_array_size(fr) != 2 || !json_is_integer(id) ||
                json_integer_value(id) < 0 ||
                (size_t)json_integer_value(id) >= json_array_size(l->python_frames)) {
                fail(l, "not a valid optmem report: sites[].python[] is not "
                        "[python_frames index, native_index]");
                break;
            }
            at[k] = as_u64(l, json_array_get(fr, 1), "sites[].python[].", "native_index");
            fr = json_array_get(l->python_frames, (size_t)json_integer_value(id));
        } else {
            at[k] = get_u64(l, fr, "sites[].python[].", "native_index", true);
        }
        const char *where = l->python_frames ? "python_frames[]." : "sites[].python[].";
        json_t *file = json_object_get(fr, "file");
        if (!json_is_object(fr) || !json_is_string(file)) {
            fail(l, "not a valid optmem report: %sfile is missing", where);
            break;
        }
        uint64_t line = get_u64(l, fr, where, "line", false);
        py[k].file = dup_str(l, file);
        py[k].function = dup_str(l, json_object_get(fr, "function"));
        py[k].line = line > 0x7fffffff ? 0 : (unsigned)line;
        py[k].offset = OM_NO_VALUE;
        py[k].address = python_key(py[k].file ? py[k].file : "", py[k].function, line);
    }
    if (l->failed) {
        for (size_t k = 0; k < np; k++) {
            free(py[k].file);
            free(py[k].function);
        }
        goto out;
    }
    for (size_t f = 0; f < n; f++) {
        if (p < np && at[p] == f) {
            /* The eval loop's frame: its Python frames stand for it. */
            free(site->frames[f].module);
            free(site->frames[f].function);
            while (p < np && at[p] == f)
                merged[o++] = py[p++];
            continue;
        }
        merged[o++] = site->frames[f];
    }
    while (p < np)
        merged[o++] = py[p++];
    free(site->frames);
    site->frames = merged;
    site->nframes = o;
    merged = NULL;
out:
    free(merged);
    free(py);
    free(at);
}

/* The index in r->sites of the site of id (ids ascending), or OM_NO_VALUE. */
static uint64_t site_index(const struct om_report *r, uint64_t id)
{
    size_t lo = 0, hi = r->nsites;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->sites[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nsites && r->sites[lo].id == id ? lo : OM_NO_VALUE;
}

static void load_sites(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *sites = get(l, root, "", "sites", JSON_ARRAY);
    if (!sites)
        return;
    r->nsites = json_array_size(sites);
    r->sites = calloc(r->nsites ? r->nsites : 1, sizeof *r->sites);
    if (!r->sites) {
        fail(l, "out of memory");
        return;
    }
    for (size_t i = 0; i < r->nsites && !l->failed; i++) {
        json_t *s = json_array_get(sites, i);
        struct om_rsite *o = &r->sites[i];
        /* Version 3 lists the sites a process used: ids ascending, not dense. */
        o->id = get_u64(l, s, "sites[].", "id", false);
        if (l->version < 3 && o->id != i) {
            fail(l, "not a valid optmem report: sites[%zu].id is not %zu", i, i);
            return;
        }
        if (o->id == OM_NO_VALUE || (i > 0 && o->id <= r->sites[i - 1].id)) {
            fail(l, "not a valid optmem report: sites[%zu].id is not above the one before", i);
            return;
        }
        json_t *folded = json_object_get(s, "folded");
        if (folded && l->version < 3) {
            fail(l, "not a valid optmem report: sites[].folded in a version %d report", l->version);
            return;
        }
        o->folded = folded ? get_u64(l, s, "sites[].", "folded", false) : 0;
        json_t *frames = get(l, s, "sites[].", "frames", JSON_ARRAY);
        if (frames)
            load_frames(l, frames, o);
        json_t *python = json_object_get(s, "python"); /* absent before Python frames */
        if (python && !json_is_array(python))
            fail(l, "not a valid optmem report: sites[].python has the wrong type");
        else if (python && !l->failed)
            load_python(l, python, o);
        o->count = get_u64(l, s, "sites[].", "count", false);
        o->total_bytes = get_u64(l, s, "sites[].", "total_bytes", false);
        json_t *cb = get(l, s, "sites[].", "category_bytes", JSON_OBJECT);
        for (int c = 0; cb && c < OM_NCAT; c++)
            o->cat_bytes[c] = get_u64(l, cb, "sites[].category_bytes.", om_cat_names[c], false);
        json_t *cat = json_object_get(s, "category");
        for (int c = 0; json_is_string(cat) && c < OM_NCAT; c++)
            if (strcmp(json_string_value(cat), om_cat_names[c]) == 0)
                o->category = om_cat_names[c];
    }
    for (size_t i = 0; i < r->npeak; i++)
        if ((r->peak[i].site = site_index(r, r->peak[i].site)) == OM_NO_VALUE)
            fail(l, "not a valid optmem report: peak.sites[%zu].site is not a site id", i);
}

/* Records are read through the names in "fields", so that added fields cost nothing. */
static void load_sample(struct loader *l, json_t *root, struct om_report *r)
{
    static const char *const names[] = {"site",     "size",     "birth_request", "death_request",
                                        "birth_ns", "death_ns", "offset"};
    enum { NFIELDS = sizeof names / sizeof names[0] };
    int at[NFIELDS];
    json_t *s = get(l, root, "", "sample", JSON_OBJECT);
    json_t *fields = s ? get(l, s, "sample.", "fields", JSON_ARRAY) : NULL;
    json_t *life = s ? get(l, s, "sample.", "lifetimes", JSON_ARRAY) : NULL;
    json_t *live = s ? get(l, s, "sample.", "live_bytes", JSON_ARRAY) : NULL;
    if (!live)
        return;
    for (int k = 0; k < NFIELDS; k++) {
        at[k] = -1;
        for (size_t j = 0; j < json_array_size(fields); j++) {
            const char *name = json_string_value(json_array_get(fields, j));
            if (name && strcmp(name, names[k]) == 0)
                at[k] = (int)j;
        }
        if (at[k] < 0 && k < NFIELDS - 1) {
            fail(l, "not a valid optmem report: sample.fields lacks \"%s\"", names[k]);
            return;
        }
    }
    r->sample_has_offsets = at[NFIELDS - 1] >= 0;
    r->sample_first = get_u64(l, s, "sample.", "first_request", false);
    r->sample_end = get_u64(l, s, "sample.", "end_request", false);
    r->nlife = json_array_size(life);
    if (l->failed || r->sample_end < r->sample_first ||
        r->sample_end - r->sample_first != r->nlife || json_array_size(live) != r->nlife) {
        fail(l, "not a valid optmem report: sample covers %zu requests, not end - first", r->nlife);
        return;
    }
    size_t nlive;
    r->live_after = u64_array(l, live, "sample.live_bytes", &nlive);
    r->life = calloc(r->nlife ? r->nlife : 1, sizeof *r->life);
    if (!r->life) {
        fail(l, "out of memory");
        return;
    }
    for (size_t i = 0; i < r->nlife && !l->failed; i++) {
        json_t *rec = json_array_get(life, i);
        uint64_t v[NFIELDS];
        if (!json_is_array(rec)) {
            fail(l, "not a valid optmem report: sample.lifetimes[%zu] is not an array", i);
            return;
        }
        if (json_array_size(rec) == 0) { /* a request the tracer could not record */
            r->life[i].site = OM_NO_VALUE;
            continue;
        }
        for (int k = 0; k < NFIELDS; k++)
            v[k] = at[k] < 0 ? OM_NO_VALUE
                             : as_u64(l, json_array_get(rec, (size_t)at[k]), "sample.", names[k]);
        v[0] = site_index(r, v[0]);
        if (v[0] == OM_NO_VALUE || v[1] == OM_NO_VALUE || v[2] != r->sample_first + i) {
            fail(l, "not a valid optmem report: sample.lifetimes[%zu] is inconsistent", i);
            return;
        }
        r->life[i] = (struct om_rlife){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    }
    json_t *t = get(l, root, "", "timeline", JSON_OBJECT);
    json_t *pts = t ? get(l, t, "timeline.", "max_live_bytes", JSON_ARRAY) : NULL;
    if (!pts)
        return;
    r->timeline_first = get_u64(l, t, "timeline.", "first_request", false);
    r->timeline_width = get_u64(l, t, "timeline.", "requests_per_point", false);
    r->timeline = u64_array(l, pts, "timeline.max_live_bytes", &r->ntimeline);
}

/* The blocks born before the sample and live at its start; reports that predate the section
 * have none, and the breakdown says so. */
static void load_resident(struct loader *l, json_t *root, struct om_report *r)
{
    json_t *s = json_object_get(root, "resident");
    if (!s)
        return;
    json_t *blocks = json_is_object(s) ? get(l, s, "resident.", "blocks", JSON_ARRAY) : NULL;
    json_t *complete = blocks ? get(l, s, "resident.", "complete", JSON_TRUE) : NULL;
    if (!complete) {
        fail(l, "not a valid optmem report: resident is not {blocks, complete, ...}");
        return;
    }
    r->resident_omitted_bytes = get_u64(l, s, "resident.", "omitted_bytes", false);
    r->resident_complete = json_is_true(complete) && r->resident_omitted_bytes == 0;
    r->nresident = json_array_size(blocks);
    r->resident = calloc(r->nresident ? r->nresident : 1, sizeof *r->resident);
    if (!r->resident) {
        fail(l, "out of memory");
        return;
    }
    for (size_t i = 0; i < r->nresident && !l->failed; i++) {
        json_t *rec = json_array_get(blocks, i);
        uint64_t v[4];
        if (!json_is_array(rec) || json_array_size(rec) != 4) {
            fail(l,
                 "not a valid optmem report: resident.blocks[%zu] is not [site, size, birth, "
                 "death]",
                 i);
            return;
        }
        for (size_t k = 0; k < 4; k++)
            v[k] = as_u64(l, json_array_get(rec, k), "resident.blocks[].", "field");
        v[0] = site_index(r, v[0]);
        if (v[0] == OM_NO_VALUE || v[1] == OM_NO_VALUE || v[2] >= r->sample_first ||
            (v[3] != OM_NO_VALUE && v[3] <= v[2])) {
            fail(l, "not a valid optmem report: resident.blocks[%zu] is inconsistent", i);
            return;
        }
        r->resident[i] = (struct om_rresident){v[0], v[1], v[2], v[3]};
    }
    r->have_resident = !l->failed;
}

bool om_domain_is_host(const char *name)
{
    return !name || strcmp(name, OM_HOST_DOMAIN) == 0;
}

void om_rdomains_free(struct om_rdomains *d)
{
    for (size_t i = 0; d && i < d->n; i++)
        free(d->v[i].name);
    if (d) {
        free(d->v);
        d->v = NULL;
        d->n = 0;
    }
}

/* The device domains' names and headline figures; fills out when it is not NULL. */
static void load_devices(struct loader *l, json_t *devs, struct om_rdomains *out)
{
    if (!devs)
        return; /* a report written before there were device domains */
    if (!json_is_array(devs)) {
        fail(l, "not a valid optmem report: device_domains has the wrong type");
        return;
    }
    size_t n = json_array_size(devs);
    if (out) {
        out->v = calloc(n ? n : 1, sizeof *out->v);
        if (!out->v) {
            fail(l, "out of memory");
            return;
        }
    }
    for (size_t i = 0; i < n && !l->failed; i++) {
        json_t *d = json_array_get(devs, i);
        json_t *name = json_is_object(d) ? json_object_get(d, "name") : NULL;
        if (!json_is_string(name) || om_domain_is_host(json_string_value(name))) {
            fail(l, "not a valid optmem report: device_domains[%zu].name is missing", i);
            return;
        }
        json_t *counters = get(l, d, "device_domains[].", "counters", JSON_OBJECT);
        struct om_rdomain v = {NULL, 0, 0, 0};
        if (counters)
            v.managed_requests =
                get_u64(l, counters, "device_domains[].counters.", "managed_requests", false);
        v.lower_bound = get_u64(l, d, "device_domains[].", "lower_bound_bytes", false);
        v.peak_live = get_u64(l, d, "device_domains[].", "peak_live_bytes", false);
        if (!out || l->failed)
            continue;
        v.name = dup_str(l, name);
        out->v[out->n++] = v;
    }
}

/* The object that holds the sections of domain: the top level for the host. */
static json_t *domain_sections(struct loader *l, json_t *root, const char *domain)
{
    if (om_domain_is_host(domain))
        return root;
    json_t *devs = json_object_get(root, "device_domains");
    for (size_t i = 0; i < json_array_size(devs); i++) {
        json_t *d = json_array_get(devs, i);
        if (strcmp(json_string_value(json_object_get(d, "name")), domain) == 0)
            return d;
    }
    /* Names are printable ASCII without spaces (the tracer checks them): listed as they are. */
    char have[512];
    size_t len = (size_t)snprintf(have, sizeof have, "%s", OM_HOST_DOMAIN);
    for (size_t i = 0; i < json_array_size(devs) && len < sizeof have; i++)
        len +=
            (size_t)snprintf(have + len, sizeof have - len, ", %s",
                             json_string_value(json_object_get(json_array_get(devs, i), "name")));
    fail(l, "no memory domain '%s' in this report (it has %s)", domain, have);
    l->code = -ENOENT;
    return NULL;
}

static void load_root(struct loader *l, json_t *root, const char *domain, struct om_report *r,
                      struct om_rdomains *devices)
{
    json_t *schema = json_object_get(root, "schema");
    if (!json_is_object(root) || !json_is_string(schema) ||
        strcmp(json_string_value(schema), "optmem-report") != 0) {
        fail(l, "not an optmem report (no \"schema\": \"optmem-report\")");
        return;
    }
    json_t *version = json_object_get(root, "version");
    if (!json_is_integer(version) || json_integer_value(version) < 1 ||
        json_integer_value(version) > OM_REPORT_VERSION) {
        if (json_is_integer(version))
            fail(l, "report version %lld is not supported (this optmem reads versions 1 to %d)",
                 (long long)json_integer_value(version), OM_REPORT_VERSION);
        else
            fail(l, "not a valid optmem report: version is missing");
        return;
    }
    l->version = (int)json_integer_value(version);
    if (json_integer_value(version) >= 2) {
        l->frames = get(l, root, "", "frames", JSON_ARRAY);
        l->python_frames = get(l, root, "", "python_frames", JSON_ARRAY);
        if (l->failed)
            return;
    }
    load_process(l, root, r);
    json_t *cfg = get(l, root, "", "configuration", JSON_OBJECT);
    if (cfg)
        r->mode = dup_str(l, get(l, cfg, "configuration.", "mode", JSON_STRING));
    r->duration_ns = get_u64(l, root, "", "duration_ns", false);
    load_devices(l, json_object_get(root, "device_domains"), devices);
    json_t *sec = l->failed ? NULL : domain_sections(l, root, domain);
    if (!sec)
        return;
    if (sec != root)
        l->domain = domain;
    json_t *counters = get(l, sec, "", "counters", JSON_OBJECT);
    if (counters)
        r->managed_requests = get_u64(l, counters, "counters.", "managed_requests", false);
    r->lower_bound = get_u64(l, sec, "", "lower_bound_bytes", false);
    r->peak_live = get_u64(l, sec, "", "peak_live_bytes", false);
    load_peak(l, sec, r);
    load_serving(l, sec, r);
    load_iterations(l, sec, r);
    load_sites(l, sec, r);
    load_sample(l, sec, r);
    if (!l->failed)
        load_resident(l, sec, r);
}

int om_report_load_domain(const char *path, const char *domain, struct om_report *r,
                          struct om_rdomains *devices, char *err, size_t errlen)
{
    struct loader l = {.path = path, .err = err, .errlen = errlen, .code = -EINVAL};
    memset(r, 0, sizeof *r);
    if (devices)
        *devices = (struct om_rdomains){NULL, 0};
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    json_error_t jerr;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
        goto out;
    }
    if (!root) {
        rc = -EINVAL;
        snprintf(err, errlen, "%s: not valid JSON: line %d column %d: %s", path, jerr.line,
                 jerr.column, jerr.text);
        goto out;
    }
    r->path = strdup(path);
    if (!r->path)
        fail(&l, "out of memory");
    load_root(&l, root, domain, r, devices);
    if (l.failed) {
        rc = l.code;
        om_report_free(r);
        om_rdomains_free(devices);
    }
out:
    json_decref(root);
    fclose(f);
    return rc;
}

int om_report_load(const char *path, struct om_report *r, char *err, size_t errlen)
{
    return om_report_load_domain(path, OM_HOST_DOMAIN, r, NULL, err, errlen);
}

void om_report_free(struct om_report *r)
{
    for (size_t i = 0; i < r->nsites; i++) {
        for (size_t f = 0; f < r->sites[i].nframes; f++) {
            free(r->sites[i].frames[f].module);
            free(r->sites[i].frames[f].function);
            free(r->sites[i].frames[f].file);
        }
        free(r->sites[i].frames);
    }
    for (size_t i = 0; i < r->argc; i++)
        free(r->argv[i]);
    free(r->argv);
    free(r->sites);
    free(r->path);
    free(r->exe);
    free(r->mode);
    free(r->method);
    free(r->peak);
    free(r->life);
    free(r->live_after);
    free(r->starts);
    free(r->timeline);
    free(r->resident);
    memset(r, 0, sizeof *r);
}

/* The same expansion as the tracer's om_path_expand (the CLI does not link the tracer). */
int om_report_path_expand(const char *tmpl, long pid, long rank, char *out, size_t outlen)
{
    size_t n = 0;
    if (outlen == 0)
        return -ENAMETOOLONG;
    for (const char *p = tmpl; *p; p++) {
        char piece[32] = {*p, '\0'};
        if (*p == '%') {
            p++;
            if (*p == 'p' || *p == 'r')
                snprintf(piece, sizeof piece, "%ld", *p == 'p' ? pid : rank);
            else if (*p != '%')
                return out[0] = '\0', -EINVAL;
        }
        size_t len = strlen(piece);
        if (n + len >= outlen)
            return out[0] = '\0', -ENAMETOOLONG;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return 0;
}
