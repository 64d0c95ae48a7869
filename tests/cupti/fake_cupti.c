/* A fake libcupti.so.13: the CUPTI entry points liboptmem_cupti.so calls, with CUPTI's ABI,
 * delivering the MEMORY2 records a test program makes it write, in buffers, as CUPTI does. */
#include "cupti_abi.h"
#include "fake_cupti.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

CUptiResult cuptiActivityRegisterCallbacks(om_cupti_buffer_requested_fn requested,
                                           om_cupti_buffer_completed_fn completed);
CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind);
CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record);
CUptiResult cuptiActivityFlushAll(uint32_t flag);
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t *dropped);
CUptiResult cuptiGetResultString(CUptiResult result, const char **str);

#define QUEUE 16

struct buffer {
    uint8_t *data;
    size_t size, valid;
};

/* Everything below; never held while the client's completion callback runs. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static om_cupti_buffer_requested_fn client_requested;
static om_cupti_buffer_completed_fn client_completed;
static int memory2_on, worker_started, worker_busy;
static struct buffer cur;
static size_t cur_records, cur_max, per_buffer;
static struct buffer queue[QUEUE];
static size_t queue_head, queue_len;
static size_t dropped;
static uint32_t correlation;
static struct fake_cupti_stats stats;

/* FAKE_CUPTI_FAIL names the entry point that fails, as a broken CUPTI or driver would. */
static int failing(const char *name)
{
    const char *which = getenv("FAKE_CUPTI_FAIL");
    return which && strcmp(which, name) == 0;
}

/* CUPTI hands completed buffers back on a thread of its own, in order. */
static void *worker_main(void *arg)
{
    pthread_mutex_lock(&lock);
    for (;;) {
        while (queue_len == 0)
            pthread_cond_wait(&changed, &lock);
        struct buffer b = queue[queue_head];
        queue_head = (queue_head + 1) % QUEUE;
        queue_len--;
        worker_busy = 1;
        pthread_mutex_unlock(&lock);
        client_completed(NULL, 0, b.data, b.size, b.valid);
        pthread_mutex_lock(&lock);
        worker_busy = 0;
        stats.buffers_by_worker++;
        pthread_cond_broadcast(&changed);
    }
    return NULL;
}

static void complete_current(void)
{
    while (queue_len == QUEUE)
        pthread_cond_wait(&changed, &lock);
    queue[(queue_head + queue_len) % QUEUE] = cur;
    queue_len++;
    cur = (struct buffer){0};
    cur_records = 0;
    pthread_cond_broadcast(&changed);
}

