/* optmem report --format chrome and --format folded: the trace-event JSON that Perfetto
 * and chrome://tracing open, and the folded stacks that flamegraph.pl and speedscope read. */
#include "report_domain.h"

#include <errno.h>
#include <string.h>

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* Trace-event times are microseconds; keeping the nanoseconds as decimals loses nothing. */
static void ts(FILE *out, uint64_t ns)
{
    fprintf(out, "%llu.%03u", (unsigned long long)(ns / 1000), (unsigned)(ns % 1000));
}

static void process_meta(FILE *out, const struct om_report *r, const char *domain)
{
    char name[512];
    int len = snprintf(name, sizeof name, "pid %lld rank %lld%s%s:", (long long)r->pid,
                       (long long)r->rank, om_domain_is_host(domain) ? "" : " ",
                       om_domain_is_host(domain) ? "" : domain);
    for (size_t i = 0; i < r->argc && len > 0 && (size_t)len < sizeof name; i++)
        len += snprintf(name + len, sizeof name - (size_t)len, " %s", r->argv[i]);
    fprintf(out,
            "{\"ph\":\"M\",\"pid\":%lld,\"tid\":0,\"name\":\"process_name\",\"args\":{"
            "\"name\":",
            (long long)r->pid);
    json_str(out, name);
    fputs("}},\n", out);
    fprintf(out,
            "{\"ph\":\"M\",\"pid\":%lld,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":"
            "\"lifetimes\"}},\n",
            (long long)r->pid);
}

static uint64_t sample_end_ns(const struct om_report *r)
{
    uint64_t end = 0;
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *l = &r->life[i];
        if (l->site == OM_NO_VALUE)
            continue;
        if (l->birth_ns > end)
            end = l->birth_ns;
        if (l->death_ns != OM_NO_VALUE && l->death_ns > end)
            end = l->death_ns;
    }
    return end;
}

/* Returns the number of slices written, at most cap. */
static size_t process_events(FILE *out, const struct om_report *r, const struct om_render *o,
                             size_t cap, const char *domain)
{
    long long pid = r->pid;
    uint64_t end_ns = sample_end_ns(r);
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *l = &r->life[i];
        if (l->site == OM_NO_VALUE)
            continue;
        fprintf(out, "{\"ph\":\"C\",\"pid\":%lld,\"tid\":0,\"name\":\"live bytes\",\"ts\":", pid);
        ts(out, l->birth_ns);
        /* The series is named by the domain: Perfetto shows its name next to the curve. */
        fputs(",\"args\":{", out);
        json_str(out, domain);
        fprintf(out, ":%llu,\"lower bound\":%llu}},\n", (unsigned long long)r->live_after[i],
                (unsigned long long)r->lower_bound);
    }
    size_t written = 0;
    char buf[512];
    for (size_t i = 0; i < r->nlife && written < cap; i++) {
        const struct om_rlife *l = &r->life[i];
        if (l->site == OM_NO_VALUE)
            continue;
        const char *name = om_site_name(o->sym, &r->sites[l->site], o->full_names, buf, sizeof buf);
        for (int end = 0; end < 2; end++) {
            fprintf(out,
                    "{\"ph\":\"%c\",\"cat\":\"lifetime\",\"pid\":%lld,\"tid\":1,\"id\":\"0x%llx\","
                    "\"name\":",
                    end ? 'e' : 'b', pid, (unsigned long long)l->birth);
            json_str(out, name);
            fputs(",\"ts\":", out);
            ts(out, !end ? l->birth_ns : l->death_ns != OM_NO_VALUE ? l->death_ns : end_ns);
            if (!end) {
                fprintf(out, ",\"args\":{\"site\":%llu,\"size\":%llu,\"request\":%llu",
                        (unsigned long long)r->sites[l->site].id, (unsigned long long)l->size,
                        (unsigned long long)l->birth);
                if (l->offset != OM_NO_VALUE)
                    fprintf(out, ",\"offset\":%llu", (unsigned long long)l->offset);
                if (l->death == OM_NO_VALUE)
                    fputs(",\"live_at_report\":true", out);
                fputc('}', out);
            }
            fputs("},\n", out);
        }
        written++;
    }
    return written;
}

int om_render_chrome(const struct om_merged *m, const struct om_render *o)
{
    const struct om_domain_view host = {OM_HOST_DOMAIN, NULL};
    return om_render_chrome_in(m, o, &host);
}

int om_render_chrome_in(const struct om_merged *m, const struct om_render *o,
                        const struct om_domain_view *v)
{
    FILE *out = o->out;
    size_t total = 0, written = 0;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", out);
    for (size_t i = 0; i < m->nreports; i++) {
        const struct om_report *r = &m->reports[i];
        process_meta(out, r, v->shown);
        for (size_t k = 0; k < r->nlife; k++)
            total += r->life[k].site != OM_NO_VALUE;
        written += process_events(out, r, o, o->max_slices - written, v->shown);
    }
    /* A last event, so that every event above may end with a comma. */
    fputs("{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":"
          "\"optmem\"}}\n],\n",
          out);
    fprintf(
        out,
        "\"otherData\":{\"generator\":\"optmem\",\"slices\":\"%zu\",\"slices_in_sample\":\"%zu\","
        "\"slice_cap\":\"%zu\",\"note\":\"%s\"},\n",
        written, total, o->max_slices,
        written < total ? "slices capped: the earliest lifetimes of the sample are shown "
                          "(--max-slices raises the cap)"
                        : "every lifetime of the sample is shown");
    fprintf(out,
            "\"metadata\":{\"optmem-slices\":%zu,\"optmem-slices-in-sample\":%zu,"
            "\"optmem-slice-cap\":%zu,\"optmem-slices-capped\":%s}}\n",
            written, total, o->max_slices, written < total ? "true" : "false");
    return ferror(out) ? -EIO : 0;
}

/* flamegraph.pl and speedscope split a line at its last space (so spaces inside C++
 * names are fine) and its frames at ';'. */
static void folded_frame(FILE *out, const char *label)
{
    for (const char *c = label; *c; c++)
        fputc(*c == ';' ? ':' : *c == '\n' || *c == '\t' || *c == '\r' ? ' ' : *c, out);
}

int om_render_folded(const struct om_merged *m, const struct om_render *o)
{
    char buf[512];
    for (size_t i = 0; i < m->nsites; i++) {
        const struct om_dframe *f;
        size_t n;
        int rc = om_sym_site(o->sym, m->sites[i].site, &f, &n);
        if (rc != 0)
            return rc;
        /* The leaf is the frame the site is named by: the plumbing under it is left out. */
        size_t first = o->full_names ? 0 : om_site_where(o->sym, m->sites[i].site);
        if (n == 0)
            fputs("[unknown]", o->out);
        for (size_t k = n; k-- > first;) {
            if (f[k].file && !f[k].module) {
                /* A Python source frame, as py-spy folds it: "function (file:line)". */
                snprintf(buf, sizeof buf, "%s (%s:%u)", f[k].function ? f[k].function : "?",
                         f[k].file, f[k].line);
                folded_frame(o->out, buf);
            } else {
                folded_frame(o->out, om_frame_name(&f[k], o->full_names, buf, sizeof buf));
            }
            if (k > first)
                fputc(';', o->out);
        }
        fprintf(o->out, " %llu\n", (unsigned long long)m->sites[i].bytes);
    }
    return ferror(o->out) ? -EIO : 0;
}
