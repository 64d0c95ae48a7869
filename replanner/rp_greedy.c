/* Skyline decoder over a segment tree, the greedy orders tried first, and the local search. */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/* The local search's restarts: steps without a lower plan, per block and Luby unit, before
 * it starts again, and the random changes per block (a divisor) to the order it starts from. */
#define LOCAL_RESTART_STEPS 4
#define LOCAL_SHAKE 8

/*
 * The skyline: per section, the top of the highest block placed there. Blocks go on top
 * of everything placed before them that they meet in time; some order of the blocks gives
 * an optimal plan this way (the order of the optimal offsets), so searching orders loses
 * nothing. A block's top is above every top in its sections, so placing it only raises
 * them: a node keeps the max of its subtree (mx) and a floor that holds for every section
 * under it (tg), both only ever raised, and the query and the update walk up from the two
 * ends of the range, with no push down (a recursive lazy assignment took 3.5 times the
 * instructions: docs/replanner.md).
 */
typedef struct rp_sky {
    uint64_t *mx;
    uint64_t *tg;
    uint32_t size;
    int clean; /* all 0: as allocated, or reset and nothing placed since */
} rp_sky;

static int sky_init(rp_sky *t, rp_mem *m, uint32_t nsec)
{
    t->size = 1;
    while (t->size < nsec)
        t->size <<= 1;
    t->mx = rp_alloc(m, 2 * (size_t)t->size, sizeof(uint64_t));
    t->tg = rp_alloc(m, 2 * (size_t)t->size, sizeof(uint64_t));
    t->clean = 1;
    return t->mx && t->tg ? 0 : -ENOMEM;
}

static void sky_reset(rp_sky *t)
{
    if (t->clean)
        return;
    memset(t->mx, 0, 2 * (size_t)t->size * sizeof(uint64_t));
    memset(t->tg, 0, 2 * (size_t)t->size * sizeof(uint64_t));
    t->clean = 1;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* The highest top over sections [l, r) (0 if empty): the range's canonical nodes, and the
 * floors of every node above its two ends. */
static uint64_t sky_max(const rp_sky *t, uint32_t l, uint32_t r)
{
    uint64_t v = 0;

    if (l >= r)
        return 0;
    l += t->size;
    r += t->size;
    for (uint32_t x = l >> 1, y = (r - 1) >> 1; x >= 1; x >>= 1, y >>= 1)
        v = max64(v, max64(t->tg[x], t->tg[y]));
    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1)
            v = max64(v, t->mx[l++]);
        if (r & 1)
            v = max64(v, t->mx[--r]);
    }
    return v;
}

/* Raises sections [l, r) to v, which is at least their highest top. */
static void sky_set(rp_sky *t, uint32_t l, uint32_t r, uint64_t v)
{
    if (l >= r)
        return;
    t->clean = 0;
    l += t->size;
    r += t->size;
    /* A node's max is at least its children's: where both paths' nodes hold v already, so
     * does every node above them. */
    for (uint32_t x = l >> 1, y = (r - 1) >> 1; x >= 1 && (t->mx[x] < v || t->mx[y] < v);
         x >>= 1, y >>= 1) {
        t->mx[x] = max64(t->mx[x], v);
        t->mx[y] = max64(t->mx[y], v);
    }
    for (; l < r; l >>= 1, r >>= 1) {
        if (l & 1) {
            t->tg[l] = max64(t->tg[l], v);
            t->mx[l] = max64(t->mx[l], v);
            l++;
        }
        if (r & 1) {
            --r;
            t->tg[r] = max64(t->tg[r], v);
            t->mx[r] = max64(t->mx[r], v);
        }
    }
}

/*
 * Places movable blocks in the given order. Returns the peak, or RP_NONE as soon as a top
 * exceeds cutoff (the caller only wants plans at least as good) or, with clk, once the
 * deadline has passed: one decode of a large input takes milliseconds. *crit: a block at
 * the peak.
 */
