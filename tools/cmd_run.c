/* optmem run: starts a command with liboptmem.so preloaded and the options as OPTMEM_*
 * variables, forwards signals to it, and returns its exit status. */
#include "commands.h"
#include "report.h"
#include "report_domain.h"

#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid;

static void run_usage(FILE *out)
{
    fprintf(
        out,
        "usage: optmem run [OPTIONS] [--] COMMAND [ARGS...]\n\n"
        "Runs COMMAND with liboptmem.so preloaded (children and exec'd programs keep it).\n\n"
        "  --mode plan|trace|off    OPTMEM_MODE (default plan)\n"
        "  -o, --report PATH        OPTMEM_REPORT, %%p pid, %%r rank (default optmem.%%p.json)\n"
        "  --min-bytes SIZE         OPTMEM_MIN_BYTES, e.g. 4096 or 64K\n"
        "  --stack-depth N          OPTMEM_STACK_DEPTH, 1..64\n"
        "  --warmup auto|N          OPTMEM_WARMUP\n"
        "  --plan-file PATH         OPTMEM_PLAN_FILE\n"
        "  --devices LIST           OPTMEM_DEVICES: cpu, cuda or cpu,cuda\n"
        "  --cuda                   manage device memory too (OPTMEM_DEVICES=cpu,cuda unless\n"
        "                           set) and add backend:cudaMallocAsync to\n"
        "                           PYTORCH_CUDA_ALLOC_CONF (PyTorch then allocates and\n"
        "                           frees each tensor through cudaMallocAsync)\n"
        "  --log quiet|warn|info|debug  OPTMEM_LOG (default warn: problems only)\n"
        "  --verify                 OPTMEM_VERIFY=1 (checking mode)\n"
        "  --library PATH           the liboptmem.so to preload\n\n"
        "Exit status: that of COMMAND (a command killed by a signal kills optmem with it);\n"
        "127 when COMMAND cannot be run, 2 for bad usage.\n");
}

/* Forwards signals sent to optmem itself; a terminal's signals reach the child directly. */
static void forward_signal(int sig, siginfo_t *info, void *ctx)
{
    if (child_pid > 0 && info->si_code != SI_KERNEL)
        kill(child_pid, sig);
}

/* Finds liboptmem.so next to this executable: installed (bin/../lib, or where the build's
 * libdir lies from its bindir) or in the build tree. */
static int find_library(char *out, size_t outlen)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    static const char *const candidates[] = {OM_LIBDIR_FROM_BINDIR "/liboptmem.so",
                                             "../lib/liboptmem.so", "../preload/liboptmem.so"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", exe, candidates[i]);
        if (access(path, R_OK) == 0 && realpath(path, out) && strlen(out) < outlen)
            return 0;
    }
    return -ENOENT;
}

static int set_preload(const char *library)
{
    const char *old = getenv("LD_PRELOAD");
    if (!old || !*old)
        return setenv("LD_PRELOAD", library, 1);
    size_t len = strlen(library) + strlen(old) + 2;
    char *value = malloc(len);
    if (!value)
        return -1;
    snprintf(value, len, "%s:%s", library, old);
    int rc = setenv("LD_PRELOAD", value, 1);
    free(value);
    return rc;
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return 127;
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    int sig = WTERMSIG(status);
    fprintf(stderr, "optmem: command killed by signal %d (%s)\n", sig, strsignal(sig));
    signal(sig, SIG_DFL);
    raise(sig); /* so that our parent sees the same status */
    return 128 + sig;
}

/* The glob(3) pattern of every path the template can name for this rank: %p becomes '*',
 * the rest is matched literally. 0 or -ENAMETOOLONG. */
static int template_glob(const char *tmpl, long rank, char *out, size_t outlen)
{
    size_t n = 0;
    char num[32];
    for (const char *c = tmpl; *c; c++) {
        const char *piece = c;
        size_t len = 1;
        int literal = 1;
        if (c[0] == '%' && c[1] == 'p') {
            piece = "*", literal = 0, c++;
        } else if (c[0] == '%' && c[1] == 'r') {
            snprintf(num, sizeof num, "%ld", rank);
            piece = num, len = strlen(num), c++;
        } else if (c[0] == '%' && c[1] == '%') {
            c++;
        }
        for (size_t i = 0; i < len; i++) {
            if (n + 3 > outlen)
                return -ENAMETOOLONG;
            if (literal && strchr("*?[\\", piece[i]))
                out[n++] = '\\';
            out[n++] = piece[i];
        }
    }
    out[n] = '\0';
    return 0;
}

