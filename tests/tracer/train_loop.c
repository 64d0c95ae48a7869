/* A training loop of known structure for the tracer's tests; check_train_loop.py derives
 * every expected figure of the report from the constants below (keep the two in step).
 *
 *   before the loop: PERSIST blocks (site_persist, never freed), one block of SETUP_BYTES
 *                    (site_setup, freed at once)
 *   iteration i:     TEMPS temporaries (site_temp, sizes TEMP_BYTES(k)), the first one
 *                    before the previous iteration's arc is freed; one arc of CROSS_BYTES
 *                    (site_cross) that dies in iteration i + 1; in iteration 0 only, LAZY
 *                    blocks of LAZY_BYTES after the arc (site_lazy, never freed: optimizer
 *                    state created in the first step); the temporaries are freed last
 *   with --mark:     optmem_step() after each iteration
 *   with --until-eof: after ITERATIONS, more iterations until stdin ends (a test closes it
 *                    once the run's report shows what it waits for, such as a plan made)
 *
 * Usage: train_loop ITERATIONS [--mark | --until-eof]. No output on success: stdio's buffer
 * would be a managed request of its own. */
#include <dlfcn.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PERSIST 3
#define PERSIST_BYTES(k) (65536u + 32768u * (k))
#define SETUP_BYTES 8192u
#define TEMPS 8
#define TEMP_BYTES(k) (4096u * ((k) + 1))
#define CROSS_BYTES 49152u
#define LAZY 2
#define LAZY_BYTES 32768u

/* Each site is its own function, so that each has its own call-site stack. */
/* Exported (ENABLE_EXPORTS), so that dladdr names them in the report. */
void *site_persist(size_t n);
void *site_setup(size_t n);
void *site_temp(size_t n);
void *site_cross(size_t n);
void *site_lazy(size_t n);

__attribute__((noinline)) void *site_persist(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory"); /* keeps the compiler from eliding it */
    return p;
}

__attribute__((noinline)) void *site_setup(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *site_temp(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *site_cross(size_t n)
{
    void *p = calloc(1, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *site_lazy(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0)
        return NULL;
    return p;
}

static void die(const char *msg)
{
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
    exit(2);
}

/* Whether stdin has ended (read without blocking, into no managed buffer). */
static int stdin_ended(void)
{
    struct pollfd p = {.fd = 0, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    char buf[256];
    return read(0, buf, sizeof buf) <= 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: train_loop ITERATIONS [--mark | --until-eof]\n");
    int iters = atoi(argv[1]);
    int until_eof = argc > 2 && strcmp(argv[2], "--until-eof") == 0;
    void (*step)(void) = NULL;
    if (argc > 2 && strcmp(argv[2], "--mark") == 0) {
        step = (void (*)(void))dlsym(RTLD_DEFAULT, "optmem_step");
        if (!step)
            die("train_loop: optmem_step not found (run under LD_PRELOAD)\n");
    }
    void *persist[PERSIST], *lazy[LAZY] = {NULL}, *cross = NULL;
    for (int k = 0; k < PERSIST; k++)
        persist[k] = site_persist(PERSIST_BYTES(k));
    free(site_setup(SETUP_BYTES));
    for (int i = 0; i < iters || (until_eof && !stdin_ended()); i++) {
        void *temps[TEMPS];
        temps[0] = site_temp(TEMP_BYTES(0));
        free(cross);
        for (int k = 1; k < TEMPS; k++)
            temps[k] = site_temp(TEMP_BYTES(k));
        cross = site_cross(CROSS_BYTES);
        if (i == 0)
            for (int k = 0; k < LAZY; k++)
                lazy[k] = site_lazy(LAZY_BYTES);
        for (int k = 0; k < TEMPS; k++)
            free(temps[k]);
        if (step)
            step();
    }
    for (int k = 0; k < PERSIST; k++)
        if (!persist[k])
            die("train_loop: out of memory\n");
    for (int k = 0; k < LAZY; k++)
        if (!lazy[k])
            die("train_loop: out of memory\n");
    return 0;
}