static uint64_t decode(const rp_inst *in, rp_sky *t, const uint32_t *order, uint64_t *off,
                       uint64_t cutoff, uint32_t *crit, const rp_clock *clk)
{
    uint64_t peak = in->fixed_top;

    sky_reset(t);
    for (uint32_t x = 0; x < in->nm; x++) {
        uint32_t k = order[x], i = in->mov[k];
        uint64_t o, top;

        if (clk && (x & 1023) == 1023 && rp_now_ns() >= clk->deadline_ns)
            return RP_NONE;
        if (x + 1 < in->nm)
            rp_prefetch_block(in, in->mov[order[x + 1]]);
        o = sky_max(t, in->s0[i], in->s1[i]);
        if (in->w0[i] < in->w1[i]) {
            uint64_t w = sky_max(t, in->w0[i], in->w1[i]);
            o = w > o ? w : o;
        }
        o = in->fx_start[k] == in->fx_start[k + 1] ? rp_align_up(o, in->b[i].align)
                                                   : rp_bump_fixed(in, k, o);
        top = o + in->b[i].size;
        if (top > cutoff)
            return RP_NONE;
        sky_set(t, in->s0[i], in->s1[i], top);
        sky_set(t, in->w0[i], in->w1[i], top);
        off[k] = o;
        if (top >= peak) {
            peak = top;
            *crit = x;
        }
    }
    return peak;
}

static uint64_t length_of(const om_rp_block *b)
{
    return b->upper - b->lower;
}

static uint64_t desc(uint64_t x)
{
    return UINT64_MAX - x;
}

static uint64_t area_of(const om_rp_block *b)
{
    uint64_t len = length_of(b);
    return b->size > UINT64_MAX / len ? UINT64_MAX : b->size * len;
}

/* Orders worth a try: by size, by the load around the block, by area, by birth, by length.
 * With m, by the radix sort (one more array of records); without, in place. */
static int make_order(const rp_inst *in, rp_mem *m, rp_kv *kv, int which, uint32_t *order)
{
    for (uint32_t k = 0; k < in->nm; k++) {
        const om_rp_block *b = &in->b[in->mov[k]];
        kv[k].v = k;
        switch (which) {
        case 0:
            kv[k].k1 = desc(b->size);
            kv[k].k2 = desc(length_of(b));
            break;
        case 1:
            kv[k].k1 = desc(in->secmax[k]);
            kv[k].k2 = desc(b->size);
            break;
        case 2:
            kv[k].k1 = desc(area_of(b));
            kv[k].k2 = desc(b->size);
            break;
        case 3:
            kv[k].k1 = b->lower;
            kv[k].k2 = desc(b->size);
            break;
        default:
            kv[k].k1 = desc(length_of(b));
            kv[k].k2 = desc(b->size);
            break;
        }
    }
    if (!m)
        rp_sort_kv(kv, in->nm);
    else if (rp_sort_kv_mem(kv, in->nm, m) < 0)
        return -ENOMEM;
    for (uint32_t k = 0; k < in->nm; k++)
        order[k] = kv[k].v;
    return 0;
}

/*
 * The branch and bound's rankings (rp_restart.c), each as one dive without backtracking
 * (rp_dive.c): within a short budget (20 ms in a program) the search itself gets few dives
 * in, and each of these is cheap on MiniMalloc's sizes; on traces where the branch and
 * bound's lists would take the whole budget they are what gets a plan near LB.
 */
static const char *const dive_keys[] = {"TWA", "TCA", "TW", "UW", "lZ"};

