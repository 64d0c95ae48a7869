/* `optmem report`: reads lifetime reports and renders them as text, JSON, Chrome trace
 * events, folded stacks, SVG, HTML or a PyTorch memory snapshot. */
#include "commands.h"
#include "report_domain.h"
#include "snapshot.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TOP 10
#define DEFAULT_MAX_SLICES 20000

/* Folded stacks carry no labels: the domain changes only which sites they weigh. */
static int render_folded(const struct om_merged *m, const struct om_render *o,
                         const struct om_domain_view *v)
{
    return om_render_folded(m, o);
}

static const struct {
    const char *name;
    int (*render)(const struct om_merged *m, const struct om_render *o,
                  const struct om_domain_view *v);
} formats[] = {
    {"text", om_render_text_in},         {"json", om_render_json_in},
    {"chrome", om_render_chrome_in},     {"folded", render_folded},
    {"svg", om_render_svg_in},           {"html", om_render_html_in},
    {"memory-viz", om_render_memviz_in},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: optmem report FILE... [--format FORMAT] [-o OUT] [--top N] [--domain NAME]\n"
            "Summarises optmem lifetime reports (OPTMEM_REPORT files). Several files (ranks,\n"
            "forked workers) are merged: one row per process, totals, and call sites merged\n"
            "by their stacks. A PyTorch memory snapshot (torch.cuda.memory._dump_snapshot,\n"
            "recognised by its content) is read as a report of its devices (cuda:N; the\n"
            "first by default), with its Python frames as call sites.\n\n"
            "  --format FORMAT     text (default): peak, lower bound, plan efficiency,\n"
            "                      iterations, call sites at the peak, categories, serving\n"
            "                      json:   the same summary for scripts\n"
            "                      chrome: trace events for Perfetto / chrome://tracing\n"
            "                      folded: stacks for flamegraph.pl / speedscope, weighted by\n"
            "                              bytes live at the peak\n"
            "                      svg:    block offsets against time, live bytes, lower bound\n"
            "                      html:   one offline page with the pictures and tables\n"
            "                      memory-viz: one report's domain as a PyTorch memory\n"
            "                              snapshot (pickle) for pytorch.org/memory_viz and\n"
            "                              torch.cuda._memory_viz; cpu is shown as device 0\n"
            "  --domain NAME       the memory domain shown, in every format: cpu (default)\n"
            "                      or a device domain the report lists (cuda:0, ...); the\n"
            "                      text summary of cpu names the device domains there are\n"
            "  -o, --output OUT    write to OUT instead of standard output\n"
            "  --top N             call sites shown (default %d)\n"
            "  --max-slices N      lifetimes drawn in chrome and svg output (default %d)\n"
            "  --no-symbolize      show the report's own names and module+offset only\n"
            "  --full-names        C++ frames with argument lists and templates, and call\n"
            "                      sites named by those (default: shortened)\n"
            "  -h, --help          this text\n\n"
            "Frames are symbolized from the modules named in the report (function, file:line,\n"
            "inlined frames) when those files are still there. Each call site is named by its\n"
            "innermost frame that is not allocator plumbing, and where there is one, the\n"
            "frame the program entered native code by or its innermost user Python frame.\n"
            "Exit status: 0 success, 1 a report is missing or invalid, lacks the domain, or\n"
            "OUT cannot be written, 2 bad usage.\n",
            DEFAULT_TOP, DEFAULT_MAX_SLICES);
}

static int parse_count(const char *s, size_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > 100000000ull)
        return -EINVAL;
    *out = (size_t)v;
    return 0;
}

static int render(int fmt, struct om_report *reports, size_t n, const char *outpath,
                  struct om_render *o, bool symbolize, const struct om_domain_view *v)
{
    struct om_merged m;
    int rc = om_merge(reports, n, &m);
    if (rc != 0) {
        fprintf(stderr, "optmem report: %s\n", strerror(-rc));
        return OM_EXIT_FAILURE;
    }
    int status = OM_EXIT_FAILURE;
    o->out = outpath ? fopen(outpath, "w") : stdout;
    if (!o->out) {
        fprintf(stderr, "optmem report: %s: %s\n", outpath, strerror(errno));
        goto out_merged;
    }
    rc = om_sym_open(symbolize, &o->sym);
    if (rc == 0)
        rc = formats[fmt].render(&m, o, v);
    om_sym_close(o->sym);
    if (fflush(o->out) != 0 && rc == 0)
        rc = -errno;
    if (outpath && fclose(o->out) != 0 && rc == 0)
        rc = -errno;
    if (rc != 0) {
        fprintf(stderr, "optmem report: %s: %s\n", outpath ? outpath : "standard output",
                strerror(-rc));
        if (outpath)
            unlink(outpath); /* no partial file that looks like a result */
        goto out_merged;
    }
    status = OM_EXIT_OK;
out_merged:
    om_merged_free(&m);
    return status;
}

