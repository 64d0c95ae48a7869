/* optmem report: the inferred breakdown of one steady iteration (docs/report-formats.md). */
#include "report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *const om_bd_keys[OM_NBD] = {"parameters",  "gradients",   "optimizer_state",
                                        "activations", "temporaries", "other"};
const char *const om_bd_labels[OM_NBD] = {"parameters",      "gradients",
                                          "optimizer state", "activations kept for backward",
                                          "temporaries",     "other"};
const char om_bd_letters[OM_NBD] = {'P', 'G', 'O', 'A', 'T', '.'};

#define NEVER UINT64_MAX /* the death of a block live at the report */

struct bd_block {
    uint64_t site, size, birth, death;
    int cls;
};

static int by_size_site(const void *a, const void *b)
{
    const struct bd_block *x = *(const struct bd_block *const *)a;
    const struct bd_block *y = *(const struct bd_block *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return (x->site > y->site) - (x->site < y->site);
}

static int by_size_birth(const void *a, const void *b)
{
    const struct bd_block *x = *(const struct bd_block *const *)a;
    const struct bd_block *y = *(const struct bd_block *const *)b;
    if (x->size != y->size)
        return x->size < y->size ? -1 : 1;
    return x->birth < y->birth ? -1 : x->birth > y->birth;
}

/* The iteration: T requests from the lowest point (live bytes just before a request) within
 * the first period of the sample that has a whole period after it. */
static int find_cycle(const struct om_report *r, struct om_breakdown *b)
{
    uint64_t T = r->period;
    uint64_t s = r->nstarts ? r->starts[0] : r->sample_first;
    if (s < r->sample_first || s > r->sample_end || r->sample_end - s < T ||
        r->sample_end - s - T < T) {
        b->why = "the sample holds less than two iterations";
        return -1;
    }
    uint64_t low = UINT64_MAX, q0 = s;
    for (uint64_t q = s; q < s + T; q++) {
        const struct om_rlife *l = &r->life[q - r->sample_first];
        if (l->site == OM_NO_VALUE)
            continue;
        uint64_t before = r->live_after[q - r->sample_first] - l->size;
        if (before < low) {
            low = before;
            q0 = q;
        }
    }
    b->first = q0;
    b->end = q0 + T;
    uint64_t high = 0;
    b->peak_request = q0;
    for (uint64_t q = q0; q < q0 + T; q++)
        if (r->live_after[q - r->sample_first] > high) {
            high = r->live_after[q - r->sample_first];
            b->peak_request = q;
        }
    b->peak_bytes = high;
    return 0;
}

/* Gradients are matched one for one with parameters of their size: the earliest-born
 * resident blocks of that size. The blocks are sorted by size then birth. */
static void match_parameters(struct bd_block **grads, size_t ngrads, struct bd_block **res,
                             size_t nres, uint64_t *last_param)
{
    size_t g = 0, k = 0;
    while (g < ngrads) {
        uint64_t size = grads[g]->size;
        while (k < nres && res[k]->size < size)
            k++;
        while (g < ngrads && grads[g]->size == size) {
            if (k < nres && res[k]->size == size) {
                res[k]->cls = OM_BD_PARAMETERS;
                if (res[k]->birth > *last_param || *last_param == NEVER)
                    *last_param = res[k]->birth;
                k++;
            } else {
                grads[g]->cls = -1; /* no parameter of its size: not a gradient */
            }
            g++;
        }
    }
}

/* Optimizer state: resident blocks of a parameter's size born after the last parameter. An
 * optimizer keeps the same number of state tensors for every parameter (Adam two, SGD with
 * momentum one), so that number is the fewest any parameter size has, and of each size only
 * the latest-born that many per parameter are state: a data set born after the model whose
 * size happens to be a parameter's stays other. res is sorted by size then birth. */
static void find_state(struct bd_block **res, size_t nr, uint64_t last_param)
{
    uint64_t per_param = UINT64_MAX;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < nr;) {
            size_t end = k, params = 0, cands = 0;
            while (end < nr && res[end]->size == res[k]->size) {
                params += res[end]->cls == OM_BD_PARAMETERS;
                cands += res[end]->cls == OM_BD_OTHER && res[end]->birth > last_param;
                end++;
            }
            if (params && pass == 0 && cands / params < per_param)
                per_param = cands / params;
            for (size_t i = end, keep = params * per_param; pass == 1 && params && i-- > k;)
                if (keep && res[i]->cls == OM_BD_OTHER && res[i]->birth > last_param) {
                    res[i]->cls = OM_BD_OPTIMIZER;
                    keep--;
                }
            k = end;
        }
        if (per_param == UINT64_MAX || per_param == 0)
            return;
    }
}

