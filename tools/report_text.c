/* optmem report: the terminal summary (the default format). */
#include "replanner.h"
#include "report_domain.h"

#include <errno.h>
#include <string.h>

/* Up to four sizes in one printf: each needs its own buffer. */
#define HB(v, k) om_human_bytes((v), hb[k], sizeof hb[0])

static void print_argv(FILE *out, const struct om_report *r)
{
    for (size_t i = 0; i < r->argc; i++)
        fprintf(out, "%s%s", i ? " " : "", r->argv[i]);
    if (r->argc == 0)
        fputs(r->exe ? r->exe : "?", out);
}

static void print_frames(FILE *out, const struct om_dframe *f, size_t n, bool full)
{
    char buf[512];
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "        %s", om_frame_name(&f[i], full, buf, sizeof buf));
        if (f[i].file)
            fprintf(out, "  %s:%u", f[i].file, f[i].line);
        else if (f[i].function && f[i].module)
            fprintf(out, "  (%s+0x%llx)",
                    strrchr(f[i].module, '/') ? strrchr(f[i].module, '/') + 1 : f[i].module,
                    (unsigned long long)f[i].offset);
        fputs(f[i].inlined ? "  [inlined]\n" : "\n", out);
    }
}

static void print_serving(FILE *out, const struct om_report *r)
{
    const struct om_rserving *v = &r->serving;
    double served = om_served_fraction(r);
    fprintf(out, "  served from plan   %llu", (unsigned long long)v->served_from_plan);
    if (served >= 0)
        fprintf(out, " of %llu requests made while serving (%.1f %%)",
                (unsigned long long)v->serving_requests, 100 * served);
    fprintf(out,
            "\n  serving            hits %llu, misses %llu, fallbacks %llu, guard "
            "rejections %llu, plans %llu, replans %llu, plans reused %llu\n",
            (unsigned long long)v->hits, (unsigned long long)v->misses,
            (unsigned long long)v->fallbacks, (unsigned long long)v->guard_rejections,
            (unsigned long long)v->plans, (unsigned long long)v->replans,
            (unsigned long long)v->reused_plans);
    if (v->verify_violations || v->invalid_frees)
        fprintf(out, "  WARNING            verify violations %llu, invalid frees %llu\n",
                (unsigned long long)v->verify_violations, (unsigned long long)v->invalid_frees);
}

/* Greedy by size's peak and whose the gap to the lower bound is (reports that predate them,
 * and saved plans, have neither). */
static void print_plan_gap(FILE *out, const struct om_rserving *v)
{
    if (!v->present || !v->plans || !v->plan_greedy_bytes || !v->plan_lower_bound_bytes)
        return;
    char hb[1][32];
    double lb = (double)v->plan_lower_bound_bytes;
    fprintf(
        out, "  plan search        %.1f ms %s; greedy by size %s (%.3f of the bound); %s\n",
        v->plan_time_us / 1e3, v->plan_on_thread ? "on the optmem-plan thread" : "inline",
        HB(v->plan_greedy_bytes, 0), v->plan_greedy_bytes / lb,
        om_rp_gap_owner(v->plan_peak_bytes, v->plan_lower_bound_bytes, v->plan_proven_bound_bytes));
}

static void print_process(FILE *out, const struct om_report *r)
{
    char hb[2][32];
    fprintf(out, "process %lld (rank %lld, %s mode): ", (long long)r->pid, (long long)r->rank,
            r->mode);
    print_argv(out, r);
    fprintf(out, "\n  managed requests   %llu in %.3f s\n", (unsigned long long)r->managed_requests,
            r->duration_ns / 1e9);
    fprintf(out, "  peak live          %s (%llu bytes held by the allocator)\n",
            HB(r->peak_live, 0), (unsigned long long)r->peak_live);
    fprintf(out, "  lower bound        %s (%llu bytes live at once at most)\n",
            HB(r->lower_bound, 0), (unsigned long long)r->lower_bound);
    double eff = om_plan_efficiency(r);
    if (eff >= 0)
        fprintf(out, "  plan efficiency    %.3f (plan peak %s over its lower bound %s)\n", eff,
                HB(r->serving.plan_peak_bytes, 0), HB(r->serving.plan_lower_bound_bytes, 1));
    else if (r->serving.present)
        fputs("  plan efficiency    no plan was made\n", out);
    print_plan_gap(out, &r->serving);
    fprintf(out, "  iterations         %s: ", r->method);
    if (r->found && r->period != OM_NO_VALUE)
        fprintf(out, "period %llu requests, first steady request %llu\n",
                (unsigned long long)r->period, (unsigned long long)r->first_steady);
    else
        fputs("no steady iterations found\n", out);
    if (r->serving.present)
        print_serving(out, r);
}

