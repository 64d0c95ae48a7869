/* The process configuration: every OPTMEM_* environment variable, parsed once from one table. */
#ifndef OPTMEM_PRELOAD_CONFIG_H
#define OPTMEM_PRELOAD_CONFIG_H

#include <limits.h>
#include <stddef.h>

enum om_mode { OM_MODE_OFF = 0, OM_MODE_TRACE = 1, OM_MODE_PLAN = 2 };

enum om_device { OM_DEVICE_CPU = 1u << 0, OM_DEVICE_CUDA = 1u << 1 };

#define OM_STACK_DEPTH_MAX 64

struct om_config {
    enum om_mode mode;
    char report[PATH_MAX];    /* template with %p and %r; empty: no report */
    char plan_file[PATH_MAX]; /* empty: no saved plan */
    char plan_dump[PATH_MAX]; /* a directory for each planning instance; empty: none */
    size_t min_bytes;
    unsigned stack_depth;
    unsigned warmup; /* 0: detect iterations; N: N optmem_step() iterations */
    unsigned devices;
    int log_level;
    int verify;
    int hugepages;   /* the plan's region on transparent huge pages (host) */
    int plan_thread; /* -1 (auto): a search not done within 1 ms goes on a thread */
};

/* Reads a variable; getenv in the library, a fake in the tests. */
typedef const char *(*om_getenv_fn)(const char *name);

/* Fills cfg from the environment. A bad value prints one "optmem:" line and takes the
 * default. Returns the number of variables that had a bad value. Never allocates. */
int om_config_load(struct om_config *cfg, om_getenv_fn getenv_fn);

/* Parses "4096", "64K", "16MiB", "1g": returns 0 or -EINVAL / -ERANGE. */
int om_parse_size(const char *text, size_t *out);

const char *om_mode_name(enum om_mode mode);

/* The configuration of this process, valid once the library is initialised. */
extern struct om_config om_cfg;

#endif
