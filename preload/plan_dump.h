/* OPTMEM_PLAN_DUMP: each instance a pool hands to the replanner, written as a lifetime CSV
 * that `optmem plan` reads, to replay an in-program plan offline (docs/serving.md). */
#ifndef OPTMEM_PRELOAD_PLAN_DUMP_H
#define OPTMEM_PRELOAD_PLAN_DUMP_H

#include "replanner.h"

#include <stddef.h>
#include <stdint.h>

/* Writes blocks (period 0: a line) to OPTMEM_PLAN_DUMP/plan-PID-DOMAIN-N.csv, N counting the
 * process's instances from 1, with what (printf's format: the search it is for) in a
 * comment. Nothing without OPTMEM_PLAN_DUMP. Allocates only through mmap; a file that cannot
 * be written gives one warning, after which no more are tried: the program and its planning
 * go on. */
void om_plan_dump(unsigned domain, const om_rp_block *blocks, size_t n, uint64_t period,
                  const char *what, ...) __attribute__((format(printf, 5, 6)));

#endif