/* Device domains are summarised on the host's page, so that nobody misses them. */
static void print_devices(FILE *out, const struct om_merged *m, const struct om_domain_view *v)
{
    char hb[2][32];
    if (!v->devices || !om_domain_is_host(v->shown))
        return;
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_rdomains *d = &v->devices[i];
        for (size_t k = 0; k < d->n; k++) {
            fprintf(out,
                    "  device domain      %s: %llu managed requests, lower bound %s, peak live %s",
                    d->v[k].name, (unsigned long long)d->v[k].managed_requests,
                    HB(d->v[k].lower_bound, 0), HB(d->v[k].peak_live, 1));
            if (m->nreports > 1)
                fprintf(out, " (pid %lld)", (long long)m->reports[i].pid);
            fprintf(out, "; --domain %s shows it\n", d->v[k].name);
        }
    }
}

static void print_categories(FILE *out, const uint64_t *bytes, const uint64_t *blocks,
                             const char *where)
{
    char hb[2][32];
    fprintf(out, "\nbytes by category (%s):\n", where);
    static const int order[] = {OM_CAT_PERSISTENT, OM_CAT_PER_ITERATION, OM_CAT_TEMPORARY};
    for (int k = 0; k < OM_NCAT; k++) {
        fprintf(out, "  %-14s %10s", om_cat_names[order[k]], HB(bytes[order[k]], 0));
        if (blocks)
            fprintf(out, "  %llu block%s", (unsigned long long)blocks[order[k]],
                    blocks[order[k]] == 1 ? "" : "s");
        fputc('\n', out);
    }
}

#define BAR_WIDTH 60

/* The inferred breakdown: a table and a bar of letters, one letter per 1/60 of the peak. */
static int print_breakdown(FILE *out, const struct om_report *r, bool several)
{
    char hb[3][32];
    struct om_breakdown b;
    int rc = om_breakdown(r, &b);
    if (rc != 0)
        return rc;
    fputs("\nbreakdown", out);
    if (several)
        fprintf(out, " of pid %lld", (long long)r->pid);
    fputs(", inferred from lifetimes and sizes (rules: docs/report-formats.md, "
          "\"Breakdown\"):\n",
          out);
    if (!b.found) {
        fprintf(out, "  not available: %s\n", b.why);
        return 0;
    }
    fprintf(out, "  one steady iteration, requests %llu..%llu; its peak: request %llu, %s live\n",
            (unsigned long long)b.first, (unsigned long long)b.end,
            (unsigned long long)b.peak_request, HB(b.peak_bytes, 0));
    fprintf(out, "  %-30s %10s %6s %7s %12s %12s\n", "(inferred)", "at peak", "share", "blocks",
            "max in iter", "requested");
    for (int c = 0; c < OM_NBD; c++)
        fprintf(out, "  %c %-28s %10s %5.1f%% %7llu %12s %12s\n", om_bd_letters[c], om_bd_labels[c],
                HB(b.at_peak[c], 0),
                b.peak_bytes ? 100.0 * (double)b.at_peak[c] / (double)b.peak_bytes : 0.0,
                (unsigned long long)b.blocks_at_peak[c], HB(b.max_live[c], 1), HB(b.born[c], 2));
    /* Largest remainders, so that the bar is always BAR_WIDTH letters and no class with
     * bytes vanishes for rounding when it has at least half a letter's worth. */
    char bar[BAR_WIDTH + 1];
    size_t at = 0;
    uint64_t total = 0;
    for (int c = 0; c < OM_NBD; c++)
        total += b.at_peak[c];
    for (int c = 0; c < OM_NBD && total; c++) {
        size_t n = (size_t)((double)b.at_peak[c] * BAR_WIDTH / (double)total + 0.5);
        for (size_t k = 0; k < n && at < BAR_WIDTH; k++)
            bar[at++] = om_bd_letters[c];
    }
    while (at < BAR_WIDTH && total)
        bar[at++] = om_bd_letters[OM_BD_OTHER];
    bar[at] = '\0';
    fprintf(out, "  [%s]\n", bar);
    if (b.kept_gradients)
        fputs("  (gradients kept from one iteration to the next: zero_grad(set_to_none=False))\n",
              out);
    if (!b.complete)
        fputs("  (some blocks born before the sample were not in the report: counted as other)\n",
              out);
    return 0;
}

