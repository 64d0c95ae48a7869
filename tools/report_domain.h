/* optmem report: memory domains. A report's top level is the host ("cpu"); device_domains
 * holds the others ("cuda:0", ...) with the same sections. Loading one domain's sections,
 * and the renderers that say which domain they show. */
#ifndef OPTMEM_TOOLS_REPORT_DOMAIN_H
#define OPTMEM_TOOLS_REPORT_DOMAIN_H

#include "report.h"

#define OM_HOST_DOMAIN "cpu"

/* A device domain's headline figures, for the host's summary. */
struct om_rdomain {
    char *name;
    uint64_t managed_requests, lower_bound, peak_live;
};

struct om_rdomains {
    struct om_rdomain *v;
    size_t n;
};

/* Loads one report with the sections of the domain called domain (NULL or "cpu": the top
 * level). devices, when not NULL, receives the report's device domains (none in reports
 * written before there were any). A domain the report lacks fails with -ENOENT and a line
 * naming the domains it has. On failure nothing is left to free. */
int om_report_load_domain(const char *path, const char *domain, struct om_report *r,
                          struct om_rdomains *devices, char *err, size_t errlen);
void om_rdomains_free(struct om_rdomains *d);

/* What the renderers know of domains: the one shown, and each report's device domains. */
struct om_domain_view {
    const char *shown;                 /* its name */
    const struct om_rdomains *devices; /* one per report, or NULL */
};

/* The renderers of report.h, for the domain v->shown (theirs show the host). */
int om_render_text_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v);
int om_render_json_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v);
int om_render_chrome_in(const struct om_merged *m, const struct om_render *o,
                        const struct om_domain_view *v);
int om_render_svg_in(const struct om_merged *m, const struct om_render *o,
                     const struct om_domain_view *v);
int om_render_html_in(const struct om_merged *m, const struct om_render *o,
                      const struct om_domain_view *v);
/* One report's domain v->shown as a PyTorch memory snapshot pickle; -EINVAL for several. */
int om_render_memviz_in(const struct om_merged *m, const struct om_render *o,
                        const struct om_domain_view *v);
int om_svg_panel_in(FILE *out, const struct om_report *r, const struct om_render *o,
                    bool standalone, const char *domain);

/* Whether name is the host's domain. */
bool om_domain_is_host(const char *name);

#endif
