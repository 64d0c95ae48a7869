/* Fuzz target: the pickle reader and the snapshot reader on arbitrary bytes, then the
 * replanner on the lifetimes of small snapshots. */
#include "fuzz_util.h"
#include "replanner.h"
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
    return 0;
}
