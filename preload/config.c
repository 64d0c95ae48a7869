/* Parses the OPTMEM_* environment variables through one table, without allocating. */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct om_config om_cfg;

typedef int (*om_parse_fn)(const char *text, struct om_config *cfg);

struct om_env_var {
    const char *name;
    const char *fallback; /* the default, parsed by the same function */
    om_parse_fn parse;
    const char *expected; /* said in the error line */
};

static int parse_mode(const char *text, struct om_config *cfg)
{
    static const char *const names[] = {"off", "trace", "plan"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(text, names[i]) == 0) {
            cfg->mode = (enum om_mode)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *om_mode_name(enum om_mode mode)
{
    switch (mode) {
    case OM_MODE_OFF:
        return "off";
    case OM_MODE_TRACE:
        return "trace";
    case OM_MODE_PLAN:
        return "plan";
    }
    return "?";
}

/* Accepts only %p, %r and %% so that a typo is reported now, not at exit. */
static int parse_path_template(const char *text, char *dst, size_t dstlen)
{
    size_t len = strlen(text);
    if (len >= dstlen)
        return -ENAMETOOLONG;
    for (const char *c = text; *c; c++) {
        if (*c != '%')
            continue;
        c++;
        if (*c != 'p' && *c != 'r' && *c != '%')
            return -EINVAL;
    }
    memcpy(dst, text, len + 1);
    return 0;
}

static int parse_report(const char *text, struct om_config *cfg)
{
    return parse_path_template(text, cfg->report, sizeof cfg->report);
}

static int parse_plan_file(const char *text, struct om_config *cfg)
{
    return parse_path_template(text, cfg->plan_file, sizeof cfg->plan_file);
}

/* A directory, taken as it is: each file's name carries its pid. */
static int parse_plan_dump(const char *text, struct om_config *cfg)
{
    size_t len = strlen(text);
    if (len + 64 > sizeof cfg->plan_dump) /* room for /plan-PID-DOMAIN-N.csv */
        return -ENAMETOOLONG;
    memcpy(cfg->plan_dump, text, len + 1);
    return 0;
}

int om_parse_size(const char *text, size_t *out)
{
    if (*text < '0' || *text > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case '\0':
        break;
    default:
        return -EINVAL;
    }
    if (shift) {
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
    }
    if (*end != '\0')
        return -EINVAL;
    if (v > (SIZE_MAX >> shift))
        return -ERANGE;
    *out = (size_t)v << shift;
    return 0;
}

static int parse_min_bytes(const char *text, struct om_config *cfg)
{
    size_t v;
    int rc = om_parse_size(text, &v);
    if (rc == 0 && v == 0)
        rc = -EINVAL;
    if (rc == 0)
        cfg->min_bytes = v;
    return rc;
}

static int parse_uint_in(const char *text, unsigned lo, unsigned hi, unsigned *out)
{
    if (*text < '0' || *text > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE || v < lo || v > hi)
        return -ERANGE;
    *out = (unsigned)v;
    return 0;
}

static int parse_stack_depth(const char *text, struct om_config *cfg)
{
    return parse_uint_in(text, 1, OM_STACK_DEPTH_MAX, &cfg->stack_depth);
}

static int parse_warmup(const char *text, struct om_config *cfg)
{
    if (strcasecmp(text, "auto") == 0) {
        cfg->warmup = 0;
        return 0;
    }
    return parse_uint_in(text, 1, 1000000, &cfg->warmup);
}

static int parse_devices(const char *text, struct om_config *cfg)
{
    unsigned devices = 0;
    const char *c = text;
    while (*c) {
        size_t len = strcspn(c, ",");
        if (len == 3 && strncasecmp(c, "cpu", 3) == 0)
            devices |= OM_DEVICE_CPU;
        else if (len == 4 && strncasecmp(c, "cuda", 4) == 0)
            devices |= OM_DEVICE_CUDA;
        else
            return -EINVAL;
        c += len;
        if (*c == ',')
            c++;
    }
    if (devices == 0)
        return -EINVAL;
    cfg->devices = devices;
    return 0;
}

static int parse_log(const char *text, struct om_config *cfg)
{
    static const char *const names[] = {"quiet", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(text, names[i]) == 0) {
            cfg->log_level = i;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_flag(const char *text, int *flag)
{
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) {
        *flag = text[0] == '1';
        return 0;
    }
    return -EINVAL;
}

static int parse_verify(const char *text, struct om_config *cfg)
{
    return parse_flag(text, &cfg->verify);
}

static int parse_hugepages(const char *text, struct om_config *cfg)
{
    return parse_flag(text, &cfg->hugepages);
}

static int parse_plan_thread(const char *text, struct om_config *cfg)
{
    if (strcasecmp(text, "auto") == 0) {
        cfg->plan_thread = -1;
        return 0;
    }
    return parse_flag(text, &cfg->plan_thread);
}

/* OPTMEM_LOG comes first so that it governs the error lines of the others. */
static const struct om_env_var om_env_table[] = {
    {"OPTMEM_LOG", "warn", parse_log, "quiet, warn, info or debug"},
    {"OPTMEM_MODE", "plan", parse_mode, "plan, trace or off"},
    {"OPTMEM_REPORT", "", parse_report, "a path; %p, %r and %% are the only escapes"},
    {"OPTMEM_MIN_BYTES", "4096", parse_min_bytes, "a size of at least 1, e.g. 4096 or 64K"},
    {"OPTMEM_STACK_DEPTH", "16", parse_stack_depth, "1..64"},
    {"OPTMEM_WARMUP", "auto", parse_warmup, "auto or a count 1..1000000"},
    {"OPTMEM_PLAN_FILE", "", parse_plan_file, "a path; %p, %r and %% are the only escapes"},
    {"OPTMEM_DEVICES", "cpu", parse_devices, "cpu, cuda or cpu,cuda"},
    {"OPTMEM_VERIFY", "0", parse_verify, "0 or 1"},
    {"OPTMEM_HUGEPAGES", "0", parse_hugepages, "0 or 1"},
    {"OPTMEM_PLAN_THREAD", "auto", parse_plan_thread, "auto, 0 or 1"},
    {"OPTMEM_PLAN_DUMP", "", parse_plan_dump, "a directory path of at most 4032 characters"},
};

int om_config_load(struct om_config *cfg, om_getenv_fn getenv_fn)
{
    int bad = 0;
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < sizeof om_env_table / sizeof om_env_table[0]; i++) {
        const struct om_env_var *var = &om_env_table[i];
        const char *text = getenv_fn(var->name);
        if (text && var->parse(text, cfg) != 0) {
            bad++;
            om_warn("%s=\"%s\" is not valid (expected %s); using \"%s\"", var->name, text,
                    var->expected, var->fallback);
            text = NULL;
        }
        if (!text)
            var->parse(var->fallback, cfg);
        if (var->parse == parse_log)
            om_log_level = cfg->log_level;
    }
    return bad;
}
