/* optmem report --format html: one self-contained page (inline CSS and SVG, nothing fetched)
 * that opens with the answer, then the pictures, then the tables of the text summary. */
#include "report_domain.h"

#include <errno.h>
#include <string.h>

static const char style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1260px}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse;margin:8px 0}"
    "table.wide{display:block;overflow-x:auto;max-width:100%}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "td{overflow-wrap:anywhere}"
    "td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}"
    "th{background:#f0f0f0}"
    "ol.stack{margin:0;padding-left:20px;font-family:monospace;font-size:12px}"
    ".inl{color:#777}.loc{color:#555}.note{color:#555;font-size:13px}"
    "ol.stack li,b.site{overflow-wrap:anywhere}"
    "#summary{background:#f7f7f7;border:1px solid #ccc;padding:4px 16px 10px}"
    "#summary h2{margin-top:8px}"
    ".bdbar{display:flex;width:100%;max-width:900px;height:22px;border:1px solid #888;"
    "box-sizing:border-box;margin:6px 0}.bdbar span{display:block;height:100%;min-width:0}"
    ".sw{display:inline-block;width:12px;height:12px;border:1px solid #888;margin-right:6px;"
    "vertical-align:middle}"
    /* A picture keeps its size (its legend stays legible) and scrolls in its own box on a
     * narrower window, as do the tables of many numeric columns (processes, serving): the
     * page never scrolls sideways. */
    ".fig{overflow-x:auto;max-width:100%}.fig svg{display:block}";

/* One colour per class of the breakdown, in om_bd_keys' order. */
static const char *const bd_colour[OM_NBD] = {"#4e79a7", "#f28e2b", "#e15759",
                                              "#76b7b2", "#59a14f", "#bab0ac"};

static void cell_bytes(FILE *out, uint64_t v)
{
    char hb[32];
    fprintf(out, "<td class=\"n\" title=\"%llu bytes\">%s</td>", (unsigned long long)v,
            om_human_bytes(v, hb, sizeof hb));
}

static void cell_ratio(FILE *out, double v, bool percent)
{
    if (v < 0)
        fputs("<td class=\"n\">&ndash;</td>", out);
    else if (percent)
        fprintf(out, "<td class=\"n\">%.1f %%</td>", 100 * v);
    else
        fprintf(out, "<td class=\"n\">%.3f</td>", v);
}

static void cell_u64(FILE *out, uint64_t v)
{
    if (v == OM_NO_VALUE)
        fputs("<td class=\"n\">&ndash;</td>", out);
    else
        fprintf(out, "<td class=\"n\">%llu</td>", (unsigned long long)v);
}

/* The plan search's saving: greedy by size's peak against the plan's, both from the
 * report's serving record (reports that predate the greedy figure, and saved plans, lack it). */
static void cell_saved(FILE *out, const struct om_rserving *v)
{
    char hb[3][32];
    if (!v->present || !v->plans || !v->plan_greedy_bytes) {
        fputs("<td class=\"n\">&ndash;</td>", out);
        return;
    }
    if (v->plan_peak_bytes >= v->plan_greedy_bytes) {
        fprintf(out, "<td>nothing: plan peak %s, greedy by size %s</td>",
                om_human_bytes(v->plan_peak_bytes, hb[0], sizeof hb[0]),
                om_human_bytes(v->plan_greedy_bytes, hb[1], sizeof hb[1]));
        return;
    }
    fprintf(out, "<td>%s (%.1f %%): plan peak %s, greedy by size %s</td>",
            om_human_bytes(v->plan_greedy_bytes - v->plan_peak_bytes, hb[0], sizeof hb[0]),
            100.0 * (double)(v->plan_greedy_bytes - v->plan_peak_bytes) /
                (double)v->plan_greedy_bytes,
            om_human_bytes(v->plan_peak_bytes, hb[1], sizeof hb[1]),
            om_human_bytes(v->plan_greedy_bytes, hb[2], sizeof hb[2]));
}

