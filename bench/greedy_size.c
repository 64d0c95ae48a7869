/* Greedy by size alone on lifetime CSVs: its time (the fastest of R runs), peak and plan. */
#include "om_common.h"
#include "rp_bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One file: the setup (rp_inst_core) and greedy by size with no deadline, runs times. */
static int bench_file(const char *path, int runs)
{
    om_rp_block *b = NULL;
    size_t n = 0;
    uint64_t period = 0, best_core = UINT64_MAX, best_greedy = UINT64_MAX, best_cpu = UINT64_MAX;
    uint64_t peak = 0;
    uint64_t hash = OM_FNV_OFFSET;
    int rc = rp_bench_read("greedy_size", path, &b, &n, &period);

    if (rc < 0)
        return rc;
    for (int r = 0; r < runs && rc == 0; r++) {
        rp_mem m = {&heap, NULL};
        rp_inst in;
        uint32_t *order, placed;
        uint64_t *off, t0 = rp_now_ns(), t1, t2, c1, c2;

        if ((rc = rp_inst_core(&in, &m, b, n, period)) < 0)
            goto next;
        t1 = rp_now_ns();
        c1 = cpu_ns();
        order = rp_alloc(&m, (size_t)in.nm + 1, sizeof(*order));
        off = rp_alloc(&m, (size_t)in.nm + 1, sizeof(*off));
        if (!order || !off) {
            rc = -ENOMEM;
            goto next;
        }
        if ((rc = rp_greedy_size(&in, &m, NULL, order, off, &peak, &placed)) < 0)
            goto next;
        t2 = rp_now_ns();
        c2 = cpu_ns();
        best_cpu = c2 - c1 < best_cpu ? c2 - c1 : best_cpu;
        best_core = t1 - t0 < best_core ? t1 - t0 : best_core;
        best_greedy = t2 - t1 < best_greedy ? t2 - t1 : best_greedy;
        /* over the offsets: two builds that place alike print the same hash */
        for (uint32_t k = 0; r == 0 && k < in.nm; k++)
            hash = om_fnv1a_word(hash, off[k]);
    next:
        rp_mem_free_all(&m);
    }
    if (rc == 0)
        printf("%s\t%zu\t%llu\t%016llx\t%.2f\t%.2f\t%.2f\n", path, n, (unsigned long long)peak,
               (unsigned long long)hash, (double)best_core / 1e6, (double)best_greedy / 1e6,
               (double)best_cpu / 1e6);
    else
        fprintf(stderr, "greedy_size: %s: %s\n", path, strerror(-rc));
    om_rp_csv_free(&heap, b, n);
    return rc;
}

int main(int argc, char **argv)
{
    int runs = 5, first = 1, failed = 0;

    if (argc > 2 && strcmp(argv[1], "-r") == 0) {
        char *end;
        long v = strtol(argv[2], &end, 10);

        if (*end || v < 1 || v > 1000) {
            fprintf(stderr, "greedy_size: -r takes 1 to 1000 runs\n");
            return 1;
        }
        runs = (int)v;
        first = 3;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: greedy_size [-r RUNS] FILE.csv...\n"
                        "prints file, buffers, peak, a hash of the offsets, the setup's and greedy "
                        "by size's ms and greedy by size's CPU ms (fastest of RUNS, default "
                        "5)\n");
        return 1;
    }
    printf("file\tbuffers\tpeak\toffsets_hash\tsetup_ms\tgreedy_ms\tgreedy_cpu_ms\n");
    for (int i = first; i < argc; i++)
        failed |= bench_file(argv[i], runs) != 0;
    return failed;
}
