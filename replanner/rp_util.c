/* Replanner helpers with no malloc: scratch memory, sort, clock, branch and bound rankings. */
#include "rp_internal.h"

#include <string.h>
#include <time.h>

struct rp_chunk {
    struct rp_chunk *next;
    size_t size;
    /* keeps what follows aligned for any scalar */
    uint64_t pad;
};

void *rp_alloc(rp_mem *m, size_t count, size_t elem)
{
    struct rp_chunk *c;
    size_t n;

    if (elem && count > (SIZE_MAX - sizeof(*c)) / elem)
        return NULL;
    n = sizeof(*c) + count * elem;
    if (!(c = m->a->alloc(m->a->ctx, n)))
        return NULL;
    memset(c, 0, n);
    c->size = n;
    c->next = m->head;
    m->head = c;
    return c + 1;
}

void rp_mem_free_all(rp_mem *m)
{
    while (m->head) {
        struct rp_chunk *c = m->head;
        m->head = c->next;
        m->a->release(m->a->ctx, c, c->size);
    }
}

static int kv_less(const rp_kv *a, const rp_kv *b)
{
    if (a->k1 != b->k1)
        return a->k1 < b->k1;
    if (a->k2 != b->k2)
        return a->k2 < b->k2;
    return a->v < b->v;
}

static void sift(rp_kv *a, size_t root, size_t n)
{
    for (;;) {
        size_t c = 2 * root + 1;
        rp_kv t;

        if (c >= n)
            return;
        if (c + 1 < n && kv_less(&a[c], &a[c + 1]))
            c++;
        if (!kv_less(&a[root], &a[c]))
            return;
        t = a[root];
        a[root] = a[c];
        a[c] = t;
        root = c;
    }
}

/* Heapsort: glibc's qsort may call malloc, which the preload library must not reach. */
void rp_sort_kv(rp_kv *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift(a, i, n);
    for (size_t end = n; end > 1; end--) {
        rp_kv t = a[0];
        a[0] = a[end - 1];
        a[end - 1] = t;
        sift(a, 0, end - 1);
    }
}

uint64_t rp_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t rp_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Static rankings, in MiniMalloc's letters, larger first: A area, C sections spanned, L birth,
 * O blocks met, T load of the busiest section spanned, U death, W length, Z size; a lower
 * case letter ranks smaller first. The time to a plan swings by orders of magnitude with the
 * ranking, and each instance tends to have one that works at once, so several are tried
 * round robin (MiniMalloc tries the first three). The others were picked on the MiniMalloc
 * set: UW solved A, lZ B, Tl D at its best known peak, each in under 10k nodes, where the
 * first three needed 40k to 1M nodes or failed.
 */
static const char *const portfolio[RP_NRANKINGS] = {"WA", "TA", "TW", "UW", "lZ", "Tl", "OA", "CA"};

static uint64_t rank_key(const rp_inst *in, const uint32_t *ov_start, uint32_t k, char c)
{
    uint32_t i = in->mov[k];
    const om_rp_block *b = &in->b[i];
    uint64_t w = b->upper - b->lower;

    switch (c) {
    case 'A':
        return b->size > UINT64_MAX / w ? UINT64_MAX : b->size * w;
    case 'C':
        return in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
    case 'L':
        return b->lower;
    case 'O':
        return ov_start[k + 1] - ov_start[k];
    case 'T':
        return in->secmax[k];
    case 'U':
        return b->upper;
    case 'W':
        return w;
    case 'Z':
        return b->size;
    default: /* lower case: smaller first */
        return UINT64_MAX - rank_key(in, ov_start, k, (char)(c - 'a' + 'A'));
    }
}

/*
 * Ranking h of the portfolio (out[k]: rank of movable block k; ov_start: the branch and
 * bound's list of blocks each one meets, for O). With rng, the first key is scaled by a random
 * factor in [1 - noise/2, 1 + noise/2): restarts then explore other orders near the static ones.
 */
void rp_rank(const rp_inst *in, const uint32_t *ov_start, int h, uint64_t *rng, double noise,
             rp_kv *kv, uint32_t *out)
{
    for (uint32_t k = 0; k < in->nm; k++) {
        uint64_t k1 = rank_key(in, ov_start, k, portfolio[h][0]);

        if (rng) {
            double f = 1.0 + noise * ((double)(rp_rand(rng) >> 11) / 9007199254740992.0 - 0.5);
            double v = (double)k1 * f;
            k1 = v >= 1.8e19 ? UINT64_MAX - 1 : (uint64_t)v;
        }
        kv[k].k1 = UINT64_MAX - k1;
        kv[k].k2 = UINT64_MAX - rank_key(in, ov_start, k, portfolio[h][1]);
        kv[k].v = k;
    }
    rp_sort_kv(kv, in->nm);
    for (uint32_t r = 0; r < in->nm; r++)
        out[kv[r].v] = r;
}