int rp_dives(const rp_inst *in, rp_mem *m, rp_best *best, uint64_t deadline_ns, int aside)
{
    rp_sky t;
    rp_kv *kv = rp_alloc(m, (size_t)in->nm + 1, sizeof(*kv));
    uint32_t *order = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    uint32_t *rank = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    uint64_t *off = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint64_t));
    uint32_t crit;
    int rc;

    if (!kv || !order || !rank || !off || sky_init(&t, m, in->nsec ? in->nsec : 1) < 0)
        return -ENOMEM;
    if (aside && !best->spare_off) {
        best->spare_off = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint64_t));
        best->spare_order = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
        if (!best->spare_off || !best->spare_order)
            return -ENOMEM;
    }
    for (size_t r = 0; r < sizeof(dive_keys) / sizeof(dive_keys[0]); r++) {
        uint64_t peak, below = best->spare_peak < best->peak ? best->spare_peak : best->peak;

        if (below <= in->stop || rp_now_ns() >= deadline_ns)
            break;
        rp_rank(in, NULL, dive_keys[r], NULL, NULL, NULL, 0, NULL, kv, rank);
        if ((rc = rp_dive(in, m, rank, order, deadline_ns)) == -ETIMEDOUT)
            break;
        if (rc < 0)
            return rc;
        peak = decode(in, &t, order, off, below - 1, &crit, NULL);
        if (peak == RP_NONE)
            continue;
        if (!aside) {
            best->peak = peak;
            best->stage = "greedy";
            memcpy(best->off, off, in->nm * sizeof(uint64_t));
            memcpy(best->order, order, in->nm * sizeof(uint32_t));
            continue;
        }
        best->spare_peak = peak;
        memcpy(best->spare_off, off, in->nm * sizeof(uint64_t));
        memcpy(best->spare_order, order, in->nm * sizeof(uint32_t));
    }
    /* One that reaches the bound ends the search at once. */
    if (best->spare_peak <= in->stop)
        rp_take_spare(in, best);
    return 0;
}

void rp_take_spare(const rp_inst *in, rp_best *best)
{
    if (best->spare_peak >= best->peak)
        return;
    best->peak = best->spare_peak;
    best->stage = "greedy";
    memcpy(best->off, best->spare_off, in->nm * sizeof(uint64_t));
    memcpy(best->order, best->spare_order, in->nm * sizeof(uint32_t));
}

/*
 * When the deadline cut greedy by size: its placed blocks (the first `placed` of order) at
 * their offsets in from, and the rest, the smallest, packed among themselves by the skyline
 * in their order, all above the placed ones and the fixed blocks. On top of what each meets
 * (the plan decode() gives) a small block lands above the largest ones around it, and
 * those stacks add up.
 * Returns the peak, the plan in to, or RP_NONE as soon as a top exceeds cutoff.
 */
static uint64_t rest_apart(const rp_inst *in, rp_sky *t, const uint32_t *order, uint32_t placed,
                           const uint64_t *from, uint64_t *to, uint64_t cutoff)
{
    uint64_t base = in->fixed_top, peak;

    for (uint32_t x = 0; x < placed; x++) {
        uint32_t k = order[x];
        uint64_t top = from[k] + in->b[in->mov[k]].size;
        to[k] = from[k];
        base = top > base ? top : base;
    }
    peak = base;
    sky_reset(t);
    for (uint32_t x = placed; x < in->nm; x++) {
        uint32_t k = order[x], i = in->mov[k];
        uint64_t o = sky_max(t, in->s0[i], in->s1[i]), top;

        if (in->w0[i] < in->w1[i]) {
            uint64_t w = sky_max(t, in->w0[i], in->w1[i]);
            o = w > o ? w : o;
        }
        o = rp_align_up(o > base ? o : base, in->b[i].align);
        top = o + in->b[i].size;
        if (top > cutoff)
            return RP_NONE;
        sky_set(t, in->s0[i], in->s1[i], top);
        sky_set(t, in->w0[i], in->w1[i], top);
        to[k] = o;
        peak = top > peak ? top : peak;
    }
    return peak;
}

struct rp_greedy_ws {
    rp_sky t;
    rp_kv *kv;
    uint32_t *order;
    uint64_t *off;
    int pending; /* greedy by size's plan has not been through the skyline yet */
};

/* The skyline and the keys' records, after greedy by size: its tree's memory is given back
 * by then, and a plan that ends at greedy by size does not need them. */
static int ws_ready(const rp_inst *in, rp_mem *m, rp_greedy_ws *ws)
{
    if (ws->kv)
        return 0;
    if (sky_init(&ws->t, m, in->nsec ? in->nsec : 1) < 0 ||
        !(ws->kv = rp_alloc(m, (size_t)in->nm + 1, sizeof(*ws->kv))))
        return -ENOMEM;
    return 0;
}

