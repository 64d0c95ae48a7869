/* Branch and bound on canonical plans (after MiniMalloc, Moffitt, ASPLOS 2023). */
#include "rp_internal.h"

#include <errno.h>
#include <string.h>

/*
 * Decision version: can every block fit below capacity C? Blocks are placed in order of
 * (offset, rank), each at its lowest offset above the blocks already placed that it meets
 * in time; every optimal plan has such a form, so the search is complete. Pruning:
 * - monotonic floor: nothing placed later goes below the current offset, so in every
 *   section offset + unplaced bytes must stay within C;
 * - unallocated floor: nor below the lowest offset any unplaced block in it can take
 *   (checked only where a bumped block breaks it alone, so no per-section rescan);
 * - dominance: a block that would sit above the top of another unplaced block at its
 *   lowest offset leaves a gap that the other could fill, so it is skipped;
 * - a block that meets no unplaced block ("hatless") is independent of the rest: when
 *   the subtree after it fails, its siblings fail too.
 * - decomposition: once no unplaced block spans a section boundary, the two sides are
 *   independent problems, each searched on its own (and a failure of one is final).
 * Restarts over rankings (see rp_bnb) rather than one long search.
 */

enum { FOUND = 0, NOTFOUND = 1, ABORTED = 2 };

/* Nodes of the shortest restart, and how far a randomized ranking strays from its base. */
#define RESTART_NODES 4096
#define RESTART_NOISE 0.3

typedef struct trail {
    uint32_t *idx;
    uint64_t *old;
    size_t len, cap;
} trail;

typedef struct bnb {
    const rp_inst *in;
    rp_mem *m;
    rp_best *best;
    rp_clock *clk;
    uint32_t nm, nsec;
    uint64_t cap; /* C */
    uint64_t *size;
    uint32_t *ov_start, *ov; /* blocks meeting each block in time */
    uint32_t *sc_start, *sc; /* blocks live in each section, the unplaced ones first */
    uint32_t *ucnt;          /* per section: how many of its blocks are unplaced */
    uint32_t *kbase, *loc;   /* per block and section it spans: its index in sc */
    uint32_t *rank;          /* static ranking of the current round */
    uint32_t *rankings[RP_NRANKINGS];
    uint32_t *rrank; /* a randomized ranking for restarts */
    rp_kv *kv;
    uint64_t *off, *minoff, *total;
    uint32_t *stamp;
    uint64_t *sol;    /* offsets of the finished parts of the current attempt */
    uint32_t *cuts;   /* per section boundary x|x+1: unplaced blocks spanning it */
    int decompose;    /* linear timelines only: a circle has no ends to cut at */
    uint32_t *pstack; /* members of the open parts, addressed by index: it may move */
    size_t ptop, pcap;
    uint32_t *cstack; /* candidates of the open nodes, addressed by index: it may move */
    size_t ctop, ccap;
    uint64_t nodes_left;
    uint64_t attempts;
    uint32_t *wit; /* per section: an unplaced member low enough at the last check, or none */
    trail tmin;
} bnb;

static int trail_push(bnb *s, trail *t, uint32_t idx, uint64_t old)
{
    if (t->len == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        uint32_t *ni = rp_alloc(s->m, cap, sizeof(uint32_t));
        uint64_t *no = rp_alloc(s->m, cap, sizeof(uint64_t));

        if (!ni || !no)
            return -ENOMEM;
        if (t->len) {
            memcpy(ni, t->idx, t->len * sizeof(uint32_t));
            memcpy(no, t->old, t->len * sizeof(uint64_t));
        }
        t->idx = ni;
        t->old = no;
        t->cap = cap;
    }
    t->idx[t->len] = idx;
    t->old[t->len++] = old;
    return 0;
}

#define FOR_SECTIONS(in, i, s)                                                                     \
    for (int run_ = 0; run_ < 2; run_++)                                                           \
        for (uint32_t s = run_ ? (in)->w0[i] : (in)->s0[i],                                        \
                      end_ = run_ ? (in)->w1[i] : (in)->s1[i];                                     \
             s < end_; s++)

