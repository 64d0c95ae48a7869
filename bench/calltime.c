/* Preloaded in front of an allocator: times the calls of >= CALLTIME_MIN_BYTES and writes a JSON
 * histogram at exit, of the whole run and of the calls after the program's phase mark. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define CT_EXPORT __attribute__((visibility("default")))

/* C23's, not declared by glibc 2.36: exported for programs built against a newer libc. */
CT_EXPORT void free_sized(void *ptr, size_t size);
/* Called by the program (tests/workloads/common.py finds it with ctypes) where the phase it
 * wants timed on its own begins, its training loop's steady steps: the calls that start after
 * the first call are also counted in the report's "phase" histograms. */
CT_EXPORT void calltime_phase_mark(void);

/*
 * Histogram buckets: values below 16 ns are exact, above that 8 buckets per power of two
 * (12.5 % resolution), up to 2^63 ns.
 */
#define CT_EXACT 16
#define CT_BUCKETS (CT_EXACT + 60 * 8)

enum ct_kind { CT_MALLOC, CT_CALLOC, CT_REALLOC, CT_ALIGNED, CT_FREE, CT_KINDS };
static const char *const ct_kind_names[CT_KINDS] = {"malloc", "calloc", "realloc", "aligned",
                                                    "free"};

struct ct_stats {
    _Atomic uint64_t count;
    _Atomic uint64_t total_ns;
    _Atomic uint64_t max_ns;
    _Atomic uint64_t hist[CT_BUCKETS];
};

static struct ct_stats ct_stats[CT_KINDS];
/* The calls that started at or after ct_phase_ns (0: no mark yet), in their own histograms. */
static struct ct_stats ct_phase_stats[CT_KINDS];
static _Atomic uint64_t ct_phase_ns;

/*
 * CALLTIME_SLOW_US: calls that took at least this long are logged (the first CT_SLOW_MAX), each
 * with the caller's stack, the thread, and the thread's CPU time and minor page faults inside
 * the call (two more system calls around every timed call, so the other figures of such a
 * run are not comparable): CPU time well below the call's tells preemption from work.
 */
#define CT_SLOW_MAX 64
#define CT_SLOW_FRAMES 12
struct ct_slow {
    int kind, nframes;
    long tid;
    size_t size;
    uint64_t ns, cpu_ns, minflt, at_ns;
    void *frames[CT_SLOW_FRAMES];
};
static struct ct_slow ct_slow[CT_SLOW_MAX];
static _Atomic unsigned ct_nslow;
static uint64_t ct_slow_ns, ct_start_ns;

/*
 * Live large blocks, so that their frees are timed and small frees are not: open addressing
 * with linear probing, lock-free. A key is inserted only while its block is live and removed
 * before the block goes back to the allocator, so a key is never present twice. Removed keys
 * leave a tombstone that later inserts reuse; allocators hand out the same addresses again,
 * so the slots in use stay bounded by the distinct large addresses, not by the calls.
 */
#define CT_TABLE_BITS 20
#define CT_TABLE_SIZE (1u << CT_TABLE_BITS)
#define CT_MAX_PROBES 4096
#define CT_EMPTY ((uintptr_t)0)
#define CT_TOMB ((uintptr_t)1)
static _Atomic uintptr_t ct_table[CT_TABLE_SIZE];
static _Atomic uint64_t ct_untracked; /* large blocks the full table could not hold */

/* dlsym may allocate before the real functions are known: served from here, never freed. */
#define CT_BOOT_BYTES (256 * 1024)
static _Alignas(4096) unsigned char ct_boot[CT_BOOT_BYTES];
static _Atomic size_t ct_boot_used;

typedef void *(*ct_malloc_fn)(size_t);
typedef void (*ct_free_fn)(void *);
typedef void *(*ct_calloc_fn)(size_t, size_t);
typedef void *(*ct_realloc_fn)(void *, size_t);
typedef int (*ct_posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*ct_aligned_fn)(size_t, size_t);
typedef void *(*ct_valloc_fn)(size_t);
typedef void (*ct_free_sized_fn)(void *, size_t);
typedef size_t (*ct_usable_fn)(void *);

static struct {
    ct_malloc_fn malloc;
    ct_free_fn free;
    ct_calloc_fn calloc;
    ct_realloc_fn realloc;
    ct_posix_memalign_fn posix_memalign;
    ct_aligned_fn aligned_alloc;
    ct_aligned_fn memalign;
    ct_valloc_fn valloc;
    ct_valloc_fn pvalloc;
    ct_free_sized_fn free_sized;
    ct_usable_fn malloc_usable_size;
} ct_real;
static _Atomic int ct_ready;
/*
 * Calls the next allocator makes to the public functions while serving one (optmem's realloc
 * goes through malloc and free) belong to the outer call: forwarded untimed and untracked.
 */
