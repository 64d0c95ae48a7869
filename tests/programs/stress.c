/* Multithreaded allocator stress: random sizes from 1 byte to 64 MiB, random alignments,
 * realloc chains, frees from other threads; every block's contents are checked before it
 * is freed. Prints a summary that must not depend on the allocator. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define SLOTS 24
#define EXCHANGE 64

struct block {
    unsigned char *p;
    size_t size;
    uint32_t seed; /* the pattern's seed: byte i holds pattern(seed, i) */
};

static struct block exchange[EXCHANGE];
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long corruptions, operations;
static long ops_per_thread = 6000;

static uint64_t next_random(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)((seed * 2654435761u) ^ (i * 31) ^ (i >> 12));
}

/* Writes or checks the first 64 bytes and one byte in every 64 KiB, and the last byte
 * when with_last is set (a realloc'd prefix has no pattern at its new end). */
static void visit(struct block *b, int write, int with_last)
{
    size_t step = 65536; /* sparse, so that big blocks do not fault every page in */
    for (size_t i = 0; i < b->size; i = (i < 64 ? i + 1 : i + step)) {
        if (write)
            b->p[i] = pattern(b->seed, i);
        else if (b->p[i] != pattern(b->seed, i))
            atomic_fetch_add(&corruptions, 1);
    }
    if (b->size && with_last) {
        size_t last = b->size - 1;
        if (write)
            b->p[last] = pattern(b->seed, last);
        else if (b->p[last] != pattern(b->seed, last))
            atomic_fetch_add(&corruptions, 1);
    }
}

static size_t random_size(uint64_t *rng)
{
    /* The smaller of two log-uniform draws: mostly small blocks, some up to 64 MiB. */
    unsigned a = (unsigned)(next_random(rng) % 27), b = (unsigned)(next_random(rng) % 27);
    unsigned bits = a < b ? a : b;
    size_t size = ((size_t)1 << bits) + next_random(rng) % ((size_t)1 << bits);
    return size > ((size_t)64 << 20) ? (size_t)64 << 20 : size;
}

static void release(struct block *b)
{
    if (!b->p)
        return;
    visit(b, 0, 1);
    if (malloc_usable_size(b->p) < b->size)
        atomic_fetch_add(&corruptions, 1);
    free(b->p);
    b->p = NULL;
}

static void allocate(struct block *b, uint64_t *rng)
{
    size_t size = random_size(rng);
    unsigned kind = (unsigned)(next_random(rng) % 4);
    size_t alignment = (size_t)1 << (3 + next_random(rng) % 14);
    void *p = NULL;
    switch (kind) {
    case 0:
        p = malloc(size);
        break;
    case 1:
        p = calloc(1, size);
        for (size_t i = 0; p && i < size; i += 4096)
            if (((unsigned char *)p)[i])
                atomic_fetch_add(&corruptions, 1);
        break;
    case 2:
        if (posix_memalign(&p, alignment, size) != 0)
            p = NULL;
        if (p && ((uintptr_t)p & (alignment - 1)))
            atomic_fetch_add(&corruptions, 1);
        break;
    default:
        p = aligned_alloc(alignment, size);
        if (p && ((uintptr_t)p & (alignment - 1)))
            atomic_fetch_add(&corruptions, 1);
    }
    if (!p) {
        atomic_fetch_add(&corruptions, 1);
        return;
    }
    b->p = p;
    b->size = size;
    b->seed = (uint32_t)next_random(rng);
    visit(b, 1, 1);
}

/* Grows or shrinks a block; the common prefix must survive. */
static void reallocate(struct block *b, uint64_t *rng)
{
    size_t size = random_size(rng);
    unsigned char *p = realloc(b->p, size);
    if (!p) {
        atomic_fetch_add(&corruptions, 1);
        return;
    }
    struct block kept = {p, size < b->size ? size : b->size, b->seed};
    visit(&kept, 0, 0);
    b->p = p;
    b->size = size;
    visit(b, 1, 1);
}

static void *worker(void *arg)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
    struct block slots[SLOTS] = {{0}};
    for (long op = 0; op < ops_per_thread; op++) {
        struct block *b = &slots[next_random(&rng) % SLOTS];
        unsigned action = (unsigned)(next_random(&rng) % 10);
        if (action < 4) {
            release(b);
            allocate(b, &rng);
        } else if (action < 7 && b->p) {
            reallocate(b, &rng);
        } else if (b->p) { /* swap with the exchange: another thread will free it */
            size_t e = next_random(&rng) % EXCHANGE;
            pthread_mutex_lock(&exchange_lock);
            struct block theirs = exchange[e];
            exchange[e] = *b;
            pthread_mutex_unlock(&exchange_lock);
            *b = theirs;
        }
        atomic_fetch_add(&operations, 1);
    }
    for (int i = 0; i < SLOTS; i++)
        release(&slots[i]);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ops_per_thread = atol(argv[1]);
    pthread_t threads[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < EXCHANGE; i++)
        release(&exchange[i]);
    printf("threads %d operations %ld corruptions %ld\n", THREADS, (long)operations,
           (long)corruptions);
    return corruptions != 0;
}
