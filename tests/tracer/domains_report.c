/* Records a host and a device domain interleaved through the tracer's API, writes the report
 * to argv[1], and prints on stdout (JSON) the figures its own model expects, per domain. */
#include "tracer.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define STEPS 40u
#define MIB (1024u * 1024u)
#define DEVICE_ARENA 0x7e0000000000ull /* a fake device arena: nothing is dereferenced */
#define HOST_BASE 0x550000000000ull

/* Call sites: each block's innermost frame is one of these functions (exported, so that
 * the report names them). */
void host_weights(void);
void host_act(void);
void host_tmp(void);
void host_grad(void);
void gpu_weights(void);
void gpu_act(void);
void gpu_workspace(void);
void gpu_out(void);
void gpu_scratch(void);
void training_loop(void);
void host_weights(void) {}
void host_act(void) {}
void host_tmp(void) {}
void host_grad(void) {}
void gpu_weights(void) {}
void gpu_act(void) {}
void gpu_workspace(void) {}
void gpu_out(void) {}
void gpu_scratch(void) {}
void training_loop(void) {}

struct model {
    const char *name;
    unsigned domain;
    size_t granule; /* usable sizes are sizes rounded up to this */
    uint64_t requests, frees, live, live_blocks, usable, lower_bound, peak_usable;
    unsigned sites;
};

static size_t usable_of(const struct model *m, size_t size)
{
    return (size + m->granule - 1) / m->granule * m->granule;
}

/* A return address inside fn: the report resolves address - 1, which lies in fn. */
static struct om_stack stack_at(void (*fn)(void))
{
    struct om_stack s = {
        .depth = 2,
        .frames = {(void *)((uintptr_t)fn + 1), (void *)((uintptr_t)training_loop + 1)}};
    return s;
}

static void alloc(struct model *m, void (*site)(void), uintptr_t ptr, size_t size)
{
    struct om_stack s = stack_at(site);
    om_tracer_on_alloc(m->domain, (void *)ptr, size, usable_of(m, size), 0, &s, NULL);
    m->requests++;
    m->live += size;
    m->live_blocks++;
    m->usable += usable_of(m, size);
    if (m->live > m->lower_bound)
        m->lower_bound = m->live;
    if (m->usable > m->peak_usable)
        m->peak_usable = m->usable;
}

static int release(struct model *m, uintptr_t ptr, size_t size)
{
    if (om_tracer_on_free(m->domain, (void *)ptr) != 1) {
        fprintf(stderr, "domains_report: %s block %#lx was not live\n", m->name,
                (unsigned long)ptr);
        return -1;
    }
    m->frees++;
    m->live -= size;
    m->live_blocks--;
    m->usable -= usable_of(m, size);
    return 0;
}

/* One iteration of each domain is a sequence of phases; the two sequences are interleaved
 * differently every step, as a host loop and its device work would be. */
static int host_phase(struct model *h, unsigned k)
{
    switch (k) {
    case 0:
        alloc(h, host_act, HOST_BASE + 0x100000, 64 * 1024);
        return 0;
    case 1:
        alloc(h, host_tmp, HOST_BASE + 0x200000, 16 * 1024);
        return release(h, HOST_BASE + 0x200000, 16 * 1024);
    default:
        alloc(h, host_grad, HOST_BASE + 0x300000, 32 * 1024);
        if (release(h, HOST_BASE + 0x100000, 64 * 1024) != 0)
            return -1;
        return release(h, HOST_BASE + 0x300000, 32 * 1024);
    }
}

