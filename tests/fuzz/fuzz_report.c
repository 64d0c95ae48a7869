/* Fuzz target: om_report_load on arbitrary JSON, then merging and rendering what it accepted. */
#include "fuzz_util.h"
#include "report_domain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (!sink) {
        sink = fopen("/dev/null", "w");
        FUZZ_CHECK(sink != NULL);
    }
    struct om_report r[2];
    char err[512] = "";
    int rc = om_report_load(fuzz_file(data, size), &r[0], err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM || rc == -EIO);
    if (rc != 0) {
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    /* The renderers trust what the loader accepted: a report that loads must render in
     * every format, alone and merged with itself (as `optmem report a.json a.json`). */
    rc = om_report_load(fuzz_file(data, size), &r[1], err, sizeof err);
    FUZZ_CHECK(rc == 0);
    (void)om_plan_efficiency(&r[0]);
    (void)om_served_fraction(&r[0]);
    /* The symbolizer keeps pointers into the reports' strings: it lives inside their life,
     * as in `optmem report`. */
    struct om_symbolizer *sym;
    FUZZ_CHECK(om_sym_open(false, &sym) == 0);
    for (size_t n = 1; n <= 2; n++) {
        struct om_merged m;
        if (om_merge(r, n, &m) != 0)
            continue;
        const struct om_render o = {.out = sink, .top = 5, .max_slices = 200, .sym = sym};
        om_render_text(&m, &o);
        om_render_json(&m, &o);
        om_render_chrome(&m, &o);
        om_render_folded(&m, &o);
        om_render_svg(&m, &o);
        om_render_html(&m, &o);
        /* One report only (the CLI refuses more); its placement must hold every block. */
        const struct om_domain_view host = {"cpu", NULL};
        if (n == 1)
            FUZZ_CHECK(om_render_memviz_in(&m, &o, &host) == 0);
        om_merged_free(&m);
    }
    om_sym_close(sym);
    om_report_free(&r[0]);
    om_report_free(&r[1]);
    return 0;
}
