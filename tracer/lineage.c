/* Whose a report is, and where it goes: one report per process of a run, none replaced by
 * another's. */
#include "log.h"
#include "tracer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An environment larger than this is not searched for LD_PRELOAD (the ancestor then counts
 * as not running optmem). */
#define ENVIRON_MAX (256u * 1024)
/* The part of an existing report that is read to learn whose it is: the process object
 * comes first, before argv, whatever the length of the command line. */
#define HEADER_MAX 4096

/* The parent and start time (clock ticks since boot) of a process, from /proc/PID/stat. */
static int read_stat(long pid, long *ppid, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    size_t len = om_sys_read_file(path, buf, sizeof buf - 1);
    if (len == 0)
        return -ENOENT;
    buf[len] = '\0';
    /* The command name may hold spaces and parentheses: fields start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -EINVAL;
    p++;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return -EINVAL;
        if (field == 4)
            *ppid = strtol(p, NULL, 10);
        if (field == 22)
            *start = strtoull(p, NULL, 10);
        while (*p && *p != ' ')
            p++;
    }
    return 0;
}

/* Whether the process was started with optmem in LD_PRELOAD. */
static int runs_optmem(long pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    char *env = om_sys_map(ENVIRON_MAX);
    if (!env)
        return 0;
    size_t len = om_sys_read_file(path, env, ENVIRON_MAX);
    int found = 0;
    for (size_t i = 0; i < len && !found;) {
        size_t n = strnlen(env + i, len - i);
        if (n > 11 && memcmp(env + i, "LD_PRELOAD=", 11) == 0 &&
            memmem(env + i + 11, n - 11, "liboptmem", 9))
            found = 1;
        i += n + 1;
    }
    om_sys_unmap(env, ENVIRON_MAX);
    return found;
}

void om_lineage_init(struct om_lineage *lin)
{
    memset(lin, 0, sizeof *lin);
    long pid = (long)getpid(), ppid = 0;
    lin->self.pid = pid;
    if (read_stat(pid, &ppid, &lin->self.start) != 0)
        return;
    while (ppid > 1 && lin->n < OM_LINEAGE_MAX && runs_optmem(ppid)) {
        struct om_proc_ref *up = &lin->up[lin->n];
        long next = 0;
        up->pid = ppid;
        if (read_stat(ppid, &next, &up->start) != 0)
            break;
        lin->n++;
        ppid = next;
    }
}

void om_lineage_fork(struct om_lineage *lin)
{
    struct om_proc_ref parent = lin->self;
    unsigned keep = lin->n < OM_LINEAGE_MAX ? lin->n : OM_LINEAGE_MAX - 1;
    memmove(lin->up + 1, lin->up, keep * sizeof lin->up[0]);
    lin->up[0] = parent;
    lin->n = keep + 1;
    long ppid;
    lin->self.pid = (long)getpid();
    lin->self.start = 0;
    (void)read_stat(lin->self.pid, &ppid, &lin->self.start);
}

/* ---- an existing report's header ---- */

struct header {
    struct om_lineage lin;
    uint64_t requests;
    int iterations;
};

static const char *after_key(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    return p ? p + strlen(key) : NULL;
}

/* Reads the process object at the start of a report written by this library. */
static int read_header(const char *path, struct header *h)
{
    char buf[HEADER_MAX + 1];
    size_t len = om_sys_read_file(path, buf, HEADER_MAX);
    buf[len] = '\0';
    const char *proc = after_key(buf, "\"process\":{");
    if (!proc)
        return -ENOENT;
    const char *pid = after_key(proc, "\"pid\":"), *start = after_key(proc, "\"start_time\":");
    const char *req = after_key(proc, "\"managed_requests\":");
    const char *anc = after_key(proc, "\"ancestors\":[");
    const char *iter = after_key(proc, "\"iterations_found\":");
    if (!pid || !start || !req || !anc || !iter)
        return -ENOENT;
    memset(h, 0, sizeof *h);
    h->iterations = strncmp(iter, "true", 4) == 0;
    h->lin.self.pid = strtol(pid, NULL, 10);
    h->lin.self.start = strtoull(start, NULL, 10);
    h->requests = strtoull(req, NULL, 10);
    const char *p = anc;
    while (*p == '[' && h->lin.n < OM_LINEAGE_MAX) {
        char *end;
        struct om_proc_ref *up = &h->lin.up[h->lin.n];
        up->pid = strtol(p + 1, &end, 10);
        if (*end != ',')
            return -EINVAL;
        up->start = strtoull(end + 1, &end, 10);
        if (*end != ']')
            return -EINVAL;
        h->lin.n++;
        p = end + 1;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int same_ref(const struct om_proc_ref *a, const struct om_proc_ref *b)
{
    return a->pid == b->pid && a->start == b->start;
}

static int member(const struct om_lineage *lin, const struct om_proc_ref *r)
{
    if (same_ref(&lin->self, r))
        return 1;
    for (unsigned i = 0; i < lin->n; i++)
        if (same_ref(&lin->up[i], r))
            return 1;
    return 0;
}

/* Two processes are of one run when one started the other, or one process running optmem
 * started both (directly or not). */
static int same_run(const struct om_lineage *a, const struct om_lineage *b)
{
    if (member(b, &a->self))
        return 1;
    for (unsigned i = 0; i < a->n; i++)
        if (member(b, &a->up[i]))
            return 1;
    return 0;
}

/* path with ".PID" before its extension: r.json -> r.123.json. */
static int with_pid(const char *path, long pid, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    size_t stem = dot && dot > (slash ? slash : path) ? (size_t)(dot - path) : strlen(path);
    int n = snprintf(out, outlen, "%.*s.%ld%s", (int)stem, path, pid, path + stem);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int om_report_claim(struct om_claim *claim, const struct om_lineage *me, uint64_t requests,
                    int iterations, const char *path, char *out, size_t outlen)
{
    if (claim->moved_aside)
        return with_pid(path, me->self.pid, out, outlen);
    struct header other;
    if (read_header(path, &other) != 0 || same_ref(&other.lin.self, &me->self) ||
        !same_run(&other.lin, me)) {
        /* No report there, ours, or one of an earlier run: the path is ours. */
        size_t len = strlen(path);
        if (len >= outlen)
            return -ENAMETOOLONG;
        memcpy(out, path, len + 1);
        return 0;
    }
    if (other.requests >= requests) {
        if (!iterations) {
            om_info("%s holds the report of process %ld of this run; this process (%ld) found "
                    "no iterations and writes none (%%p in OPTMEM_REPORT keeps every process's)",
                    path, (long)other.lin.self.pid, (long)me->self.pid);
            return -ENODATA;
        }
        int rc = with_pid(path, me->self.pid, out, outlen);
        if (rc == 0) {
            claim->moved_aside = 1;
            om_warn("%s holds the report of process %ld, which made more managed requests; "
                    "this process (%ld) writes its own to %s",
                    path, (long)other.lin.self.pid, (long)me->self.pid, out);
        }
        return rc;
    }
    char aside[4096];
    int rc = with_pid(path, other.lin.self.pid, aside, sizeof aside);
    if (rc != 0)
        return rc;
    if (!other.iterations) {
        if (unlink(path) != 0 && errno != ENOENT)
            return -errno;
        om_info("the report of process %ld at %s is replaced: it found no iterations, and "
                "process %ld made more managed requests",
                (long)other.lin.self.pid, path, (long)me->self.pid);
    } else {
        if (rename(path, aside) != 0)
            return -errno;
        om_info("the report of process %ld moved from %s to %s: process %ld made more "
                "managed requests and writes its own there",
                (long)other.lin.self.pid, path, aside, (long)me->self.pid);
    }
    size_t len = strlen(path);
    if (len >= outlen)
        return -ENAMETOOLONG;
    memcpy(out, path, len + 1);
    return 0;
}