/* Managed requests of a report, all domains: how much of the run's work its process did. */
static uint64_t report_work(const struct om_report *r, const struct om_rdomains *devices)
{
    uint64_t work = r->managed_requests;
    for (size_t i = 0; i < devices->n; i++)
        work += devices->v[i].managed_requests;
    return work;
}

/* Whether the report is of the command's process or of one of its descendants. */
static int of_command(const struct om_report *r)
{
    if (r->pid == child_pid)
        return 1;
    for (size_t i = 0; i < r->nancestors; i++)
        if (r->ancestors[i] == child_pid)
            return 1;
    return 0;
}

/* Among the reports the template names (written since the command started), the one of
 * the command's process or descendant that made the most managed requests; how many
 * others of theirs there are. 0, or -ENOENT with err set. */
static int find_report(const char *tmpl, long rank, time_t since, char *best, size_t bestlen,
                       size_t *others, char *err, size_t errlen)
{
    char pattern[PATH_MAX * 2];
    if (template_glob(tmpl, rank, pattern, sizeof pattern) != 0) {
        snprintf(err, errlen, "the template '%s' is too long", tmpl);
        return -ENOENT;
    }
    glob_t g;
    int found = 0;
    uint64_t most = 0;
    *others = 0;
    snprintf(err, errlen, "no report of the command's processes matches %s", tmpl);
    if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0)
        return -ENOENT;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) != 0 || st.st_mtime < since)
            continue;
        struct om_report r;
        struct om_rdomains devices = {0};
        if (om_report_load_domain(g.gl_pathv[i], NULL, &r, &devices, err, errlen) != 0)
            continue;
        if (of_command(&r)) {
            uint64_t work = report_work(&r, &devices);
            if (found)
                ++*others;
            if ((!found || work > most) && strlen(g.gl_pathv[i]) < bestlen) {
                most = work;
                strcpy(best, g.gl_pathv[i]);
            }
            found = 1;
        }
        om_rdomains_free(&devices);
        om_report_free(&r);
    }
    globfree(&g);
    return found ? 0 : -ENOENT;
}

/* Finds the report of the command's process that did the work (its own, or a descendant's:
 * a wrapper's worker, a launcher's training process) and says what it holds and how to
 * look at it. */
static void print_summary(const char *report, time_t since)
{
    struct rusage usage;
    if (getrusage(RUSAGE_CHILDREN, &usage) == 0)
        fprintf(stderr, "optmem: peak RSS of the command: %.1f MiB\n", usage.ru_maxrss / 1024.0);
    if (!report)
        return;
    long rank = 0;
    static const char *const rank_vars[] = {"RANK", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++) {
        const char *v = getenv(rank_vars[i]);
        char *end;
        errno = 0;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !errno && !*end && r >= 0) {
            rank = r;
            break;
        }
    }
    char path[PATH_MAX], err[PATH_MAX + 256], hb[2][32];
    size_t others = 0;
    if (find_report(report, rank, since, path, sizeof path, &others, err, sizeof err) != 0) {
        fprintf(stderr, "optmem: no report from the command: %s\n", err);
        return;
    }
    struct om_report r;
    if (om_report_load(path, &r, err, sizeof err) != 0) {
        fprintf(stderr, "optmem: no report from the command: %s\n", err);
        return;
    }
    if (r.pid != child_pid || others)
        fprintf(stderr, "optmem: the busiest of %zu processes that wrote a report: pid %lld\n",
                others + 1, (long long)r.pid);
    fprintf(stderr, "optmem: lower bound %s, peak live %s",
            om_human_bytes(r.lower_bound, hb[0], sizeof hb[0]),
            om_human_bytes(r.peak_live, hb[1], sizeof hb[1]));
    double eff = om_plan_efficiency(&r), served = om_served_fraction(&r);
    if (eff >= 0)
        fprintf(stderr, ", plan efficiency %.3f", eff);
    if (served >= 0)
        fprintf(stderr, ", %.1f %% served from the plan", 100 * served);
    fprintf(stderr,
            "\noptmem: report: %s\noptmem: look at it: optmem report %s\n"
            "optmem:             optmem report %s --format html -o report.html\n",
            path, path, path);
    om_report_free(&r);
}

/* --cuda: the device domain on (unless OPTMEM_DEVICES says otherwise), and PyTorch's
 * stream-ordered backend, keeping the rest of the user's allocator settings. A backend the
 * user chose is left as it is. 0 or -1 with errno. */