int om_cmd_report(int argc, char **argv)
{
    enum { OPT_FORMAT = 256, OPT_TOP, OPT_SLICES, OPT_NOSYM, OPT_DOMAIN, OPT_FULL };
    static const struct option options[] = {
        {"format", required_argument, NULL, OPT_FORMAT},
        {"output", required_argument, NULL, 'o'},
        {"top", required_argument, NULL, OPT_TOP},
        {"max-slices", required_argument, NULL, OPT_SLICES},
        {"no-symbolize", no_argument, NULL, OPT_NOSYM},
        {"domain", required_argument, NULL, OPT_DOMAIN},
        {"full-names", no_argument, NULL, OPT_FULL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct om_render o = {.top = DEFAULT_TOP, .max_slices = DEFAULT_MAX_SLICES};
    const char *outpath = NULL, *domain = OM_HOST_DOMAIN;
    bool symbolize = true, domain_set = false;
    char *shown = NULL; /* the device a snapshot shows without --domain */
    int fmt = 0, opt;
    size_t v;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_FORMAT:
            fmt = -1;
            for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
                if (strcmp(optarg, formats[i].name) == 0)
                    fmt = (int)i;
            if (fmt < 0) {
                fprintf(stderr,
                        "optmem report: unknown format '%s' (text, json, chrome, "
                        "folded, svg, html or memory-viz)\n",
                        optarg);
                return OM_EXIT_USAGE;
            }
            break;
        case 'o':
            outpath = optarg;
            break;
        case OPT_TOP:
        case OPT_SLICES:
            if (parse_count(optarg, &v) != 0) {
                fprintf(stderr, "optmem report: --%s wants a positive integer, not '%s'\n",
                        opt == OPT_TOP ? "top" : "max-slices", optarg);
                return OM_EXIT_USAGE;
            }
            if (opt == OPT_TOP)
                o.top = v > 1000000 ? 1000000 : (unsigned)v;
            else
                o.max_slices = v;
            break;
        case OPT_NOSYM:
            symbolize = false;
            break;
        case OPT_FULL:
            o.full_names = true;
            break;
        case OPT_DOMAIN:
            domain = optarg;
            domain_set = true;
            break;
        case 'h':
            usage(stdout);
            return OM_EXIT_OK;
        default:
            usage(stderr);
            return OM_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "optmem report: no report file given\n");
        usage(stderr);
        return OM_EXIT_USAGE;
    }
    size_t n = (size_t)(argc - optind), nsnap = 0;
    /* A snapshot is one process's allocator: merging processes would invent one. */
    if (formats[fmt].render == om_render_memviz_in && n > 1) {
        fprintf(stderr, "optmem report: --format memory-viz takes one report, not %zu\n", n);
        return OM_EXIT_USAGE;
    }
    if (formats[fmt].render == om_render_memviz_in && !outpath && isatty(STDOUT_FILENO)) {
        fprintf(stderr, "optmem report: --format memory-viz writes a binary pickle: give -o FILE "
                        "or redirect standard output\n");
        return OM_EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++)
        nsnap += om_pickle_sniff(argv[i]);
    /* A snapshot shows a device by default and a report its host: no common domain. */
    if (nsnap && nsnap < n && !domain_set) {
        fprintf(stderr, "optmem report: snapshots and reports together need --domain\n");
        return OM_EXIT_USAGE;
    }
    struct stat out_st, in_st;
    for (int i = optind; outpath && i < argc && stat(outpath, &out_st) == 0; i++) {
        if (stat(argv[i], &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
            in_st.st_ino == out_st.st_ino) {
            fprintf(stderr, "optmem report: -o %s would overwrite the report %s\n", outpath,
                    argv[i]);
            return OM_EXIT_USAGE;
        }
    }
    struct om_report *reports = calloc(n, sizeof *reports);
    struct om_rdomains *devices = calloc(n, sizeof *devices);
    int status = OM_EXIT_FAILURE;
    size_t loaded = 0;
    if (!reports || !devices) {
        fprintf(stderr, "optmem report: out of memory\n");
        goto out;
    }
    for (; loaded < n; loaded++) {
        char err[1024];
        const char *path = argv[optind + (int)loaded];
        char *dev = NULL;
        int rc = om_pickle_sniff(path) ? om_snapshot_report(path, domain, &reports[loaded],
                                                            &devices[loaded], &dev, err, sizeof err)
                                       : om_report_load_domain(path, domain, &reports[loaded],
                                                               &devices[loaded], err, sizeof err);
        if (dev && !domain_set && !shown)
            shown = dev;
        else
            free(dev);
        if (rc != 0) {
            fprintf(stderr, "optmem report: %s\n", err);
            goto out;
        }
    }
    const struct om_domain_view view = {shown ? shown : domain, devices};
    status = render(fmt, reports, n, outpath, &o, symbolize, &view);
out:
    for (size_t i = 0; i < loaded; i++) {
        om_report_free(&reports[i]);
        om_rdomains_free(&devices[i]);
    }
    free(reports);
    free(devices);
    free(shown);
    return status;
}
