/* optmem report --format json: the merged summary for scripts (docs/report-formats.md). */
#include "report_domain.h"

#include <errno.h>
#include <jansson.h>

/* jansson integers are signed 64-bit; sizes in a report never come near 2^63. */
static json_t *num_or_null(uint64_t v)
{
    return v == OM_NO_VALUE ? json_null() : json_integer((json_int_t)v);
}

static json_t *ratio(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

static json_t *strings(char **v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *serving(const struct om_rserving *v)
{
    if (!v->present)
        return json_null();
    return json_pack(
        "{s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
        "serving_requests", num_or_null(v->serving_requests), "hits", (json_int_t)v->hits, "misses",
        (json_int_t)v->misses, "served_from_plan", (json_int_t)v->served_from_plan, "fallbacks",
        (json_int_t)v->fallbacks, "guard_rejections", (json_int_t)v->guard_rejections, "plans",
        (json_int_t)v->plans, "replans", (json_int_t)v->replans, "reused_plans",
        (json_int_t)v->reused_plans, "plan_slots", (json_int_t)v->plan_slots, "plan_peak_bytes",
        (json_int_t)v->plan_peak_bytes, "plan_lower_bound_bytes",
        (json_int_t)v->plan_lower_bound_bytes, "arena_top_bytes", (json_int_t)v->arena_top_bytes,
        "released_bytes", (json_int_t)v->released_bytes, "verify_violations",
        (json_int_t)v->verify_violations, "invalid_frees", (json_int_t)v->invalid_frees,
        "plan_greedy_bytes", (json_int_t)v->plan_greedy_bytes, "plan_proven_bound_bytes",
        (json_int_t)v->plan_proven_bound_bytes, "plan_time_us", (json_int_t)v->plan_time_us,
        "plan_on_thread", (json_int_t)v->plan_on_thread);
}

static json_t *categories(const uint64_t *bytes, const uint64_t *blocks)
{
    json_t *o = json_object();
    for (int c = 0; c < OM_NCAT; c++) {
        json_t *e = json_pack("{s:I}", "bytes", (json_int_t)bytes[c]);
        if (blocks)
            json_object_set_new(e, "blocks", json_integer((json_int_t)blocks[c]));
        json_object_set_new(o, om_cat_names[c], e);
    }
    return o;
}

static json_t *devices(const struct om_rdomains *d)
{
    json_t *a = json_array();
    for (size_t k = 0; d && k < d->n; k++)
        json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I}", "name", d->v[k].name,
                                           "managed_requests", (json_int_t)d->v[k].managed_requests,
                                           "lower_bound_bytes", (json_int_t)d->v[k].lower_bound,
                                           "peak_live_bytes", (json_int_t)d->v[k].peak_live));
    return a;
}

/* The inferred breakdown (docs/report-formats.md, "Breakdown"). */
static json_t *breakdown(const struct om_report *r)
{
    struct om_breakdown b;
    if (om_breakdown(r, &b) != 0)
        return NULL;
    json_t *o = json_pack("{s:b,s:s,s:b}", "inferred", 1, "rules",
                          "docs/report-formats.md#breakdown", "found", b.found);
    if (!b.found) {
        json_object_set_new(o, "why", json_string(b.why));
        return o;
    }
    json_t *classes = json_object();
    for (int c = 0; c < OM_NBD; c++)
        json_object_set_new(
            classes, om_bd_keys[c],
            json_pack("{s:I,s:I,s:I,s:I}", "at_peak_bytes", (json_int_t)b.at_peak[c],
                      "blocks_at_peak", (json_int_t)b.blocks_at_peak[c], "max_live_bytes",
                      (json_int_t)b.max_live[c], "requested_bytes", (json_int_t)b.born[c]));
    json_object_set_new(o, "iteration", json_pack("[I,I]", (json_int_t)b.first, (json_int_t)b.end));
    json_object_set_new(o, "peak_request", json_integer((json_int_t)b.peak_request));
    json_object_set_new(o, "peak_bytes", json_integer((json_int_t)b.peak_bytes));
    json_object_set_new(o, "complete", json_boolean(b.complete));
    json_object_set_new(o, "gradients_kept", json_boolean(b.kept_gradients));
    json_object_set_new(o, "classes", classes);
    return o;
}

