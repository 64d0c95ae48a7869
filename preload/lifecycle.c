/* Process life around the library: start-up, fork, exit, and the public optmem.h calls. */
#include "config.h"
#include "engine.h"
#include "guard.h"
#include "route.h"
#include "optmem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The process the engine's state belongs to: set at start and in fork children. A
 * vfork child (posix_spawn, Python's subprocess) shares the parent's memory and runs no
 * fork handlers, so its pid differs from this and it must not touch the engine. */
static pid_t owner_pid;

static void atfork_prepare(void)
{
    om_engine_atfork_prepare();
}

static void atfork_parent(void)
{
    om_engine_atfork_parent();
}

static void atfork_child(void)
{
    owner_pid = getpid();
    om_engine_atfork_child();
}

/* Runs before main; the first malloc may already have initialised the library. */
__attribute__((constructor)) static void optmem_start(void)
{
    om_ensure_init();
    owner_pid = getpid();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Writes the report; frees that come later (other destructors) still work, because
 * nothing is torn down. */
__attribute__((destructor)) static void optmem_stop(void)
{
    om_engine_at_exit();
}

/* Processes that end with _exit (forked workers: Python's os._exit, DataLoader workers)
 * run no destructor; they write their report here. glibc's own exit path does not come
 * through this symbol, so a report is never written twice. _exit is async-signal-safe: a
 * signal handler may call it on a thread that is inside optmem, holding a lock the report
 * needs, which would wait forever; that exit writes no report (the last checkpoint stays). */
OM_EXPORT __attribute__((noreturn)) void _exit(int status)
{
    if (owner_pid == getpid() && !om_guard_inside())
        om_engine_at_exit();
    for (;;)
        syscall(SYS_exit_group, status);
}

OM_EXPORT __attribute__((noreturn)) void _Exit(int status)
{
    _exit(status);
}

#define OM_STR_(x) #x
#define OM_STR(x) OM_STR_(x)

OM_EXPORT const char *optmem_version(void)
{
    return OM_STR(OPTMEM_VERSION_MAJOR) "." OM_STR(OPTMEM_VERSION_MINOR) "." OM_STR(
        OPTMEM_VERSION_PATCH);
}

OM_EXPORT const char *optmem_mode(void)
{
    if (om_ensure_init() != 0)
        return "off";
    return om_engine_running() ? om_mode_name(om_cfg.mode) : "off";
}

OM_EXPORT void optmem_step(void)
{
    if (om_ensure_init() == 0)
        om_engine_step();
}

OM_EXPORT int optmem_dump(const char *path)
{
    if (om_ensure_init() != 0)
        return -EAGAIN;
    return om_engine_dump(path);
}
