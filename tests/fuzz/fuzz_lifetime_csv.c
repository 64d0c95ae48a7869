/* Fuzz target: om_rp_csv_read_instance on arbitrary CSV (comments, a period, fixed blocks),
 * then the replanner on what it accepted. */
#include "fuzz_util.h"
#include "replanner.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Every block carries its size in front, so that a release with the wrong size traps. */
static void *checked_alloc(void *ctx, size_t n)
{
    (void)ctx;
    uint64_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    return p + 2;
}

static void checked_release(void *ctx, void *q, size_t n)
{
    (void)ctx;
    if (!q)
        return;
    uint64_t *p = (uint64_t *)q - 2;
    FUZZ_CHECK(p[0] == n);
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const om_rp_allocator alloc = {checked_alloc, checked_release, NULL};
    om_rp_block *blocks = NULL;
    size_t n = 0;
    uint64_t period = 0;
    char err[256] = "";
    int rc = om_rp_csv_read_instance(fuzz_file(data, size), &alloc, &blocks, &n, &period, err,
                                     sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == -EINVAL)
        FUZZ_CHECK(err[0] != '\0');
    if (rc != 0)
        return 0;
    /* An accepted set that also validates must get a plan that om_rp_check accepts; a
     * small one, and a short greedy run with a node cap so that each input is reproducible. */
    if (n > 0 && n <= 64 && om_rp_validate(blocks, n, period, err, sizeof err) == 0) {
        uint64_t *offsets = calloc(n, sizeof *offsets);
        FUZZ_CHECK(offsets != NULL);
        om_rp_options opt = {.period = period,
                             .algo = OM_RP_ALGO_GREEDY,
                             .budget_ms = 1000,
                             .max_nodes = 64,
                             .alloc = alloc,
                             .err = err,
                             .errlen = sizeof err};
        om_rp_result res;
        rc = om_rp_plan(blocks, n, &opt, offsets, &res);
        FUZZ_CHECK(rc == 0 || rc == -ENOMEM);
        if (rc == 0) {
            FUZZ_CHECK(om_rp_check(blocks, n, period, offsets, &alloc, err, sizeof err) == 0);
            FUZZ_CHECK(res.peak >= res.lower_bound);
        }
        free(offsets);
    }
    om_rp_csv_free(&alloc, blocks, n);
    return 0;
}