CUptiResult cuptiActivityRegisterCallbacks(om_cupti_buffer_requested_fn requested,
                                           om_cupti_buffer_completed_fn completed)
{
    if (!requested || !completed)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (failing("cuptiActivityRegisterCallbacks"))
        return CUPTI_ERROR_UNKNOWN;
    CUptiResult rc = CUPTI_SUCCESS;
    pthread_mutex_lock(&lock);
    client_requested = requested;
    client_completed = completed;
    if (!worker_started) {
        pthread_t worker;
        if (pthread_create(&worker, NULL, worker_main, NULL) == 0) {
            pthread_detach(worker);
            worker_started = 1;
        } else {
            rc = CUPTI_ERROR_UNKNOWN;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
    if (failing("cuptiActivityEnable"))
        return CUPTI_ERROR_UNKNOWN;
    if (kind != CUPTI_ACTIVITY_KIND_MEMORY2)
        return CUPTI_ERROR_INVALID_KIND; /* the fake writes no other record */
    pthread_mutex_lock(&lock);
    memory2_on = 1;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (failing("cuptiActivityGetNextRecord"))
        return CUPTI_ERROR_UNKNOWN;
    size_t at = 0;
    if (*record)
        at = (size_t)((uint8_t *)*record - buffer) + sizeof(CUpti_ActivityMemory4);
    if (at >= valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    CUpti_Activity *next = (CUpti_Activity *)(buffer + at);
    if (next->kind != CUPTI_ACTIVITY_KIND_MEMORY2 || valid - at < sizeof(CUpti_ActivityMemory4))
        return CUPTI_ERROR_INVALID_KIND;
    *record = next;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    if (failing("cuptiActivityFlushAll"))
        return CUPTI_ERROR_UNKNOWN;
    pthread_mutex_lock(&lock);
    if (!client_completed) {
        pthread_mutex_unlock(&lock);
        return CUPTI_ERROR_NOT_INITIALIZED;
    }
    /* Blocking: every buffer already complete is delivered first, then the partial one. */
    while (queue_len || worker_busy)
        pthread_cond_wait(&changed, &lock);
    struct buffer b = {0};
    if (cur.data && cur_records) {
        b = cur;
        cur = (struct buffer){0};
        cur_records = 0;
        stats.buffers_by_flush++;
    }
    stats.flushes++;
    pthread_mutex_unlock(&lock);
    if (b.data)
        client_completed(NULL, 0, b.data, b.size, b.valid);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t *count)
{
    if (!count)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&lock);
    *count = dropped;
    dropped = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS:
        *str = "CUPTI_SUCCESS";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_INVALID_PARAMETER:
        *str = "CUPTI_ERROR_INVALID_PARAMETER";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_MAX_LIMIT_REACHED:
        *str = "CUPTI_ERROR_MAX_LIMIT_REACHED";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_NOT_INITIALIZED:
        *str = "CUPTI_ERROR_NOT_INITIALIZED";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_INVALID_KIND:
        *str = "CUPTI_ERROR_INVALID_KIND";
        return CUPTI_SUCCESS;
    case CUPTI_ERROR_UNKNOWN:
        *str = "CUPTI_ERROR_UNKNOWN";
        return CUPTI_SUCCESS;
    }
    return CUPTI_ERROR_INVALID_PARAMETER;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int fakeCuptiEmit(uint32_t operation, uint32_t kind, uint64_t address, uint64_t bytes,
                  uint32_t device, uint64_t pc)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (!memory2_on) {
        rc = -EPERM;
        goto out;
    }
    if (!cur.data) {
        uint8_t *data = NULL;
        size_t size = 0, max = 0;
        client_requested(&data, &size, &max);
        stats.buffers_requested++;
        if (!data || size < sizeof(CUpti_ActivityMemory4)) {
            dropped++;
            rc = -ENOBUFS;
            goto out;
        }
        cur = (struct buffer){data, size, 0};
        cur_max = max;
        cur_records = 0;
    }
    CUpti_ActivityMemory4 *r = (CUpti_ActivityMemory4 *)(cur.data + cur.valid);
    memset(r, 0, sizeof *r);
    r->kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    r->memoryOperationType = operation;
    r->memoryKind = kind;
    r->correlationId = ++correlation;
    r->address = address;
    r->bytes = bytes;
    r->timestamp = now_ns();
    r->PC = pc;
    r->processId = (uint32_t)getpid();
    r->deviceId = device;
    r->contextId = device + 1;
    r->streamId = UINT32_MAX; /* CUPTI_INVALID_STREAM_ID: not stream-ordered */
    cur.valid += sizeof *r;
    cur_records++;
    stats.records_written++;
    if ((per_buffer && cur_records == per_buffer) || (cur_max && cur_records == cur_max) ||
        cur.size - cur.valid < sizeof *r)
        complete_current();
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

void fakeCuptiSetRecordsPerBuffer(size_t records)
{
    pthread_mutex_lock(&lock);
    per_buffer = records;
    pthread_mutex_unlock(&lock);
}

void fakeCuptiDrop(size_t records)
{
    pthread_mutex_lock(&lock);
    dropped += records;
    pthread_mutex_unlock(&lock);
}

void fakeCuptiWaitIdle(void)
{
    pthread_mutex_lock(&lock);
    while (queue_len || worker_busy)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

void fakeCuptiStats(struct fake_cupti_stats *out)
{
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
}