/* The inferred breakdown of one process: a stacked bar of the iteration's peak and its
 * legend, a table (docs/report-formats.md, "Breakdown"). */
static int breakdown(FILE *out, const struct om_report *r, bool several)
{
    char hb[32];
    struct om_breakdown b;
    int rc = om_breakdown(r, &b);
    if (rc != 0)
        return rc;
    fputs("<div class=\"breakdown\"><h3>", out);
    if (several)
        fprintf(out, "pid %lld: ", (long long)r->pid);
    fputs("What the memory is, inferred</h3>\n", out);
    if (!b.found) {
        fputs("<p class=\"note\">Not available: ", out);
        om_xml_escape(out, b.why);
        fputs(".</p></div>\n", out);
        return 0;
    }
    fprintf(out,
            "<p class=\"note\">Inferred from lifetimes and sizes, not measured (rules: "
            "docs/report-formats.md, &ldquo;Breakdown&rdquo;): one steady iteration, requests "
            "%llu..%llu, at its peak (request %llu, %s live).",
            (unsigned long long)b.first, (unsigned long long)b.end,
            (unsigned long long)b.peak_request, om_human_bytes(b.peak_bytes, hb, sizeof hb));
    if (!b.complete)
        fputs(" Some blocks born before the sample were not in the report: counted as other.", out);
    fputs("</p>\n<div class=\"bdbar\" role=\"img\" aria-label=\"inferred breakdown at the "
          "peak\">",
          out);
    uint64_t total = 0;
    for (int c = 0; c < OM_NBD; c++)
        total += b.at_peak[c];
    for (int c = 0; c < OM_NBD && total; c++)
        if (b.at_peak[c])
            fprintf(out,
                    "<span class=\"bd-%s\" style=\"width:%.3f%%;background:%s\" "
                    "title=\"%s (inferred): %s\"></span>",
                    om_bd_keys[c], 100.0 * (double)b.at_peak[c] / (double)total, bd_colour[c],
                    om_bd_labels[c], om_human_bytes(b.at_peak[c], hb, sizeof hb));
    fputs("</div>\n<table class=\"bd\"><tr><th>inferred class</th><th>at the peak</th>"
          "<th>share</th><th>blocks</th><th>most live in the iteration</th><th>requested in "
          "the iteration</th></tr>\n",
          out);
    for (int c = 0; c < OM_NBD; c++) {
        fprintf(out, "<tr><td><span class=\"sw\" style=\"background:%s\"></span>%s</td>",
                bd_colour[c], om_bd_labels[c]);
        cell_bytes(out, b.at_peak[c]);
        cell_ratio(out, b.peak_bytes ? (double)b.at_peak[c] / (double)b.peak_bytes : -1, true);
        cell_u64(out, b.blocks_at_peak[c]);
        cell_bytes(out, b.max_live[c]);
        cell_bytes(out, b.born[c]);
        fputs("</tr>\n", out);
    }
    fputs("</table></div>\n", out);
    return 0;
}

static void command(FILE *out, const struct om_report *r)
{
    for (size_t k = 0; k < r->argc; k++) {
        fputs(k ? " " : "", out);
        om_xml_escape(out, r->argv[k]);
    }
    if (r->argc == 0)
        om_xml_escape(out, r->exe ? r->exe : "?");
}

/* The answer first: the headline figures of every process, what the memory is, then the
 * biggest sites by name. */
