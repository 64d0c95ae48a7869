/* The device domain as the engine sees it: started with the engine, published into the
 * report, kept consistent across fork. The entry points themselves are exported from
 * cuda/ and reach the engine through om_engine_enter/leave and the per-device pools. */
#ifndef OPTMEM_CUDA_H
#define OPTMEM_CUDA_H

#include "config.h"

/* Called once by om_engine_init after the tracer started, when OPTMEM_DEVICES includes
 * cuda. Resolves nothing yet: devices are set up at their first request. 0 or -errno. */
int om_cuda_init(const struct om_config *cfg);

/* Hands each device pool's serving counters to the tracer (before a report). */
void om_cuda_publish(void);

/* Fork discipline: every device pool's lock is held across fork. The child keeps its
 * parent's tables but can no longer use the parent's CUDA context: it stops serving. */
void om_cuda_atfork_prepare(void);
void om_cuda_atfork_parent(void);
void om_cuda_atfork_child(void);

#endif
