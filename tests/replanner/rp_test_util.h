/* Helpers shared by the replanner tests: a counting allocator, random instances, brute force. */
#ifndef OPTMEM_RP_TEST_UTIL_H
#define OPTMEM_RP_TEST_UTIL_H

#include "replanner.h"

/* malloc-backed, counts live bytes so that tests see every release matched, and their
 * peak since the last t_peak_reset(). */
extern om_rp_allocator t_alloc;
size_t t_live_bytes(void);
size_t t_peak_bytes(void);
void t_peak_reset(void);

uint64_t t_rand(uint64_t *s);

/* Whether two blocks are live at once (on the circle of the period if it is not 0). */
int t_live_together(const om_rp_block *a, const om_rp_block *b, uint64_t p);
/* x rounded up to a multiple of a (a of 0 or 1: x). */
uint64_t t_align_up(uint64_t x, uint64_t a);

/* Random instance: n blocks, times below horizon (the period if cyclic), some aligned. */
void t_random_blocks(om_rp_block *b, size_t n, uint64_t horizon, int cyclic, int aligned,
                     uint64_t *seed);

/* Optimal peak by first-fit over every order (n <= 7): the reference for tiny instances. */
uint64_t t_brute_force(const om_rp_block *b, size_t n, uint64_t period);

/* Plans and asserts the plan valid; returns the peak. */
uint64_t t_plan_checked(const om_rp_block *b, size_t n, uint64_t period, int algo,
                        uint32_t budget_ms, uint64_t *lb);

#endif
