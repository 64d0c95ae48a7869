/* Managed requests: the stack is captured before any lock; in plan mode the pool serves the
 * block, otherwise (or when the pool cannot) the real allocator does and the tracer records
 * its birth and death. The registered domains are walked at fork, before reports and at exit. */
#include "engine.h"
#include "checkpoint.h"
#include "guard.h"
#include "log.h"
#include "pool.h"
#include "real.h"
#include "route.h"
#include "tracer.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int engine_on, pool_on;
static struct om_pool *host_pool;

static size_t engine_min_bytes;
static unsigned engine_depth;

/* The registered domains; ndomains is published (release) after the slot is written. */
static struct {
    const struct om_domain_ops *ops;
    void *ctx;
} domains[OM_ENGINE_DOMAINS];
static int ndomains;

int om_engine_register(const struct om_domain_ops *ops, void *ctx)
{
    int n = __atomic_load_n(&ndomains, __ATOMIC_RELAXED);
    if (n == OM_ENGINE_DOMAINS)
        return -ENOSPC;
    domains[n].ops = ops;
    domains[n].ctx = ctx;
    __atomic_store_n(&ndomains, n + 1, __ATOMIC_RELEASE);
    return 0;
}

/* The host's pool as a domain. */
static void host_lock(void *ctx)
{
    om_pool_lock(ctx);
}

static void host_unlock(void *ctx)
{
    om_pool_unlock(ctx);
}

static void host_atfork_child(void *ctx)
{
    om_pool_atfork_child(ctx);
}

static void host_publish(void *ctx)
{
    om_pool_publish(ctx);
}

static void host_save_plan(void *ctx)
{
    om_pool_save_plan(ctx);
}

static const struct om_domain_ops host_ops = {
    .lock = host_lock,
    .unlock = host_unlock,
    .atfork_child = host_atfork_child,
    .publish = host_publish,
    .save_plan = host_save_plan,
};

static void start_kinds(const struct om_config *cfg)
{
    for (const struct om_domain_kind *const *k = om_domain_kinds; k && *k; k++) {
        int rc = (*k)->start(cfg);
        if (rc != 0)
            om_warn("the %s domain could not start (%s); its memory is not managed", (*k)->name,
                    strerror(-rc));
    }
}

int om_engine_init(const struct om_config *cfg)
{
    struct om_tracer_options options = {
        .min_bytes = cfg->min_bytes,
        .stack_depth = cfg->stack_depth,
        .warmup = cfg->warmup,
        .report_template = cfg->report,
        .mode_name = om_mode_name(cfg->mode),
        .verify = cfg->verify,
    };
    om_guard_enter();
    int rc = om_tracer_init(&options);
    if (rc == 0 && cfg->mode == OM_MODE_PLAN && (cfg->devices & OM_DEVICE_CPU)) {
        /* Address space only: twice the machine's memory, which no program can fill. */
        size_t reserve = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) * 2;
        if (reserve < ((size_t)1 << 32))
            reserve = (size_t)1 << 32;
        int pool_rc = om_pool_create(&host_pool, &om_host_backend, OM_TRACER_HOST, reserve, cfg);
        if (pool_rc != 0)
            om_warn("the pool could not be reserved (%s); recording only", strerror(-pool_rc));
        pool_on = pool_rc == 0 && om_engine_register(&host_ops, host_pool) == 0;
        if (pool_on)
            om_pool_range(host_pool, &om_arena_lo, &om_arena_len);
    }
    if (rc == 0)
        start_kinds(cfg);
    om_guard_leave();
    if (rc != 0) {
        om_warn("the tracer could not start (%s); running in passthrough", strerror(-rc));
        return rc;
    }
    engine_min_bytes = cfg->min_bytes;
    engine_depth = cfg->stack_depth;
    engine_on = 1;
    return 0;
}

int om_engine_running(void)
{
    return engine_on;
}

int om_engine_accepts(size_t size)
{
    return engine_on && !om_guard_inside();
}

static void *real_alloc(size_t size, size_t alignment, int zero, const struct om_stack *stack)
{
    void *p;
    if (alignment) {
        int rc = om_real.posix_memalign(&p, alignment, size);
        if (rc != 0) {
            p = NULL;
            errno = rc;
        }
    } else {
        p = om_real.malloc(size);
    }
    if (!p)
        return NULL;
    if (zero)
        memset(p, 0, size);
    size_t usable = om_real.malloc_usable_size ? om_real.malloc_usable_size(p) : size;
    __atomic_fetch_add(&om_real_managed, 1, __ATOMIC_RELAXED);
    om_tracer_on_alloc(OM_TRACER_HOST, p, size, usable, alignment, stack, NULL);
    return p;
}

/* A request that succeeds, and a free, leave errno as it was, whatever optmem did inside
 * (a thread that could not be started, a page that could not go back): as glibc. */
