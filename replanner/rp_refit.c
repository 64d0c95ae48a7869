/* Iterated first fit: greedy by size's placement over orders changed one swap at a time. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

typedef struct refit {
    uint32_t *order, *pos; /* the current order and each block's place in it */
    uint32_t *crit;        /* scratch: the blocks that end at the peak */
    uint64_t *off, *cand;  /* the current plan, a candidate's */
    uint64_t peak;
} refit;

/* A block at the current peak, swapped with a block anywhere before it. */
static void swap_critical(const rp_inst *in, refit *f, uint64_t *rng, uint32_t *a, uint32_t *b)
{
    uint32_t nc = 0, c, j;

    for (uint32_t k = 0; k < in->nm; k++)
        if (f->off[k] + in->b[in->mov[k]].size == f->peak)
            f->crit[nc++] = k;
    c = f->crit[nc > 1 ? rp_rand(rng) % nc : 0];
    j = f->pos[c];
    *a = (uint32_t)(rp_rand(rng) % ((uint64_t)j + 1));
    *b = j;
}

static void swap_at(refit *f, uint32_t a, uint32_t b)
{
    uint32_t t = f->order[a];

    f->order[a] = f->order[b];
    f->order[b] = t;
    f->pos[f->order[a]] = a;
    f->pos[f->order[b]] = b;
}

int rp_refit(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint32_t probe,
             uint64_t probe_ns, uint64_t deadline_ns, uint64_t seed)
{
    refit f;
    uint32_t n = in->nm, placed, rounds = 0;
    int lower = 0, won = 0;
    /* under a step limit, half of the steps left: its share of the time in steps */
    uint64_t last_step = clk->max_nodes && clk->nodes < clk->max_nodes
                             ? clk->nodes + (clk->max_nodes - clk->nodes) / 2
                             : UINT64_MAX;
    uint64_t rng = seed ^ UINT64_C(0x5bd1e9955bd1e995), rival;
    rp_kv *kv = rp_alloc_raw(m, (size_t)n + 1, sizeof(*kv)); /* written below */
    rp_clock own = {.deadline_ns = probe_ns < deadline_ns ? probe_ns : deadline_ns};

    if (n < 2 || best->peak <= in->stop || rp_now_ns() >= deadline_ns)
        return 0;
    f.order = rp_alloc(m, n, sizeof(uint32_t));
    f.pos = rp_alloc(m, n, sizeof(uint32_t));
    f.crit = rp_alloc(m, n, sizeof(uint32_t));
    f.off = rp_alloc(m, n, sizeof(uint64_t));
    f.cand = rp_alloc(m, n, sizeof(uint64_t));
    if (!kv || !f.order || !f.pos || !f.crit || !f.off || !f.cand)
        return -ENOMEM;
    /* greedy by size's order (its own plan is in best or under it) */
    for (uint32_t k = 0; k < n; k++) {
        const om_rp_block *b = &in->b[in->mov[k]];
        kv[k] = (rp_kv){UINT64_MAX - b->size, b->lower, 0, k};
    }
    if (rp_sort_kv_mem(kv, n, m) < 0)
        return -ENOMEM;
    for (uint32_t x = 0; x < n; x++) {
        f.order[x] = kv[x].v;
        f.pos[kv[x].v] = x;
    }
    /* a first plan that does not fit in the probe's time: too slow a decode to search with */
    if (rp_fit_order(in, m, f.order, &own, f.off, &f.peak, &placed) < 0)
        return -ENOMEM;
    if (placed < n)
        return 0;
    /* the plan to beat in the probe: the lowest so far, the dives' kept aside included */
    rival = best->spare_peak < best->peak ? best->spare_peak : best->peak;
    while (f.peak > in->stop && clk->nodes < last_step && !rp_expired(clk) &&
           rp_now_ns() < deadline_ns) {
        uint32_t a, b;
        uint64_t peak, *t;

        if (!won && (rounds >= probe || rp_now_ns() >= probe_ns))
            break;
        rounds++;
        swap_critical(in, &f, &rng, &a, &b);
        swap_at(&f, a, b);
        /* the blocks before the swap's first place are placed as in the current plan */
        memcpy(f.cand, f.off, (size_t)n * sizeof(uint64_t));
        if (rp_fit_below(in, m, f.order, a, &own, f.peak, f.cand, &peak, &placed) < 0)
            return -ENOMEM;
        if (placed < n || peak > f.peak) {
            swap_at(&f, a, b);
            continue;
        }
        /* no higher: kept, so that the search drifts along plateaus */
        t = f.off;
        f.off = f.cand;
        f.cand = t;
        f.peak = peak;
        if (peak < rival && !won) {
            won = 1;
            own.deadline_ns = deadline_ns; /* decodes past the probe's time from now on */
        }
        if (peak < best->peak) {
            best->peak = peak;
            best->stage = "refit";
            memcpy(best->off, f.off, (size_t)n * sizeof(uint64_t));
            lower = 1;
        }
    }
    if (!lower)
        return 0;
    /* the local search's order: by offset, which the skyline decodes at or below each */
    for (uint32_t k = 0; k < n; k++)
        kv[k] = (rp_kv){best->off[k], 0, 0, k};
    if (rp_sort_kv_mem(kv, n, m) < 0)
        return -ENOMEM;
    for (uint32_t x = 0; x < n; x++)
        best->order[x] = kv[x].v;
    return 0;
}
