/* Report checkpoints on a thread of optmem's: no signal handler in the program. */
#include "checkpoint.h"
#include "config.h"
#include "engine.h"
#include "guard.h"
#include "log.h"
#include "tracer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { CKPT_IDLE, CKPT_RUNNING, CKPT_STOPPED };

static int state = CKPT_IDLE;
static void *checkpoint_loop(void *arg)
{
    (void)arg;
    om_guard_own_thread("optmem-report", 1);
    const struct timespec poll = {0, OM_CHECKPOINT_POLL_MS * 1000000L};
    om_tracer_report_prepare();
    /* A fork child may set its rank before its first checkpoint: the program's next request
     * reads it (a checkpoint never reads the environment itself). */
    __atomic_store_n(&om_tracer_rank_wanted, 1, __ATOMIC_RELAXED);
    while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == CKPT_RUNNING) {
        nanosleep(&poll, NULL);
        if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != CKPT_RUNNING)
            break;
        /* glibc ends a process with exit(0) when its last thread exits; this thread must not
         * keep alive a process whose own threads have all ended (main called pthread_exit). */
        if (om_sys_others_exited())
            exit(0);
        om_engine_checkpoint((uint64_t)OM_CHECKPOINT_INTERVAL_MS * 1000000u);
    }
    return NULL;
}

/* The thread blocks every signal, so that none meant for the program is delivered to it,
 * and names itself: a detached thread's handle may be gone as soon as it is made. */
static int start_thread(void)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    rc = pthread_create(&thread, &attr, checkpoint_loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return -rc;
    return 0;
}

OM_COLD static void start(void)
{
    int idle = CKPT_IDLE;
    if (!__atomic_compare_exchange_n(&state, &idle, CKPT_RUNNING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    int rc = start_thread();
    if (rc != 0) {
        __atomic_store_n(&state, CKPT_STOPPED, __ATOMIC_RELEASE);
        om_warn("no report checkpoints (thread: %s): a killed process leaves no report",
                strerror(-rc));
    }
}

void om_checkpoint_note_request(void)
{
    if (OM_LIKELY(__atomic_load_n(&state, __ATOMIC_RELAXED) != CKPT_IDLE) || !om_cfg.report[0]) {
        om_tracer_rank_poll();
        return;
    }
    start();
}

void om_checkpoint_atfork_child(void)
{
    if (__atomic_load_n(&state, __ATOMIC_RELAXED) != CKPT_STOPPED)
        __atomic_store_n(&state, CKPT_IDLE, __ATOMIC_RELAXED);
}

void om_checkpoint_stop(void)
{
    __atomic_store_n(&state, CKPT_STOPPED, __ATOMIC_RELEASE);
}
