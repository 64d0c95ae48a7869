/* A training-like loop that drifts on purpose (sizes, extra requests, longer lifetimes,
 * cross-thread frees, realloc, calloc, fork, a change of shapes, a weight replaced by a new
 * array each iteration, a request that moves to another call site for good (with another size
 * or the same one), layers whose
 * requests repeat within a step and outlive the layer, evaluation phases between training
 * phases), forks at each of its first iterations (fork_each: one fork comes while plan mode
 * makes a plan), or takes its time (slow, slow_wide). Every buffer's contents are checked
 * before it is freed; the printed checksum must not depend on the allocator.
 * usage: train_drift SCENARIO [ITERATIONS]; TRAIN_DRIFT_EXTRA_FIRST=1 adds one request first */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct buf {
    unsigned char *p;
    size_t size;
    uint32_t seed;
};

static const char *scenario = "steady";
static long corruptions;
static uint64_t checksum;

static int is(const char *name)
{
    return strcmp(scenario, name) == 0;
}

static unsigned char pattern(uint32_t seed, size_t i)
{
    return (unsigned char)(seed * 2654435761u + i * 40503u + (i >> 8));
}

static void fill(struct buf *b)
{
    for (size_t i = 0; i < b->size; i += 7)
        b->p[i] = pattern(b->seed, i);
    b->p[b->size - 1] = pattern(b->seed, b->size - 1);
}

static void check_and_free(struct buf *b)
{
    if (!b->p)
        return;
    for (size_t i = 0; i < b->size; i += 7) {
        corruptions += b->p[i] != pattern(b->seed, i);
        checksum = checksum * 31 + b->p[i];
    }
    corruptions += b->p[b->size - 1] != pattern(b->seed, b->size - 1);
    free(b->p);
    b->p = NULL;
}

/* Each call site is its own function, so each has its own stack. */
__attribute__((noinline)) static void alloc_activation(struct buf *b, size_t size, uint32_t seed)
{
    *b = (struct buf){malloc(size), size, seed};
    fill(b);
}

__attribute__((noinline)) static void alloc_gradient(struct buf *b, size_t size, uint32_t seed)
{
    *b = (struct buf){malloc(size), size, seed};
    fill(b);
}

__attribute__((noinline)) static void alloc_temporary(struct buf *b, size_t size, uint32_t seed)
{
    if (is("calloc")) {
        unsigned char *p = calloc(1, size);
        for (size_t i = 0; i < size; i += 64)
            corruptions += p[i] != 0;
        *b = (struct buf){p, size, seed};
    } else {
        *b = (struct buf){malloc(size), size, seed};
    }
    fill(b);
}

__attribute__((noinline)) static void alloc_extra(struct buf *b, size_t size, uint32_t seed)
{
    *b = (struct buf){malloc(size), size, seed};
    fill(b);
}

/* The same request from another call site, as Python's interpreter makes it once it has
 * specialized the bytecode that asks for it. */
__attribute__((noinline)) static void alloc_extra_elsewhere(struct buf *b, size_t size,
                                                            uint32_t seed)
{
    *b = (struct buf){malloc(size), size, seed};
    fill(b);
}

/* The forward pass's layers, the same in a training step and in an evaluation step. */
static void forward_layers(uint32_t seed)
{
    for (uint32_t l = 0; l < 8; l++) {
        struct buf layer;
        alloc_extra(&layer, 8192 * (size_t)(l % 3 + 1), seed + 20 + l);
        check_and_free(&layer);
    }
}

static void backward_layers(uint32_t seed)
{
    for (uint32_t l = 0; l < 24; l++) {
        struct buf grad;
        alloc_gradient(&grad, 12288, seed + 30 + l);
        check_and_free(&grad);
    }
}

/* An evaluation step's own requests, after the forward pass it shares with training. */
static void evaluate(struct buf *in, uint32_t seed)
{
    struct buf out[3];
    for (uint32_t k = 0; k < 3; k++)
        alloc_extra_elsewhere(&out[k], 100 * 1024 * (size_t)(k + 1), seed + 50 + k);
    for (uint32_t k = 0; k < 3; k++)
        check_and_free(&out[k]);
    check_and_free(in);
}

static void *free_in_thread(void *arg)
{
    check_and_free(arg);
    return NULL;
}