static int set_cuda_env(void)
{
    if (!getenv("OPTMEM_DEVICES") && setenv("OPTMEM_DEVICES", "cpu,cuda", 1) != 0)
        return -1;
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    if (!conf || !*conf)
        return setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
    if (strstr(conf, "backend:"))
        return 0;
    char merged[4096];
    if (snprintf(merged, sizeof merged, "%s,backend:cudaMallocAsync", conf) >= (int)sizeof merged) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return setenv("PYTORCH_CUDA_ALLOC_CONF", merged, 1);
}

int om_cmd_run(int argc, char **argv)
{
    enum {
        OPT_MODE = 256,
        OPT_MIN,
        OPT_DEPTH,
        OPT_WARMUP,
        OPT_PLAN,
        OPT_DEV,
        OPT_CUDA,
        OPT_LOG,
        OPT_VERIFY,
        OPT_LIB,
        OPT_HELP
    };
    static const struct option options[] = {
        {"mode", required_argument, NULL, OPT_MODE},
        {"report", required_argument, NULL, 'o'},
        {"min-bytes", required_argument, NULL, OPT_MIN},
        {"stack-depth", required_argument, NULL, OPT_DEPTH},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"plan-file", required_argument, NULL, OPT_PLAN},
        {"devices", required_argument, NULL, OPT_DEV},
        {"cuda", no_argument, NULL, OPT_CUDA},
        {"log", required_argument, NULL, OPT_LOG},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"library", required_argument, NULL, OPT_LIB},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    /* Each option is the environment variable of the same meaning. */
    static const struct {
        int opt;
        const char *var;
    } env_of[] = {
        {OPT_MODE, "OPTMEM_MODE"},     {'o', "OPTMEM_REPORT"},
        {OPT_MIN, "OPTMEM_MIN_BYTES"}, {OPT_DEPTH, "OPTMEM_STACK_DEPTH"},
        {OPT_WARMUP, "OPTMEM_WARMUP"}, {OPT_PLAN, "OPTMEM_PLAN_FILE"},
        {OPT_DEV, "OPTMEM_DEVICES"},   {OPT_LOG, "OPTMEM_LOG"},
    };
    char library[PATH_MAX] = "";
    int cuda = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, "+o:h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_CUDA:
            cuda = 1;
            break;
        case OPT_VERIFY:
            setenv("OPTMEM_VERIFY", "1", 1);
            break;
        case OPT_LIB:
            if (!realpath(optarg, library)) {
                fprintf(stderr, "optmem: --library %s: %s\n", optarg, strerror(errno));
                return OM_EXIT_USAGE;
            }
            break;
        case 'h':
        case OPT_HELP:
            run_usage(stdout);
            return OM_EXIT_OK;
        case '?':
            run_usage(stderr);
            return OM_EXIT_USAGE;
        default:
            for (size_t i = 0; i < sizeof env_of / sizeof env_of[0]; i++) {
                if (env_of[i].opt == opt)
                    setenv(env_of[i].var, optarg, 1);
            }
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "optmem run: no command given\n");
        run_usage(stderr);
        return OM_EXIT_USAGE;
    }
    if (!*library && find_library(library, sizeof library) != 0) {
        fprintf(stderr, "optmem: liboptmem.so not found next to this program; use --library\n");
        return OM_EXIT_FAILURE;
    }
    if (!getenv("OPTMEM_REPORT"))
        setenv("OPTMEM_REPORT", "optmem.%p.json", 1);
    if (cuda && set_cuda_env() != 0) {
        fprintf(stderr, "optmem: cannot set PYTORCH_CUDA_ALLOC_CONF: %s\n", strerror(errno));
        return OM_EXIT_FAILURE;
    }
    if (set_preload(library) != 0) {
        fprintf(stderr, "optmem: cannot set LD_PRELOAD: %s\n", strerror(errno));
        return OM_EXIT_FAILURE;
    }

    struct sigaction sa = {.sa_sigaction = forward_signal, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &sa, NULL);

    /* Reports older than this are an earlier run's (mtime has whole seconds). */
    time_t since = time(NULL) - 1;
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "optmem: fork: %s\n", strerror(errno));
        return OM_EXIT_FAILURE;
    }
    if (pid == 0) {
        for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
            signal(forwarded[i], SIG_DFL);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "optmem: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    int status = wait_child(pid);
    print_summary(getenv("OPTMEM_REPORT"), since);
    return status;
}