static __thread int ct_depth __attribute__((tls_model("initial-exec")));
static _Atomic int ct_resolving;
static size_t ct_min_bytes = 4096;
static uint64_t ct_timer_overhead_ns;

static uint64_t ct_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned ct_bucket(uint64_t ns)
{
    if (ns < CT_EXACT)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns);
    unsigned sub = (unsigned)(ns >> (e - 3)) & 7u;
    return CT_EXACT + (e - 4) * 8 + sub;
}

static uint64_t ct_bucket_low(unsigned b)
{
    if (b < CT_EXACT)
        return b;
    unsigned e = (b - CT_EXACT) / 8 + 4, sub = (b - CT_EXACT) % 8;
    return (uint64_t)(8 + sub) << (e - 3);
}

static uint64_t ct_bucket_high(unsigned b)
{
    if (b < CT_EXACT)
        return b;
    unsigned e = (b - CT_EXACT) / 8 + 4;
    return ct_bucket_low(b) + ((uint64_t)1 << (e - 3)) - 1;
}

/* A timed call's start: the clock, and with CALLTIME_SLOW_US the thread's CPU time and faults. */
struct ct_mark {
    uint64_t ns, cpu_ns, minflt;
};

static uint64_t ct_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t ct_thread_minflt(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_minflt : 0;
}

static struct ct_mark ct_start_call(void)
{
    struct ct_mark m = {0, 0, 0};
    if (ct_slow_ns) {
        m.cpu_ns = ct_thread_cpu();
        m.minflt = ct_thread_minflt();
    }
    m.ns = ct_now();
    return m;
}

static void ct_log_slow(enum ct_kind kind, const struct ct_mark *m, uint64_t ns, size_t size)
{
    uint64_t cpu = ct_thread_cpu() - m->cpu_ns, flt = ct_thread_minflt() - m->minflt;
    unsigned i = atomic_fetch_add_explicit(&ct_nslow, 1, memory_order_relaxed);
    if (i >= CT_SLOW_MAX)
        return;
    struct ct_slow *e = &ct_slow[i];
    *e = (struct ct_slow){.kind = kind,
                          .tid = (long)gettid(),
                          .size = size,
                          .ns = ns,
                          .cpu_ns = cpu,
                          .minflt = flt,
                          .at_ns = m->ns - ct_start_ns};
    ct_depth++; /* backtrace loads libgcc once, through malloc */
    e->nframes = backtrace(e->frames, CT_SLOW_FRAMES);
    ct_depth--;
}

static void ct_add(struct ct_stats *s, uint64_t ns)
{
    atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->total_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->hist[ct_bucket(ns)], 1, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&s->max_ns, memory_order_relaxed);
    while (ns > max && !atomic_compare_exchange_weak_explicit(
                           &s->max_ns, &max, ns, memory_order_relaxed, memory_order_relaxed))
        ;
}

static void ct_record(enum ct_kind kind, const struct ct_mark *m, size_t size)
{
    uint64_t ns = ct_now() - m->ns;
    if (ct_slow_ns && ns >= ct_slow_ns)
        ct_log_slow(kind, m, ns, size);
    ct_add(&ct_stats[kind], ns);
    uint64_t phase = atomic_load_explicit(&ct_phase_ns, memory_order_relaxed);
    if (phase && m->ns >= phase)
        ct_add(&ct_phase_stats[kind], ns);
}

CT_EXPORT void calltime_phase_mark(void)
{
    uint64_t none = 0;
    atomic_compare_exchange_strong(&ct_phase_ns, &none, ct_now());
}

static size_t ct_slot(uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - CT_TABLE_BITS));
}

static void ct_track(void *ptr)
{
    uintptr_t key = (uintptr_t)ptr;
    size_t i = ct_slot(key);
    for (unsigned n = 0; n < CT_MAX_PROBES; n++, i = (i + 1) & (CT_TABLE_SIZE - 1)) {
        uintptr_t cur = atomic_load_explicit(&ct_table[i], memory_order_relaxed);
        while (cur == CT_EMPTY || cur == CT_TOMB) {
            if (atomic_compare_exchange_weak_explicit(&ct_table[i], &cur, key, memory_order_relaxed,
                                                      memory_order_relaxed))
                return;
        }
    }
    atomic_fetch_add_explicit(&ct_untracked, 1, memory_order_relaxed);
}

