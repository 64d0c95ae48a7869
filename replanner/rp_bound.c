/* Proven lower bounds beyond the live bytes: cliques of arcs on a circle, holes among fixed blocks.
 */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/* The holes bound costs holes x sections; above this it is left out (the live bytes and the
 * clique bound still hold), so that a plan searched inline for a millisecond keeps it. */
#define HOLES_MAX_WORK (UINT64_C(1) << 20)

/* Per section, bytes of the blocks flagged (sel NULL: all movable blocks) live in it. */
static void section_sums(const rp_inst *in, const unsigned char *sel, uint64_t *diff, uint64_t *out)
{
    memset(diff, 0, ((size_t)in->nsec + 1) * sizeof(*diff));
    for (size_t i = 0; i < in->n; i++) {
        if (sel ? !sel[i] : in->b[i].fixed)
            continue;
        diff[in->s0[i]] += in->b[i].size;
        diff[in->s1[i]] -= in->b[i].size;
        if (in->w0[i] < in->w1[i]) {
            diff[in->w0[i]] += in->b[i].size;
            diff[in->w1[i]] -= in->b[i].size;
        }
    }
    for (uint32_t s = 0; s < in->nsec; s++)
        out[s] = (s ? out[s - 1] : 0) + diff[s];
}

/*
 * On a circle of period P two arcs longer than P/2 always meet, so the long arcs L form a
 * clique: whatever the plan, their bytes are disjoint, though they may never be live all at
 * once (the max of live bytes counts only those live at one time). With them go the arcs
 * live in any one section that meet every arc of L. An arc b misses a long arc a iff b lies
 * within a's complement, an arc shorter than P/2: a containment query over the complements
 * sorted by start (each also one period later, where b's start is shifted by P).
 */
static int clique_bound(const rp_inst *in, rp_mem *m, uint64_t *bound)
{
    uint64_t P = in->period, sl = 0;
    size_t nl = 0, nc = 0;

    for (size_t i = 0; i < in->n; i++)
        if (2 * (in->b[i].upper - in->b[i].lower) > P)
            nl++;
    if (nl == 0)
        return 0;
    rp_kv *comp = rp_alloc(m, 2 * nl + 1, sizeof(*comp));
    uint64_t *reach = rp_alloc(m, 2 * nl + 1, sizeof(*reach));
    unsigned char *sel = rp_alloc(m, in->n + 1, 1);
    uint64_t *diff = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*diff));
    uint64_t *sum = rp_alloc(m, (size_t)in->nsec + 1, sizeof(*sum));
    if (!comp || !reach || !sel || !diff || !sum)
        return -ENOMEM;
    for (size_t i = 0; i < in->n; i++) {
        const om_rp_block *a = &in->b[i];
        uint64_t len = a->upper - a->lower;
        if (2 * len <= P)
            continue;
        sl += a->size;
        if (len == P) /* live throughout: no arc misses it */
            continue;
        uint64_t c = a->upper >= P ? a->upper - P : a->upper;
        comp[nc++] = (rp_kv){c, c + P - len, 0, 0};
        comp[nc++] = (rp_kv){c + P, c + 2 * P - len, 0, 0};
    }
    rp_sort_kv(comp, nc);
    for (size_t k = 0; k < nc; k++)
        reach[k] = k && reach[k - 1] > comp[k].k2 ? reach[k - 1] : comp[k].k2;
    for (size_t i = 0; i < in->n; i++) {
        const om_rp_block *b = &in->b[i];
        sel[i] = 0;
        if (2 * (b->upper - b->lower) > P)
            continue;
        /* the last complement starting at or before b (shifted) */
        size_t lo = 0, hi = nc;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (comp[mid].k1 <= b->lower + P)
                lo = mid + 1;
            else
                hi = mid;
        }
        sel[i] = lo == 0 || reach[lo - 1] < b->upper + P;
    }
    section_sums(in, sel, diff, sum);
    *bound = sl;
    for (uint32_t s = 0; s < in->nsec; s++)
        if (sl + sum[s] > *bound)
            *bound = sl + sum[s];
    return 0;
}

/*
 * Fixed blocks live throughout cut the bytes below the highest of them into holes. A movable
 * block lies in one hole or above them all, so in each section the movable bytes that do not
 * fit in the holes (each hole takes at most its length, and only of blocks no larger) are
 * stacked above: top + movable bytes - what the holes can take.
 */
