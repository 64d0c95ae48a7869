/* Managed requests: the stack is captured before any lock; in plan mode the pool serves the
 * block, otherwise (or when the pool cannot) the real allocator does and the tracer records
 * its birth and death. */
#include "engine.h"
#include "checkpoint.h"
#include "cuda.h"
#include "log.h"
#include "pool.h"
#include "real.h"
#include "route.h"
#include "tracer.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int engine_on, pool_on, cuda_on;
static struct om_pool *host_pool;

static size_t engine_min_bytes;
static unsigned engine_depth;
/* Set while this thread is inside the engine: anything it allocates (libunwind, the
 * report) goes straight to the real allocator. */
static __thread int tls_in_engine;

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
    tls_in_engine++;
    int rc = om_tracer_init(&options);
    if (rc == 0 && cfg->mode == OM_MODE_PLAN && (cfg->devices & OM_DEVICE_CPU)) {
        /* Address space only: twice the machine's memory, which no program can fill. */
        size_t reserve = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) * 2;
        if (reserve < ((size_t)1 << 32))
            reserve = (size_t)1 << 32;
        int pool_rc = om_pool_create(&host_pool, &om_host_backend, OM_TRACER_HOST, reserve, cfg);
        if (pool_rc != 0)
            om_warn("the pool could not be reserved (%s); recording only", strerror(-pool_rc));
        pool_on = pool_rc == 0;
        if (pool_on)
            om_pool_range(host_pool, &om_arena_lo, &om_arena_len);
    }
    if (rc == 0 && (cfg->devices & OM_DEVICE_CUDA)) {
        int cuda_rc = om_cuda_init(cfg);
        if (cuda_rc != 0)
            om_warn("the CUDA domain could not start (%s); device memory is not managed",
                    strerror(-cuda_rc));
        cuda_on = cuda_rc == 0;
    }
    tls_in_engine--;
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
    return engine_on && !tls_in_engine;
}

void om_engine_enter(void)
{
    tls_in_engine++;
}

void om_engine_leave(void)
{
    tls_in_engine--;
}

int om_engine_inside(void)
{
    return tls_in_engine;
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

void *om_engine_alloc(size_t size, size_t alignment, int zero)
{
    struct om_stack stack;
    tls_in_engine++;
    om_stack_capture(&stack, engine_depth, 2); /* skip this frame and the route's */
    void *p =
        pool_on ? om_pool_alloc(host_pool, size, alignment, zero, OM_STREAM_NONE, &stack) : NULL;
    if (!p)
        p = real_alloc(size, alignment, zero, &stack);
    om_checkpoint_note_request();
    tls_in_engine--;
    return p;
}

/* Only blocks of at least min_bytes can be managed; the real allocator answers that from
 * the chunk header, which spares the tracer a locked lookup for every small free. */
static int may_be_managed(void *ptr)
{
    return engine_on && !tls_in_engine && __atomic_load_n(&om_real_managed, __ATOMIC_RELAXED) > 0 &&
           om_real.malloc_usable_size && om_real.malloc_usable_size(ptr) >= engine_min_bytes;
}

int om_engine_free(void *ptr)
{
    if (pool_on && om_pool_contains(host_pool, ptr)) {
        tls_in_engine++;
        om_pool_free(host_pool, ptr, OM_STREAM_NONE);
        tls_in_engine--;
        return 0;
    }
    if (may_be_managed(ptr) && om_tracer_on_free(OM_TRACER_HOST, ptr))
        __atomic_fetch_sub(&om_real_managed, 1, __ATOMIC_RELAXED);
    return -ENOENT;
}

int om_engine_owns(void *ptr)
{
    return (pool_on && om_pool_contains(host_pool, ptr)) ||
           (may_be_managed(ptr) && om_tracer_block_size(OM_TRACER_HOST, ptr) != 0);
}

size_t om_engine_usable_size(void *ptr)
{
    return pool_on && om_pool_contains(host_pool, ptr) ? om_pool_usable_size(host_pool, ptr) : 0;
}

/* Every pool's counters into the tracer, before a report. */
static void publish(void)
{
    if (pool_on)
        om_pool_publish(host_pool);
    if (cuda_on)
        om_cuda_publish();
}

void om_engine_step(void)
{
    if (engine_on)
        om_tracer_step();
}

int om_engine_dump(const char *path)
{
    if (!engine_on)
        return -ENOTSUP;
    tls_in_engine++;
    publish();
    int rc = om_tracer_dump(path);
    tls_in_engine--;
    return rc;
}

/* Lock order everywhere: the host pool's, the device pools', then the tracer's. */
void om_engine_atfork_prepare(void)
{
    if (pool_on)
        om_pool_lock(host_pool);
    if (cuda_on)
        om_cuda_atfork_prepare();
    if (engine_on)
        om_tracer_atfork_prepare();
}

void om_engine_atfork_parent(void)
{
    if (engine_on)
        om_tracer_atfork_parent();
    if (cuda_on)
        om_cuda_atfork_parent();
    if (pool_on)
        om_pool_unlock(host_pool);
}

void om_engine_atfork_child(void)
{
    om_checkpoint_atfork_child();
    if (engine_on)
        om_tracer_atfork_child();
    if (cuda_on)
        om_cuda_atfork_child();
    if (pool_on)
        om_pool_atfork_child(host_pool);
}

void om_engine_checkpoint(uint64_t interval_ns)
{
    if (!engine_on)
        return;
    tls_in_engine++;
    publish();
    om_tracer_checkpoint(interval_ns);
    tls_in_engine--;
}

void om_engine_at_exit(void)
{
    if (!engine_on)
        return;
    om_checkpoint_stop();
    tls_in_engine++;
    if (pool_on)
        om_pool_save_plan(host_pool);
    publish();
    om_tracer_at_exit();
    tls_in_engine--;
}