/* The first `placed` blocks of order (positions in mov) by their offset in off, in order. */
static int by_offset(rp_mem *m, rp_kv *kv, uint32_t *order, uint32_t placed, const uint64_t *off)
{
    for (uint32_t x = 0; x < placed; x++)
        kv[x] = (rp_kv){off[order[x]], 0, 0, order[x]};
    if (rp_sort_kv_mem(kv, placed, m) < 0)
        return -ENOMEM;
    for (uint32_t x = 0; x < placed; x++)
        order[x] = kv[x].v;
    return 0;
}

/*
 * Greedy by size's blocks by offset through the skyline: each lands at or below its offset
 * (the blocks placed before it that meet it in time end at or below that offset), so the
 * plan is never higher and the local search gets an order that yields it.
 */
static int through_skyline(const rp_inst *in, rp_mem *m, rp_best *best, rp_greedy_ws *ws)
{
    uint32_t crit = 0;

    ws->pending = 0;
    if (ws_ready(in, m, ws) < 0 || by_offset(m, ws->kv, ws->order, in->nm, ws->off) < 0)
        return -ENOMEM;
    best->peak = decode(in, &ws->t, ws->order, best->off, RP_NONE - 1, &crit, NULL);
    memcpy(best->order, ws->order, in->nm * sizeof(uint32_t));
    if (in->nm == 0)
        best->peak = in->fixed_top;
    return 0;
}

/* Decodes order and keeps the plan if it is below best's peak. */
static void try_order(const rp_inst *in, rp_best *best, rp_greedy_ws *ws, const uint32_t *order)
{
    uint32_t crit = 0;
    uint64_t peak = decode(in, &ws->t, order, ws->off, best->peak - 1, &crit, NULL);

    if (peak == RP_NONE)
        return;
    best->peak = peak;
    memcpy(best->off, ws->off, in->nm * sizeof(uint64_t));
    memcpy(best->order, order, in->nm * sizeof(uint32_t));
}

/*
 * When the deadline stopped greedy by size: a plan from the blocks it placed (the first
 * `placed` of ws->order, at their offsets in ws->off) by offset through the skyline, in
 * O(n log n) whatever the budget. The blocks it did not place, its smallest, follow longest
 * first on top of what each meets (a long-lived block low leaves the short ones to stack
 * only where they live); or packed apart above the placed ones; or in its order on top of
 * what each meets, where a small block lands above the large ones around it; and, where it
 * placed some, all the blocks go longest first as well (where a few large ones placed first
 * leave the rest worse off). Each wins somewhere (docs/replanner.md, Algorithms 2); the
 * lowest is kept. Every plan after the first stops as soon as it is no lower, so the one
 * that wins most often comes first.
 */
static int complete_cut(const rp_inst *in, rp_mem *m, rp_best *best, rp_greedy_ws *ws,
                        uint32_t placed, uint32_t *sized)
{
    uint32_t crit = 0, *order = ws->order;
    rp_kv *kv;

    if (ws_ready(in, m, ws) < 0)
        return -ENOMEM;
    kv = ws->kv;
    memcpy(sized, order, in->nm * sizeof(uint32_t));
    if (by_offset(m, kv, order, placed, ws->off) < 0)
        return -ENOMEM;
    for (uint32_t x = placed; x < in->nm; x++) {
        const om_rp_block *b = &in->b[in->mov[sized[x]]];
        kv[x - placed] = (rp_kv){desc(length_of(b)), desc(b->size), 0, sized[x]};
    }
    if (rp_sort_kv_mem(kv, in->nm - placed, m) < 0)
        return -ENOMEM;
    for (uint32_t x = placed; x < in->nm; x++)
        order[x] = kv[x - placed].v;
    best->peak = decode(in, &ws->t, order, best->off, RP_NONE - 1, &crit, NULL);
    memcpy(best->order, order, in->nm * sizeof(uint32_t));
    /* (apart, with nothing placed, is the plan on top with the fixed blocks lower; the
     * placed blocks' offsets are the same in every plan whose order starts with them) */
    if (placed) {
        uint64_t peak = rest_apart(in, &ws->t, sized, placed, best->off, ws->off, best->peak - 1);

        if (peak != RP_NONE) {
            best->peak = peak;
            memcpy(best->off, ws->off, in->nm * sizeof(uint64_t));
        }
    }
    memcpy(order + placed, sized + placed, (in->nm - placed) * sizeof(uint32_t));
    try_order(in, best, ws, order);
    /* (all of them longest first, with nothing placed, is the first plan) */
    if (placed) {
        if (make_order(in, m, kv, 4, order) < 0)
            return -ENOMEM;
        try_order(in, best, ws, order);
    }
    return 0;
}

