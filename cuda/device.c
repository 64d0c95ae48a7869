/* The devices of the CUDA domain: set-up of each device's tracer domain, backend and pool
 * under one lock, the lookup of a pointer's device, and the domains it registers with the
 * engine (the set-up, then each device as it is set up). */
#include "device.h"
#include "engine.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

int om_cuda_state = OM_CUDA_OFF;
size_t om_cuda_min = SIZE_MAX;
unsigned om_cuda_depth;

static const struct om_config *cuda_cfg;
static struct om_cuda_dev devices[OM_CUDA_DEVICES];
/* Held while a device is set up, and across fork (so no pool appears in between). */
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set-up devices have ordinals below this: the bound of every scan. */
static int devices_hi;
/* Ordinals whose set-up failed: they pass through for good. */
static unsigned failed_mask;

/* A device as a domain: registered before its set-up, so its ops act only once it is ready
 * and has a pool (fork's ops run under the set-up lock, where that cannot change). */
static struct om_pool *device_pool(void *ctx)
{
    struct om_cuda_dev *d = ctx;
    return __atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) ? d->pool : NULL;
}

static void device_lock(void *ctx)
{
    struct om_pool *pool = device_pool(ctx);
    if (pool)
        om_pool_lock(pool);
}

static void device_unlock(void *ctx)
{
    struct om_pool *pool = device_pool(ctx);
    if (pool)
        om_pool_unlock(pool);
}

static void device_atfork_child(void *ctx)
{
    struct om_pool *pool = device_pool(ctx);
    if (pool)
        om_pool_atfork_child(pool);
}

static void device_publish(void *ctx)
{
    struct om_pool *pool = device_pool(ctx);
    if (pool)
        om_pool_publish(pool);
}

/* No save_plan: saved plans are the host's (OPTMEM_PLAN_FILE). */
static const struct om_domain_ops device_ops = {
    .lock = device_lock,
    .unlock = device_unlock,
    .atfork_child = device_atfork_child,
    .publish = device_publish,
};

static void device_name(int ordinal, char name[16])
{
    memcpy(name, "cuda:", 5);
    int n = 5;
    if (ordinal >= 10)
        name[n++] = (char)('0' + ordinal / 10);
    name[n++] = (char)('0' + ordinal % 10);
    name[n] = '\0';
}

/* Plan mode: the device's arena and pool. On failure the device is still recorded. */
static int setup_pool(struct om_cuda_dev *d, int ordinal, const char *name)
{
    size_t reserve_len;
    int rc = om_cuda_backend_init(&d->backend, ordinal, name, &reserve_len);
    if (rc == 0)
        rc = om_pool_create(&d->pool, &d->backend.ops, d->domain, reserve_len, cuda_cfg);
    if (rc != 0) {
        d->pool = NULL;
        om_cuda_backend_destroy(&d->backend);
        return rc;
    }
    om_pool_range(d->pool, &d->lo, &d->len);
    return 0;
}

/* Every device, the set-up and the host's pool fit in the engine's table. */
_Static_assert(OM_CUDA_DEVICES + 2 <= OM_ENGINE_DOMAINS, "the engine's domain table is too small");

static int setup_device(struct om_cuda_dev *d, int ordinal)
{
    char name[16];
    device_name(ordinal, name);
    int rc = om_engine_register(&device_ops, d);
    if (rc != 0) {
        om_warn("%s: not registered with the engine (%s); this device passes through", name,
                strerror(-rc));
        return rc;
    }
    int domain = om_tracer_domain_open(name);
    if (domain < 0) {
        om_warn("%s: no tracer domain (%s); this device passes through", name, strerror(-domain));
        return domain;
    }
    d->domain = (unsigned)domain;
    if (cuda_cfg->mode == OM_MODE_PLAN) {
        rc = setup_pool(d, ordinal, name);
        if (rc != 0)
            om_warn("%s: the device arena could not be set up (%s); recording only", name,
                    strerror(-rc));
    }
    return 0;
}