static void print_table(FILE *out, const struct om_merged *m)
{
    char hb[2][32];
    fprintf(out, "%zu processes\n  %8s %5s %10s %11s %7s %7s  %s\n", m->nreports, "pid", "rank",
            "peak", "lower bound", "plan", "served", "command");
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        double eff = om_plan_efficiency(r), served = om_served_fraction(r);
        char e[16] = "-", s[16] = "-";
        if (eff >= 0)
            snprintf(e, sizeof e, "%.3f", eff);
        if (served >= 0)
            snprintf(s, sizeof s, "%.1f%%", 100 * served);
        fprintf(out, "  %8lld %5lld %10s %11s %7s %7s  ", (long long)r->pid, (long long)r->rank,
                HB(r->peak_live, 0), HB(r->lower_bound, 1), e, s);
        print_argv(out, r);
        fputc('\n', out);
    }
    fprintf(out, "  %8s %5s %10s %11s  (sums: the processes need not peak at the same time)\n",
            "total", "", HB(m->peak_live, 0), HB(m->lower_bound, 1));
}

int om_render_text(const struct om_merged *m, const struct om_render *o)
{
    const struct om_domain_view host = {OM_HOST_DOMAIN, NULL};
    return om_render_text_in(m, o, &host);
}

int om_render_text_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v)
{
    FILE *out = o->out;
    char hb[2][32];
    for (size_t i = 0; i < m->nreports; i++)
        fprintf(out, "%s%s", i ? ", " : "optmem report: ", m->reports[i].path);
    if (!om_domain_is_host(v->shown))
        fprintf(out, "\nmemory domain %s", v->shown);
    fputs("\n\n", out);
    if (m->nreports == 1)
        print_process(out, &m->reports[0]);
    else
        print_table(out, m);
    print_devices(out, m, v);

    uint64_t at_peak = 0;
    for (size_t i = 0; i < m->nreports; i++)
        at_peak += m->reports[i].lower_bound;
    if (m->nreports == 1)
        fprintf(out, "\ncall sites live at the peak (request %llu, %s live):\n",
                (unsigned long long)m->reports[0].peak_request, HB(at_peak, 0));
    else
        fprintf(out, "\ncall sites live at each process's peak (%s live in all):\n",
                HB(at_peak, 0));
    if (m->nsites == 0)
        fputs("  none\n", out);
    for (size_t i = 0; i < m->nsites && i < o->top; i++) {
        const struct om_msite *s = &m->sites[i];
        fprintf(out, "  #%-2zu %10s %5.1f %%  %llu block%s", i + 1, HB(s->bytes, 0),
                at_peak ? 100.0 * (double)s->bytes / (double)at_peak : 0.0,
                (unsigned long long)s->blocks, s->blocks == 1 ? "" : "s");
        if (s->site->category)
            fprintf(out, "  %s", s->site->category);
        if (m->nreports > 1)
            fprintf(out, "  in %u process%s", s->processes, s->processes == 1 ? "" : "es");
        char name[1024];
        fprintf(out, "\n      %s\n",
                om_site_name(o->sym, s->site, o->full_names, name, sizeof name));
        const struct om_dframe *f;
        size_t n;
        int rc = om_sym_site(o->sym, s->site, &f, &n);
        if (rc != 0)
            return rc;
        print_frames(out, f, n, o->full_names);
    }
    if (m->nsites > o->top)
        fprintf(out, "  (%zu more; --top N shows more)\n", m->nsites - o->top);

    if (m->nreports == 1 && m->reports[0].have_categories) {
        const struct om_report *r = &m->reports[0];
        char where[96];
        snprintf(where, sizeof where, "the last complete iteration, requests %llu..%llu",
                 (unsigned long long)r->cat_iter[0], (unsigned long long)r->cat_iter[1]);
        print_categories(out, r->cat_bytes, r->cat_blocks, where);
    } else if (m->nreports > 1) {
        print_categories(out, m->cat_bytes, NULL, "last complete iterations, all processes");
    } else {
        fputs("\nbytes by category: no complete iteration was recorded\n", out);
    }
    for (size_t i = 0; i < m->nreports; i++) {
        int rc = print_breakdown(out, &m->reports[i], m->nreports > 1);
        if (rc != 0)
            return rc;
    }
    return ferror(out) ? -EIO : 0;
}