int rp_greedy_first(const rp_inst *in, rp_mem *m, rp_best *best, const rp_clock *clk,
                    rp_greedy_ws **out)
{
    rp_greedy_ws *ws = rp_alloc(m, 1, sizeof(*ws));
    uint32_t *order = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    uint64_t *off = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint64_t));
    uint32_t placed, *sized;

    best->stage = "greedy";
    best->spare_peak = RP_NONE;
    if (!ws || !order || !off)
        return -ENOMEM;
    ws->order = order;
    ws->off = off;
    *out = ws;
    if (rp_greedy_size(in, m, clk, order, off, &best->greedy_peak, &placed) < 0)
        return -ENOMEM;
    if (placed == in->nm) {
        /* Its plan is the first answer: through the skyline (through_skyline) when the
         * search goes on, where it may only come out lower. */
        for (uint32_t k = 0; k < in->nm; k++)
            best->off[k] = off[k];
        memcpy(best->order, order, in->nm * sizeof(uint32_t));
        best->peak = in->nm ? best->greedy_peak : in->fixed_top;
        ws->pending = 1;
        return 0;
    }
    if (!(sized = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t))) ||
        complete_cut(in, m, best, ws, placed, sized) < 0)
        return -ENOMEM;
    best->greedy_cut = 1;
    best->greedy_peak = best->peak;
    return 0;
}

