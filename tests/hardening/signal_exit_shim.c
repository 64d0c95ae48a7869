/* Preloaded with liboptmem.so for signal_exit: raises SIGUSR1 on the main thread once, from
 * inside the first madvise or mremap after SIGNAL_EXIT_ARM=calls (optmem's calls, in the
 * allocator), or from a fork handler that runs after optmem's has taken its locks
 * (SIGNAL_EXIT_ARM=fork; this library is initialised first, so its prepare handler runs
 * last). */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fire_if(const char *when)
{
    static int fired;
    const char *armed = getenv("SIGNAL_EXIT_ARM");
    if (!fired && armed && strcmp(armed, when) == 0 && syscall(SYS_gettid) == getpid()) {
        fired = 1;
        raise(SIGUSR1);
    }
}

void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    void *to = va_arg(ap, void *);
    va_end(ap);
    fire_if("calls");
    return (void *)syscall(SYS_mremap, old, old_len, len, flags, to);
}

int madvise(void *addr, size_t len, int advice)
{
    fire_if("calls");
    return (int)syscall(SYS_madvise, addr, len, advice);
}

static void prepare(void)
{
    fire_if("fork");
}

__attribute__((constructor)) static void start(void)
{
    pthread_atfork(prepare, NULL, NULL);
}
