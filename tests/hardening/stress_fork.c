/* Hardening stress: a training-like loop on the main thread (so that plan mode serves it)
 * while helper threads malloc, calloc, realloc and free at random, a fork mid-run whose
 * child goes on training, and every block's bytes checked before it is freed. Prints a
 * summary that must not depend on the allocator. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELPERS 3
#define SLOTS 32
#define LAYERS 6

static atomic_long corruptions;
static atomic_int stop;

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)((seed * 2654435761u) ^ (i * 31) ^ (i >> 9));
}

/* Every 61st byte and the last: enough to see a block written over by another. */
static void fill(unsigned char *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i += 61)
        p[i] = pattern(seed, i);
    if (n)
        p[n - 1] = pattern(seed, n - 1);
}

static void check(const unsigned char *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i += 61)
        if (p[i] != pattern(seed, i))
            atomic_fetch_add(&corruptions, 1);
    if (n && p[n - 1] != pattern(seed, n - 1))
        atomic_fetch_add(&corruptions, 1);
}

struct slot {
    unsigned char *p;
    size_t n;
    uint32_t seed;
};

/* Random traffic, also of managed sizes, that the plan never saw. */
static void *helper(void *arg)
{
    uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    struct slot s[SLOTS] = {{0}};
    while (!atomic_load(&stop)) {
        struct slot *b = &s[next_random(&rng) % SLOTS];
        size_t n = 16 + next_random(&rng) % (1u << (8 + next_random(&rng) % 12));
        uint32_t seed = (uint32_t)next_random(&rng);
        switch (next_random(&rng) % 4) {
        case 0: /* realloc keeps the old prefix */
            if (b->p) {
                check(b->p, b->n, b->seed);
                unsigned char *q = realloc(b->p, n);
                if (!q)
                    abort();
                size_t keep = n < b->n ? n : b->n;
                for (size_t i = 0; i < keep; i += 61)
                    if (q[i] != pattern(b->seed, i))
                        atomic_fetch_add(&corruptions, 1);
                b->p = q;
                b->n = n;
                fill(q, n, b->seed);
                break;
            }
            /* fall through */
        case 1: /* calloc must be zero, also in reused arena space */
            free(b->p ? (check(b->p, b->n, b->seed), b->p) : NULL);
            b->p = calloc(1, n);
            if (!b->p)
                abort();
            for (size_t i = 0; i < n; i += 61)
                if (b->p[i])
                    atomic_fetch_add(&corruptions, 1);
            break;
        default:
            if (b->p)
                check(b->p, b->n, b->seed);
            free(b->p);
            b->p = malloc(n);
            if (!b->p)
                abort();
            break;
        }
        b->n = n;
        b->seed = seed;
        fill(b->p, n, seed);
    }
    for (int i = 0; i < SLOTS; i++) {
        if (s[i].p)
            check(s[i].p, s[i].n, s[i].seed);
        free(s[i].p);
    }
    return NULL;
}

/* One training step: activations kept for a backward pass, a temporary per layer. */
static void train(long iterations, uint32_t salt)
{
    static const size_t sizes[LAYERS] = {65536, 131072, 8192, 262144, 16384, 98304};
    for (long it = 0; it < iterations; it++) {
        unsigned char *act[LAYERS];
        for (int l = 0; l < LAYERS; l++) {
            act[l] = malloc(sizes[l]);
            unsigned char *tmp = calloc(1, sizes[l] / 2);
            if (!act[l] || !tmp)
                abort();
            if (tmp[sizes[l] / 2 - 1])
                atomic_fetch_add(&corruptions, 1);
            fill(act[l], sizes[l], salt + (uint32_t)l);
            free(tmp);
        }
        for (int l = LAYERS; l-- > 0;) {
            check(act[l], sizes[l], salt + (uint32_t)l);
            free(act[l]);
        }
    }
}

static void run_helpers(pthread_t *t)
{
    for (uintptr_t i = 0; i < HELPERS; i++)
        if (pthread_create(&t[i], NULL, helper, (void *)(i + 1)) != 0)
            abort();
}

static void join_helpers(pthread_t *t)
{
    atomic_store(&stop, 1);
    for (int i = 0; i < HELPERS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop, 0);
}

int main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 200;
    pthread_t t[HELPERS];
    run_helpers(t);
    train(iterations / 2, 7);
    fflush(stdout);
    /* Fork with the helpers running: the child must find every lock usable. */
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        train(iterations / 4, 11);
        run_helpers(t);
        train(iterations / 4, 13);
        join_helpers(t);
        printf("child: corruptions %ld\n", atomic_load(&corruptions));
        fflush(stdout);
        exit(atomic_load(&corruptions) ? 1 : 0); /* exit, not _exit: the child writes its report */
    }
    train(iterations / 2, 17);
    join_helpers(t);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 1;
    printf("parent: iterations %ld corruptions %ld child exit %d\n", iterations,
           atomic_load(&corruptions), WEXITSTATUS(status));
    return atomic_load(&corruptions) || WEXITSTATUS(status) ? 1 : 0;
}