int rp_greedy(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, rp_greedy_ws *ws,
              int stacks)
{
    uint32_t crit = 0, *order = ws->order;
    uint64_t now, *off = ws->off;
    int rc;

    if (ws->pending && (rc = through_skyline(in, m, best, ws)) < 0)
        return rc;
    for (int which = 0; which < 5 && best->peak > in->stop; which++) {
        uint64_t peak;

        if (rp_now_ns() >= clk->deadline_ns)
            break;
        make_order(in, NULL, ws->kv, which, order);
        peak = decode(in, &ws->t, order, off, best->peak - 1, &crit, clk);
        if (peak == RP_NONE)
            continue;
        best->peak = peak;
        memcpy(best->off, off, in->nm * sizeof(uint64_t));
        memcpy(best->order, order, in->nm * sizeof(uint32_t));
    }
    /* Where the long arcs' clique is above LB, the dives aim at LB, out of reach, and the
     * stacks at the clique: those first, with a quarter of the time left at most. */
    now = rp_now_ns();
    if (stacks && in->clique_lb > in->lb && now < clk->deadline_ns &&
        (rc = rp_stack_long(in, m, best, ws, clk, now + (clk->deadline_ns - now) / 4)) < 0)
        return rc;
    /* Up to OM_RP_BNB_MAX_BLOCKS blocks, where the branch and bound may take the rest of the
     * budget, the dives take at most half of it; above, om_rp_plan runs them where it does
     * not. */
    now = rp_now_ns();
    if (in->nm <= OM_RP_BNB_MAX_BLOCKS && best->peak > in->stop && now < clk->deadline_ns &&
        (rc = rp_dives(in, m, best, now + (clk->deadline_ns - now) / 2, 1)) < 0)
        return rc;
    if (in->nm == 0)
        best->peak = in->fixed_top;
    return 0;
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The movable long arcs (longer than half the period: rp_bound.c's clique) sorted by births
 * (key 0) or by deaths around the circle (key 1) into lng; the others, largest first, ties
 * by birth (greedy by size's order), into rest. Returns how many are long. */
static uint32_t split_long(const rp_inst *in, rp_mem *m, rp_kv *kv, int key, uint32_t *lng,
                           uint32_t *rest)
{
    uint64_t P = in->period;
    uint32_t nl = 0, nr = 0;

    for (uint32_t k = 0; k < in->nm; k++) {
        const om_rp_block *b = &in->b[in->mov[k]];
        if (2 * length_of(b) > P)
            kv[nl++] = (rp_kv){key ? b->upper % P : b->lower, 0, 0, k};
        else if (rest)
            rest[nr++] = k;
    }
    if (rp_sort_kv_mem(kv, nl, m) < 0)
        return UINT32_MAX;
    for (uint32_t x = 0; x < nl; x++)
        lng[x] = kv[x].v;
    if (!rest)
        return nl;
    for (uint32_t x = 0; x < nr; x++) {
        const om_rp_block *b = &in->b[in->mov[rest[x]]];
        kv[x] = (rp_kv){desc(b->size), b->lower, 0, rest[x]};
    }
    if (rp_sort_kv_mem(kv, nr, m) < 0)
        return UINT32_MAX;
    for (uint32_t x = 0; x < nr; x++)
        rest[x] = kv[x].v;
    return nl;
}

/*
 * A plan at the clique bound gives each long arc bytes of its own, and fits the short arcs
 * into the room each long arc leaves while it is dead. Where neighbours in the stack die at
 * about the same time their rooms join into one, where a short arc larger than either
 * fits; by size, as greedy by size places them, the long arcs go wherever they fit among
 * the short ones, and their rooms end up apart. So the long arcs go first, stacked in the
 * order of their births or of their deaths around the circle, starting from each of them and
 * either way up, then the rest by size, each at the lowest offset where it fits. Each plan
 * goes through the skyline in the order of its offsets (never higher); a lower one than the
 * best replaces it, and the local search goes on from its order. Only where the clique is
 * the bound (not below the max of live bytes): elsewhere the long arcs need no bytes of
 * their own.
 */
int rp_stack_long(const rp_inst *in, rp_mem *m, rp_best *best, rp_greedy_ws *ws, rp_clock *clk,
                  uint64_t deadline_ns)
{
    uint32_t n = in->nm, nl, stride, *lng[2], *order, *rest;
    uint64_t *off;
    rp_clock own = {0};

    if (!in->period || in->clique_lb < in->lb || best->peak <= in->stop ||
        rp_now_ns() >= deadline_ns)
        return 0;
    lng[0] = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    lng[1] = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    rest = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    order = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    off = rp_alloc(m, (size_t)n + 1, sizeof(uint64_t));
    if (!lng[0] || !lng[1] || !rest || !order || !off || ws_ready(in, m, ws) < 0)
        return -ENOMEM;
    if ((nl = split_long(in, m, ws->kv, 0, lng[0], rest)) == UINT32_MAX ||
        split_long(in, m, ws->kv, 1, lng[1], NULL) == UINT32_MAX)
        return -ENOMEM;
    if (nl < 2)
        return 0;
    /* The starting places in a stride prime to nl of about 0.618 nl: those tried before the
     * time runs out are spread around the circle. */
    stride = (uint32_t)((uint64_t)nl * 618 / 1000);
    while (gcd32(stride, nl) != 1)
        stride++;
    own.deadline_ns = deadline_ns;
    for (uint32_t j = 0, r = 0; j < nl; j++, r = (uint32_t)(((uint64_t)r + stride) % nl)) {
        for (int c = 0; c < 4; c++) {
            const uint32_t *base = lng[c >> 1];
            uint64_t peak;
            uint32_t placed;

            /* each plan a step of the search (om_rp_options.max_nodes) */
            if (best->peak <= in->stop || rp_now_ns() >= deadline_ns || rp_expired(clk))
                return 0;
            for (uint32_t x = 0; x < nl; x++)
                order[x] = base[c & 1 ? (r + nl - 1 - x) % nl : (r + x) % nl];
            memcpy(order + nl, rest, (n - nl) * sizeof(uint32_t));
            if (rp_fit_order(in, m, order, &own, off, &peak, &placed) < 0)
                return -ENOMEM;
            if (placed < n || peak >= best->peak)
                continue;
            if (by_offset(m, ws->kv, order, n, off) < 0)
                return -ENOMEM;
            uint64_t had = best->peak;
            try_order(in, best, ws, order);
            if (best->peak < had)
                best->stage = "greedy";
        }
    }
    return 0;
}

/* One random change to the order: a swap, or a block (often the one at the peak) moved up. */
static void mutate(uint32_t *order, uint32_t n, uint32_t crit, uint64_t *rng)
{
    uint64_t r = rp_rand(rng);
    uint32_t j = (r & 3) == 0 ? crit : (uint32_t)((r >> 8) % n);
    uint32_t i = (uint32_t)((r >> 40) % n), v;

    if ((r & 3) == 1) {
        v = order[i];
        order[i] = order[j];
        order[j] = v;
        return;
    }
    if (i > j) {
        v = i;
        i = j;
        j = v;
    }
    v = order[j];
    memmove(order + i + 1, order + i, (size_t)(j - i) * sizeof(uint32_t));
    order[i] = v;
}

/*
 * Iterated greedy over orders: mutate the current order, keep it when the plan is no
 * worse (plateaus let the search drift), remember the best. Stops at the lower bound.
 * Where arcs meet pairwise beyond the live bytes (rp_bound.c's clique above LB: the long
 * arcs of a loop whose tensors live from one iteration into the next) a walk settles in a
 * basin, an arrangement of those arcs, that its moves do not leave: where it ends depends
 * on its seed far more than on its length. There, after a run of steps without a lower
 * plan (the Luby sequence times LOCAL_RESTART_STEPS per block), it starts again from the
 * order it was given, shaken by a few random changes (from the best order, or unshaken,
 * walks fell back into the basins they had left). Elsewhere (MiniMalloc's) a walk reaches
 * lower plans after long drifts, which restarts cut short: one walk.
 */
int rp_local(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed)
{
    rp_sky t;
    uint32_t n = in->nm, crit = 0, cand_crit = 0;
    uint32_t *cur = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    uint32_t *cand = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    uint32_t *start = rp_alloc(m, (size_t)n + 1, sizeof(uint32_t));
    uint64_t *off = rp_alloc(m, (size_t)n + 1, sizeof(uint64_t));
    uint64_t cur_peak, rng = seed, since = 0, run = 1;
    int restarts = in->clique_lb > in->lb;

    if (!cur || !cand || !start || !off || sky_init(&t, m, in->nsec ? in->nsec : 1) < 0)
        return -ENOMEM;
    if (n < 2 || rp_now_ns() >= clk->deadline_ns)
        return 0;
    memcpy(cur, best->order, n * sizeof(uint32_t));
    memcpy(start, cur, n * sizeof(uint32_t));
    /* The order's own peak: above the best one where the branch and bound found that */
    cur_peak = decode(in, &t, cur, off, RP_NONE - 1, &crit, NULL);
    /* A decode can take milliseconds: look at the clock before each one. */
    while (cur_peak > in->stop && !rp_expired(clk) && rp_now_ns() < clk->deadline_ns) {
        uint64_t peak;

        if (restarts && ++since > rp_luby(run) * LOCAL_RESTART_STEPS * n) {
            /* from the order it was given, shaken: each restart a basin of its own */
            memcpy(cand, start, n * sizeof(uint32_t));
            for (uint32_t q = 0; q < n / LOCAL_SHAKE; q++)
                mutate(cand, n, (uint32_t)(rp_rand(&rng) % n), &rng);
            run++;
            since = 0;
            peak = decode(in, &t, cand, off, RP_NONE - 1, &cand_crit, clk);
        } else {
            memcpy(cand, cur, n * sizeof(uint32_t));
            mutate(cand, n, crit, &rng);
            peak = decode(in, &t, cand, off, cur_peak, &cand_crit, clk);
            if (peak != RP_NONE && peak < cur_peak)
                since = 0;
        }
        if (peak == RP_NONE)
            continue;
        memcpy(cur, cand, n * sizeof(uint32_t));
        cur_peak = peak;
        crit = cand_crit;
        if (peak < best->peak) {
            best->peak = peak;
            best->stage = "local";
            memcpy(best->off, off, n * sizeof(uint64_t));
            memcpy(best->order, cur, n * sizeof(uint32_t));
        }
    }
    return 0;
}