/* Returns the number of list entries it would hold; fills them if lists is not NULL. */
static size_t build_lists(bnb *s, uint32_t *ov_start, uint32_t *ov, uint32_t *sc_start,
                          uint32_t *sc)
{
    const rp_inst *in = s->in;
    size_t n = 0;

    for (uint32_t k = 0; k < s->nm; k++) {
        if (ov_start)
            ov_start[k] = (uint32_t)n;
        for (uint32_t j = 0; j < s->nm; j++)
            if (j != k && rp_overlap_time(in, in->mov[k], in->mov[j])) {
                if (ov)
                    ov[n] = j;
                n++;
            }
    }
    if (ov_start)
        ov_start[s->nm] = (uint32_t)n;
    if (sc_start) {
        memset(sc_start, 0, ((size_t)s->nsec + 1) * sizeof(uint32_t));
        for (uint32_t k = 0; k < s->nm; k++)
            FOR_SECTIONS(in, in->mov[k], x) sc_start[x + 1]++;
        for (uint32_t x = 0; x < s->nsec; x++)
            sc_start[x + 1] += sc_start[x];
        for (uint32_t k = 0; k < s->nm; k++)
            FOR_SECTIONS(in, in->mov[k], x) sc[sc_start[x] + s->stamp[x]++] = k;
        memset(s->stamp, 0, s->nsec * sizeof(uint32_t));
    }
    return n;
}

/* Ranking h of the portfolio (rp_util.c), with noise when rng is given. */
static void make_ranking(bnb *s, int h, uint64_t *rng, double noise, uint32_t *out)
{
    rp_rank(s->in, s->ov_start, h, rng, noise, s->kv, out);
}

static int setup(bnb *s)
{
    const rp_inst *in = s->in;
    rp_kv *kv;
    size_t nov, nsc = 0;

    s->nm = in->nm;
    s->nsec = in->nsec;
    s->size = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->off = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->minoff = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->total = rp_alloc(s->m, s->nsec + 1, sizeof(uint64_t));
    s->stamp = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    s->ov_start = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->sc_start = rp_alloc(s->m, s->nsec + 2, sizeof(uint32_t));
    s->sol = rp_alloc(s->m, s->nm, sizeof(uint64_t));
    s->cuts = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    kv = rp_alloc(s->m, s->nm, sizeof(*kv));
    if (!s->size || !s->off || !s->minoff || !s->total || !s->stamp || !s->ov_start ||
        !s->sc_start || !s->sol || !s->cuts || !kv)
        return -ENOMEM;
    for (uint32_t k = 0; k < s->nm; k++) {
        s->size[k] = in->b[in->mov[k]].size;
        FOR_SECTIONS(in, in->mov[k], x) nsc++;
    }
    nov = build_lists(s, NULL, NULL, NULL, NULL);
    s->ov = rp_alloc(s->m, nov + 1, sizeof(uint32_t));
    s->sc = rp_alloc(s->m, nsc + 1, sizeof(uint32_t));
    s->loc = rp_alloc(s->m, nsc + 1, sizeof(uint32_t));
    s->kbase = rp_alloc(s->m, s->nm + 1, sizeof(uint32_t));
    s->ucnt = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t));
    if (!s->ov || !s->sc || !s->loc || !s->kbase || !s->ucnt)
        return -ENOMEM;
    for (uint32_t k = 0, at = 0; k < s->nm; k++) {
        uint32_t i = in->mov[k];
        s->kbase[k] = at;
        at += in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
    }
    build_lists(s, s->ov_start, s->ov, s->sc_start, s->sc);
    s->kv = kv;
    for (int h = 0; h < RP_NRANKINGS; h++) {
        if (!(s->rankings[h] = rp_alloc(s->m, s->nm, sizeof(uint32_t))))
            return -ENOMEM;
        make_ranking(s, h, NULL, 0, s->rankings[h]);
    }
    if (!(s->rrank = rp_alloc(s->m, s->nm, sizeof(uint32_t))))
        return -ENOMEM;
    if (!(s->wit = rp_alloc(s->m, s->nsec + 1, sizeof(uint32_t))))
        return -ENOMEM;
    memset(s->wit, 0xff, ((size_t)s->nsec + 1) * sizeof(uint32_t));
    return 0;
}