/* Gradients kept from one iteration to the next (zero_grad(set_to_none=False)) are born in
 * the first backward and never freed: resident blocks. Every backward since makes each
 * parameter's gradient again, at the call site and of the size that made the kept one, and
 * adds it into the kept one, which is why the iteration frees it. So a resident block is a
 * kept gradient when a block born and freed in the iteration has its call site and its size,
 * and it is matched with a parameter (rule 4) among the other resident blocks. Called when
 * no gradient of the iteration was matched; grads and res (sorted by size then birth) are
 * the caller's arrays, grads free to reuse. */
static int find_kept(struct bd_block *v, size_t n, struct bd_block **grads, struct bd_block **res,
                     size_t nr, struct om_breakdown *b, uint64_t *last_param)
{
    struct bd_block **made = calloc(n ? n : 1, sizeof *made);
    if (!made)
        return -ENOMEM;
    size_t nm = 0, nk = 0, no = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].birth >= b->first && v[i].birth < b->end && v[i].death <= b->end)
            made[nm++] = &v[i];
    qsort(made, nm, sizeof *made, by_size_site);
    /* res, in place: the kept gradients to grads, the others stay, in order. */
    for (size_t k = 0; k < nr; k++) {
        struct bd_block *x = res[k];
        if (bsearch(&x, made, nm, sizeof *made, by_size_site)) {
            x->cls = OM_BD_GRADIENTS;
            grads[nk++] = x;
        } else {
            res[no++] = x;
        }
    }
    free(made);
    if (nk == 0)
        return 0;
    match_parameters(grads, nk, res, no, last_param);
    for (size_t g = 0; g < nk; g++) {
        if (grads[g]->cls < 0)
            grads[g]->cls = OM_BD_OTHER; /* no parameter of its size */
        res[no + g] = grads[g];          /* res keeps every resident block */
    }
    qsort(res, nr, sizeof *res, by_size_birth);
    b->kept_gradients = *last_param != NEVER;
    return 0;
}

/* Rule 3b: blocks freed at the iteration's end but born after its last block that died in
 * it. A step that makes no temporaries (SGD updating in place) leaves the backward's last
 * gradients (the first layer's) there, where the step's final temporaries usually are: such a
 * block is a gradient when a resident block of its size, born no later than the last
 * parameter, is still unmatched. A step's final temporary of a parameter's size finds every
 * parameter of that size taken by its own gradient. */
static void match_late(struct bd_block *v, size_t n, uint64_t q0, uint64_t qe, uint64_t last_done,
                       struct bd_block **res, size_t nr, uint64_t last_param)
{
    for (size_t i = 0; i < n; i++) {
        struct bd_block *x = &v[i];
        if (x->birth < q0 || x->birth >= qe || x->death != qe || x->birth < last_done ||
            x->cls != OM_BD_TEMPORARIES)
            continue;
        size_t lo = 0, hi = nr; /* the first resident block of its size (sorted by size) */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (res[mid]->size < x->size)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t k = lo; k < nr && res[k]->size == x->size; k++)
            if (res[k]->cls == OM_BD_OTHER && res[k]->birth <= last_param) {
                res[k]->cls = OM_BD_PARAMETERS;
                x->cls = OM_BD_GRADIENTS;
                break;
            }
    }
}

