/* Plays the CUDA driver and a program for liboptmem_cupti.so: loads it, calls
 * InitializeInjection, then has the fake libcupti deliver the records a file lists. */
#include "cupti_abi.h"
#include "fake_cupti.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fakeCuptiStats_fn fake_stats;

/* Registered before the injection's handler, so it runs after that one's final flush. */
static void print_stats_at_exit(void)
{
    if (!fake_stats)
        return;
    struct fake_cupti_stats s;
    fake_stats(&s);
    printf("fake: %zu buffers requested, %zu completed by the worker, %zu by a flush, "
           "%zu flushes, %zu records written\n",
           s.buffers_requested, s.buffers_by_worker, s.buffers_by_flush, s.flushes,
           s.records_written);
    fflush(stdout);
}

static int resolve(void *lib, const char *name, void *slot)
{
    void *sym = dlsym(lib, name);
    if (!sym)
        return -ENOENT;
    memcpy(slot, &sym, sizeof sym);
    return 0;
}

struct fake_api {
    fakeCuptiEmit_fn emit;
    fakeCuptiSetRecordsPerBuffer_fn set_per_buffer;
    fakeCuptiDrop_fn drop;
    fakeCuptiWaitIdle_fn wait_idle;
};

/* Lines: "buffer N" (records per buffer), "D N" (N records dropped), and
 * "A|R KIND ADDRESS BYTES DEVICE PC" (hex address and pc). 0, -EINVAL or -EIO. */
static int play(FILE *in, const struct fake_api *fake, size_t *delivered, size_t *refused)
{
    char line[256];
    size_t lineno = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        char op;
        unsigned kind, device;
        uint64_t address, bytes, pc;
        size_t n;
        if (sscanf(line, "buffer %zu", &n) == 1) {
            if (fake->set_per_buffer)
                fake->set_per_buffer(n);
        } else if (sscanf(line, "D %zu", &n) == 1) {
            if (fake->drop)
                fake->drop(n);
        } else if (sscanf(line, "%c %u %" SCNx64 " %" SCNu64 " %u %" SCNx64, &op, &kind, &address,
                          &bytes, &device, &pc) == 6 &&
                   (op == 'A' || op == 'R')) {
            uint32_t operation = op == 'A' ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                           : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
            int rc = fake->emit ? fake->emit(operation, kind, address, bytes, device, pc) : -EPERM;
            if (rc == 0) {
                (*delivered)++;
            } else if (rc == -EPERM) {
                (*refused)++; /* MEMORY2 is not enabled: CUPTI records nothing */
            } else {
                fprintf(stderr, "line %zu: the fake libcupti refused the record: %s\n", lineno,
                        strerror(-rc));
                return -EIO;
            }
        } else if (line[0] != '#' && line[0] != '\n') {
            fprintf(stderr, "line %zu: cannot parse: %s", lineno, line);
            return -EINVAL;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBOPTMEM_CUPTI RECORDS\n", argv[0]);
        return 2;
    }
    if (atexit(print_stats_at_exit) != 0)
        return 1;
    printf("pid %ld\n", (long)getpid()); /* the report's %p */

    /* What the driver does with CUDA_INJECTION64_PATH, during cuInit. */
    void *inject = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    int (*initialize)(void) = NULL;
    if (!inject || resolve(inject, "InitializeInjection", &initialize) != 0) {
        fprintf(stderr, "cannot load InitializeInjection from %s: %s\n", argv[1], dlerror());
        return 1;
    }
    printf("InitializeInjection returned %d\n", initialize());

    /* Only the injection library may have loaded libcupti (found through the search path). */
    struct fake_api fake = {0};
    void *cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (cupti && (resolve(cupti, "fakeCuptiEmit", &fake.emit) ||
                  resolve(cupti, "fakeCuptiDrop", &fake.drop) ||
                  resolve(cupti, "fakeCuptiSetRecordsPerBuffer", &fake.set_per_buffer) ||
                  resolve(cupti, "fakeCuptiWaitIdle", &fake.wait_idle) ||
                  resolve(cupti, "fakeCuptiStats", &fake_stats))) {
        fprintf(stderr, "the libcupti.so.13 loaded is not the fake one\n");
        return 1;
    }
    printf("libcupti %s\n", cupti ? "loaded" : "not loaded");

    FILE *in = fopen(argv[2], "r");
    if (!in) {
        perror(argv[2]);
        return 2;
    }
    size_t delivered = 0, refused = 0;
    int rc = play(in, &fake, &delivered, &refused);
    fclose(in);
    if (rc != 0)
        return rc == -EINVAL ? 2 : 1;
    if (fake.wait_idle)
        fake.wait_idle();
    printf("records: %zu written by CUPTI, %zu refused\n", delivered, refused);
    return 0;
}
