/* `optmem plan`: offline placement of a lifetime CSV, with the replanner the library uses. */
#include "commands.h"
#include "replanner.h"
#include "snapshot.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define CLI_DEFAULT_BUDGET_MS 1000
/* The search's branch and bound recurses once per block placed: a dive through tens of
 * thousands of blocks needs more than a main thread's usual 8 MiB. */
#define CLI_SEARCH_STACK ((size_t)256 << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: optmem plan FILE.csv|SNAPSHOT.pickle [--budget-ms N] [--algo NAME]\n"
            "                  [--seed N] [--period P] [-o OUT.csv]\n"
            "Places the buffers of a lifetime CSV (header id,lower,upper,size[,alignment]\n"
            "[,fixed,offset]; lifetimes half-open [lower,upper); a line \"# period: P\" makes\n"
            "the timeline cyclic) in one pool and prints the peak against the\n"
            "lower bound (max bytes live at once), greedy by size's peak, which it never\n"
            "exceeds, and the bound proven so far (how much of the gap is the bound's).\n"
            "A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot, recognised by its\n"
            "content) is planned per device and stream, against the peak PyTorch reserved.\n"
            "  --budget-ms N  search time in milliseconds (default %d)\n"
            "  --algo NAME    auto (default), greedy, local or bnb\n"
            "  --seed N       seed of the randomized search (default 1)\n"
            "  --period P     cyclic timeline of period P (0 <= lower < P, upper <= lower + P);\n"
            "                 overrides the file's \"# period: P\"\n"
            "  -o OUT.csv     write the input columns plus offset (a snapshot's lifetimes: one\n"
            "                 file per device and stream, OUT.dD.sS.csv, when there are several)\n"
            "  -h, --help     this text\n",
            CLI_DEFAULT_BUDGET_MS);
}

/* Strict unsigned decimal: "12x", "-1" and "" are errors. */
static int parse_num(const char *s, uint64_t max, uint64_t *v)
{
    char *end;
    unsigned long long x;

    if (!s || !*s || *s == '-' || *s == '+')
        return -EINVAL;
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno || *end || x > max)
        return -EINVAL;
    *v = x;
    return 0;
}

/* The value of --name V or --name=V; advances *i past it. NULL if missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t len = strlen(name);
    const char *a = argv[*i];

    if (strncmp(a, name, len) == 0 && a[len] == '=')
        return a + len + 1;
    if (strcmp(a, name) == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int is_opt(const char *a, const char *name)
{
    size_t len = strlen(name);
    return strncmp(a, name, len) == 0 && (a[len] == '\0' || a[len] == '=');
}

struct search {
    const om_rp_block *blocks;
    size_t n;
    om_rp_options *opt;
    uint64_t *off;
    om_rp_result *res;
    int rc;
};

static void *search_main(void *arg)
{
    struct search *s = arg;
    s->rc = om_rp_plan(s->blocks, s->n, s->opt, s->off, s->res);
    return NULL;
}

/* om_rp_plan on a thread with a stack of CLI_SEARCH_STACK (a MiB of it left to the thread's
 * start and the search's callers), or here, as deep as this thread's stack allows, where no
 * such thread can be made. */
