/* Iteration detection: the period of a token stream, found as a tandem repeat, incrementally. */
#include "tracer_internal.h"

#include <errno.h>
#include <string.h>

#define H OM_PERIOD_HISTORY
#define MAX_PERIOD ((H - 1) / 2)

/* Exact repeats are believed after one period, repeats with substitutions after two: a
 * first step with a few extra requests at its end (lazily created state) offers a
 * candidate one step plus those requests long, whose first comparison period sees them as
 * substitutions, and only its second the shift of every request after them. */
#define NOISY_PERIODS 2
/* A period whose live bytes do not come back is believed only after this many: a handful
 * of identical layers repeat inside a training step, a program that keeps part of every
 * step (a leak, outputs kept for the epoch's metrics) goes on. */
#define UNBALANCED_PERIODS 4
/* Live bytes may move by this fraction of the bytes requested in a period and still count
 * as balanced: a helper thread's frees of the stream's blocks land anywhere. */
#define BALANCE_SLACK 16

int om_period_init(struct om_period *d)
{
    memset(d, 0, sizeof *d);
    d->hist = om_sys_map(H * sizeof *d->hist);
    d->kgram_last = om_sys_map(OM_PERIOD_KGRAM_SLOTS * sizeof *d->kgram_last);
    if (!d->hist || !d->kgram_last)
        return -ENOMEM;
    return 0;
}

void om_period_reset(struct om_period *d)
{
    struct om_period_entry *hist = d->hist;
    uint64_t *kl = d->kgram_last;
    memset(d, 0, sizeof *d);
    d->hist = hist;
    d->kgram_last = kl;
    memset(kl, 0, OM_PERIOD_KGRAM_SLOTS * sizeof *kl);
}

void om_period_unmap(struct om_period *d)
{
    om_sys_unmap(d->hist, H * sizeof *d->hist);
    om_sys_unmap(d->kgram_last, OM_PERIOD_KGRAM_SLOTS * sizeof *d->kgram_last);
}

static inline uint64_t at(const struct om_period *d, uint64_t i)
{
    return d->hist[i % H].token;
}

/* Substitutions cost two mismatches (the odd token against its neighbours one period
 * either side), so a few per period are tolerated; an insertion shifts everything after
 * it and kills the candidate, which the k-grams then propose again. */
static uint64_t tolerance(uint64_t p)
{
    return p / 16;
}

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* A training step frees what it allocates within about a step, so its live bytes come
 * back one period later. A layer repeated inside the step does not: in the forward pass
 * each keeps its activations for the backward one (+29% of what it requests in the
 * bundled transformer), in the backward pass each frees them (-17%). The sums wrap around
 * like the caller's counts; only their differences matter. */
static int unbalanced(const struct om_period *d, uint64_t i, uint64_t p)
{
    const struct om_period_entry *now = &d->hist[i % H], *then = &d->hist[(i - p) % H];
    uint64_t grew = now->live - then->live;
    uint64_t moved = (int64_t)grew < 0 ? -grew : grew;
    uint64_t requested = now->born - then->born;
    return moved > requested / BALANCE_SLACK;
}

/* Comparisons where live bytes moved, over the indices a candidate's counts cover: those
 * since it was created, the last p at most. */
static uint64_t unbalanced_window(const struct om_period *d, uint64_t p, uint64_t created)
{
    uint64_t count = 0;
    for (uint64_t j = d->n - created > p ? d->n - p : created; j < d->n; j++)
        count += unbalanced(d, j, p);
    return count;
}

/* Balance is judged over the whole last period, as mismatches are: at the end of a run of
 * layers, the one point that compares the next part of the step with the last layer may
 * well balance. */
static int confirmed(const struct om_period *d, const struct om_period_candidate *c)
{
    uint64_t age = d->n - c->created;
    if (age < OM_PERIOD_MIN_EVIDENCE)
        return 0;
    if (c->unbalanced > tolerance(c->p))
        return age >= UNBALANCED_PERIODS * c->p;
    return age >= (c->mismatch ? NOISY_PERIODS : 1) * c->p;
}

static void drop(struct om_period *d, unsigned k)
{
    d->cand[k] = d->cand[--d->ncand];
}

static int is_candidate(const struct om_period *d, uint64_t p)
{
    for (unsigned k = 0; k < d->ncand; k++)
        if (d->cand[k].p == p)
            return 1;
    return 0;
}