/* Returns 1 (and forgets the block) if ptr is a tracked large block. */
static int ct_untrack(void *ptr)
{
    uintptr_t key = (uintptr_t)ptr;
    size_t i = ct_slot(key);
    for (unsigned n = 0; n < CT_MAX_PROBES; n++, i = (i + 1) & (CT_TABLE_SIZE - 1)) {
        uintptr_t cur = atomic_load_explicit(&ct_table[i], memory_order_relaxed);
        if (cur == CT_EMPTY)
            return 0;
        /* Only the thread freeing ptr can remove it, so a plain store is enough. */
        if (cur == key) {
            atomic_store_explicit(&ct_table[i], CT_TOMB, memory_order_relaxed);
            return 1;
        }
    }
    return 0;
}

static int ct_is_boot(const void *ptr)
{
    const unsigned char *p = ptr;
    return p >= ct_boot && p < ct_boot + CT_BOOT_BYTES;
}

/* Each bootstrap block is preceded by its size so that realloc can copy it. */
static void *ct_boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    if (size > CT_BOOT_BYTES || (align & (align - 1)) != 0 || align > 4096)
        return NULL;
    size_t used = atomic_load_explicit(&ct_boot_used, memory_order_relaxed);
    for (;;) {
        size_t start = (used + 16 + align - 1) & ~(align - 1);
        size_t end = start + size;
        if (end > CT_BOOT_BYTES)
            return NULL;
        if (atomic_compare_exchange_weak_explicit(&ct_boot_used, &used, end, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            memcpy(ct_boot + start - sizeof(size_t), &size, sizeof(size_t));
            return ct_boot + start; /* static storage: already zero */
        }
    }
}

static size_t ct_boot_size(const void *ptr)
{
    size_t size;
    memcpy(&size, (const unsigned char *)ptr - sizeof(size_t), sizeof(size_t));
    return size;
}

static void ct_reset_stats(void)
{
    memset(ct_stats, 0, sizeof(ct_stats));
    memset(ct_phase_stats, 0, sizeof(ct_phase_stats));
}

static void ct_calibrate(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 1000; i++) {
        uint64_t a = ct_now();
        uint64_t b = ct_now();
        if (b - a < best)
            best = b - a;
    }
    ct_timer_overhead_ns = best;
}

static void ct_read_env(void)
{
    const char *slow = getenv("CALLTIME_SLOW_US");
    if (slow && *slow) {
        char *end;
        errno = 0;
        unsigned long long us = strtoull(slow, &end, 10);
        if (errno || *end || slow[0] == '-' || us == 0) {
            static const char msg[] = "calltime: CALLTIME_SLOW_US must be a number of us > 0\n";
            ssize_t w = write(2, msg, sizeof(msg) - 1);
            (void)w;
            _exit(1);
        }
        ct_slow_ns = us * 1000;
    }
    const char *v = getenv("CALLTIME_MIN_BYTES");
    if (v && *v) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || *end || v[0] == '-') {
            static const char msg[] = "calltime: CALLTIME_MIN_BYTES must be a number of bytes\n";
            ssize_t w = write(2, msg, sizeof(msg) - 1);
            (void)w;
            _exit(1);
        } else {
            ct_min_bytes = (size_t)n;
        }
    }
}