/* A part of the problem: its unplaced blocks (in pstack) and its sections [lo, hi). */
typedef struct part {
    size_t first, count;
    uint32_t lo, hi;
} part;

/* After a block went to offset o, every later one sits at o or above: the unplaced bytes
 * of each section must fit between o and C. */
static int check(const bnb *s, const part *p, uint64_t o)
{
    uint64_t room = s->cap - o;

    for (uint32_t x = p->lo; x < p->hi; x++)
        if (s->total[x] > room)
            return 0;
    return 1;
}

/* Where block k's entry for section x sits in loc. */
static uint32_t loc_index(const bnb *s, uint32_t k, uint32_t x)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[k];

    if (x >= in->s0[i] && x < in->s1[i])
        return s->kbase[k] + (x - in->s0[i]);
    return s->kbase[k] + (in->s1[i] - in->s0[i]) + (x - in->w0[i]);
}

/*
 * MiniMalloc's unallocated floor: the unplaced bytes of a section go above the lowest
 * offset its unplaced blocks can take. Lowest offsets only rise when place() bumps them and
 * totals only shrink, so checking the sections of each bumped block keeps this true at
 * every node; a section needs its members scanned only when the bumped block alone breaks it.
 */
static int sections_fit(bnb *s, uint32_t y)
{
    const rp_inst *in = s->in;
    uint64_t lo = s->minoff[y];

    if (lo > s->cap || s->size[y] > s->cap - lo)
        return 0;
    FOR_SECTIONS(in, in->mov[y], x)
    {
        uint64_t room = s->cap - s->total[x];
        uint32_t w = s->wit[x], z, e;

        if (lo <= room)
            continue;
        /* The member that passed this test last time usually passes it again. */
        if (w != UINT32_MAX && s->off[w] == RP_NONE && s->minoff[w] <= room)
            continue;
        for (z = s->sc_start[x], e = z + s->ucnt[x]; z < e; z++)
            if (s->minoff[s->sc[z]] <= room)
                break;
        if (z == e)
            return 0;
        s->wit[x] = s->sc[z];
    }
    return 1;
}

/* Places block c at offset o. Returns bit 0: no unplaced block meets it; bit 1: a section
 * boundary lost its last spanning block; bit 2: a section can no longer fit its unplaced
 * bytes. Or -ENOMEM. unplace() undoes it in every case. */
static int place(bnb *s, uint32_t c, uint64_t o)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[c];
    uint64_t height = o + s->size[c];
    int flags = 1;

    s->off[c] = o;
    /* Out of the unplaced prefix of each section; unplace() is LIFO, so a count undoes it. */
    FOR_SECTIONS(in, i, sec)
    {
        uint32_t at = s->loc[loc_index(s, c, sec)], last = s->sc_start[sec] + --s->ucnt[sec];
        uint32_t w = s->sc[last];

        s->sc[last] = c;
        s->sc[at] = w;
        s->loc[loc_index(s, c, sec)] = last;
        s->loc[loc_index(s, w, sec)] = at;
        s->total[sec] -= s->size[c];
    }
    if (s->decompose)
        for (uint32_t x = in->s0[i]; x + 1 < in->s1[i]; x++)
            if (--s->cuts[x] == 0)
                flags |= 2;
    for (uint32_t x = s->ov_start[c]; x < s->ov_start[c + 1]; x++) {
        uint32_t y = s->ov[x];

        if (s->off[y] != RP_NONE)
            continue;
        flags &= ~1;
        if (s->minoff[y] >= height)
            continue;
        if (trail_push(s, &s->tmin, y, s->minoff[y]) < 0)
            return -ENOMEM;
        s->minoff[y] = rp_bump_fixed(in, y, height);
        if (!sections_fit(s, y))
            return flags | 4;
    }
    return flags;
}

