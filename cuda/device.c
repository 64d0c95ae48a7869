/* The devices of the CUDA domain: set-up of each device's tracer domain, backend and pool
 * under one lock, the lookup of a pointer's device, and the engine's hooks (init, publish,
 * fork). */
#include "cuda.h"
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

int om_cuda_init(const struct om_config *cfg)
{
    if (!(cfg->devices & OM_DEVICE_CUDA) || cfg->mode == OM_MODE_OFF)
        return 0;
    cuda_cfg = cfg;
    om_cuda_depth = cfg->stack_depth;
    __atomic_store_n(&om_cuda_min, cfg->min_bytes ? cfg->min_bytes : 1, __ATOMIC_RELAXED);
    __atomic_store_n(&om_cuda_state, OM_CUDA_ON, __ATOMIC_RELEASE);
    return 0;
}

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

static int setup_device(struct om_cuda_dev *d, int ordinal)
{
    char name[16];
    device_name(ordinal, name);
    int domain = om_tracer_domain_open(name);
    if (domain < 0) {
        om_warn("%s: no tracer domain (%s); this device passes through", name, strerror(-domain));
        return domain;
    }
    d->domain = (unsigned)domain;
    if (cuda_cfg->mode == OM_MODE_PLAN) {
        int rc = setup_pool(d, ordinal, name);
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

void om_cuda_publish(void)
{
    int hi = __atomic_load_n(&devices_hi, __ATOMIC_ACQUIRE);
    om_engine_enter();
    for (int i = 0; i < hi; i++)
        if (__atomic_load_n(&devices[i].ready, __ATOMIC_ACQUIRE) && devices[i].pool)
            om_pool_publish(devices[i].pool);
    om_engine_leave();
}

/* Lock order: the set-up lock, then the device pools in ordinal order (the tracer's come
 * after: set-up opens tracer domains while holding the set-up lock). */
void om_cuda_atfork_prepare(void)
{
    pthread_mutex_lock(&setup_lock);
    for (int i = 0; i < devices_hi; i++)
        if (devices[i].ready && devices[i].pool)
            om_pool_lock(devices[i].pool);
}

void om_cuda_atfork_parent(void)
{
    for (int i = devices_hi - 1; i >= 0; i--)
        if (devices[i].ready && devices[i].pool)
            om_pool_unlock(devices[i].pool);
    pthread_mutex_unlock(&setup_lock);
}

void om_cuda_atfork_child(void)
{
    for (int i = 0; i < devices_hi; i++)
        if (devices[i].ready && devices[i].pool)
            om_pool_atfork_child(devices[i].pool);
    pthread_mutex_unlock(&setup_lock);
    if (om_cuda_state == OM_CUDA_ON) {
        om_cuda_min = SIZE_MAX;
        om_cuda_state = OM_CUDA_CHILD;
    }
}
