/* liboptmem_cupti.so, named by CUDA_INJECTION64_PATH: device lifetimes from CUPTI's MEMORY2
 * records, for programs with a static cudart whose cudaMalloc no PLT hook can reach. */
#include "config.h"
#include "cupti_abi.h"
#include "log.h"
#include "tracer.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The driver looks this up in the library CUDA_INJECTION64_PATH names, during cuInit. */
__attribute__((visibility("default"))) int InitializeInjection(void);

/* The tracer holds 16 device domains besides the host's. */
#define OM_CUPTI_DEVICES (OM_TRACER_DOMAINS - 1)

/* 8192 MEMORY2 records per buffer: few callbacks, and little memory held by CUPTI. */
#define OM_CUPTI_BUFFER_BYTES ((size_t)1 << 20)

static struct {
    om_cuptiActivityRegisterCallbacks_fn register_callbacks;
    om_cuptiActivityEnable_fn enable;
    om_cuptiActivityGetNextRecord_fn next_record;
    om_cuptiActivityFlushAll_fn flush_all;
    om_cuptiActivityGetNumDroppedRecords_fn dropped_records;
    om_cuptiGetResultString_fn result_string;
} cupti;

/* Buffers complete on CUPTI's thread and on whichever thread flushes; taking them one at
 * a time keeps births and deaths in the order CUPTI wrote them. It also guards the rest. */
static pthread_mutex_t feed_lock = PTHREAD_MUTEX_INITIALIZER;
static int device_domain[OM_CUPTI_DEVICES]; /* tracer domain + 1; 0: not open; -1: failed */
static int warned_device, warned_record;
static size_t dropped_total;

static int recording;
static pid_t recording_pid;

static const char *result_text(CUptiResult rc)
{
    const char *text = NULL;
    if (cupti.result_string && cupti.result_string(rc, &text) == CUPTI_SUCCESS && text)
        return text;
    return "unknown CUPTI error";
}

/* The tracer domain of a device, opened at its first managed allocation (open != 0): a
 * device whose memory was never recorded has nothing to free and no report section. */
static int domain_of(uint32_t device, int open)
{
    if (device >= OM_CUPTI_DEVICES) {
        if (open && !warned_device) {
            warned_device = 1;
            om_warn("CUPTI: device %u is above the %u devices optmem records; its memory is "
                    "left out of the report",
                    device, OM_CUPTI_DEVICES - 1);
        }
        return -1;
    }
    if (device_domain[device] == 0 && open) {
        char name[16];
        snprintf(name, sizeof name, "cuda:%u", device);
        int domain = om_tracer_domain_open(name);
        if (domain < 0)
            om_warn("CUPTI: cannot record %s: %s", name, strerror(-domain));
        device_domain[device] = domain < 0 ? -1 : domain + 1;
    }
    return device_domain[device] > 0 ? device_domain[device] - 1 : -1;
}

static void feed(const CUpti_ActivityMemory4 *r)
{
    /* Host memory (pinned, pageable) and module statics are no device buffers to plan. */
    if (r->memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE &&
        r->memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_MANAGED)
        return;
    void *ptr = (void *)(uintptr_t)r->address;
    if (r->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) {
        if (r->bytes < om_cfg.min_bytes)
            return;
        int domain = domain_of(r->deviceId, 1);
        if (domain < 0)
            return;
        /* The only frame CUPTI knows is the PC of the API call. */
        struct om_stack stack = {.depth = 1, .frames = {(void *)(uintptr_t)r->PC}};
        om_tracer_on_alloc((unsigned)domain, ptr, (size_t)r->bytes, (size_t)r->bytes, 0, &stack,
                           NULL);
    } else if (r->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
        int domain = domain_of(r->deviceId, 0);
        if (domain >= 0)
            om_tracer_on_free((unsigned)domain, ptr);
    }
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* From mmap, not malloc: the program's allocator (or one it preloads) stays untouched.
     * NULL tells CUPTI to drop records, which it counts. */
    *buffer = om_sys_map(OM_CUPTI_BUFFER_BYTES);
    *size = *buffer ? OM_CUPTI_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size,
                             size_t valid)
{
    if (!buffer)
        return;
    pthread_mutex_lock(&feed_lock);
    CUpti_Activity *record = NULL;
    for (;;) {
        CUptiResult rc = cupti.next_record(buffer, valid, &record);
        if (rc == CUPTI_ERROR_MAX_LIMIT_REACHED)
            break;
        if (rc != CUPTI_SUCCESS) {
            if (!warned_record) {
                warned_record = 1;
                om_warn("CUPTI: cuptiActivityGetNextRecord: %s; the rest of a buffer of "
                        "device records is left out of the report",
                        result_text(rc));
            }
            break;
        }
        if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY2)
            feed((const CUpti_ActivityMemory4 *)record);
    }
    size_t dropped = 0;
    if (cupti.dropped_records(NULL, 0, &dropped) == CUPTI_SUCCESS)
        dropped_total += dropped;
    pthread_mutex_unlock(&feed_lock);
    om_sys_unmap(buffer, size);
}