static void unplace(bnb *s, uint32_t c, size_t tmin_mark)
{
    const rp_inst *in = s->in;
    uint32_t i = in->mov[c];

    while (s->tmin.len > tmin_mark) {
        s->tmin.len--;
        s->minoff[s->tmin.idx[s->tmin.len]] = s->tmin.old[s->tmin.len];
    }
    FOR_SECTIONS(in, i, sec)
    {
        s->total[sec] += s->size[c];
        s->ucnt[sec]++;
    }
    if (s->decompose)
        for (uint32_t x = in->s0[i]; x + 1 < in->s1[i]; x++)
            s->cuts[x]++;
    s->off[c] = RP_NONE;
}

static int pstack_reserve(bnb *s, size_t more)
{
    if (s->ptop + more > s->pcap) {
        size_t cap = 2 * (s->ptop + more) + 1024;
        uint32_t *n = rp_alloc(s->m, cap, sizeof(uint32_t));
        if (!n)
            return -ENOMEM;
        if (s->ptop)
            memcpy(n, s->pstack, s->ptop * sizeof(uint32_t));
        s->pstack = n;
        s->pcap = cap;
    }
    return 0;
}

static int search(bnb *s, const part *p, uint64_t min_off, uint32_t min_rank);

/* Splits part p at the boundaries no unplaced block spans and solves each side alone. */
static int solve_split(bnb *s, const part *p)
{
    const rp_inst *in = s->in;
    size_t mark = s->ptop;
    uint32_t a = p->lo;
    int r = FOUND;

    while (a < p->hi && r == FOUND) {
        uint32_t b = a;
        part q;

        while (b + 1 < p->hi && s->cuts[b] != 0)
            b++;
        b++; /* sections [a, b) */
        if (pstack_reserve(s, p->count) < 0)
            return -ENOMEM;
        q.first = s->ptop;
        q.count = 0;
        q.lo = a;
        q.hi = b;
        for (size_t x = 0; x < p->count; x++) {
            uint32_t k = s->pstack[p->first + x], i = in->mov[k];
            if (s->off[k] == RP_NONE && in->s0[i] < b && a < in->s1[i])
                s->pstack[q.first + q.count++] = k;
        }
        s->ptop += q.count;
        if (q.count)
            r = search(s, &q, 0, 0);
        s->ptop = q.first;
        a = b;
    }
    s->ptop = mark;
    return r;
}

static int cstack_reserve(bnb *s, size_t more)
{
    if (s->ctop + more > s->ccap) {
        size_t cap = 2 * (s->ctop + more) + 1024;
        uint32_t *n = rp_alloc(s->m, cap, sizeof(uint32_t));
        if (!n)
            return -ENOMEM;
        if (s->ctop)
            memcpy(n, s->cstack, s->ctop * sizeof(uint32_t));
        s->cstack = n;
        s->ccap = cap;
    }
    return 0;
}

/* (offset, rank) order of the canonical form, as one comparison. */
static int cand_less(const bnb *s, uint32_t a, uint32_t b)
{
    return s->minoff[a] < s->minoff[b] || (s->minoff[a] == s->minoff[b] && s->rank[a] < s->rank[b]);
}