void *om_engine_alloc(size_t size, size_t alignment, int zero)
{
    struct om_stack stack;
    int saved_errno = errno;
    om_guard_enter();
    void *p = NULL;
    int taken = 0;
    uint64_t key = 0;
    if (pool_on) {
        key = om_stack_cheap_key(size);
        p = om_pool_alloc_cheap(host_pool, size, alignment, zero, key, &taken);
    }
    if (!taken || !p)
        om_stack_capture(&stack, engine_depth, 2); /* skip this frame and the route's */
    if (!taken && pool_on)
        p = om_pool_alloc_keyed(host_pool, size, alignment, zero, OM_STREAM_NONE, &stack, key);
    if (!p)
        p = real_alloc(size, alignment, zero, &stack);
    om_checkpoint_note_request();
    om_guard_leave();
    if (p)
        errno = saved_errno;
    return p;
}

/* Only blocks of at least min_bytes can be managed; the real allocator answers that from
 * the chunk header, which spares the tracer a locked lookup for every small free. */
static int may_be_managed(void *ptr)
{
    return engine_on && !om_guard_inside() &&
           __atomic_load_n(&om_real_managed, __ATOMIC_RELAXED) > 0 && om_real.malloc_usable_size &&
           om_real.malloc_usable_size(ptr) >= engine_min_bytes;
}

int om_engine_free(void *ptr)
{
    if (pool_on && om_pool_contains(host_pool, ptr)) {
        int saved_errno = errno;
        om_guard_enter();
        om_pool_free(host_pool, ptr, OM_STREAM_NONE);
        om_guard_leave();
        errno = saved_errno;
        return 0;
    }
    if (may_be_managed(ptr)) {
        int saved_errno = errno;
        om_guard_enter(); /* from here on this thread may hold the tracer's lock */
        int found = om_tracer_on_free(OM_TRACER_HOST, ptr);
        om_guard_leave();
        errno = saved_errno;
        if (found)
            __atomic_fetch_sub(&om_real_managed, 1, __ATOMIC_RELAXED);
    }
    return -ENOENT;
}

int om_engine_owns(void *ptr)
{
    if (pool_on && om_pool_contains(host_pool, ptr))
        return 1;
    if (!may_be_managed(ptr))
        return 0;
    om_guard_enter();
    int owned = om_tracer_block_size(OM_TRACER_HOST, ptr) != 0;
    om_guard_leave();
    return owned;
}

size_t om_engine_usable_size(void *ptr)
{
    if (!pool_on || !om_pool_contains(host_pool, ptr))
        return 0;
    om_guard_enter();
    size_t usable = om_pool_usable_size(host_pool, ptr);
    om_guard_leave();
    return usable;
}

/* Every domain's counters into the tracer, before a report. */
static void publish(void)
{
    int n = __atomic_load_n(&ndomains, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (domains[i].ops->publish)
            domains[i].ops->publish(domains[i].ctx);
}

void om_engine_step(void)
{
    if (!engine_on)
        return;
    om_guard_enter();
    om_tracer_step();
    om_guard_leave();
}

int om_engine_dump(const char *path)
{
    if (!engine_on)
        return -ENOTSUP;
    om_guard_enter();
    publish();
    int rc = om_tracer_dump(path);
    om_guard_leave();
    return rc;
}

/* The count is read again after each lock: a domain registered under an earlier domain's
 * lock (a device, under the set-up lock) is seen once that lock is held. From the first lock
 * to the fork's end this thread is inside optmem (a signal handler's _exit writes no report). */
void om_engine_atfork_prepare(void)
{
    om_guard_enter();
    for (int i = 0; i < __atomic_load_n(&ndomains, __ATOMIC_ACQUIRE); i++)
        if (domains[i].ops->lock)
            domains[i].ops->lock(domains[i].ctx);
    if (engine_on)
        om_tracer_atfork_prepare();
}

void om_engine_atfork_parent(void)
{
    if (engine_on)
        om_tracer_atfork_parent();
    for (int i = __atomic_load_n(&ndomains, __ATOMIC_ACQUIRE) - 1; i >= 0; i--)
        if (domains[i].ops->unlock)
            domains[i].ops->unlock(domains[i].ctx);
    om_guard_leave();
}

void om_engine_atfork_child(void)
{
    om_checkpoint_atfork_child();
    if (engine_on)
        om_tracer_atfork_child();
    for (int i = __atomic_load_n(&ndomains, __ATOMIC_ACQUIRE) - 1; i >= 0; i--)
        if (domains[i].ops->atfork_child)
            domains[i].ops->atfork_child(domains[i].ctx);
    om_guard_leave();
}

void om_engine_checkpoint(uint64_t interval_ns)
{
    if (!engine_on)
        return;
    om_guard_enter();
    publish();
    om_tracer_checkpoint(interval_ns);
    om_guard_leave();
}

void om_engine_at_exit(void)
{
    if (!engine_on)
        return;
    om_checkpoint_stop();
    om_guard_enter();
    int n = __atomic_load_n(&ndomains, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (domains[i].ops->save_plan)
            domains[i].ops->save_plan(domains[i].ctx);
    publish();
    om_tracer_at_exit();
    om_guard_leave();
}
