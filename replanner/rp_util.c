/* Replanner helpers with no malloc: scratch memory, sort, a max tree, clock, branch and bound
 * rankings. */
#include "rp_internal.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

struct rp_chunk {
    struct rp_chunk *next;
    size_t size;
    /* keeps what follows aligned for any scalar */
    uint64_t pad;
};

void *rp_alloc_raw(rp_mem *m, size_t count, size_t elem)
{
    struct rp_chunk *c;
    size_t n;

    if (elem && count > (SIZE_MAX - sizeof(*c)) / elem)
        return NULL;
    n = sizeof(*c) + count * elem;
    if (!(c = m->a->alloc(m->a->ctx, n)))
        return NULL;
    c->size = n;
    c->next = m->head;
    m->head = c;
    return c + 1;
}

void *rp_alloc(rp_mem *m, size_t count, size_t elem)
{
    void *p = rp_alloc_raw(m, count, elem);

    if (p)
        memset(p, 0, count * elem);
    return p;
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
    if (a->k3 != b->k3)
        return a->k3 < b->k3;
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

static void heapsort_kv(rp_kv *a, size_t n)
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

static void swap_kv(rp_kv *a, rp_kv *b)
{
    rp_kv t = *a;
    *a = *b;
    *b = t;
}

/*
 * Introsort: quicksort on the median of three, insertion sort for short ranges, heapsort
 * past a depth of 2 log n (so n log n at worst). In place: glibc's qsort may call malloc,
 * which the preload library must not reach. Heapsort alone took most of the setup of
 * 50,000-block plans: it jumps across the whole array at every step. Keys are unique (v
 * breaks ties), so the order is the same whatever the sort.
 */
static void introsort(rp_kv *a, size_t n, int depth)
{
    while (n > 16) {
        size_t i = 0, j = n - 1, mid = n / 2;

        if (depth-- == 0) {
            heapsort_kv(a, n);
            return;
        }
        if (kv_less(&a[mid], &a[0]))
            swap_kv(&a[mid], &a[0]);
        if (kv_less(&a[n - 1], &a[0]))
            swap_kv(&a[n - 1], &a[0]);
        if (kv_less(&a[n - 1], &a[mid]))
            swap_kv(&a[n - 1], &a[mid]);
        /* a[0] <= pivot <= a[n - 1]: both scans stop inside the range. */
        rp_kv pivot = a[mid];
        for (;;) {
            while (kv_less(&a[i], &pivot))
                i++;
            while (kv_less(&pivot, &a[j]))
                j--;
            if (i >= j)
                break;
            swap_kv(&a[i++], &a[j--]);
        }
        /* [0, j] <= pivot <= [j + 1, n): recurse into the smaller side, loop on the larger. */
        if (j + 1 < n - j - 1) {
            introsort(a, j + 1, depth);
            a += j + 1;
            n -= j + 1;
        } else {
            introsort(a + j + 1, n - j - 1, depth);
            n = j + 1;
        }
    }
    for (size_t x = 1; x < n; x++) {
        rp_kv t = a[x];
        size_t y = x;

        for (; y > 0 && kv_less(&t, &a[y - 1]); y--)
            a[y] = a[y - 1];
        a[y] = t;
    }
}

void rp_sort_kv(rp_kv *a, size_t n)
{
    int depth = 0;

    for (size_t m = n; m > 1; m >>= 1)
        depth += 2;
    introsort(a, n, depth);
}

/*
 * Least significant digit first, a byte at a time, skipping the bytes that are the same in
 * every record: the setup's sorts of the sections' ends and of greedy by size's order have
 * a few varying bytes, where introsort's comparisons of four keys took milliseconds on
 * 60,000 blocks. Stable, so the order is the introsort's.
 */
int rp_sort_kv_mem(rp_kv *a, size_t n, rp_mem *m)
{
    rp_kv *tmp, *src = a, *dst;
    uint64_t vary[4] = {0, 0, 0, 0}; /* v, k3, k2, k1: the bits that differ somewhere */
    uint32_t cnt[256];
    int in_v_order = 1; /* then the passes over v are not needed: the sort is stable */

    if (n < 2048 || n > UINT32_MAX) {
        rp_sort_kv(a, n);
        return 0;
    }
    if (!(tmp = rp_alloc_raw(m, n, sizeof(*tmp)))) /* every pass writes it whole */
        return -ENOMEM;
    for (size_t x = 1; x < n; x++) {
        in_v_order &= a[x].v >= a[x - 1].v;
        vary[0] |= a[x].v ^ a[0].v;
        vary[1] |= a[x].k3 ^ a[0].k3;
        vary[2] |= a[x].k2 ^ a[0].k2;
        vary[3] |= a[x].k1 ^ a[0].k1;
    }
    dst = tmp;
    for (unsigned d = 0; d < 28; d++) {
        unsigned w = d < 4 ? 0 : 1 + (d - 4) / 8, sh = d < 4 ? 8 * d : 8 * ((d - 4) % 8);
        /* the key word of the pass, by its offset in the record */
        size_t at = w == 0   ? offsetof(rp_kv, v)
                    : w == 1 ? offsetof(rp_kv, k3)
                    : w == 2 ? offsetof(rp_kv, k2)
                             : offsetof(rp_kv, k1);
        uint32_t sum = 0;

#define RP_DIGIT(r)                                                                                \
    (unsigned)((w == 0 ? (uint64_t)(r)->v                                                          \
                       : *(const uint64_t *)(const void *)((const char *)(r) + at)) >>             \
                   sh &                                                                            \
               0xff)
        if (!((vary[w] >> sh) & 0xff) || (w == 0 && in_v_order))
            continue; /* the same byte everywhere, or v in order already */
        memset(cnt, 0, sizeof(cnt));
        for (size_t x = 0; x < n; x++)
            cnt[RP_DIGIT(&src[x])]++;
        for (unsigned y = 0; y < 256; y++) {
            uint32_t t = cnt[y];
            cnt[y] = sum;
            sum += t;
        }
        for (size_t x = 0; x < n; x++)
            dst[cnt[RP_DIGIT(&src[x])]++] = src[x];
#undef RP_DIGIT
        rp_kv *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(*a));
    return 0;
}

int rp_maxtree_init(rp_maxtree *t, rp_mem *m, uint32_t n)
{
    for (t->n = 1; t->n < n; t->n *= 2)
        ;
    t->mx = rp_alloc_raw(m, 2 * (size_t)t->n, sizeof(int64_t));
    t->add = rp_alloc_raw(m, 2 * (size_t)t->n, sizeof(int64_t));
    if (!t->mx || !t->add)
        return -ENOMEM;
    memset(t->mx, 0, 2 * (size_t)t->n * sizeof(int64_t));
    memset(t->add, 0, 2 * (size_t)t->n * sizeof(int64_t));
    return 0;
}

void rp_maxtree_build(rp_maxtree *t, const uint64_t *v, uint32_t n)
{
    memset(t->add, 0, 2 * (size_t)t->n * sizeof(int64_t));
    for (uint32_t i = 0; i < t->n; i++)
        t->mx[t->n + i] = i < n ? (int64_t)v[i] : 0;
    for (uint32_t i = t->n; i-- > 1;)
        t->mx[i] = (t->mx[2 * i] > t->mx[2 * i + 1] ? t->mx[2 * i] : t->mx[2 * i + 1]);
}

static void tree_add(rp_maxtree *t, size_t node, uint32_t nlo, uint32_t nhi, uint32_t lo,
                     uint32_t hi, int64_t d)
{
    uint32_t mid = nlo + (nhi - nlo) / 2;
    int64_t a, b;

    if (hi <= nlo || nhi <= lo)
        return;
    if (lo <= nlo && nhi <= hi) {
        t->mx[node] += d;
        t->add[node] += d;
        return;
    }
    tree_add(t, 2 * node, nlo, mid, lo, hi, d);
    tree_add(t, 2 * node + 1, mid, nhi, lo, hi, d);
    a = t->mx[2 * node];
    b = t->mx[2 * node + 1];
    t->mx[node] = (a > b ? a : b) + t->add[node];
}

void rp_maxtree_add(rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t d)
{
    if (lo < hi)
        tree_add(t, 1, 0, t->n, lo, hi, d);
}

static int64_t tree_max(const rp_maxtree *t, size_t node, uint32_t nlo, uint32_t nhi, uint32_t lo,
                        uint32_t hi)
{
    uint32_t mid = nlo + (nhi - nlo) / 2;
    int64_t a, b;

    if (lo <= nlo && nhi <= hi)
        return t->mx[node];
    if (hi <= mid)
        return tree_max(t, 2 * node, nlo, mid, lo, hi) + t->add[node];
    if (lo >= mid)
        return tree_max(t, 2 * node + 1, mid, nhi, lo, hi) + t->add[node];
    a = tree_max(t, 2 * node, nlo, mid, lo, hi);
    b = tree_max(t, 2 * node + 1, mid, nhi, lo, hi);
    return (a > b ? a : b) + t->add[node];
}

int64_t rp_maxtree_max(const rp_maxtree *t, uint32_t lo, uint32_t hi)
{
    return tree_max(t, 1, 0, t->n, lo, hi);
}

/* acc: what the node's ancestors add to every value below them. */
static uint32_t tree_first_above(const rp_maxtree *t, size_t node, uint32_t nlo, uint32_t nhi,
                                 uint32_t lo, uint32_t hi, int64_t thr, int64_t acc)
{
    uint32_t mid = nlo + (nhi - nlo) / 2, r;

    if (hi <= nlo || nhi <= lo || t->mx[node] + acc <= thr)
        return UINT32_MAX;
    if (nhi - nlo == 1)
        return nlo;
    acc += t->add[node];
    r = tree_first_above(t, 2 * node, nlo, mid, lo, hi, thr, acc);
    return r != UINT32_MAX ? r : tree_first_above(t, 2 * node + 1, mid, nhi, lo, hi, thr, acc);
}

uint32_t rp_maxtree_first_above(const rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t thr)
{
    uint32_t r = lo < hi ? tree_first_above(t, 1, 0, t->n, lo, hi, thr, 0) : UINT32_MAX;

    return r < hi ? r : hi;
}

static int tree_each_above(const rp_maxtree *t, size_t node, uint32_t nlo, uint32_t nhi,
                           uint32_t lo, uint32_t hi, int64_t thr, int64_t acc,
                           int (*fn)(void *, uint32_t), void *ctx)
{
    uint32_t mid = nlo + (nhi - nlo) / 2;

    if (hi <= nlo || nhi <= lo || t->mx[node] + acc <= thr)
        return 1;
    if (nhi - nlo == 1)
        return fn(ctx, nlo);
    acc += t->add[node];
    return tree_each_above(t, 2 * node, nlo, mid, lo, hi, thr, acc, fn, ctx) &&
           tree_each_above(t, 2 * node + 1, mid, nhi, lo, hi, thr, acc, fn, ctx);
}

int rp_maxtree_each_above(const rp_maxtree *t, uint32_t lo, uint32_t hi, int64_t thr,
                          int (*fn)(void *, uint32_t), void *ctx)
{
    return lo >= hi || tree_each_above(t, 1, 0, t->n, lo, hi, thr, 0, fn, ctx);
}

uint64_t rp_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t rp_luby(uint64_t i)
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

uint64_t rp_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Ranking keys, in MiniMalloc's letters, larger first: A area, C sections spanned, L birth,
 * O blocks met, T the most unplaced bytes in a section the block spans, U death, W length,
 * Z size; a lower case letter ranks smaller first.
 */
static uint64_t rank_key(const rp_inst *in, const uint32_t *deg, const uint64_t *total,
                         const rp_maxtree *tree, uint32_t k, char c)
{
    uint32_t i = in->mov[k];
    const om_rp_block *b = &in->b[i];
    uint64_t w = b->upper - b->lower, mx = 0;

    switch (c) {
    case 'A':
        return b->size > UINT64_MAX / w ? UINT64_MAX : b->size * w;
    case 'C':
        return in->s1[i] - in->s0[i] + in->w1[i] - in->w0[i];
    case 'L':
        return b->lower;
    case 'O':
        return deg[k];
    case 'T':
        if (!total)
            return in->secmax[k];
        if (tree) { /* a long-lived block spans thousands of sections */
            int64_t a = rp_maxtree_max(tree, in->s0[i], in->s1[i]);
            int64_t e = in->w0[i] < in->w1[i] ? rp_maxtree_max(tree, in->w0[i], in->w1[i]) : 0;
            return (uint64_t)(a > e ? a : e);
        }
        for (uint32_t x = in->s0[i]; x < in->s1[i]; x++)
            mx = total[x] > mx ? total[x] : mx;
        for (uint32_t x = in->w0[i]; x < in->w1[i]; x++)
            mx = total[x] > mx ? total[x] : mx;
        return mx;
    case 'U':
        return b->upper;
    case 'W':
        return w;
    case 'Z':
        return b->size;
    default: /* lower case: smaller first */
        return UINT64_MAX - rank_key(in, deg, total, tree, k, (char)(c - 'a' + 'A'));
    }
}

void rp_rank(const rp_inst *in, const uint32_t *deg, const char *keys, const uint64_t *total,
             const rp_maxtree *tree, const uint32_t *members, uint32_t count, const double *factor,
             rp_kv *kv, uint32_t *out)
{
    if (!members)
        count = in->nm;
    for (uint32_t x = 0; x < count; x++) {
        uint32_t k = members ? members[x] : x;
        uint64_t key[3] = {0, 0, 0};

        for (int j = 0; j < 3 && keys[j]; j++)
            key[j] = UINT64_MAX - rank_key(in, deg, total, tree, k, keys[j]);
        if (factor) {
            /* Scale the value itself, not its complement for a lower case letter. */
            int up = keys[0] >= 'A' && keys[0] <= 'Z';
            double v = (double)(up ? UINT64_MAX - key[0] : key[0]) * factor[k];
            uint64_t s = v >= 1.8e19 ? UINT64_MAX - 1 : (uint64_t)v;
            key[0] = up ? UINT64_MAX - s : s;
        }
        kv[x].k1 = key[0];
        kv[x].k2 = key[1];
        kv[x].k3 = key[2];
        kv[x].v = k;
    }
    rp_sort_kv(kv, count);
    for (uint32_t r = 0; r < count; r++)
        out[kv[r].v] = r;
}
