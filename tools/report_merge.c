/* optmem report: merges the reports of several processes (ranks, forked workers) and the
 * figures every output format shares. */
#include "report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct keyed {
    char *key; /* the site's stack as module+offset: equal across ranks despite ASLR */
    const struct om_rsite *site;
    uint64_t bytes, blocks;
    size_t report;
};

static char *stack_key(const struct om_rsite *s)
{
    size_t len = 1;
    for (size_t f = 0; f < s->nframes; f++)
        len += (s->frames[f].module ? strlen(s->frames[f].module) : 0) + 40;
    char *key = malloc(len), *p = key;
    if (!key)
        return NULL;
    for (size_t f = 0; f < s->nframes; f++) {
        const struct om_rframe *fr = &s->frames[f];
        p += sprintf(p, "%s+%llx;", fr->module ? fr->module : "",
                     (unsigned long long)(fr->module ? fr->offset : fr->address));
    }
    *p = '\0';
    return key;
}

static int by_key(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->report > y->report) - (x->report < y->report);
}

static int by_bytes(const void *a, const void *b)
{
    const struct om_msite *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    if (x->blocks != y->blocks)
        return x->blocks < y->blocks ? 1 : -1;
    return 0;
}

int om_merge(struct om_report *reports, size_t n, struct om_merged *m)
{
    memset(m, 0, sizeof *m);
    m->reports = reports;
    m->nreports = n;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += reports[i].npeak;
        m->peak_live += reports[i].peak_live;
        m->lower_bound += reports[i].lower_bound;
        for (int c = 0; c < OM_NCAT && reports[i].have_categories; c++)
            m->cat_bytes[c] += reports[i].cat_bytes[c];
    }
    struct keyed *all = calloc(total ? total : 1, sizeof *all);
    m->sites = calloc(total ? total : 1, sizeof *m->sites);
    int rc = all && m->sites ? 0 : -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        for (size_t j = 0; j < reports[i].npeak && rc == 0; j++) {
            const struct om_rpeak *p = &reports[i].peak[j];
            all[k] = (struct keyed){stack_key(&reports[i].sites[p->site]),
                                    &reports[i].sites[p->site], p->bytes, p->blocks, i};
            rc = all[k++].key ? 0 : -ENOMEM;
        }
    }
    if (rc == 0) {
        qsort(all, k, sizeof *all, by_key);
        for (size_t a = 0; a < k;) {
            struct om_msite *ms = &m->sites[m->nsites++];
            *ms = (struct om_msite){.site = all[a].site};
            size_t b = a;
            for (; b < k && strcmp(all[b].key, all[a].key) == 0; b++) {
                ms->bytes += all[b].bytes;
                ms->blocks += all[b].blocks;
                ms->processes += b == a || all[b].report != all[b - 1].report;
            }
            a = b;
        }
        /* Stable for equal sizes: the key order above makes the output reproducible. */
        for (size_t a = 1; a < m->nsites; a++) {
            struct om_msite x = m->sites[a];
            size_t b = a;
            for (; b > 0 && by_bytes(&m->sites[b - 1], &x) > 0; b--)
                m->sites[b] = m->sites[b - 1];
            m->sites[b] = x;
        }
    }
    for (size_t a = 0; all && a < k; a++)
        free(all[a].key);
    free(all);
    if (rc != 0)
        om_merged_free(m);
    return rc;
}

void om_merged_free(struct om_merged *m)
{
    free(m->sites);
    m->sites = NULL;
    m->nsites = 0;
}

double om_plan_efficiency(const struct om_report *r)
{
    if (!r->serving.present || r->serving.plan_lower_bound_bytes == 0 || r->serving.plans == 0)
        return -1;
    return (double)r->serving.plan_peak_bytes / (double)r->serving.plan_lower_bound_bytes;
}

double om_served_fraction(const struct om_report *r)
{
    const struct om_rserving *v = &r->serving;
    if (!v->present || v->serving_requests == OM_NO_VALUE || v->serving_requests == 0)
        return -1;
    return (double)v->served_from_plan / (double)v->serving_requests;
}

const char *om_human_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

void om_xml_escape(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '&':
            fputs("&amp;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        default:
            /* Control characters are not allowed in XML 1.0. */
            fputc((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' ? '?' : *s, out);
        }
    }
}
