/* ThreadSanitizer test of the tracer: births, deaths, lookups, steps and dumps from several
 * threads at once, in the host domain and a device domain opened while they run. */
#include "tracer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 3000
#define LIVE 16

static char report_path[64];

/* Distinct call sites, so that interning runs concurrently too. */
static __attribute__((noinline)) void record(unsigned domain, void *p, size_t size)
{
    struct om_stack stack;
    struct om_alloc_info info;
    om_stack_capture(&stack, 8, 0);
    om_tracer_on_alloc(domain, p, size, size, 0, &stack, &info);
}

static __attribute__((noinline)) void record_other(unsigned domain, void *p, size_t size)
{
    record(domain, p, size);
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    /* Even threads record on the host, odd ones in a device domain they all open. */
    int opened = (seed & 1) ? om_tracer_domain_open("cuda:0") : (int)OM_TRACER_HOST;
    if (opened < 0) {
        fprintf(stderr, "tsan_tracer: domain: %s\n", strerror(-opened));
        exit(1);
    }
    unsigned domain = (unsigned)opened;
    void *live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        int k = r % LIVE;
        if (live[k]) {
            if (om_tracer_block_size(domain, live[k]) != sizes[k] ||
                om_tracer_on_free(domain, live[k]) != 1) {
                fprintf(stderr, "tsan_tracer: block %p lost\n", live[k]);
                exit(1);
            }
            free(live[k]);
        }
        sizes[k] = 4096 + (size_t)(rand_r(&seed) % 8) * 4096;
        live[k] = malloc(sizes[k]);
        if (!live[k])
            exit(1);
        if (k & 1)
            record(domain, live[k], sizes[k]);
        else
            record_other(domain, live[k], sizes[k]);
        if (k == LIVE - 1)
            (void)om_tracer_on_cycle_thread(domain);
    }
    for (int k = 0; k < LIVE; k++) {
        if (live[k]) {
            om_tracer_on_free(domain, live[k]);
            free(live[k]);
        }
    }
    return NULL;
}

/* Steps, serving statistics and reports while the workers run. */
static void *observer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20; i++) {
        om_tracer_step();
        struct om_serving_stats st = {.serving_requests = (uint64_t)i, .hits = (uint64_t)i};
        om_tracer_set_serving(OM_TRACER_HOST, &st);
        int device = om_tracer_domain_open("cuda:0");
        if (device > 0)
            om_tracer_set_serving((unsigned)device, &st);
        int rc = om_tracer_dump(report_path);
        if (rc != 0) {
            fprintf(stderr, "tsan_tracer: dump: %s\n", strerror(-rc));
            exit(1);
        }
        usleep(1000);
    }
    return NULL;
}

int main(void)
{
    snprintf(report_path, sizeof report_path, "/tmp/optmem-tsan-%d.json", (int)getpid());
    struct om_tracer_options opt = {.min_bytes = 4096, .stack_depth = 8, .mode_name = "trace"};
    int rc = om_tracer_init(&opt);
    if (rc != 0) {
        fprintf(stderr, "tsan_tracer: init: %s\n", strerror(-rc));
        return 1;
    }
    pthread_t t[THREADS + 1];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    pthread_create(&t[THREADS], NULL, observer, NULL);
    for (int i = 0; i <= THREADS; i++)
        pthread_join(t[i], NULL);
    rc = om_tracer_dump(report_path);
    unlink(report_path);
    if (rc != 0)
        return 1;
    printf("tsan_tracer: %d threads, %d rounds each: ok\n", THREADS, ROUNDS);
    return 0;
}
