/* The replanner's setup and first plan (greedy by size's) on lifetime CSVs: their CPU time. */
#include "rp_bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long minor_faults(void)
{
    struct rusage ru;

    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* One run: rp_inst_core, then rp_greedy_first with a deadline cut_ms after the start (0: none);
 * CPU ns of each in t[0..2). */
static int run_once(const om_rp_block *b, size_t n, uint64_t period, uint64_t cut_ms, uint64_t *t,
                    long *faults, uint64_t *peak, int *cut)
{
    rp_mem m = {&heap, NULL};
    rp_inst in;
    rp_best best = {0};
    rp_clock clk = {cut_ms ? rp_now_ns() + cut_ms * 1000000u : UINT64_MAX, 0, 0, 0, 0};
    rp_greedy_ws *ws;
    long f0 = minor_faults();
    uint64_t c0 = cpu_ns(), c1;
    int rc;

    if ((rc = rp_inst_core(&in, &m, b, n, period)) < 0)
        goto out;
    c1 = cpu_ns();
    best.off = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint64_t));
    best.order = rp_alloc(&m, (size_t)in.nm + 1, sizeof(uint32_t));
    if (!best.off || !best.order) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = rp_greedy_first(&in, &m, &best, &clk, &ws)) < 0)
        goto out;
    t[0] = c1 - c0;
    t[1] = cpu_ns() - c1;
    *faults = minor_faults() - f0;
    *peak = best.peak;
    *cut = best.greedy_cut;
out:
    rp_mem_free_all(&m);
    return rc;
}

static int bench_file(const char *path, int runs, uint64_t cut_ms)
{
    om_rp_block *b = NULL;
    size_t n = 0;
    uint64_t period = 0, best[2] = {UINT64_MAX, UINT64_MAX}, best_sum = UINT64_MAX, peak = 0;
    long faults = 0;
    int cut = 0, cuts = 0;
    int rc = rp_bench_read("first_plan", path, &b, &n, &period);

    if (rc < 0)
        return rc;
    for (int r = 0; r < runs && rc == 0; r++) {
        uint64_t t[2];
        long f;

        if ((rc = run_once(b, n, period, cut_ms, t, &f, &peak, &cut)) < 0)
            break;
        cuts += cut;
        for (int s = 0; s < 2; s++)
            best[s] = t[s] < best[s] ? t[s] : best[s];
        if (t[0] + t[1] < best_sum) {
            best_sum = t[0] + t[1];
            faults = f;
        }
    }
    if (rc == 0)
        printf("%s\t%zu\t%llu\t%.2f\t%.2f\t%.2f\t%ld\t%d\n", path, n, (unsigned long long)peak,
               (double)best[0] / 1e6, (double)best[1] / 1e6, (double)best_sum / 1e6, faults, cuts);
    else
        fprintf(stderr, "first_plan: %s: %s\n", path, strerror(-rc));
    om_rp_csv_free(&heap, b, n);
    return rc;
}

int main(int argc, char **argv)
{
    int runs = 5, first = 1, failed = 0;
    uint64_t cut_ms = 0;

    while (first + 1 < argc && (strcmp(argv[first], "-r") == 0 || strcmp(argv[first], "-d") == 0)) {
        char *end;
        long v = strtol(argv[first + 1], &end, 10);

        if (*end || v < 1 || v > 100000) {
            fprintf(stderr, "first_plan: %s takes 1 to 100000\n", argv[first]);
            return 1;
        }
        if (argv[first][1] == 'r')
            runs = (int)v;
        else
            cut_ms = (uint64_t)v;
        first += 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: first_plan [-r RUNS] [-d MS] FILE.csv...\n"
                        "prints file, buffers, the first plan's peak (the last run's), the CPU ms "
                        "of the setup (rp_inst_core), of the first plan (rp_greedy_first, with a "
                        "deadline MS after the setup's start, default none) and of both (fastest "
                        "of RUNS, default 5), the minor page faults of the fastest run, and in "
                        "how many runs the deadline cut greedy by size\n");
        return 1;
    }
    printf("file\tbuffers\tpeak\tsetup_cpu_ms\tfirst_cpu_ms\ttotal_cpu_ms\tminor_faults\tcut\n");
    for (int i = first; i < argc; i++)
        failed |= bench_file(argv[i], runs, cut_ms) != 0;
    return failed;
}