/* p, not a candidate yet. */
static void propose(struct om_period *d, uint64_t p, uint64_t created)
{
    unsigned slot = d->ncand;
    if (slot == OM_PERIOD_CANDIDATES) {
        /* Evict the youngest candidate that is not locked: age is the evidence. */
        uint64_t best_created = 0;
        slot = OM_PERIOD_CANDIDATES;
        for (unsigned k = 0; k < d->ncand; k++) {
            if (d->cand[k].p == d->p)
                continue;
            if (slot == OM_PERIOD_CANDIDATES || d->cand[k].created > best_created) {
                slot = k;
                best_created = d->cand[k].created;
            }
        }
        if (slot == OM_PERIOD_CANDIDATES || best_created > created)
            return;
    } else {
        d->ncand++;
    }
    /* The repeat's evidence reaches back over the exact matches before the k-gram: a
     * period whose every k-gram recurs within it (identical layers, the step made of them)
     * is first proposed one period after it began, when the step's seam recurs, and has
     * been repeating all along. Far enough to be believed, no further: the walk is paid
     * for on the request that proposes. */
    uint64_t oldest = d->n > H ? d->n - H : 0;
    uint64_t reach = UNBALANCED_PERIODS * p + OM_PERIOD_MIN_EVIDENCE;
    while (created >= p + oldest + 1 && d->n - created < reach &&
           at(d, created - 1) == at(d, created - 1 - p))
        created--;
    d->cand[slot].p = p;
    d->cand[slot].created = created;
    d->cand[slot].mismatch = 0; /* the k-gram matched, and so did the comparisons before it */
    d->cand[slot].unbalanced = unbalanced_window(d, p, created);
}

/* The repeat is extended backwards over exact matches: the first steady iteration starts
 * where the stream became periodic, however different the iterations before were. */
static void lock(struct om_period *d, const struct om_period_candidate *c, om_period_start_fn fn,
                 void *ctx)
{
    uint64_t p = c->p, j = c->created;
    uint64_t oldest = d->n > H ? d->n - H : 0;
    while (j >= p + oldest + 1 && at(d, j - 1) == at(d, j - 1 - p))
        j--;
    /* The period locked so far counted no balance while it held (om_period_push): it is
     * a candidate like the others from now on. */
    for (unsigned k = 0; d->p && k < d->ncand; k++)
        if (d->cand[k].p == d->p)
            d->cand[k].unbalanced = unbalanced_window(d, d->p, d->cand[k].created);
    d->p = p;
    d->s0 = j - p;
    d->locks++;
    uint64_t last = d->n - 1, s = d->s0;
    for (; s <= last; s += p)
        fn(ctx, d->hist[s % H].tag, s == d->s0 ? OM_START_LOCK : OM_START_RETRO);
    d->next_start = s;
}

uint64_t om_period_covered(const struct om_period *d)
{
    return d->p ? d->n - d->s0 : 0;
}

void om_period_push(struct om_period *d, uint64_t token, uint64_t tag, uint64_t live, uint64_t size,
                    om_period_start_fn fn, void *ctx)
{
    uint64_t i = d->n++;
    d->born_total += size;
    d->hist[i % H] = (struct om_period_entry){token, tag, live, d->born_total};

    if (d->p && i == d->next_start) {
        fn(ctx, tag, OM_START_LIVE);
        d->next_start += d->p;
    }

    int locked_noisy = 0;
    for (unsigned k = 0; k < d->ncand;) {
        struct om_period_candidate *c = &d->cand[k];
        uint64_t p = c->p;
        /* The locked period's balance is read only once another is locked (lock() counts
         * it then): while it holds, every request would pay for two comparisons of it. */
        int balance = p != d->p;
        c->mismatch += at(d, i) != at(d, i - p);
        if (balance)
            c->unbalanced += unbalanced(d, i, p);
        if (i - p >= c->created) {
            c->mismatch -= at(d, i - p) != at(d, i - 2 * p);
            if (balance)
                c->unbalanced -= unbalanced(d, i - p, p);
        }
        if (c->mismatch > tolerance(p)) {
            if (p == d->p)
                d->p = 0; /* the program changed, or the lock was a sub-period */
            drop(d, k);
            continue;
        }
        if (p == d->p)
            locked_noisy = c->mismatch != 0;
        k++;
    }

    if (i + 1 >= OM_PERIOD_KGRAM) {
        uint64_t h = 0;
        for (unsigned j = 0; j < OM_PERIOD_KGRAM; j++)
            h = mix(h ^ at(d, i - j));
        uint64_t *slot = &d->kgram_last[h & (OM_PERIOD_KGRAM_SLOTS - 1)];
        uint64_t prev = *slot;
        *slot = i + 1;
        if (prev) {
            uint64_t p = i - (prev - 1);
            /* A candidate already (the locked period, every request while it holds): it
             * is proposed no second time, so the k-gram need not be compared. */
            int same =
                p >= 1 && p <= MAX_PERIOD && i + 1 >= p + OM_PERIOD_KGRAM && !is_candidate(d, p);
            for (unsigned j = 0; same && j < OM_PERIOD_KGRAM; j++)
                same = at(d, i - j) == at(d, i - j - p);
            if (same)
                propose(d, p, i + 1 - OM_PERIOD_KGRAM);
        }
    }

    /* Unlocked: the candidate believed over the most requests. Locked on one that repeats
     * with substitutions: a longer one believed to repeat exactly takes over (a step of
     * identical layers whose seam the layer's period tolerates as a substitution). */
    if (d->p && !locked_noisy)
        return;
    int best = -1;
    for (unsigned k = 0; k < d->ncand; k++) {
        const struct om_period_candidate *c = &d->cand[k];
        if (!confirmed(d, c) || (d->p && (c->p <= d->p || c->mismatch)))
            continue;
        if (best < 0 || c->created < d->cand[best].created ||
            (c->created == d->cand[best].created && c->p < d->cand[best].p))
            best = (int)k;
    }
    if (best >= 0)
        lock(d, &d->cand[best], fn, ctx);
}