static void at_exit(void)
{
    /* A forked child inherits this handler but not CUPTI: the report is its parent's. */
    if (!recording || getpid() != recording_pid)
        return;
    CUptiResult rc = cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (rc != CUPTI_SUCCESS)
        om_warn("CUPTI: cuptiActivityFlushAll: %s; the last device records are missing from "
                "the report",
                result_text(rc));
    pthread_mutex_lock(&feed_lock);
    size_t dropped = dropped_total;
    pthread_mutex_unlock(&feed_lock);
    if (dropped)
        om_warn("CUPTI dropped %zu device memory records: the device lifetimes in the report "
                "are incomplete",
                dropped);
    om_tracer_at_exit();
}

static int resolve(void *lib, const char *name, void *slot)
{
    void *sym = dlsym(lib, name);
    if (!sym) {
        om_warn("CUPTI: the libcupti found has no %s; recording nothing", name);
        return -ENOSYS;
    }
    memcpy(slot, &sym, sizeof sym);
    return 0;
}

/* No link-time dependency: the library builds and loads without the toolkit. */
static int load_cupti(void)
{
    static const char *const names[] = {"libcupti.so.13", "libcupti.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        om_warn("CUPTI not found (%s): add its directory (the toolkit's lib64 or "
                "extras/CUPTI/lib64) to LD_LIBRARY_PATH; recording nothing",
                dlerror());
        return -ENOENT;
    }
    int rc = resolve(lib, "cuptiGetResultString", &cupti.result_string);
    if (rc == 0)
        rc = resolve(lib, "cuptiActivityRegisterCallbacks", &cupti.register_callbacks);
    if (rc == 0)
        rc = resolve(lib, "cuptiActivityEnable", &cupti.enable);
    if (rc == 0)
        rc = resolve(lib, "cuptiActivityGetNextRecord", &cupti.next_record);
    if (rc == 0)
        rc = resolve(lib, "cuptiActivityFlushAll", &cupti.flush_all);
    if (rc == 0)
        rc = resolve(lib, "cuptiActivityGetNumDroppedRecords", &cupti.dropped_records);
    if (rc != 0)
        goto fail;
    return 0;
fail:
    memset(&cupti, 0, sizeof cupti);
    dlclose(lib);
    return rc;
}

static const char *env(const char *name)
{
    return getenv(name);
}

/* liboptmem.so has already parsed (and complained about) every other variable. */
static const char *env_log_only(const char *name)
{
    return strcmp(name, "OPTMEM_LOG") == 0 ? getenv(name) : NULL;
}

static int start(void)
{
    /* Two tracers would write the same report path twice, each with half the story. */
    if (dlsym(RTLD_DEFAULT, "optmem_version")) {
        om_config_load(&om_cfg, env_log_only);
        om_warn("liboptmem.so is loaded too and records this process: the CUPTI injection "
                "(CUDA_INJECTION64_PATH) records nothing");
        return -EEXIST;
    }
    om_config_load(&om_cfg, env);
    if (om_cfg.mode == OM_MODE_OFF) {
        om_debug("OPTMEM_MODE=off: the CUPTI injection records nothing");
        return -ECANCELED;
    }
    if (!om_cfg.report[0]) {
        om_warn("OPTMEM_REPORT is not set: the CUPTI injection would have nowhere to write "
                "device lifetimes, and records nothing");
        return -EINVAL;
    }
    int rc = load_cupti();
    if (rc != 0)
        return rc;
    /* It records only: serving device memory takes liboptmem.so's cudaMalloc. */
    struct om_tracer_options options = {
        .min_bytes = om_cfg.min_bytes,
        .stack_depth = 1,
        .warmup = om_cfg.warmup,
        .report_template = om_cfg.report,
        .mode_name = om_mode_name(OM_MODE_TRACE),
        .verify = om_cfg.verify,
    };
    rc = om_tracer_init(&options);
    if (rc != 0) {
        om_warn("CUPTI injection: the tracer did not start (%s); recording nothing", strerror(-rc));
        return rc;
    }
    const char *what = "cuptiActivityRegisterCallbacks";
    CUptiResult crc = cupti.register_callbacks(buffer_requested, buffer_completed);
    if (crc != CUPTI_SUCCESS)
        goto cupti_fail;
    recording_pid = getpid();
    if (atexit(at_exit) != 0) {
        om_warn("CUPTI injection: atexit failed; recording nothing");
        return -ENOMEM;
    }
    what = "cuptiActivityEnable(MEMORY2)";
    crc = cupti.enable(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (crc != CUPTI_SUCCESS)
        goto cupti_fail;
    recording = 1;
    om_debug("CUPTI injection: recording device memory into %s", om_cfg.report);
    return 0;
cupti_fail:
    om_warn("CUPTI: %s: %s; recording nothing", what, result_text(crc));
    return -EIO;
}

/* 1 when recording (the value the CUDA injection samples return), 0 otherwise; the
 * program goes on either way. */
int InitializeInjection(void)
{
    static int called;
    if (__atomic_exchange_n(&called, 1, __ATOMIC_ACQ_REL))
        return __atomic_load_n(&recording, __ATOMIC_ACQUIRE);
    int rc = start();
    __atomic_store_n(&recording, rc == 0, __ATOMIC_RELEASE);
    return rc == 0;
}