static int summary(FILE *out, const struct om_merged *m, const struct om_render *o)
{
    bool any_saved = false;
    for (size_t i = 0; i < m->nreports; i++)
        any_saved |= m->reports[i].serving.plan_greedy_bytes != 0;
    fputs("<section id=\"summary\">\n<h2>Summary</h2>\n<table><tr><th>pid</th><th>command</th>"
          "<th>peak live</th><th>lower bound</th><th>plan peak</th><th>plan efficiency</th>"
          "<th>served from plan</th>",
          out);
    if (any_saved)
        fputs("<th>the plan search saved</th>", out);
    fputs("</tr>\n", out);
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        const struct om_rserving *v = &r->serving;
        fprintf(out, "<tr><td class=\"n\">%lld</td><td>", (long long)r->pid);
        command(out, r);
        fputs("</td>", out);
        cell_bytes(out, r->peak_live);
        cell_bytes(out, r->lower_bound);
        if (v->present && v->plans)
            cell_bytes(out, v->plan_peak_bytes);
        else
            fputs("<td class=\"n\">&ndash;</td>", out);
        cell_ratio(out, om_plan_efficiency(r), false);
        cell_ratio(out, om_served_fraction(r), true);
        if (any_saved)
            cell_saved(out, v);
        fputs("</tr>\n", out);
    }
    if (m->nreports > 1) {
        fputs("<tr><th colspan=\"2\">total (sums)</th>", out);
        cell_bytes(out, m->peak_live);
        cell_bytes(out, m->lower_bound);
        fprintf(out, "<td colspan=\"%d\"></td></tr>\n", any_saved ? 4 : 3);
    }
    fputs("</table>\n<p class=\"note\">Peak live: the most bytes the allocator held at once; "
          "lower bound: the most bytes live at once (no placement uses less); plan efficiency: "
          "the plan's peak over its lower bound.",
          out);
    if (any_saved)
        fputs(" The plan search saved: greedy by size's peak minus the plan's peak.", out);
    fputs("</p>\n", out);
    for (size_t i = 0; i < m->nreports; i++) {
        int rc = breakdown(out, &m->reports[i], m->nreports > 1);
        if (rc != 0)
            return rc;
    }

    char buf[512];
    size_t top = o->top < 10 ? o->top : 10;
    fputs("<table class=\"top\"><tr><th>#</th><th>call site at the peak</th><th>bytes</th>"
          "<th>share</th><th>blocks</th></tr>\n",
          out);
    for (size_t i = 0; i < m->nsites && i < top; i++) {
        const struct om_msite *s = &m->sites[i];
        fprintf(out, "<tr><td class=\"n\">%zu</td><td><b class=\"site\">", i + 1);
        om_xml_escape(out, om_site_name(o->sym, s->site, o->full_names, buf, sizeof buf));
        fputs("</b></td>", out);
        cell_bytes(out, s->bytes);
        cell_ratio(out, m->lower_bound ? (double)s->bytes / (double)m->lower_bound : -1, true);
        cell_u64(out, s->blocks);
        fputs("</tr>\n", out);
    }
    if (m->nsites == 0)
        fputs("<tr><td colspan=\"5\">no call site was live at the peak</td></tr>\n", out);
    fputs("</table>\n</section>\n", out);
    return 0;
}

static void processes(FILE *out, const struct om_merged *m)
{
    fputs("<h2>Processes</h2>\n<table "
          "class=\"wide\"><tr><th>pid</th><th>rank</th><th>command</th><th>mode</th>"
          "<th>peak live</th><th>lower bound</th><th>plan efficiency</th><th>served from "
          "plan</th><th>iterations</th><th>period</th><th>first steady request</th></tr>\n",
          out);
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        fprintf(out, "<tr><td class=\"n\">%lld</td><td class=\"n\">%lld</td><td>",
                (long long)r->pid, (long long)r->rank);
        command(out, r);
        fputs("</td><td>", out);
        om_xml_escape(out, r->mode);
        fputs("</td>", out);
        cell_bytes(out, r->peak_live);
        cell_bytes(out, r->lower_bound);
        cell_ratio(out, om_plan_efficiency(r), false);
        cell_ratio(out, om_served_fraction(r), true);
        fputs("<td>", out);
        om_xml_escape(out, r->method);
        fputs(r->found ? "" : " (none found)", out);
        fputs("</td>", out);
        cell_u64(out, r->period);
        cell_u64(out, r->first_steady);
        fputs("</tr>\n", out);
    }
    if (m->nreports > 1) {
        fputs("<tr><th colspan=\"4\">total (sums: processes need not peak together)</th>", out);
        cell_bytes(out, m->peak_live);
        cell_bytes(out, m->lower_bound);
        fputs("<td colspan=\"5\"></td></tr>\n", out);
    }
    fputs("</table>\n", out);
}

