/* Preloaded after liboptmem.so: no thread can be had, as under a low RLIMIT_NPROC or a
 * sandbox; pthread_create fails leaving errno as glibc's failed stack mapping does. */
#include <errno.h>
#include <pthread.h>

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    (void)thread;
    (void)attr;
    (void)fn;
    (void)arg;
    errno = ENOMEM;
    return EAGAIN;
}