static json_t *process(const struct om_report *r, const struct om_rdomains *devs)
{
    json_t *bd = breakdown(r);
    if (!bd)
        return NULL;
    json_t *cat = json_null();
    if (r->have_categories) {
        cat = categories(r->cat_bytes, r->cat_blocks);
        json_object_set_new(
            cat, "iteration",
            json_pack("[I,I]", (json_int_t)r->cat_iter[0], (json_int_t)r->cat_iter[1]));
        json_object_set_new(cat, "lower_bound_bytes", json_integer((json_int_t)r->cat_lower_bound));
    }
    return json_pack("{s:s,s:I,s:I,s:I,s:s?,s:o,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:{s:s,s:b,s:o,s:o},"
                     "s:o,s:o,s:o,s:o}",
                     "file", r->path, "pid", (json_int_t)r->pid, "ppid", (json_int_t)r->ppid,
                     "rank", (json_int_t)r->rank, "exe", r->exe, "argv", strings(r->argv, r->argc),
                     "mode", r->mode, "managed_requests", (json_int_t)r->managed_requests,
                     "duration_ns", (json_int_t)r->duration_ns, "peak_live_bytes",
                     (json_int_t)r->peak_live, "lower_bound_bytes", (json_int_t)r->lower_bound,
                     "plan_efficiency", ratio(om_plan_efficiency(r)), "served_from_plan_fraction",
                     ratio(om_served_fraction(r)), "iterations", "method", r->method, "found",
                     r->found, "period_requests", num_or_null(r->period), "first_steady_request",
                     num_or_null(r->first_steady), "categories", cat, "breakdown", bd, "serving",
                     serving(&r->serving), "device_domains", devices(devs));
}

static int site(struct om_symbolizer *sym, const struct om_msite *s, uint64_t at_peak, bool full,
                json_t **out)
{
    char name[1024];
    om_site_name(sym, s->site, full, name, sizeof name);
    const struct om_dframe *f;
    size_t n;
    int rc = om_sym_site(sym, s->site, &f, &n);
    if (rc != 0)
        return rc;
    json_t *frames = json_array();
    for (size_t i = 0; i < n; i++) {
        char off[24];
        snprintf(off, sizeof off, "0x%llx", (unsigned long long)f[i].offset);
        json_array_append_new(frames, json_pack("{s:s?,s:s?,s:o,s:b,s:s?,s:s}", "function",
                                                f[i].function, "file", f[i].file, "line",
                                                f[i].file ? json_integer(f[i].line) : json_null(),
                                                "inlined", f[i].inlined, "module", f[i].module,
                                                f[i].module ? "offset" : "address", off));
    }
    *out = json_pack("{s:s,s:I,s:I,s:f,s:s?,s:i,s:o}", "name", name, "bytes", (json_int_t)s->bytes,
                     "blocks", (json_int_t)s->blocks, "share",
                     at_peak ? (double)s->bytes / (double)at_peak : 0.0, "category",
                     s->site->category, "processes", (int)s->processes, "frames", frames);
    return *out ? 0 : -ENOMEM;
}

int om_render_json(const struct om_merged *m, const struct om_render *o)
{
    const struct om_domain_view host = {OM_HOST_DOMAIN, NULL};
    return om_render_json_in(m, o, &host);
}

int om_render_json_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v)
{
    json_t *procs = json_array(), *sites = json_array();
    int rc = 0;
    /* Device domains are listed on the host's summary only, as in the text. */
    bool host = om_domain_is_host(v->shown);
    for (size_t i = 0; i < m->nreports && rc == 0; i++)
        if (json_array_append_new(
                procs, process(&m->reports[i], host && v->devices ? &v->devices[i] : NULL)) != 0)
            rc = -ENOMEM;
    for (size_t i = 0; i < m->nsites && i < o->top && rc == 0; i++) {
        json_t *s = NULL;
        rc = site(o->sym, &m->sites[i], m->lower_bound, o->full_names, &s);
        json_array_append_new(sites, s);
    }
    json_t *root =
        json_pack("{s:s,s:i,s:s,s:o,s:{s:I,s:I,s:I,s:o},s:o}", "schema", "optmem-report-summary",
                  "version", 1, "domain", v->shown, "processes", procs, "totals", "processes",
                  (json_int_t)m->nreports, "peak_live_bytes", (json_int_t)m->peak_live,
                  "lower_bound_bytes", (json_int_t)m->lower_bound, "categories",
                  categories(m->cat_bytes, NULL), "peak_sites", sites);
    if (rc == 0 && !root)
        rc = -ENOMEM;
    if (rc == 0 && json_dumpf(root, o->out, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) != 0)
        rc = -EIO;
    if (rc == 0 && fputc('\n', o->out) == EOF)
        rc = -EIO;
    json_decref(root);
    return rc;
}