static int holes_bound(const rp_inst *in, rp_mem *m, uint64_t *bound)
{
    size_t nf = 0, nh = 0;
    uint64_t top = 0;

    for (size_t i = 0; i < in->n; i++)
        if (in->b[i].fixed && in->s0[i] == 0 && in->s1[i] == in->nsec)
            nf++;
    if (nf == 0 || in->nm == 0)
        return 0;
    rp_kv *kv = rp_alloc(m, nf + 1, sizeof(*kv));
    uint64_t *hole = rp_alloc(m, nf + 1, sizeof(*hole));
    if (!kv || !hole)
        return -ENOMEM;
    for (size_t i = 0, k = 0; i < in->n; i++)
        if (in->b[i].fixed && in->s0[i] == 0 && in->s1[i] == in->nsec)
            kv[k++] = (rp_kv){in->b[i].offset, in->b[i].offset + in->b[i].size, 0, 0};
    rp_sort_kv(kv, nf);
    for (size_t k = 0; k < nf; k++) {
        if (kv[k].k1 > top)
            hole[nh++] = kv[k].k1 - top;
        top = kv[k].k2 > top ? kv[k].k2 : top;
    }
    if (nh == 0 || (uint64_t)(nh + 1) * in->nsec > HOLES_MAX_WORK) {
        *bound = top;
        return 0;
    }
    for (size_t k = 0; k < nh; k++)
        kv[k] = (rp_kv){hole[k], 0, 0, 0};
    rp_sort_kv(kv, nh);
    for (size_t k = 0; k < nh; k++)
        hole[k] = kv[k].k1;
    /* bucket of a block: the first (smallest) hole it fits in, nh if none. Its runs' ends
     * as events by section (a counting sort), then per-bucket running sums section by
     * section: memory in blocks and holes, not their product. */
    uint32_t *at = rp_alloc(m, (size_t)in->nsec + 2, sizeof(*at));
    uint32_t *ev_q = rp_alloc(m, 4 * (size_t)in->nm + 1, sizeof(*ev_q));
    int64_t *ev_d = rp_alloc(m, 4 * (size_t)in->nm + 1, sizeof(*ev_d));
    uint64_t *run = rp_alloc(m, nh + 1, sizeof(*run));
    uint32_t *bucket = rp_alloc(m, (size_t)in->nm + 1, sizeof(*bucket));
    if (!at || !ev_q || !ev_d || !run || !bucket)
        return -ENOMEM;
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];
        size_t lo = 0, hi = nh;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (hole[mid] < in->b[i].size)
                lo = mid + 1;
            else
                hi = mid;
        }
        bucket[k] = (uint32_t)lo;
        at[in->s0[i] + 1]++;
        at[in->s1[i] + 1]++;
        if (in->w0[i] < in->w1[i]) {
            at[in->w0[i] + 1]++;
            at[in->w1[i] + 1]++;
        }
    }
    for (uint32_t x = 0; x <= in->nsec; x++)
        at[x + 1] += at[x];
    for (uint32_t k = 0; k < in->nm; k++) {
        uint32_t i = in->mov[k];
        int64_t sz = (int64_t)in->b[i].size;
        uint32_t e[4] = {in->s0[i], in->s1[i], in->w0[i], in->w1[i]};
        for (int r = 0; r < (in->w0[i] < in->w1[i] ? 4 : 2); r++) {
            ev_q[at[e[r]]] = bucket[k];
            ev_d[at[e[r]]++] = r % 2 ? -sz : sz;
        }
    }
    /* at[x] now ends section x's events, which start where x - 1's end */
    *bound = top;
    for (uint32_t s = 0, y = 0; s < in->nsec; s++) {
        uint64_t total = 0, fits = 0, taken = 0;
        for (; y < at[s]; y++)
            run[ev_q[y]] += (uint64_t)ev_d[y];
        for (size_t q = 0; q <= nh; q++) {
            total += run[q];
            if (q < nh) {
                fits += run[q]; /* bytes of blocks that fit in hole q */
                taken += fits < hole[q] ? fits : hole[q];
            }
        }
        if (taken > fits)
            taken = fits;
        if (total > taken && top + total - taken > *bound)
            *bound = top + total - taken;
    }
    return 0;
}

int rp_bound(const rp_inst *in, rp_mem *m, uint64_t *bound, uint64_t *clique)
{
    uint64_t c = 0, h = 0;
    int rc;

    if (in->period && (rc = clique_bound(in, m, &c)) < 0)
        return rc;
    if ((rc = holes_bound(in, m, &h)) < 0)
        return rc;
    *bound = c > h ? c : h;
    *clique = c;
    return 0;
}
