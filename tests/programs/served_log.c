/* A training loop whose report must not depend on how plan mode serves it (tests/served_log.py):
 * three call sites, blocks that die within their iteration, in the next one, on another
 * thread, and requests of that thread between the loop's, all in one order in every run. */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Through volatile pointers, so that the compiler neither pairs up nor moves requests. */
static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;

/* Not static, and the program exports its symbols: the report names these frames. */
#define SITE(name)                                                                                 \
    void *name(size_t n);                                                                          \
    __attribute__((noinline)) void *name(size_t n)                                                 \
    {                                                                                              \
        void *p = malloc_fn(n);                                                                    \
        __asm__ volatile("" ::"r"(p) : "memory");                                                  \
        return p;                                                                                  \
    }
SITE(served_log_site_a)
SITE(served_log_site_b)
SITE(served_log_site_c)
SITE(served_log_worker_site)

/* The worker frees the block it is handed, and every other time makes and frees a request of
 * its own; the loop waits for it, so that the order of all calls is the same in every run. */
static sem_t go, done;
static void *handed;
static int stop;

static void *worker(void *arg)
{
    (void)arg;
    for (unsigned k = 0;; k++) {
        sem_wait(&go);
        if (stop)
            break;
        free_fn(handed);
        if (k % 2) {
            unsigned char *own = served_log_worker_site(40 << 10);
            if (own)
                own[0] = 1;
            free_fn(own);
        }
        sem_post(&done);
    }
    return NULL;
}

static void hand_over(void *p)
{
    handed = p;
    sem_post(&go);
    sem_wait(&done);
}

#define PER 12 /* requests of one iteration */

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: %s ITERATIONS MID_REPORT\n", argv[0]);
        return 1;
    }
    int iterations = atoi(argv[1]);
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "optmem_dump");
    pthread_t t;
    if (sem_init(&go, 0, 0) || sem_init(&done, 0, 0) || pthread_create(&t, NULL, worker, NULL)) {
        fprintf(stderr, "served_log: cannot start the worker\n");
        return 1;
    }
    unsigned char *kept = NULL; /* one block of each iteration dies in the next */
    for (int it = 0; it < iterations; it++) {
        unsigned char *p[PER];
        for (int k = 0; k < PER; k++) {
            size_t n = (size_t)(k % 5 + 1) * (24 << 10);
            p[k] = k % 3 == 0   ? served_log_site_a(n)
                   : k % 3 == 1 ? served_log_site_b(n)
                                : served_log_site_c(n + 4096);
            if (!p[k]) {
                fprintf(stderr, "served_log: out of memory\n");
                return 1;
            }
            memset(p[k], k, 64);
            if (k == 4) /* freed while the iteration goes on */
                free_fn(p[1]);
        }
        if (kept)
            free_fn(kept);
        kept = p[PER - 1];
        hand_over(p[5]);
        for (int k = PER - 2; k >= 0; k--)
            if (k != 1 && k != 5)
                free_fn(p[k]);
        if (it == iterations / 2 && dump && dump(argv[2]) != 0) {
            fprintf(stderr, "served_log: optmem_dump(%s) failed\n", argv[2]);
            return 1;
        }
    }
    free_fn(kept);
    stop = 1;
    sem_post(&go);
    pthread_join(t, NULL);
    return 0;
}