static struct om_cuda_dev *setup_slow(int ordinal)
{
    struct om_cuda_dev *d = &devices[ordinal];
    pthread_mutex_lock(&setup_lock);
    if (!d->ready && !(failed_mask & (1u << ordinal))) {
        if (setup_device(d, ordinal) == 0) {
            __atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
            if (ordinal >= devices_hi)
                __atomic_store_n(&devices_hi, ordinal + 1, __ATOMIC_RELEASE);
        } else {
            __atomic_store_n(&failed_mask, failed_mask | 1u << ordinal, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&setup_lock);
    return d->ready ? d : NULL;
}

struct om_cuda_dev *om_cuda_device(int ordinal)
{
    if (ordinal < 0 || ordinal >= OM_CUDA_DEVICES)
        return NULL;
    if (__atomic_load_n(&devices[ordinal].ready, __ATOMIC_ACQUIRE))
        return &devices[ordinal];
    if (__atomic_load_n(&failed_mask, __ATOMIC_RELAXED) & (1u << ordinal))
        return NULL;
    return setup_slow(ordinal);
}

struct om_cuda_dev *om_cuda_device_of(const void *p)
{
    int hi = __atomic_load_n(&devices_hi, __ATOMIC_ACQUIRE);
    for (int i = 0; i < hi; i++) {
        struct om_cuda_dev *d = &devices[i];
        if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) && d->pool &&
            (uintptr_t)p - d->lo < d->len)
            return d;
    }
    return NULL;
}

void om_cuda_record_alloc(struct om_cuda_dev *d, void *p, size_t size, const struct om_stack *stack)
{
    __atomic_fetch_add(&d->live_real, 1, __ATOMIC_RELAXED);
    om_tracer_on_alloc(d->domain, p, size, size, 0, stack, NULL);
}

void om_cuda_record_free(void *p)
{
    int hi = __atomic_load_n(&devices_hi, __ATOMIC_ACQUIRE);
    for (int i = 0; i < hi; i++) {
        struct om_cuda_dev *d = &devices[i];
        if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&d->live_real, __ATOMIC_RELAXED) <= 0)
            continue;
        if (om_tracer_on_free(d->domain, p)) {
            __atomic_fetch_sub(&d->live_real, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* The set-up lock as a domain: held across fork, so that no device is set up (and none
 * registered) in between. The child keeps its parent's tables but cannot use its CUDA
 * context: it stops serving and passes everything through. */
static void setup_domain_lock(void *ctx)
{
    pthread_mutex_lock(&setup_lock);
}

static void setup_domain_unlock(void *ctx)
{
    pthread_mutex_unlock(&setup_lock);
}

static void setup_domain_atfork_child(void *ctx)
{
    pthread_mutex_unlock(&setup_lock);
    if (om_cuda_state == OM_CUDA_ON) {
        om_cuda_min = SIZE_MAX;
        om_cuda_state = OM_CUDA_CHILD;
    }
}

static const struct om_domain_ops setup_domain_ops = {
    .lock = setup_domain_lock,
    .unlock = setup_domain_unlock,
    .atfork_child = setup_domain_atfork_child,
};

/* Resolves nothing yet: devices are set up at their first request. */
static int cuda_start(const struct om_config *cfg)
{
    if (!(cfg->devices & OM_DEVICE_CUDA) || cfg->mode == OM_MODE_OFF)
        return 0;
    int rc = om_engine_register(&setup_domain_ops, NULL);
    if (rc != 0)
        return rc;
    cuda_cfg = cfg;
    om_cuda_depth = cfg->stack_depth;
    __atomic_store_n(&om_cuda_min, cfg->min_bytes ? cfg->min_bytes : 1, __ATOMIC_RELAXED);
    __atomic_store_n(&om_cuda_state, OM_CUDA_ON, __ATOMIC_RELEASE);
    return 0;
}

static const struct om_domain_kind cuda_kind = {"CUDA", cuda_start};

const struct om_domain_kind *const om_domain_kinds[] = {&cuda_kind, NULL};