static int search(bnb *s, const part *p, uint64_t min_off, uint32_t min_rank)
{
    uint64_t mh = RP_NONE;
    size_t base = s->ctop, cnt = 0;
    int r = NOTFOUND;

    if (cstack_reserve(s, p->count) < 0)
        return -ENOMEM;
    for (size_t x = 0; x < p->count; x++) {
        uint32_t k = s->pstack[p->first + x];
        if (s->off[k] == RP_NONE && s->minoff[k] + s->size[k] < mh)
            mh = s->minoff[k] + s->size[k];
    }
    if (mh == RP_NONE) {
        for (size_t x = 0; x < p->count; x++) {
            uint32_t k = s->pstack[p->first + x];
            s->sol[k] = s->off[k];
        }
        return FOUND;
    }
    /* Candidates sorted once: the state is the same again after each child is undone. */
    for (size_t x = 0; x < p->count; x++) {
        uint32_t k = s->pstack[p->first + x];
        uint64_t o = s->minoff[k];
        size_t y;

        if (s->off[k] != RP_NONE || o >= mh)
            continue;
        if (o < min_off || (o == min_off && s->rank[k] < min_rank))
            continue;
        for (y = base + cnt; y > base && cand_less(s, k, s->cstack[y - 1]); y--)
            s->cstack[y] = s->cstack[y - 1];
        s->cstack[y] = k;
        cnt++;
    }
    s->ctop = base + cnt;
    for (size_t x = 0; x < cnt; x++) {
        uint32_t c = s->cstack[base + x];
        uint64_t co = s->minoff[c];
        size_t m1 = s->tmin.len;
        int flags;

        /* A node is one placement: failed ones cost as much as the others. */
        if (s->nodes_left == 0 || rp_expired(s->clk)) {
            r = ABORTED;
            break;
        }
        s->nodes_left--;
        if ((flags = place(s, c, co)) < 0) {
            r = flags;
            break;
        }
        if ((flags & 4) || !check(s, p, co)) {
            r = NOTFOUND;
        } else if (flags & 2) {
            /* What p placed so far is final for the parts below: record it now. */
            for (size_t y = 0; y < p->count; y++) {
                uint32_t k = s->pstack[p->first + y];
                if (s->off[k] != RP_NONE)
                    s->sol[k] = s->off[k];
            }
            r = solve_split(s, p);
        } else {
            r = search(s, p, co, s->rank[c]);
        }
        unplace(s, c, m1);
        if (r != NOTFOUND || (flags & 1))
            break;
    }
    s->ctop = base;
    return r;
}

/* One decision run at capacity cap: FOUND, NOTFOUND (proven), ABORTED, or -ENOMEM. */
static int run(bnb *s, uint64_t cap, uint64_t node_limit)
{
    const rp_inst *in = s->in;
    part all = {0, s->nm, 0, s->nsec};
    int r;

    s->cap = cap;
    s->nodes_left = node_limit;
    s->tmin.len = 0;
    s->ptop = 0;
    s->ctop = 0;
    if (cap < in->fixed_top)
        return NOTFOUND;
    if (pstack_reserve(s, s->nm) < 0)
        return -ENOMEM;
    memset(s->total, 0, s->nsec * sizeof(uint64_t));
    memset(s->cuts, 0, s->nsec * sizeof(uint32_t));
    for (uint32_t k = 0; k < s->nm; k++) {
        uint32_t i = in->mov[k];
        s->off[k] = RP_NONE;
        s->minoff[k] = rp_bump_fixed(in, k, 0);
        s->pstack[k] = k;
        FOR_SECTIONS(in, i, sec) s->total[sec] += s->size[k];
        for (uint32_t x = in->s0[i]; s->decompose && x + 1 < in->s1[i]; x++)
            s->cuts[x]++;
    }
    s->ptop = s->nm;
    for (uint32_t x = 0; x < s->nsec; x++) {
        s->ucnt[x] = s->sc_start[x + 1] - s->sc_start[x];
        for (uint32_t z = s->sc_start[x]; z < s->sc_start[x + 1]; z++)
            s->loc[loc_index(s, s->sc[z], x)] = z;
    }
    for (uint32_t k = 0; k < s->nm; k++)
        if (!sections_fit(s, k))
            return NOTFOUND;
    r = s->decompose ? solve_split(s, &all) : search(s, &all, 0, 0);
    if (r == FOUND) {
        uint64_t peak = in->fixed_top;
        for (uint32_t k = 0; k < s->nm; k++)
            if (s->sol[k] + s->size[k] > peak)
                peak = s->sol[k] + s->size[k];
        if (peak < s->best->peak) {
            memcpy(s->best->off, s->sol, s->nm * sizeof(uint64_t));
            s->best->peak = peak;
            s->best->stage = "bnb";
        }
    }
    return r;
}