static int classify(struct bd_block *v, size_t n, struct bd_block **grads, struct bd_block **res,
                    struct om_breakdown *b)
{
    uint64_t q0 = b->first, qe = b->end, M = b->peak_request;
    /* The last birth of the iteration whose block also died in it: the end of the step. A
     * block still live then, and freed after the iteration's last request, waited for the
     * next zero_grad. */
    uint64_t last_done = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].birth >= q0 && v[i].birth < qe && v[i].death < qe && v[i].birth > last_done)
            last_done = v[i].birth;
    size_t ng = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        struct bd_block *x = &v[i];
        x->cls = OM_BD_OTHER;
        if (x->birth < q0 && x->death >= qe) {
            res[nr++] = x;
        } else if (x->birth >= q0 && x->birth < qe) {
            if (x->death == qe && x->birth < last_done) {
                x->cls = OM_BD_GRADIENTS;
                grads[ng++] = x;
            } else if (x->death <= qe) {
                x->cls = OM_BD_TEMPORARIES; /* or an activation: after the turn is known */
            }
        }
    }
    qsort(grads, ng, sizeof *grads, by_size_birth);
    qsort(res, nr, sizeof *res, by_size_birth);
    uint64_t last_param = NEVER;
    match_parameters(grads, ng, res, nr, &last_param);
    if (last_param == NEVER && find_kept(v, n, grads, res, nr, b, &last_param) != 0)
        return -ENOMEM;
    if (last_param != NEVER && !b->kept_gradients)
        match_late(v, n, q0, qe, last_done, res, nr, last_param);
    /* The turn from forward to backward: the first gradient's birth, or without gradients
     * the iteration's peak. Blocks of the iteration born by then and freed after it, in it,
     * were kept for the backward. */
    uint64_t turn = NEVER;
    for (size_t i = 0; i < n; i++) {
        if (v[i].cls < 0)
            v[i].cls = OM_BD_TEMPORARIES;
        else if (v[i].cls == OM_BD_GRADIENTS && v[i].birth >= q0 && v[i].birth < turn)
            turn = v[i].birth;
    }
    if (turn == NEVER)
        turn = M;
    for (size_t i = 0; i < n; i++)
        if (v[i].cls == OM_BD_TEMPORARIES && v[i].birth <= turn && v[i].death > turn)
            v[i].cls = OM_BD_ACTIVATIONS;
    if (last_param != NEVER)
        find_state(res, nr, last_param);
    b->turn_request = turn;
    return 0;
}

static int tally(const struct bd_block *v, size_t n, struct om_breakdown *b)
{
    uint64_t q0 = b->first, qe = b->end, T = qe - q0, M = b->peak_request;
    /* Unsigned: the levels are sums of sizes, exact modulo 2^64 whatever the order. */
    uint64_t *diff = calloc((size_t)T + 1, sizeof *diff * OM_NBD);
    if (!diff)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct bd_block *x = &v[i];
        if (x->birth <= M && x->death > M) {
            b->at_peak[x->cls] += x->size;
            b->blocks_at_peak[x->cls]++;
        }
        if (x->birth >= q0 && x->birth < qe)
            b->born[x->cls] += x->size;
        uint64_t from = x->birth > q0 ? x->birth : q0, to = x->death < qe ? x->death : qe;
        if (from < to) {
            diff[(from - q0) * OM_NBD + (size_t)x->cls] += x->size;
            diff[(to - q0) * OM_NBD + (size_t)x->cls] -= x->size;
        }
    }
    uint64_t level[OM_NBD] = {0};
    for (uint64_t q = 0; q < T; q++)
        for (int c = 0; c < OM_NBD; c++) {
            level[c] += diff[q * OM_NBD + (size_t)c];
            if (level[c] > b->max_live[c])
                b->max_live[c] = level[c];
        }
    free(diff);
    /* What the records cannot show (requests not recorded) is other. */
    uint64_t seen = 0;
    for (int c = 0; c < OM_NBD; c++)
        seen += b->at_peak[c];
    if (b->peak_bytes > seen)
        b->at_peak[OM_BD_OTHER] += b->peak_bytes - seen;
    return 0;
}

int om_breakdown(const struct om_report *r, struct om_breakdown *b)
{
    memset(b, 0, sizeof *b);
    if (!r->have_resident) {
        b->why = "the report has no \"resident\" section (optmem before 2026-11-26 wrote it, or it "
                 "was read from a PyTorch snapshot)";
        return 0;
    }
    if (!r->found || r->period == OM_NO_VALUE || r->period == 0) {
        b->why = "no steady iterations were found";
        return 0;
    }
    if (find_cycle(r, b) != 0)
        return 0;
    size_t n = r->nresident + r->nlife;
    struct bd_block *v = calloc(n ? n : 1, sizeof *v);
    struct bd_block **grads = calloc(n ? n : 1, sizeof *grads);
    struct bd_block **res = calloc(n ? n : 1, sizeof *res);
    int rc = -ENOMEM;
    if (!v || !grads || !res)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < r->nresident; i++) {
        const struct om_rresident *x = &r->resident[i];
        v[k++] = (struct bd_block){x->site, x->size, x->birth,
                                   x->death == OM_NO_VALUE ? NEVER : x->death, OM_BD_OTHER};
    }
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *x = &r->life[i];
        if (x->site != OM_NO_VALUE)
            v[k++] = (struct bd_block){x->site, x->size, x->birth,
                                       x->death == OM_NO_VALUE ? NEVER : x->death, OM_BD_OTHER};
    }
    rc = classify(v, k, grads, res, b);
    if (rc == 0)
        rc = tally(v, k, b);
    if (rc != 0)
        goto out;
    b->found = true;
    b->complete = r->resident_complete;
out:
    free(v);
    free(grads);
    free(res);
    return rc;
}
