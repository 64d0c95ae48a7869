/* Replanner helpers with no malloc: scratch memory on the caller's allocator, sort, clock. */
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
