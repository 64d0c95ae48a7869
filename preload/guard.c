/* The re-entry guard's per-thread depth (initial-exec TLS: reading it never allocates), and
 * how optmem's own threads start. */
#include "guard.h"

#include <pthread.h>
#include <sched.h>

__thread int om_guard_depth;

void om_guard_own_thread(const char *name, int batch)
{
    const struct sched_param none = {0};
    /* Best effort: where a sandbox refuses the change, the thread runs as it was made. */
    if (batch)
        (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
    pthread_setname_np(pthread_self(), name);
}