/* On the host's page, the device domains the reports also hold. */
static void devices(FILE *out, const struct om_merged *m, const struct om_domain_view *v)
{
    size_t any = 0;
    for (size_t i = 0; v->devices && om_domain_is_host(v->shown) && i < m->nreports; i++)
        any += v->devices[i].n;
    if (!any)
        return;
    fputs("<h2>Device domains</h2>\n<p class=\"note\">Shown by <code>optmem report FILE "
          "--domain NAME</code>.</p>\n<table><tr><th>pid</th><th>domain</th><th>managed "
          "requests</th><th>lower bound</th><th>peak live</th></tr>\n",
          out);
    for (size_t i = 0; i < m->nreports; i++) {
        for (size_t k = 0; k < v->devices[i].n; k++) {
            const struct om_rdomain *d = &v->devices[i].v[k];
            fprintf(out, "<tr><td class=\"n\">%lld</td><td>", (long long)m->reports[i].pid);
            om_xml_escape(out, d->name);
            fputs("</td>", out);
            cell_u64(out, d->managed_requests);
            cell_bytes(out, d->lower_bound);
            cell_bytes(out, d->peak_live);
            fputs("</tr>\n", out);
        }
    }
    fputs("</table>\n", out);
}

static void serving(FILE *out, const struct om_merged *m)
{
    static const char *const head[] = {"pid",
                                       "requests while serving",
                                       "served from plan",
                                       "hits",
                                       "misses",
                                       "fallbacks",
                                       "guard rejections",
                                       "plans",
                                       "replans",
                                       "plans reused",
                                       "plan peak",
                                       "plan lower bound",
                                       "arena top",
                                       "released"};
    bool any = false;
    for (size_t i = 0; i < m->nreports; i++)
        any |= m->reports[i].serving.present;
    if (!any)
        return;
    fputs("<h2>Serving</h2>\n<table class=\"wide\"><tr>", out);
    for (size_t k = 0; k < sizeof head / sizeof head[0]; k++)
        fprintf(out, "<th>%s</th>", head[k]);
    fputs("</tr>\n", out);
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        const struct om_rserving *v = &r->serving;
        if (!v->present)
            continue;
        fprintf(out, "<tr><td class=\"n\">%lld</td>", (long long)r->pid);
        cell_u64(out, v->serving_requests);
        cell_u64(out, v->served_from_plan);
        const uint64_t counts[] = {v->hits,  v->misses,  v->fallbacks,   v->guard_rejections,
                                   v->plans, v->replans, v->reused_plans};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            cell_u64(out, counts[k]);
        cell_bytes(out, v->plan_peak_bytes);
        cell_bytes(out, v->plan_lower_bound_bytes);
        cell_bytes(out, v->arena_top_bytes);
        cell_bytes(out, v->released_bytes);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
}

static void categories(FILE *out, const struct om_merged *m)
{
    fputs("<h2>Bytes by category</h2>\n<p class=\"note\">In the last complete iteration: "
          "persistent blocks live across it, per-iteration blocks live over its end, "
          "temporaries born and freed within it.</p>\n<table><tr><th>pid</th><th>iteration "
          "(requests)</th>",
          out);
    for (int c = OM_NCAT; c-- > 0;)
        fprintf(out, "<th>%s</th>", om_cat_names[c]);
    fputs("</tr>\n", out);
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        fprintf(out, "<tr><td class=\"n\">%lld</td>", (long long)r->pid);
        if (!r->have_categories) {
            fputs("<td colspan=\"4\">no complete iteration recorded</td></tr>\n", out);
            continue;
        }
        fprintf(out, "<td>%llu..%llu</td>", (unsigned long long)r->cat_iter[0],
                (unsigned long long)r->cat_iter[1]);
        for (int c = OM_NCAT; c-- > 0;)
            cell_bytes(out, r->cat_bytes[c]);
        fputs("</tr>\n", out);
    }
    fputs("</table>\n", out);
}

