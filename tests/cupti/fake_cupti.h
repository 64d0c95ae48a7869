/* The test-only entry points of the fake libcupti.so.13: make it write MEMORY2 records. */
#ifndef OPTMEM_TESTS_FAKE_CUPTI_H
#define OPTMEM_TESTS_FAKE_CUPTI_H

#include <stddef.h>
#include <stdint.h>

/* Appends one MEMORY2 record (operation: CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_*, kind:
 * CUPTI_ACTIVITY_MEMORY_KIND_*) to the current buffer, asking the client for one first;
 * a full buffer goes to the client's completion callback on the fake's worker thread.
 * 0; -EPERM: MEMORY2 is not enabled (nothing recorded, as CUPTI does); -ENOBUFS: the
 * client gave no buffer (the record is counted as dropped). */
typedef int (*fakeCuptiEmit_fn)(uint32_t operation, uint32_t kind, uint64_t address, uint64_t bytes,
                                uint32_t device, uint64_t pc);

/* A buffer is complete after this many records (0: when full), as CUPTI completes
 * buffers at times of its own choosing. */
typedef void (*fakeCuptiSetRecordsPerBuffer_fn)(size_t records);

/* Counts records CUPTI had no room for (cuptiActivityGetNumDroppedRecords reports them). */
typedef void (*fakeCuptiDrop_fn)(size_t records);

/* Returns once the worker has delivered every complete buffer: those of a long run reach the
 * client well before its exit, whatever happens to the final flush. */
typedef void (*fakeCuptiWaitIdle_fn)(void);

struct fake_cupti_stats {
    size_t buffers_requested;
    size_t buffers_by_worker; /* completed on the fake's thread */
    size_t buffers_by_flush;  /* completed in cuptiActivityFlushAll, on the caller's thread */
    size_t records_written;
    size_t flushes;
};
typedef void (*fakeCuptiStats_fn)(struct fake_cupti_stats *stats);

/* The same, as the fake exports them (the test program looks them up with dlsym). */
int fakeCuptiEmit(uint32_t operation, uint32_t kind, uint64_t address, uint64_t bytes,
                  uint32_t device, uint64_t pc);
void fakeCuptiSetRecordsPerBuffer(size_t records);
void fakeCuptiDrop(size_t records);
void fakeCuptiWaitIdle(void);
void fakeCuptiStats(struct fake_cupti_stats *stats);

#endif
