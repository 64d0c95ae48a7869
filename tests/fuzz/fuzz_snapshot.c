/* Fuzz target: om_snapshot_load and om_snapshot_report on arbitrary bytes, then the plans. */
#include "fuzz_util.h"
#include "replanner.h"
#include "report_domain.h"
#include "snapshot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void *plain_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n ? n : 1);
}

static void plain_release(void *ctx, void *p, size_t n)
{
    (void)ctx;
    (void)n;
    free(p);
}

/* The report of the first device: requests numbered by birth, deaths after births, the live
 * bytes never above the lower bound. */
static void check_report(const uint8_t *data, size_t size)
{
    struct om_report r;
    struct om_rdomains d;
    char err[512] = "", *shown = NULL;
    if (size > 4096) /* the plan drawn in the pictures would make each run slow */
        return;
    int rc = om_snapshot_report(fuzz_file(data, size), "cpu", &r, &d, &shown, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc != 0) {
        FUZZ_CHECK(err[0] != '\0' && !shown);
        return;
    }
    FUZZ_CHECK(shown && d.n > 0 && r.nlife == r.sample_end - r.sample_first);
    for (size_t i = 0; i < r.nlife; i++) {
        const struct om_rlife *l = &r.life[i];
        FUZZ_CHECK(l->birth == i && l->site < r.nsites);
        FUZZ_CHECK(l->death == OM_NO_VALUE || (l->death > i && l->death <= r.nlife));
        FUZZ_CHECK(r.live_after[i] <= r.lower_bound);
    }
    for (size_t i = 0; i < r.npeak; i++)
        FUZZ_CHECK(r.peak[i].site < r.nsites);
    free(shown);
    om_report_free(&r);
    om_rdomains_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const om_rp_allocator alloc = {plain_alloc, plain_release, NULL};
    struct om_snapshot s;
    char err[512] = "";
    int rc = om_snapshot_load(fuzz_file(data, size), &s, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc != 0) {
        FUZZ_CHECK(err[0] != '\0' && !strchr(err, '\n'));
        return 0;
    }
    size_t first = 0, total = 0;
    for (size_t g = 0; g < s.ngroups; g++)
        total += s.groups[g].nlife;
    FUZZ_CHECK(total == s.nlife);
    for (size_t i = 0; i < s.nlife; i++) {
        const struct om_snap_life *l = &s.life[i];
        FUZZ_CHECK(l->birth < l->death && l->size > 0 && l->site < s.nsites &&
                   l->group < s.ngroups);
    }
    for (size_t g = 0; g < s.ngroups; first += s.groups[g++].nlife) {
        size_t n = s.groups[g].nlife;
        if (n == 0 || n > 64)
            continue;
        om_rp_block *b = calloc(n, sizeof *b);
        uint64_t *off = calloc(n, sizeof *off);
        FUZZ_CHECK(b && off);
        for (size_t i = 0; i < n; i++)
            b[i] = (om_rp_block){.id = i,
                                 .lower = s.life[first + i].birth,
                                 .upper = s.life[first + i].death,
                                 .size = s.life[first + i].size};
        om_rp_options opt = {.algo = OM_RP_ALGO_GREEDY,
                             .budget_ms = 1000,
                             .max_nodes = 64,
                             .alloc = alloc,
                             .err = err,
                             .errlen = sizeof err};
        om_rp_result res;
        rc = om_rp_plan(b, n, &opt, off, &res);
        FUZZ_CHECK(rc == 0 || rc == -ENOMEM);
        if (rc == 0)
            FUZZ_CHECK(om_rp_check(b, n, 0, off, &alloc, err, sizeof err) == 0);
        free(b);
        free(off);
    }
    om_snapshot_free(&s);
    check_report(data, size);
    return 0;
}