/* Detection follows the thread that makes most managed requests: the main sequence of a
 * training loop, undisturbed by the timing of helper threads. Switching needs a clear
 * majority, checked every OM_THREADS_CHECK requests, so that two similar threads do not flap. */
int om_threads_note(struct om_threads *t, uint32_t tid)
{
    unsigned k = tid % OM_THREADS;
    for (unsigned n = 0; n < OM_THREADS; n++, k = (k + 1) % OM_THREADS) {
        if (t->t[k].tid == tid || t->t[k].count == 0) {
            t->t[k].tid = tid;
            t->t[k].count++;
            break;
        }
    }
    t->total++;
    if (t->det_tid == 0) {
        t->det_tid = tid;
        return 0;
    }
    if (t->total % OM_THREADS_CHECK != 0)
        return 0;
    unsigned best = 0;
    uint64_t det_count = 0;
    for (k = 0; k < OM_THREADS; k++) {
        if (t->t[k].count > t->t[best].count)
            best = k;
        if (t->t[k].tid == t->det_tid)
            det_count = t->t[k].count;
    }
    if (t->t[best].tid == t->det_tid || t->t[best].count <= 2 * det_count)
        return 0;
    t->det_tid = t->t[best].tid;
    t->switches++;
    return 1;
}

/* ---- the categories of one iteration, kept as the iteration runs ---- */

void om_acct_birth(struct om_iter_acct *a, uint64_t size)
{
    a->live_bytes += size;
    a->live_blocks++;
    a->born_bytes += size;
    a->born_blocks++;
    if (a->live_bytes > a->peak_live)
        a->peak_live = a->live_bytes;
}

int om_acct_death(struct om_iter_acct *a, uint64_t size, uint64_t birth_iter)
{
    a->live_bytes -= size;
    a->live_blocks--;
    uint64_t crossed = a->iter_no - birth_iter;
    if (crossed == 0) {
        a->temp_bytes += size;
        a->temp_blocks++;
        return OM_CAT_TEMPORARY;
    }
    a->old_died_bytes += size;
    a->old_died_blocks++;
    return crossed == 1 ? OM_CAT_PER_ITERATION : OM_CAT_PERSISTENT;
}

static void begin(struct om_iter_acct *a, uint64_t seq)
{
    a->iter_no++;
    a->start_seq = seq;
    a->start_live_bytes = a->live_bytes;
    a->start_live_blocks = a->live_blocks;
    a->born_bytes = a->born_blocks = a->temp_bytes = a->temp_blocks = 0;
    a->old_died_bytes = a->old_died_blocks = 0;
    a->peak_live = a->live_bytes;
}

/* An iteration ended at seq: born and freed inside it is temporary, born inside and
 * still live is per_iteration (an arc over the boundary), live throughout is persistent. */
void om_acct_boundary(struct om_iter_acct *a, uint64_t seq)
{
    if (!a->partial) {
        a->have_last = 1;
        a->last_start = a->start_seq;
        a->last_end = seq;
        a->last_peak = a->peak_live;
        a->last_bytes[OM_CAT_TEMPORARY] = a->temp_bytes;
        a->last_blocks[OM_CAT_TEMPORARY] = a->temp_blocks;
        a->last_bytes[OM_CAT_PER_ITERATION] = a->born_bytes - a->temp_bytes;
        a->last_blocks[OM_CAT_PER_ITERATION] = a->born_blocks - a->temp_blocks;
        a->last_bytes[OM_CAT_PERSISTENT] = a->start_live_bytes - a->old_died_bytes;
        a->last_blocks[OM_CAT_PERSISTENT] = a->start_live_blocks - a->old_died_blocks;
    }
    a->partial = 0;
    begin(a, seq);
}

/* Starts found after the fact (a period just locked): the iteration in progress is only
 * known from now on, so it is not reported when it ends. */
void om_acct_restart(struct om_iter_acct *a, uint64_t seq)
{
    begin(a, seq);
    a->partial = 1;
}