static void grow(struct buf *b, size_t size)
{
    unsigned char *p = realloc(b->p, size);
    for (size_t i = 0; i < b->size; i += 7)
        corruptions += p[i] != pattern(b->seed, i);
    *b = (struct buf){p, size, b->seed};
    fill(b);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        scenario = argv[1];
    long iterations = argc > 2 ? atol(argv[2]) : 60;
    struct buf params[2], state[2] = {{0}}, grads[2] = {{0}}, acts[3], tmp, lingering = {0};
    /* A request this run makes before training and another run may not (a library that
     * allocates on first use, a thread that got there first): outside the checksum. */
    if (getenv("TRAIN_DRIFT_EXTRA_FIRST")) {
        unsigned char *volatile extra = malloc(40000); /* volatile: not optimised away */
        if (extra)
            extra[0] = 1;
        free(extra);
    }
    alloc_activation(&params[0], 64 * 1024, 1);
    alloc_activation(&params[1], 192 * 1024, 2);
    pid_t child = 0;
    int in_child = 0; /* fork_each */
    for (long it = 0; it < iterations; it++) {
        uint32_t seed = (uint32_t)it * 16;
        size_t scale = is("phase_change") && it >= iterations / 2 ? 3 : 2;
        if (it == 0) /* optimizer state, created lazily in the first step */
            for (int i = 0; i < 2; i++)
                alloc_gradient(&state[i], params[i].size, 100 + (uint32_t)i);
        size_t a0 = 48 * 1024 * scale, a1 = 96 * 1024 * scale;
        if (is("size_drift") && it % 7 == 3)
            a0 += 4096;
        alloc_activation(&acts[0], a0, seed + 1);
        if (is("evaluate")) { /* 10 training steps, then 20 evaluation steps */
            forward_layers(seed);
            if (it % 30 >= 10) {
                evaluate(&acts[0], seed);
                continue;
            }
            backward_layers(seed);
        }
        alloc_activation(&acts[1], a1, seed + 2);
        alloc_temporary(&tmp, 32 * 1024 * scale, seed + 3);
        /* Nine requests an iteration; one changes its call site for good, with another size
         * (new_site) or the same one, as a call whose stack changed (new_stack). */
        if (is("new_site") || is("new_stack")) {
            struct buf extra[3];
            for (int k = 0; k < 3; k++) {
                if (k == 2 && it >= iterations / 4)
                    alloc_extra_elsewhere(&extra[k], is("new_site") ? 28672 : 24576,
                                          seed + 10 + (uint32_t)k);
                else
                    alloc_extra(&extra[k], 24576, seed + 10 + (uint32_t)k);
            }
            for (int k = 0; k < 3; k++)
                check_and_free(&extra[k]);
        }
        if (is("layers")) { /* identical layers, each keeping what backward needs */
            struct buf kept[200][3];
            for (int l = 0; l < 200; l++)
                for (int k = 0; k < 3; k++)
                    alloc_extra(&kept[l][k], 8192 * (size_t)(k + 1),
                                seed + 20 + (uint32_t)(3 * l + k));
            for (int l = 199; l >= 0; l--)
                for (int k = 0; k < 3; k++)
                    check_and_free(&kept[l][k]);
        }
        if (is("extra_request") && it % 5 == 2) {
            struct buf extra;
            alloc_extra(&extra, 20000, seed + 4);
            check_and_free(&extra);
        }
        if (is("longer_life") && it % 4 == 1) {
            check_and_free(&lingering);
            lingering = tmp; /* lives into the next iteration */
        } else {
            check_and_free(&tmp);
        }
        alloc_activation(&acts[2], 16 * 1024 * scale, seed + 5);
        if (is("realloc"))
            grow(&acts[1], a1 + 50000);
        /* backward: last iteration's gradients die now, the new ones wrap around */
        for (int i = 0; i < 2; i++)
            check_and_free(&grads[i]);
        for (int i = 0; i < 2; i++)
            alloc_gradient(&grads[i], params[i].size, seed + 6 + (uint32_t)i);
        for (int i = 2; i >= 0; i--) {
            if (is("cross_thread") && i == 1) {
                pthread_t t;
                pthread_create(&t, NULL, free_in_thread, &acts[i]);
                pthread_join(t, NULL);
            } else {
                check_and_free(&acts[i]);
            }
        }
        if (is("replace")) { /* w = w - lr * g: the new array is made before the old dies */
            struct buf fresh;
            alloc_extra(&fresh, params[1].size, seed + 8);
            check_and_free(&params[1]);
            params[1] = fresh;
        }
        if (is("slow_wide")) /* more requests than plan mode learns in its ring */
            for (uint32_t k = 0; k < 17000; k++) {
                struct buf extra;
                alloc_extra(&extra, 4096 + 64 * (k % 5), seed + k);
                check_and_free(&extra);
            }
        if (in_child) { /* its own optmem-plan thread must get a core on a loaded machine */
            struct timespec step = {0, 1000 * 1000};
            nanosleep(&step, NULL);
        }
        if (is("slow") || is("slow_wide")) { /* a long step: the plan may search as long */
            struct timespec step = {0, 250 * 1000 * 1000};
            nanosleep(&step, NULL);
        }
        if (is("fork") && it == iterations / 2) {
            fflush(stdout);
            child = fork();
            if (child == 0) /* the child trains on alone, then reports its own checks */
                iterations = it + 10;
        }
        if (is("fork_each") && !in_child && it < 24) {
            fflush(stdout);
            pid_t c = fork();
            if (c == 0) { /* the child trains on alone, long enough to plan on its own */
                in_child = 1;
                iterations = it + 100;
            } else {
                int status = 0;
                corruptions += c < 0 || waitpid(c, &status, 0) != c || !WIFEXITED(status) ||
                               WEXITSTATUS(status) != 0;
            }
        }
    }
    check_and_free(&lingering);
    for (int i = 0; i < 2; i++) {
        check_and_free(&grads[i]);
        check_and_free(&state[i]);
        check_and_free(&params[i]);
    }
    if ((is("fork") && child == 0) || in_child) {
        printf("child corruptions %ld\n", corruptions);
        fflush(stdout);
        _exit(corruptions != 0);
    }
    if (child > 0) {
        int status = 0;
        waitpid(child, &status, 0);
        corruptions += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf("%s iterations %ld checksum %016llx corruptions %ld\n", scenario, iterations,
           (unsigned long long)checksum, corruptions);
    return corruptions != 0;
}