static int sites(FILE *out, const struct om_merged *m, const struct om_render *o)
{
    char buf[512];
    fputs("<h2>Call sites live at the peak</h2>\n<table><tr><th>#</th><th>bytes</th><th>share"
          "</th><th>blocks</th><th>category</th><th>processes</th><th>stack (innermost first)"
          "</th></tr>\n",
          out);
    for (size_t i = 0; i < m->nsites && i < o->top; i++) {
        const struct om_msite *s = &m->sites[i];
        const struct om_dframe *f;
        size_t n;
        int rc = om_sym_site(o->sym, s->site, &f, &n);
        if (rc != 0)
            return rc;
        fprintf(out, "<tr><td class=\"n\">%zu</td>", i + 1);
        cell_bytes(out, s->bytes);
        cell_ratio(out, m->lower_bound ? (double)s->bytes / (double)m->lower_bound : -1, true);
        cell_u64(out, s->blocks);
        fprintf(out, "<td>%s</td>", s->site->category ? s->site->category : "&ndash;");
        cell_u64(out, s->processes);
        fputs("<td><b class=\"site\">", out);
        om_xml_escape(out, om_site_name(o->sym, s->site, o->full_names, buf, sizeof buf));
        fputs("</b><ol class=\"stack\">", out);
        for (size_t k = 0; k < n; k++) {
            fputs(f[k].inlined ? "<li class=\"inl\">" : "<li>", out);
            om_xml_escape(out, om_frame_name(&f[k], o->full_names, buf, sizeof buf));
            if (f[k].file) {
                fputs(" <span class=\"loc\">", out);
                om_xml_escape(out, f[k].file);
                fprintf(out, ":%u</span>", f[k].line);
            }
            fputs(f[k].inlined ? " (inlined)</li>" : "</li>", out);
        }
        fputs("</ol></td></tr>\n", out);
    }
    fputs("</table>\n", out);
    if (m->nsites > o->top)
        fprintf(out, "<p class=\"note\">%zu more call sites (--top N shows more).</p>\n",
                m->nsites - o->top);
    return 0;
}

int om_render_html(const struct om_merged *m, const struct om_render *o)
{
    const struct om_domain_view host = {OM_HOST_DOMAIN, NULL};
    return om_render_html_in(m, o, &host);
}

int om_render_html_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v)
{
    FILE *out = o->out;
    fprintf(out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>optmem report</title>\n<style>%s</style></head>\n<body>\n"
            "<h1>optmem report</h1>\n<p class=\"note\">",
            style);
    for (size_t i = 0; i < m->nreports; i++) {
        fputs(i ? ", " : "", out);
        om_xml_escape(out, m->reports[i].path);
    }
    fputs("</p>\n", out);
    if (!om_domain_is_host(v->shown)) {
        fputs("<p>Memory domain <b>", out);
        om_xml_escape(out, v->shown);
        fputs("</b>: every figure and picture below is this domain's.</p>\n", out);
    }
    int rc = summary(out, m, o);
    if (rc != 0)
        return rc;
    fputs("<h2>Lifetimes</h2>\n<p class=\"note\">Offset against time (request numbers) in the "
          "sampled iterations: one rectangle per block at its arena offset, coloured by call "
          "site; the black line is the live bytes, the red dashed line the lower bound.</p>\n",
          out);
    for (size_t i = 0; i < m->nreports && rc == 0; i++) {
        fputs("<div class=\"fig\">", out);
        rc = om_svg_panel_in(out, &m->reports[i], o, false, v->shown);
        fputs("</div>\n", out);
    }
    if (rc != 0)
        return rc;
    processes(out, m);
    devices(out, m, v);
    serving(out, m);
    rc = sites(out, m, o);
    if (rc != 0)
        return rc;
    categories(out, m);
    fputs("</body></html>\n", out);
    return ferror(out) ? -EIO : 0;
}
