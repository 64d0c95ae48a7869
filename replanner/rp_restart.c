/* Restarts of the branch and bound: which ranking, which capacity, how many nodes. */
#include "rp_internal.h"

#include <errno.h>

/*
 * The rankings tried round robin, in MiniMalloc's letters (rp_util.c). The time to a plan
 * swings by orders of magnitude with the ranking, and each instance tends to have one that
 * works at once. These five were picked on MiniMalloc's benchmark set (A to J, each also
 * with its rows shuffled, which changes the ties; G to J only checked the choice): TCA
 * solves F and H, TW E and G, TWA I, UW A, lZ B and C and takes D below its best known
 * peak, all within the first sweeps. Order matters too: D reaches that peak in other orders
 * only for some shuffles.
 */
static const char *const portfolio[] = {"TWA", "TCA", "TW", "UW", "lZ"};

#define NRANKINGS (sizeof(portfolio) / sizeof(portfolio[0]))
/* Nodes of the shortest restart, and how far a randomized ranking strays from its base. */
#define RESTART_NODES 4096
#define RESTART_NOISE 0.3
/* Runs below the best plan that may fail before a ranking gives way to the next. */
#define DESCENT_FAILS 2

typedef struct driver {
    rp_search *s;
    const rp_inst *in;
    rp_best *best;
    rp_clock *clk;
    uint64_t lo;       /* no plan has a lower peak (proven) */
    int lb_infeasible; /* the run at LB (or the goal) failed completely */
    uint64_t descents; /* runs below the best plan so far */
} driver;

/* A complete run failed at lo - 1: no plan has a lower peak than lo. */
static void prove(driver *d, uint64_t lo)
{
    if (lo > d->lo)
        d->lo = lo;
    if (lo > d->best->proven)
        d->best->proven = lo;
}

/*
 * The capacity of the j-th run below the best plan (j >= 1): best - 1, less a share of the
 * gap to the proven bound that follows the van der Corput sequence over [0, 1/2): 1/4, 1/8,
 * 3/8, 1/16, 5/16, ... Whether a run finds a plan depends little on how close C is to the
 * best one: on D a ranking with 16 k nodes finds plans at scattered capacities and none at
 * many higher ones, since a lower C prunes more and so steers the search elsewhere.
 * Spreading the targets tries each ranking under many such steerings; best - 1 and a
 * sixteenth, an eighth or a quarter of the gap below it (the previous rule) kept failing
 * at the same few capacities. A small gap rounds the share to 0: best - 1, whose failure
 * proves the plan optimal.
 */
static uint64_t target(const driver *d, uint64_t j)
{
    uint64_t c = d->best->peak - 1, v = 0;

    for (int b = 0; b < 16; b++, j >>= 1)
        v = (v << 1) | (j & 1);
    /* gap * v / 2^17, without overflow: gap < 2^60 */
    return c - (uint64_t)((double)(c - d->lo) * (double)v / 131072.0);
}

/*
 * One ranking: a run at LB, or at the caller's goal above it (until that is proven
 * infeasible), then runs below the best plan until DESCENT_FAILS of them fail (twice the
 * nodes once LB is out of reach: those runs are all that is left). 1 when the search is over
 * (optimal, at the goal or out of time), 0 to go on, or -ENOMEM.
 */
static int attempt(driver *d, const rp_ranking *rk, uint64_t limit)
{
    int rc, fails = 0;

    if (!d->lb_infeasible) {
        rc = rp_search_run(d->s, rk, d->in->stop, limit);
        if (rc < 0)
            return rc;
        if (rc == RP_NOTFOUND) {
            d->lb_infeasible = 1;
            prove(d, d->in->stop + 1);
        }
        if (rc == RP_FOUND || d->clk->stopped)
            return 1;
    }
    while (fails < DESCENT_FAILS && d->best->peak > d->lo && !d->clk->stopped) {
        uint64_t c = target(d, ++d->descents);

        rc = rp_search_run(d->s, rk, c, d->lb_infeasible ? 2 * limit : limit);
        if (rc < 0)
            return rc;
        /* A complete search that failed proves that no plan reaches c. */
        if (rc == RP_NOTFOUND)
            prove(d, c + 1);
        if (rc != RP_FOUND)
            fails++;
    }
    return d->best->peak <= d->lo || d->best->peak <= d->in->stop || d->clk->stopped;
}