static int gpu_phase(struct model *g, unsigned k)
{
    switch (k) {
    case 0:
        alloc(g, gpu_act, DEVICE_ARENA + 64 * MIB, 8 * MIB);
        return 0;
    case 1:
        alloc(g, gpu_workspace, DEVICE_ARENA + 72 * MIB, 2 * MIB);
        return release(g, DEVICE_ARENA + 72 * MIB, 2 * MIB);
    case 2:
        alloc(g, gpu_out, DEVICE_ARENA + 74 * MIB, 3 * MIB + 4096);
        return 0;
    default:
        alloc(g, gpu_scratch, DEVICE_ARENA + 78 * MIB, 1 * MIB);
        if (release(g, DEVICE_ARENA + 78 * MIB, 1 * MIB) != 0 ||
            release(g, DEVICE_ARENA + 64 * MIB, 8 * MIB) != 0)
            return -1;
        return release(g, DEVICE_ARENA + 74 * MIB, 3 * MIB + 4096);
    }
}

static void print_model(const struct model *m, unsigned period, const char *tail)
{
    printf("\"%s\": {\"managed_requests\": %llu, \"managed_frees\": %llu, \"live_blocks\": %llu, "
           "\"live_bytes\": %llu, \"call_sites\": %u, \"lower_bound_bytes\": %llu, "
           "\"peak_live_bytes\": %llu, \"period_requests\": %u, \"marks\": %u%s}",
           m->name, (unsigned long long)m->requests, (unsigned long long)m->frees,
           (unsigned long long)m->live_blocks, (unsigned long long)m->live, m->sites,
           (unsigned long long)m->lower_bound, (unsigned long long)m->peak_usable, period, STEPS,
           tail);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: domains_report REPORT.json\n");
        return 2;
    }
    struct om_tracer_options opt = {.min_bytes = 4096, .stack_depth = 4, .mode_name = "plan"};
    int rc = om_tracer_init(&opt);
    int dev = rc == 0 ? om_tracer_domain_open("cuda:0") : rc;
    if (dev < 0) {
        fprintf(stderr, "domains_report: %s\n", strerror(-dev));
        return 1;
    }
    struct model host = {"cpu", OM_TRACER_HOST, 48, .sites = 4};
    struct model gpu = {"cuda:0", (unsigned)dev, 2 * MIB, .sites = 5};
    om_tracer_set_arena((unsigned)dev, (void *)DEVICE_ARENA, 1024 * MIB);
    alloc(&host, host_weights, HOST_BASE, 1 * MIB);
    alloc(&gpu, gpu_weights, DEVICE_ARENA, 64 * MIB);
    uint64_t x = 88172645463325252ull;
    for (unsigned step = 0; step < STEPS; step++) {
        unsigned hk = 0, gk = 0;
        while (hk < 3 || gk < 4) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int host_next = gk == 4 || (hk < 3 && x % 3 == 0);
            rc = host_next ? host_phase(&host, hk++) : gpu_phase(&gpu, gk++);
            if (rc != 0)
                return 1;
        }
        om_tracer_step();
    }
    struct om_serving_stats served = {.serving_requests = 100,
                                      .hits = 85,
                                      .misses = 5,
                                      .served_from_plan = 90,
                                      .fallbacks = 10,
                                      .plans = 1,
                                      .plan_slots = 4,
                                      .plan_peak_bytes = 79 * MIB,
                                      .plan_lower_bound_bytes = 78 * MIB,
                                      .retired_blocks = 3};
    om_tracer_set_serving((unsigned)dev, &served);
    rc = om_tracer_dump(argv[1]);
    if (rc != 0) {
        fprintf(stderr, "domains_report: dump: %s\n", strerror(-rc));
        return 1;
    }
    char tail[256];
    snprintf(tail, sizeof tail,
             ", \"serving\": {\"serving_requests\": %llu, \"served_from_plan\": %llu, "
             "\"retired_blocks\": %llu}",
             (unsigned long long)served.serving_requests,
             (unsigned long long)served.served_from_plan,
             (unsigned long long)served.retired_blocks);
    fputs("{", stdout);
    print_model(&host, 3, "");
    fputs(", ", stdout);
    print_model(&gpu, 4, tail);
    fputs("}\n", stdout);
    return 0;
}
