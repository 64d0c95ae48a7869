/* The shim's slow paths: first-call initialisation, bootstrap pointers, argument checks
 * that glibc makes, and the hand-over of managed requests to the engine. */
#include "route.h"
#include "config.h"
#include "engine.h"
#include "log.h"
#include "real.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t om_route_min = 0;
int om_route_frees = 1;
uintptr_t om_arena_lo;
size_t om_arena_len;
long om_real_managed = 1;

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };
static atomic_int init_state = INIT_NONE;
static __thread int tls_initialising;

static const char *env_lookup(const char *name)
{
    return getenv(name);
}

static void init_once(void)
{
    if (om_real_resolve() != 0) {
        static const char msg[] = "optmem: the real malloc cannot be found; aborting\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    om_config_load(&om_cfg, env_lookup);
    int engine = om_cfg.mode != OM_MODE_OFF && om_engine_init(&om_cfg) == 0;
    /* OPTMEM_DEVICES=cuda: the engine runs for the device, host requests pass through. */
    int managed = engine && (om_cfg.devices & OM_DEVICE_CPU);
    om_route_min = managed ? om_cfg.min_bytes : SIZE_MAX;
    /* Bootstrap pointers are still told apart by the shim itself, so in passthrough
     * frees and reallocs go straight to the real allocator. */
    om_route_frees = managed;
    if (managed)
        __atomic_fetch_sub(&om_real_managed, 1, __ATOMIC_RELAXED); /* the start-up 1 */
}

int om_ensure_init(void)
{
    int state = atomic_load_explicit(&init_state, memory_order_acquire);
    if (OM_LIKELY(state == INIT_DONE))
        return 0;
    if (tls_initialising)
        return -EAGAIN;
    int expected = INIT_NONE;
    if (atomic_compare_exchange_strong(&init_state, &expected, INIT_RUNNING)) {
        tls_initialising = 1;
        init_once();
        tls_initialising = 0;
        atomic_store_explicit(&init_state, INIT_DONE, memory_order_release);
        return 0;
    }
    while (atomic_load_explicit(&init_state, memory_order_acquire) != INIT_DONE)
        sched_yield();
    return 0;
}

/* Whether a request of this size goes to the engine (once initialised). */
static int managed(size_t size)
{
    return size >= om_route_min && om_engine_accepts(size);
}

static void *bootstrap_or_enomem(size_t size, size_t alignment)
{
    void *p = om_bootstrap_alloc(size, alignment);
    if (!p)
        errno = ENOMEM;
    return p;
}

void *om_route_malloc(size_t size)
{
    if (OM_UNLIKELY(om_ensure_init() != 0))
        return bootstrap_or_enomem(size, 16);
    if (!managed(size))
        return om_real.malloc(size);
    return om_engine_alloc(size, 0, 0);
}

void *om_route_calloc(size_t count, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (OM_UNLIKELY(om_ensure_init() != 0))
        return bootstrap_or_enomem(total, 16);
    if (!managed(total))
        return om_real.calloc(count, size);
    return om_engine_alloc(total, 0, 1);
}

static size_t usable_size_of(void *ptr)
{
    if (om_is_bootstrap(ptr))
        return om_bootstrap_usable_size(ptr);
    size_t engine_size = om_engine_usable_size(ptr);
    if (engine_size)
        return engine_size;
    return om_real.malloc_usable_size ? om_real.malloc_usable_size(ptr) : 0;
}

/* Moves a block that the real allocator must not see (bootstrap or engine) or that must
 * become managed, through malloc and free so that every step is routed and recorded. */
static void *realloc_by_copy(void *ptr, size_t size)
{
    size_t old = usable_size_of(ptr);
    void *fresh = malloc(size ? size : 1);
    if (!fresh)
        return NULL;
    memcpy(fresh, ptr, old < size ? old : size);
    free(ptr);
    return fresh;
}

void *om_route_realloc(void *ptr, size_t size)
{
    if (!ptr)
        return malloc(size);
    /* Before the ensure_init check: during init only bootstrap pointers exist, and they
     * are copied by their recorded size, never by the new one. */
    if (om_is_bootstrap(ptr))
        return realloc_by_copy(ptr, size);
    if (OM_UNLIKELY(om_ensure_init() != 0)) {
        errno = ENOMEM;
        return NULL;
    }
    if (om_route_frees && (om_engine_owns(ptr) || size >= om_route_min)) {
        if (size == 0) { /* glibc: realloc(p, 0) frees p and returns NULL */
            free(ptr);
            return NULL;
        }
        return realloc_by_copy(ptr, size);
    }
    return om_real.realloc(ptr, size);
}

static int is_power_of_two(size_t x)
{
    return x && !(x & (x - 1));
}

int om_route_posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment % sizeof(void *) != 0 || !is_power_of_two(alignment))
        return EINVAL; /* *out untouched, as glibc */
    if (OM_UNLIKELY(om_ensure_init() != 0)) {
        void *p = om_bootstrap_alloc(size, alignment);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (!managed(size))
        return om_real.posix_memalign(out, alignment, size);
    int saved_errno = errno;
    void *p = om_engine_alloc(size, alignment, 0);
    if (!p)
        return ENOMEM;
    errno = saved_errno;
    *out = p;
    return 0;
}

static void *real_aligned(size_t alignment, size_t size, int kind)
{
    switch (kind) {
    case OM_ALIGNED_ALLOC:
        return om_real.aligned_alloc(alignment, size);
    case OM_MEMALIGN:
        return om_real.memalign(alignment, size);
    case OM_VALLOC:
        return om_real.valloc(size);
    default:
        return om_real.pvalloc(size);
    }
}

/* Managed and bootstrap requests take only power-of-two alignments; anything odd goes to
 * the real function, so that its own rules (EINVAL, rounding up) apply exactly. */
void *om_route_aligned(size_t alignment, size_t size, int kind)
{
    int ready = om_ensure_init() == 0;
    if (kind == OM_VALLOC || kind == OM_PVALLOC) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        alignment = page;
        if (kind == OM_PVALLOC && size <= SIZE_MAX - page)
            size = size ? (size + page - 1) & ~(page - 1) : page;
    }
    if (ready && (!managed(size) || !is_power_of_two(alignment) || size > PTRDIFF_MAX))
        return real_aligned(alignment, size, kind);
    if (!ready)
        return bootstrap_or_enomem(size, is_power_of_two(alignment) ? alignment : 4096);
    return om_engine_alloc(size, alignment < 16 ? 16 : alignment, 0);
}

void om_route_free(void *ptr)
{
    if (!ptr || om_is_bootstrap(ptr))
        return;
    if (OM_UNLIKELY(om_ensure_init() != 0))
        return; /* unreachable in practice: only bootstrap pointers exist during init */
    if (om_route_frees && om_engine_free(ptr) == 0)
        return;
    om_real.free(ptr);
}

size_t om_route_usable_size(void *ptr)
{
    if (!ptr || (!om_is_bootstrap(ptr) && OM_UNLIKELY(om_ensure_init() != 0)))
        return 0;
    return usable_size_of(ptr);
}