int rp_bnb(const rp_inst *in, rp_mem *m, rp_best *best, rp_clock *clk, uint64_t seed)
{
    driver d = {0};
    rp_ranking rk[NRANKINGS], rr;
    double *factor = rp_alloc(m, (size_t)in->nm + 1, sizeof(double));
    uint32_t *rrank = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t));
    uint64_t rng = seed, t = 0;
    int rc;

    if (!factor || !rrank)
        return -ENOMEM;
    /* A setup that the deadline overtook leaves the plan as it is. */
    if ((rc = rp_search_new(in, m, best, clk, &d.s)) < 0)
        return rc == -ETIMEDOUT ? 0 : rc;
    d.in = in;
    d.best = best;
    d.clk = clk;
    d.lo = in->floor_lb;
    for (size_t h = 0; h < NRANKINGS; h++) {
        rk[h].keys = portfolio[h];
        rk[h].factor = NULL;
        rk[h].keep = 0;
        if (!(rk[h].rank = rp_alloc(m, (size_t)in->nm + 1, sizeof(uint32_t))))
            return -ENOMEM;
        rp_search_rank(d.s, &rk[h], rk[h].rank);
    }
    /*
     * First one dive per ranking at LB, with nodes for about one placement per block (as
     * MiniMalloc's first round; a quarter more for backtracks: a dive that needs more is
     * left to the round robin, rather than eat the budget of the dives after it), in the
     * portfolio's order: the round robin would come to a ranking that works at once only
     * after the others' limits. A dive's parts keep their ranking's order: ranking each part
     * afresh after a split sorts the part again at every split, which costs a long trace's
     * dive more than its placements; the round robin's runs, which backtrack, rank afresh.
     */
    for (size_t x = 0; x < NRANKINGS && !d.lb_infeasible; x++) {
        rp_ranking dive = rk[x];

        if (rp_now_ns() >= clk->deadline_ns)
            return 0;
        dive.keep = 1;
        rc = rp_search_run(d.s, &dive, in->stop, (uint64_t)in->nm + in->nm / 4 + 64);
        if (rc < 0)
            return rc;
        if (rc == RP_NOTFOUND) {
            d.lb_infeasible = 1;
            prove(&d, in->stop + 1);
        }
        if (rc == RP_FOUND || clk->stopped)
            return 0;
    }
    /*
     * MiniMalloc's round robin: every static ranking with a node limit that doubles each
     * sweep (a static run repeats its predecessor's tree, so at most half is spent again).
     * Between sweeps, one randomized ranking on a Luby schedule, for instances that none of
     * the static ones solves soon.
     */
    rc = 0;
    for (uint32_t r = 0; best->peak > d.lo && best->peak > in->stop && rc == 0; r++) {
        uint64_t limit = (uint64_t)RESTART_NODES << (r < 24 ? r : 24);

        for (size_t h = 0; h < NRANKINGS && rc == 0; h++)
            rc = rp_now_ns() >= clk->deadline_ns ? 1 : attempt(&d, &rk[h], limit);
        if (rc == 0 && rp_now_ns() < clk->deadline_ns) {
            size_t h = (size_t)(t % NRANKINGS);

            for (uint32_t k = 0; k < in->nm; k++)
                factor[k] = 1.0 + RESTART_NOISE *
                                      ((double)(rp_rand(&rng) >> 11) / 9007199254740992.0 - 0.5);
            rr = rk[h];
            rr.factor = factor;
            rr.rank = rrank;
            rp_search_rank(d.s, &rr, rrank);
            rc = attempt(&d, &rr, RESTART_NODES * rp_luby(++t));
        } else if (rc == 0) {
            rc = 1;
        }
    }
    return rc < 0 ? rc : 0;
}