static int plan_blocks(const om_rp_block *blocks, size_t n, om_rp_options *opt, uint64_t *off,
                       om_rp_result *res)
{
    struct search s = {blocks, n, opt, off, res, 0};
    pthread_attr_t attr;
    pthread_t thread;
    int made = 0;
    opt->stack_bytes = CLI_SEARCH_STACK - ((size_t)1 << 20);
    if (pthread_attr_init(&attr) == 0) {
        made = pthread_attr_setstacksize(&attr, CLI_SEARCH_STACK) == 0 &&
               pthread_create(&thread, &attr, search_main, &s) == 0;
        pthread_attr_destroy(&attr);
    }
    if (made) {
        pthread_join(thread, NULL);
        return s.rc;
    }
    struct rlimit lim;
    opt->stack_bytes = getrlimit(RLIMIT_STACK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
                               lim.rlim_cur > ((rlim_t)2 << 20)
                           ? (size_t)lim.rlim_cur - ((size_t)1 << 20)
                           : (size_t)1 << 20;
    return om_rp_plan(blocks, n, opt, off, res);
}

static int write_out(const char *path, const om_rp_block *b, size_t n, const uint64_t *off)
{
    FILE *f = fopen(path, "w");
    int rc;

    if (!f) {
        fprintf(stderr, "optmem: plan: %s: %s\n", path, strerror(errno));
        return -errno;
    }
    rc = om_rp_csv_write(f, b, n, off);
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc < 0)
        fprintf(stderr, "optmem: plan: %s: %s\n", path, strerror(-rc));
    return rc;
}

static double gib(uint64_t b)
{
    return (double)b / (double)(UINT64_C(1) << 30);
}

