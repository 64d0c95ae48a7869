/* OPTMEM_PLAN_DUMP: planning instances written as lifetime CSV files, without malloc. */
#include "plan_dump.h"

#include "config.h"
#include "log.h"
#include "tracer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static unsigned dumped;
static int dump_failed;

struct dump {
    const om_rp_block *blocks;
    size_t n;
    uint64_t period;
    const char *comment;
};

static int fill_dump(int fd, void *ctx)
{
    const struct dump *d = ctx;
    return om_rp_csv_write_fd(fd, d->blocks, d->n, d->period, NULL, d->comment);
}

void om_plan_dump(unsigned domain, const om_rp_block *blocks, size_t n, uint64_t period,
                  const char *what, ...)
{
    if (!om_cfg.plan_dump[0] || __atomic_load_n(&dump_failed, __ATOMIC_RELAXED))
        return;
    unsigned k = __atomic_add_fetch(&dumped, 1, __ATOMIC_RELAXED);
    long pid = (long)getpid();
    char path[PATH_MAX], comment[256], search[160];
    om_rp_block *copy = NULL;
    size_t bytes = (n ? n : 1) * sizeof *copy;
    int rc = -ENAMETOOLONG;
    int len =
        snprintf(path, sizeof path, "%s/plan-%ld-%u-%u.csv", om_cfg.plan_dump, pid, domain, k);
    if (len < 0 || (size_t)len >= sizeof path)
        goto out;
    rc = -ENOMEM;
    if (!(copy = om_sys_map(bytes)))
        goto out;
    /* Ids name blocks in `optmem plan`'s messages and must be unique: the pool's fixed blocks
     * all carry UINT64_MAX, and get ids above every other. */
    uint64_t next = 0;
    for (size_t i = 0; i < n; i++)
        if (blocks[i].id != UINT64_MAX && blocks[i].id >= next)
            next = blocks[i].id + 1;
    for (size_t i = 0; i < n; i++) {
        copy[i] = blocks[i];
        if (copy[i].id == UINT64_MAX)
            copy[i].id = next++;
    }
    va_list ap;
    va_start(ap, what);
    vsnprintf(search, sizeof search, what, ap);
    va_end(ap);
    snprintf(comment, sizeof comment, "optmem planning instance: pid %ld, domain %u, %s", pid,
             domain, search);
    struct dump d = {copy, n, period, comment};
    rc = om_file_replace(path, fill_dump, &d);
out:
    if (copy)
        om_sys_unmap(copy, bytes);
    if (rc == 0)
        om_debug("plan: the instance of %zu blocks was written to %s", n, path);
    else if (!__atomic_exchange_n(&dump_failed, 1, __ATOMIC_RELAXED))
        om_warn("OPTMEM_PLAN_DUMP=%s: %s cannot be written (%s); no more planning instances are "
                "written",
                om_cfg.plan_dump, len > 0 ? path : "the file", strerror(-rc));
}
