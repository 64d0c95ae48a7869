/* Definitions the library, the tracer, the command line tool and the tests share: the hash
 * of tokens, keys and checksums, the death of a block that never died, a whole write, and
 * the lock of the pool and the tracer. */
#ifndef OPTMEM_COMMON_OM_COMMON_H
#define OPTMEM_COMMON_OM_COMMON_H

#include <errno.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A request's death where the block is still live (or outlived what was recorded). */
#define OM_NO_DEATH UINT64_MAX

/* 64-bit FNV-1a: the hash every key and checksum of optmem's is made with (a saved plan's
 * checksum is in its files: it must not change). */
#define OM_FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define OM_FNV_PRIME UINT64_C(0x100000001b3)

/* One step over a whole word (a frame's key, a line number). */
static inline uint64_t om_fnv1a_word(uint64_t h, uint64_t word)
{
    return (h ^ word) * OM_FNV_PRIME;
}

/* Over n bytes, from h (OM_FNV_OFFSET to begin). */
static inline uint64_t om_fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * OM_FNV_PRIME;
    return h;
}

/* Over a string, its terminating NUL excluded. */
static inline uint64_t om_fnv1a_str(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * OM_FNV_PRIME;
    return h;
}

/* Writes all n bytes to fd, again after a signal or a short write: 0 or -errno (-EIO where
 * the file takes nothing). */
static inline int om_write_all(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A mutex for the locks every managed request takes (the pool's, the tracer's): a futex
 * word, 0 free, 1 held, 2 held with waiters (Drepper, "Futexes Are Tricky", mutex3). It
 * blocks as pthread's default mutex does and is not recursive, but the uncontended lock and
 * unlock are one atomic instruction each, without pthread's checks of the mutex's kind. */
struct om_lock {
    int word; /* zero: free */
};

/* The waits leave errno as it was: malloc and free do not set it on success. */
__attribute__((noinline, unused)) static void om_lock_wait(struct om_lock *l, int c)
{
    int saved = errno;
    if (c != 2)
        c = __atomic_exchange_n(&l->word, 2, __ATOMIC_ACQUIRE);
    while (c != 0) {
        syscall(SYS_futex, &l->word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        c = __atomic_exchange_n(&l->word, 2, __ATOMIC_ACQUIRE);
    }
    errno = saved;
}

__attribute__((noinline, unused)) static void om_lock_wake(struct om_lock *l)
{
    int saved = errno;
    syscall(SYS_futex, &l->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

static inline void om_lock(struct om_lock *l)
{
    int c = 0;
    if (!__atomic_compare_exchange_n(&l->word, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        om_lock_wait(l, c);
}

static inline void om_unlock(struct om_lock *l)
{
    if (__atomic_exchange_n(&l->word, 0, __ATOMIC_RELEASE) == 2)
        om_lock_wake(l);
}

#endif
