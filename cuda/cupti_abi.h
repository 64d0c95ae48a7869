/* The part of the CUPTI ABI (CUDA 13, cupti_activity.h) that the injection library calls,
 * declared here so that it and the fake libcupti in tests/ build without the toolkit.
 * tests/gpu/abi_check.c compares every layout and value with the real headers. */
#ifndef OPTMEM_CUPTI_ABI_H
#define OPTMEM_CUPTI_ABI_H

#include "cuda_abi.h"

#include <stddef.h>
#include <stdint.h>

/* CUPTI's enums are int-sized (each has a FORCE_INT member); packed records hold them as
 * 4 bytes, so a fixed-width integer keeps the layout whatever the compiler does. */
typedef int CUptiResult;
typedef uint32_t CUpti_ActivityKind;

enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_INVALID_KIND = 21,
    CUPTI_ERROR_UNKNOWN = 999,
};

enum { CUPTI_ACTIVITY_KIND_MEMORY2 = 49 };

enum {
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID = 0,
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION = 1,
    CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE = 2,
};

enum {
    CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN = 0,
    CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE = 1,
    CUPTI_ACTIVITY_MEMORY_KIND_PINNED = 2,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE = 3,
    CUPTI_ACTIVITY_MEMORY_KIND_ARRAY = 4,
    CUPTI_ACTIVITY_MEMORY_KIND_MANAGED = 5,
    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC = 6,
    CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC = 7,
};

enum {
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID = 0,
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL = 1,
    CUPTI_ACTIVITY_MEMORY_POOL_TYPE_IMPORTED = 2,
};

enum { CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 << 0 };

/* Every record is packed and 8-aligned (PACKED_ALIGNMENT of cupti_common.h, LP64). */
#define OM_CUPTI_RECORD __attribute__((__packed__)) __attribute__((aligned(8)))

/* The header of every record: its kind says which record it is. */
typedef struct OM_CUPTI_RECORD {
    CUpti_ActivityKind kind;
} CUpti_Activity;

/* The record of CUPTI_ACTIVITY_KIND_MEMORY2 in CUDA 13: one per allocation and one per
 * release. */
typedef struct OM_CUPTI_RECORD {
    CUpti_ActivityKind kind;      /* CUPTI_ACTIVITY_KIND_MEMORY2 */
    uint32_t memoryOperationType; /* CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_* */
    uint32_t memoryKind;          /* CUPTI_ACTIVITY_MEMORY_KIND_* */
    uint32_t correlationId;
    uint64_t address;
    uint64_t bytes;
    uint64_t timestamp; /* ns */
    uint64_t PC;        /* of the API call that made the operation */
    uint32_t processId;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    const char *name;
    uint32_t isAsync;
    uint32_t pad1;
    struct OM_CUPTI_RECORD {
        uint32_t memoryPoolType; /* CUPTI_ACTIVITY_MEMORY_POOL_TYPE_* */
        uint32_t pad2;
        uint64_t address;
        uint64_t releaseThreshold;
        union {
            uint64_t size;
            uint64_t processId;
        } pool;
        uint64_t utilizedSize;
    } memoryPoolConfig;
    const char *source;
} CUpti_ActivityMemory4;

/* CUpti_BuffersCallbackRequestFunc and CUpti_BuffersCallbackCompleteFunc. */
typedef void (*om_cupti_buffer_requested_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*om_cupti_buffer_completed_fn)(CUcontext context, uint32_t streamId, uint8_t *buffer,
                                             size_t size, size_t validSize);

/* libcupti.so entry points by type, named as the library exports them. */
typedef CUptiResult (*om_cuptiActivityRegisterCallbacks_fn)(
    om_cupti_buffer_requested_fn funcBufferRequested,
    om_cupti_buffer_completed_fn funcBufferCompleted);
typedef CUptiResult (*om_cuptiActivityEnable_fn)(CUpti_ActivityKind kind);
typedef CUptiResult (*om_cuptiActivityGetNextRecord_fn)(uint8_t *buffer,
                                                        size_t validBufferSizeBytes,
                                                        CUpti_Activity **record);
typedef CUptiResult (*om_cuptiActivityFlushAll_fn)(uint32_t flag);
typedef CUptiResult (*om_cuptiActivityGetNumDroppedRecords_fn)(CUcontext context, uint32_t streamId,
                                                               size_t *dropped);
typedef CUptiResult (*om_cuptiGetResultString_fn)(CUptiResult result, const char **str);

#endif