static void ct_resolve(void)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&ct_resolving, &expected, 1))
        return; /* another thread (or dlsym itself) is resolving: the caller uses ct_boot */
    ct_real.malloc = (ct_malloc_fn)dlsym(RTLD_NEXT, "malloc");
    ct_real.free = (ct_free_fn)dlsym(RTLD_NEXT, "free");
    ct_real.calloc = (ct_calloc_fn)dlsym(RTLD_NEXT, "calloc");
    ct_real.realloc = (ct_realloc_fn)dlsym(RTLD_NEXT, "realloc");
    ct_real.posix_memalign = (ct_posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    ct_real.aligned_alloc = (ct_aligned_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    ct_real.memalign = (ct_aligned_fn)dlsym(RTLD_NEXT, "memalign");
    ct_real.valloc = (ct_valloc_fn)dlsym(RTLD_NEXT, "valloc");
    ct_real.pvalloc = (ct_valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
    ct_real.free_sized = (ct_free_sized_fn)dlsym(RTLD_NEXT, "free_sized");
    ct_real.malloc_usable_size = (ct_usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
    if (!ct_real.malloc || !ct_real.free || !ct_real.calloc || !ct_real.realloc) {
        static const char msg[] = "calltime: the next malloc/free/calloc/realloc not found\n";
        ssize_t w = write(2, msg, sizeof(msg) - 1);
        (void)w;
        _exit(127);
    }
    ct_read_env();
    ct_calibrate();
    ct_start_ns = ct_now();
    atomic_store_explicit(&ct_ready, 1, memory_order_release);
}

static int ct_init(void)
{
    if (atomic_load_explicit(&ct_ready, memory_order_acquire))
        return 1;
    ct_resolve();
    return atomic_load_explicit(&ct_ready, memory_order_acquire);
}

static void *ct_track_new(void *p, size_t size)
{
    if (p && size >= ct_min_bytes)
        ct_track(p);
    return p;
}

CT_EXPORT void *malloc(size_t size)
{
    if (!ct_init())
        return ct_boot_alloc(size, 16);
    if (ct_depth || size < ct_min_bytes)
        return ct_real.malloc(size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    void *p = ct_real.malloc(size);
    ct_depth--;
    ct_record(CT_MALLOC, &t, size);
    return ct_track_new(p, size);
}

CT_EXPORT void *calloc(size_t n, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        bytes = SIZE_MAX;
    if (!ct_init()) {
        if (bytes == SIZE_MAX)
            return NULL;
        return ct_boot_alloc(bytes, 16);
    }
    if (ct_depth || bytes < ct_min_bytes)
        return ct_real.calloc(n, size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    void *p = ct_real.calloc(n, size);
    ct_depth--;
    ct_record(CT_CALLOC, &t, bytes);
    return ct_track_new(p, bytes);
}

static void ct_free_with(void *ptr, size_t size, int sized)
{
    if (!ptr || ct_is_boot(ptr))
        return;
    if (!ct_init())
        return; /* nothing but ct_boot can have been handed out yet */
    int large = ct_depth ? 0 : ct_untrack(ptr);
    struct ct_mark t = {0, 0, 0};
    if (large)
        t = ct_start_call();
    ct_depth++;
    if (sized && ct_real.free_sized)
        ct_real.free_sized(ptr, size);
    else
        ct_real.free(ptr);
    ct_depth--;
    if (large)
        ct_record(CT_FREE, &t, size);
}

CT_EXPORT void free(void *ptr)
{
    ct_free_with(ptr, 0, 0);
}

CT_EXPORT void free_sized(void *ptr, size_t size)
{
    ct_free_with(ptr, size, 1);
}

CT_EXPORT void *realloc(void *ptr, size_t size)
{
    if (ptr && ct_is_boot(ptr)) {
        void *p = ct_init() ? ct_real.malloc(size) : ct_boot_alloc(size, 16);
        if (p) {
            size_t old = ct_boot_size(ptr);
            memcpy(p, ptr, old < size ? old : size);
        }
        return p;
    }
    if (!ct_init())
        return ptr ? NULL : ct_boot_alloc(size, 16);
    if (ct_depth)
        return ct_real.realloc(ptr, size);
    int was_large = ptr ? ct_untrack(ptr) : 0;
    if (!was_large && size < ct_min_bytes)
        return ct_real.realloc(ptr, size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    void *p = ct_real.realloc(ptr, size);
    ct_depth--;
    ct_record(CT_REALLOC, &t, size);
    if (p)
        return ct_track_new(p, size);
    /* Failed: the old block is still live (realloc(p, 0) returning NULL freed it). */
    if (was_large && size != 0)
        ct_track(ptr);
    return NULL;
}

CT_EXPORT void *reallocarray(void *ptr, size_t n, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, bytes);
}

CT_EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!ct_init()) {
        if (align < sizeof(void *) || (align & (align - 1)) != 0)
            return EINVAL;
        void *p = ct_boot_alloc(size, align);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (ct_depth || size < ct_min_bytes)
        return ct_real.posix_memalign(out, align, size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    int rc = ct_real.posix_memalign(out, align, size);
    ct_depth--;
    ct_record(CT_ALIGNED, &t, size);
    if (rc == 0)
        ct_track_new(*out, size);
    return rc;
}

static void *ct_aligned_call(ct_aligned_fn fn, size_t align, size_t size)
{
    if (!ct_init())
        return ct_boot_alloc(size, align);
    if (!fn) {
        errno = ENOMEM;
        return NULL;
    }
    if (ct_depth || size < ct_min_bytes)
        return fn(align, size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    void *p = fn(align, size);
    ct_depth--;
    ct_record(CT_ALIGNED, &t, size);
    return ct_track_new(p, size);
}

CT_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    return ct_aligned_call(ct_real.aligned_alloc, align, size);
}

CT_EXPORT void *memalign(size_t align, size_t size)
{
    return ct_aligned_call(ct_real.memalign, align, size);
}

static void *ct_page_call(ct_valloc_fn fn, size_t size)
{
    if (!ct_init())
        return ct_boot_alloc(size, 4096);
    if (!fn) {
        errno = ENOMEM;
        return NULL;
    }
    if (ct_depth || size < ct_min_bytes)
        return fn(size);
    struct ct_mark t = ct_start_call();
    ct_depth++;
    void *p = fn(size);
    ct_depth--;
    ct_record(CT_ALIGNED, &t, size);
    return ct_track_new(p, size);
}

CT_EXPORT void *valloc(size_t size)
{
    return ct_page_call(ct_real.valloc, size);
}

CT_EXPORT void *pvalloc(size_t size)
{
    return ct_page_call(ct_real.pvalloc, size);
}

CT_EXPORT size_t malloc_usable_size(void *ptr)
{
    if (!ptr)
        return 0;
    if (ct_is_boot(ptr))
        return ct_boot_size(ptr);
    if (!ct_init() || !ct_real.malloc_usable_size)
        return 0;
    return ct_real.malloc_usable_size(ptr);
}

/* Appends to a fixed buffer with snprintf: writing the report must not call malloc. */
struct ct_out {
    int fd;
    size_t len;
    char buf[8192];
};

static void ct_flush(struct ct_out *o)
{
    size_t off = 0;
    while (off < o->len) {
        ssize_t w = write(o->fd, o->buf + off, o->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    o->len = 0;
}

/* A piece that does not fit what is left of the buffer is formatted again after a flush: cut
 * where it ended, a long frame name of the slow calls' made the report invalid JSON. */
__attribute__((format(printf, 2, 3))) static void ct_printf(struct ct_out *o, const char *fmt, ...)
{
    for (int again = 0; again < 2; again++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, sizeof(o->buf) - o->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < sizeof(o->buf) - o->len) {
            o->len += (size_t)n;
            return;
        }
        if (o->len == 0) { /* longer than the whole buffer: cut */
            o->len = sizeof(o->buf) - 1;
            return;
        }
        ct_flush(o);
    }
}

/* Upper bound of the bucket holding the q-th quantile (q in per mille), 0 when empty. */
static uint64_t ct_quantile(const uint64_t *hist, uint64_t count, unsigned per_mille)
{
    if (count == 0)
        return 0;
    uint64_t rank = (count * per_mille + 999) / 1000, seen = 0;
    if (rank == 0)
        rank = 1;
    for (unsigned b = 0; b < CT_BUCKETS; b++) {
        seen += hist[b];
        if (seen >= rank)
            return ct_bucket_high(b);
    }
    return ct_bucket_high(CT_BUCKETS - 1);
}

/* Expands one %p in CALLTIME_OUT to the pid; returns 0 or -ENAMETOOLONG. */
static int ct_out_path(const char *pattern, char *path, size_t cap)
{
    const char *pp = strstr(pattern, "%p");
    int n;
    if (pp)
        n = snprintf(path, cap, "%.*s%ld%s", (int)(pp - pattern), pattern, (long)getpid(), pp + 2);
    else
        n = snprintf(path, cap, "%s", pattern);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The kinds' counts, totals, quantiles and histograms, as the members of one JSON object. */
static void ct_write_kinds(struct ct_out *o, struct ct_stats *stats)
{
    static uint64_t hist[CT_BUCKETS];
    for (int k = 0; k < CT_KINDS; k++) {
        struct ct_stats *s = &stats[k];
        uint64_t count = 0;
        for (unsigned b = 0; b < CT_BUCKETS; b++) {
            hist[b] = atomic_load_explicit(&s->hist[b], memory_order_relaxed);
            count += hist[b];
        }
        ct_printf(o,
                  "%s\n  \"%s\": {\"count\": %llu, \"total_ns\": %llu, \"max_ns\": %llu, "
                  "\"p50_ns\": %llu, \"p99_ns\": %llu, \"hist\": [",
                  k ? "," : "", ct_kind_names[k], (unsigned long long)count,
                  (unsigned long long)atomic_load(&s->total_ns),
                  (unsigned long long)atomic_load(&s->max_ns),
                  (unsigned long long)ct_quantile(hist, count, 500),
                  (unsigned long long)ct_quantile(hist, count, 990));
        int first = 1;
        for (unsigned b = 0; b < CT_BUCKETS; b++) {
            if (!hist[b])
                continue;
            ct_printf(o, "%s[%llu, %llu, %llu]", first ? "" : ", ",
                      (unsigned long long)ct_bucket_low(b), (unsigned long long)ct_bucket_high(b),
                      (unsigned long long)hist[b]);
            first = 0;
        }
        ct_printf(o, "]}");
    }
}

static int ct_forked_child;

static void ct_write_report(void)
{
    const char *pattern = getenv("CALLTIME_OUT");
    if (!pattern || !*pattern || !atomic_load(&ct_ready))
        return;
    /* A forked child writes only if the path names its pid, so it cannot clobber the parent's. */
    if (ct_forked_child && !strstr(pattern, "%p"))
        return;
    char path[4096];
    if (ct_out_path(pattern, path, sizeof(path)) < 0)
        return;
    static struct ct_out o;
    o.len = 0;
    o.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o.fd < 0) {
        static const char msg[] = "calltime: cannot open CALLTIME_OUT for writing\n";
        ssize_t w = write(2, msg, sizeof(msg) - 1);
        (void)w;
        return;
    }
    ct_printf(
        &o,
        "{\"tool\": \"calltime\", \"pid\": %ld, \"ppid\": %ld, \"min_bytes\": %zu, \"clock\": "
        "\"CLOCK_MONOTONIC\", \"timer_overhead_ns\": %llu, \"untracked_large\": %llu, "
        "\"bootstrap_bytes\": %zu, \"kinds\": {",
        (long)getpid(), (long)getppid(), ct_min_bytes, (unsigned long long)ct_timer_overhead_ns,
        (unsigned long long)atomic_load(&ct_untracked), atomic_load(&ct_boot_used));
    ct_write_kinds(&o, ct_stats);
    uint64_t phase = atomic_load(&ct_phase_ns);
    if (phase) {
        ct_printf(&o, "\n}, \"phase_mark_ms\": %.3f, \"phase\": {",
                  (phase > ct_start_ns ? phase - ct_start_ns : 0) / 1e6);
        ct_write_kinds(&o, ct_phase_stats);
    } else {
        ct_printf(&o, "\n}, \"phase_mark_ms\": null, \"phase\": {");
    }
    ct_printf(&o, "\n}, \"slow_us\": %llu, \"slow_calls\": %u, \"slow\": [",
              (unsigned long long)(ct_slow_ns / 1000), atomic_load(&ct_nslow));
    unsigned nslow = atomic_load(&ct_nslow);
    for (unsigned i = 0; i < nslow && i < CT_SLOW_MAX; i++) {
        const struct ct_slow *e = &ct_slow[i];
        ct_printf(
            &o,
            "%s\n  {\"kind\": \"%s\", \"ns\": %llu, \"cpu_ns\": %llu, \"minflt\": %llu, "
            "\"at_ms\": %.3f, \"tid\": %ld, \"main_thread\": %s, \"size\": %zu, \"frames\": [",
            i ? "," : "", ct_kind_names[e->kind], (unsigned long long)e->ns,
            (unsigned long long)e->cpu_ns, (unsigned long long)e->minflt, e->at_ns / 1e6, e->tid,
            e->tid == (long)getpid() ? "true" : "false", e->size);
        for (int f = 1; f < e->nframes; f++) { /* frame 0 is calltime's */
            Dl_info di;
            const char *mod = "?", *sym = "";
            uintptr_t off = (uintptr_t)e->frames[f];
            if (dladdr(e->frames[f], &di) && di.dli_fname) {
                mod = strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname;
                off -= (uintptr_t)di.dli_fbase;
                sym = di.dli_sname ? di.dli_sname : "";
            }
            ct_printf(&o, "%s\"%s+0x%lx %s\"", f > 1 ? ", " : "", mod, (unsigned long)off, sym);
        }
        ct_printf(&o, "]}");
    }
    ct_printf(&o, "]}\n");
    ct_flush(&o);
    close(o.fd);
}

static void ct_atfork_child(void)
{
    ct_forked_child = 1;
    ct_reset_stats();
}

__attribute__((constructor)) static void ct_start(void)
{
    ct_init();
    pthread_atfork(NULL, NULL, ct_atfork_child);
}

__attribute__((destructor)) static void ct_stop(void)
{
    ct_write_report();
}