/* OUT.csv for the only group, else OUT.dD.sS.csv (before the extension, if any). */
static int group_path(const char *out, const struct om_snap_group *g, bool several, char *buf,
                      size_t len)
{
    const char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
    int n;
    if (!several)
        n = snprintf(buf, len, "%s", out);
    else if (dot && (!slash || dot > slash))
        n = snprintf(buf, len, "%.*s.d%lld.s%lld%s", (int)(dot - out), out, (long long)g->device,
                     (long long)g->stream, dot);
    else
        n = snprintf(buf, len, "%s.d%lld.s%lld", out, (long long)g->device, (long long)g->stream);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Plans each device and stream of a snapshot on its own, as the allocator would see it. */
static int plan_snapshot(const char *in, const char *out, om_rp_options *opt)
{
    struct om_snapshot snap;
    char err[512], path[4096];
    om_rp_block *blocks = NULL;
    uint64_t *off = NULL;
    int ret = OM_EXIT_FAILURE, rc;

    if (om_snapshot_load(in, &snap, err, sizeof err) < 0) {
        fprintf(stderr, "optmem: plan: %s\n", err);
        return OM_EXIT_FAILURE;
    }
    if (opt->period) {
        fprintf(stderr, "optmem: plan: --period does not apply to a snapshot's timeline\n");
        ret = OM_EXIT_USAGE;
        goto out;
    }
    if (!(blocks = calloc(snap.nlife ? snap.nlife : 1, sizeof *blocks)) ||
        !(off = calloc(snap.nlife ? snap.nlife : 1, sizeof *off))) {
        fprintf(stderr, "optmem: plan: out of memory\n");
        goto out;
    }
    printf("file:        %s\n", in);
    printf("format:      PyTorch memory snapshot (%s)\n",
           snap.legacy ? "torch 1.13 list of segments, no trace" : "segments and device_traces");
    size_t first = 0;
    for (size_t g = 0; g < snap.ngroups; first += snap.groups[g++].nlife) {
        const struct om_snap_group *gr = &snap.groups[g];
        size_t n = gr->nlife;
        om_rp_result res = {0};
        for (size_t i = 0; i < n; i++) {
            const struct om_snap_life *l = &snap.life[first + i];
            blocks[i] =
                (om_rp_block){.id = i, .lower = l->birth, .upper = l->death, .size = l->size};
        }
        if (n && (rc = plan_blocks(blocks, n, opt, off, &res)) < 0) {
            fprintf(stderr, "optmem: plan: %s: device %lld stream %lld: %s\n", in,
                    (long long)gr->device, (long long)gr->stream, err);
            goto out;
        }
        if (n && om_rp_check(blocks, n, 0, off, &opt->alloc, err, sizeof err) < 0) {
            fprintf(stderr, "optmem: plan: internal error, invalid plan: %s\n", err);
            goto out;
        }
        printf("device %lld stream %lld:\n", (long long)gr->device, (long long)gr->stream);
        printf("  buffers:     %zu (%" PRIu64 " alloc events)\n", n, gr->alloc_events);
        printf("  native peak: %" PRIu64 " (%.3f GiB reserved by PyTorch, recorded)\n",
               gr->native_peak, gib(gr->native_peak));
        printf("  lower bound: %" PRIu64 " (%.3f GiB)\n", res.lower_bound, gib(res.lower_bound));
        printf("  plan peak:   %" PRIu64 " (%.3f GiB)\n", res.peak, gib(res.peak));
        if (gr->native_peak >= res.peak)
            printf("  saving:      %" PRIu64 " (%.3f GiB, %.1f%% of native)\n",
                   gr->native_peak - res.peak, gib(gr->native_peak - res.peak),
                   gr->native_peak
                       ? 100.0 * (double)(gr->native_peak - res.peak) / (double)gr->native_peak
                       : 0.0);
        else
            printf("  saving:      none (the plan is %" PRIu64 " above native)\n",
                   res.peak - gr->native_peak);
        printf("  peak/LB:     %.4f\n",
               res.lower_bound ? (double)res.peak / (double)res.lower_bound : 1.0);
        if (n)
            printf("  time:        %.1f ms (algo %s, best from %s, %" PRIu64 " steps%s)\n",
                   (double)res.elapsed_ns / 1e6, om_rp_algo_name(opt->algo), res.stage, res.nodes,
                   res.optimal ? ", optimal" : "");
        if (out) {
            if (group_path(out, gr, snap.ngroups > 1, path, sizeof path) < 0) {
                fprintf(stderr, "optmem: plan: %s: name too long\n", out);
                goto out;
            }
            if (write_out(path, blocks, n, off) < 0)
                goto out;
        }
    }
    if (snap.ngroups == 0)
        printf("no device memory in the snapshot\n");
    ret = OM_EXIT_OK;
out:
    free(blocks);
    free(off);
    om_snapshot_free(&snap);
    return ret;
}

int om_cmd_plan(int argc, char **argv)
{
    om_rp_options opt = {0};
    om_rp_result res;
    om_rp_block *blocks = NULL;
    uint64_t *off = NULL, v, file_period = 0;
    const char *in = NULL, *out = NULL;
    int period_given = 0;
    char err[512];
    size_t n = 0;
    int ret = OM_EXIT_FAILURE, rc;

    opt.alloc = om_cli_rp_heap;
    opt.budget_ms = CLI_DEFAULT_BUDGET_MS;
    opt.seed = 1;
    opt.err = err;
    opt.errlen = sizeof(err);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return OM_EXIT_OK;
        }
        if (strcmp(a, "-o") == 0 || is_opt(a, "--output")) {
            val = strcmp(a, "-o") == 0 ? (i + 1 < argc ? argv[++i] : NULL)
                                       : opt_value(argc, argv, &i, "--output");
            if (!val || !*val)
                goto missing;
            out = val;
        } else if (is_opt(a, "--budget-ms")) {
            if (!(val = opt_value(argc, argv, &i, "--budget-ms")))
                goto missing;
            if (parse_num(val, 86400000, &v) < 0 || v == 0)
                goto bad_value;
            opt.budget_ms = (uint32_t)v;
        } else if (is_opt(a, "--seed")) {
            if (!(val = opt_value(argc, argv, &i, "--seed")))
                goto missing;
            if (parse_num(val, UINT64_MAX, &opt.seed) < 0)
                goto bad_value;
        } else if (is_opt(a, "--period")) {
            if (!(val = opt_value(argc, argv, &i, "--period")))
                goto missing;
            if (parse_num(val, UINT64_MAX, &opt.period) < 0)
                goto bad_value;
            period_given = 1;
        } else if (is_opt(a, "--algo")) {
            if (!(val = opt_value(argc, argv, &i, "--algo")))
                goto missing;
            if (om_rp_algo_parse(val, &opt.algo) < 0) {
                fprintf(stderr, "optmem: plan: unknown algorithm '%s' (auto, greedy, local, bnb)\n",
                        val);
                return OM_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "optmem: plan: unknown option '%s' (see optmem plan --help)\n", a);
            return OM_EXIT_USAGE;
        } else if (in) {
            fprintf(stderr, "optmem: plan: one input file only, got '%s' and '%s'\n", in, a);
            return OM_EXIT_USAGE;
        } else {
            in = a;
        }
        continue;
    missing:
        fprintf(stderr, "optmem: plan: option '%s' needs a value\n", a);
        return OM_EXIT_USAGE;
    bad_value:
        fprintf(stderr, "optmem: plan: bad value '%s' for %s\n", val, a);
        return OM_EXIT_USAGE;
    }
    if (!in) {
        fprintf(stderr, "optmem: plan: no input file (usage: optmem plan FILE.csv [options])\n");
        return OM_EXIT_USAGE;
    }
    if (om_pickle_sniff(in))
        return plan_snapshot(in, out, &opt);

    if ((rc = om_rp_csv_read_instance(in, &opt.alloc, &blocks, &n, &file_period, err,
                                      sizeof(err))) < 0) {
        fprintf(stderr, "optmem: plan: %s\n", err);
        goto out;
    }
    if (!period_given) /* the file's "# period: P", if any */
        opt.period = file_period;
    if (!(off = calloc(n ? n : 1, sizeof(*off)))) {
        fprintf(stderr, "optmem: plan: out of memory\n");
        goto out;
    }
    if ((rc = plan_blocks(blocks, n, &opt, off, &res)) < 0) {
        fprintf(stderr, "optmem: plan: %s: %s\n", in, err);
        goto out;
    }
    /* Never print a plan the checker has not passed. */
    if ((rc = om_rp_check(blocks, n, opt.period, off, &opt.alloc, err, sizeof(err))) < 0) {
        fprintf(stderr, "optmem: plan: internal error, invalid plan: %s\n", err);
        goto out;
    }
    printf("file:        %s\n", in);
    printf("buffers:     %zu\n", n);
    if (opt.period)
        printf("period:      %" PRIu64 " (cyclic)\n", opt.period);
    printf("lower bound: %" PRIu64 "\n", res.lower_bound);
    printf("peak:        %" PRIu64 "\n", res.peak);
    printf("peak/LB:     %.4f\n",
           res.lower_bound ? (double)res.peak / (double)res.lower_bound : 1.0);
    printf("greedy:      %" PRIu64 " (%.4f x LB, greedy by size%s)\n", res.greedy_peak,
           res.lower_bound ? (double)res.greedy_peak / (double)res.lower_bound : 1.0,
           res.greedy_cut ? ", cut: the budget ran out before it finished, the blocks it had not "
                            "placed were added by a quicker packing; --budget-ms N for more"
                          : "");
    printf("proven:      %" PRIu64 " (no plan has a lower peak)\n", res.proven_bound);
    /* Above LB, the gap is the bound's up to what is proven, the search's (or not yet
     * known) above that. */
    if (res.peak > res.lower_bound)
        printf("gap:         %" PRIu64 " bytes: %" PRIu64 " the bound's (proven), %" PRIu64
               " not settled by the search\n",
               res.peak - res.lower_bound, res.proven_bound - res.lower_bound,
               res.peak - res.proven_bound);
    printf("time:        %.1f ms (algo %s, best from %s, %" PRIu64 " steps%s)\n",
           (double)res.elapsed_ns / 1e6, om_rp_algo_name(opt.algo), res.stage, res.nodes,
           res.optimal ? ", optimal" : "");
    if (out && write_out(out, blocks, n, off) < 0)
        goto out;
    ret = OM_EXIT_OK;
out:
    free(off);
    om_rp_csv_free(&opt.alloc, blocks, n);
    return ret;
}