/* The Luby sequence 1 1 2 1 1 2 4 ...: restart lengths that waste at most a log factor. */
static uint64_t luby(uint64_t i)
{
    for (;;) {
        uint64_t k = 1;
        while ((UINT64_C(1) << k) - 1 < i)
            k++;
        if ((UINT64_C(1) << k) - 1 == i)
            return UINT64_C(1) << (k - 1);
        i -= (UINT64_C(1) << (k - 1)) - 1;
    }
}

/*
 * One run with ranking rank at C = LB (unless that is proven infeasible), then at C below the
 * best plan, repeated while it succeeds (a plan found below the best one is often improved
 * again by the same ranking). 1 when the search is over (optimal or proven), 0 to go on,
 * or -ENOMEM.
 */
static int attempt(bnb *s, uint32_t *rank, uint64_t limit, int *lb_infeasible)
{
    const rp_inst *in = s->in;
    int rc;

    s->rank = rank;
    if (!*lb_infeasible) {
        rc = run(s, in->floor_lb, limit);
        if (rc < 0)
            return rc;
        if (rc == NOTFOUND)
            *lb_infeasible = 1;
        if (rc == FOUND || s->clk->stopped)
            return 1;
    }
    /*
     * Three times in four aim a sixteenth, an eighth or a quarter of the gap to LB lower:
     * stepping down one byte at a time can take many runs when the plan is far above the
     * optimum (D: 6 % above LB), and a ranking often finds a plan at once at one C but not
     * at a C slightly higher.
     */
    do {
        uint64_t c = s->best->peak - 1;
        unsigned step = (unsigned)(s->attempts++ & 3);
        int jump = step && c - in->floor_lb >= 16;

        if (jump)
            c -= (c - in->floor_lb) >> (5 - step);
        rc = run(s, c, *lb_infeasible ? 2 * limit : limit);
        if (jump && rc == NOTFOUND)
            rc = ABORTED; /* proves nothing about the plans between c and the best */
    } while (rc == FOUND && s->best->peak > in->floor_lb && !s->clk->stopped);
    if (rc < 0)
        return rc;
    /* A complete search below the best plan failed: it is optimal. */
    return rc == NOTFOUND || s->best->peak <= in->floor_lb || s->clk->stopped;
}

int rp_bnb(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed)
{
    bnb s;
    uint64_t rng = seed, t = 0;
    int lb_infeasible = 0, rc = 0;

    memset(&s, 0, sizeof(s));
    s.in = in;
    s.m = m;
    s.best = best;
    s.clk = clk;
    s.decompose = in->period == 0;
    if ((rc = setup(&s)) < 0)
        return rc;
    /*
     * MiniMalloc's round robin: every static ranking with a node limit that doubles each
     * sweep (a static run repeats its predecessor's tree, so at most half is spent again).
     * Between sweeps, as many randomized rankings on a Luby schedule, for instances that
     * none of the static ones solves soon.
     */
    for (uint32_t r = 0; best->peak > in->floor_lb && rc == 0; r++) {
        uint64_t limit = (uint64_t)RESTART_NODES << (r < 24 ? r : 24);

        for (int h = 0; h < RP_NRANKINGS && rc == 0; h++)
            rc = rp_now_ns() >= clk->deadline_ns
                     ? 1
                     : attempt(&s, s.rankings[h], limit, &lb_infeasible);
        for (int h = 0; h < RP_NRANKINGS && rc == 0; h++) {
            make_ranking(&s, h, &rng, RESTART_NOISE, s.rrank);
            rc = rp_now_ns() >= clk->deadline_ns
                     ? 1
                     : attempt(&s, s.rrank, RESTART_NODES * luby(++t), &lb_infeasible);
        }
    }
    return rc < 0 ? rc : 0;
}
