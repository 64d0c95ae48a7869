/* fork while optmem serves device blocks: the child frees blocks it inherited (arena blocks
 * under optmem), uses the host heap and exits normally; the parent's blocks keep their bytes
 * and its loop goes on. The child makes no device request: its report must say so.
 * usage: fork_serving [ITERATIONS_EACH_SIDE] */
#include "cuda_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define WARM 10

static unsigned long requests, corrupt;
static uint64_t checksum;

static __attribute__((noinline)) void *alloc(size_t size, uint32_t seed, int it)
{
    void *p;
    CT_CHECK(cudaMalloc(&p, size));
    ct_placement(p, size, it >= WARM);
    ct_write(p, size, seed);
    requests++;
    return p;
}

static void release(void *p, size_t size, uint32_t seed)
{
    corrupt += ct_check(p, size, seed, -1, &checksum);
    CT_CHECK(cudaFree(p));
}

static void loop(int first, int n)
{
    for (int it = first; it < first + n; it++) {
        uint32_t s = (uint32_t)it * 3;
        void *a = alloc(128 * KiB, s, it);
        void *b = alloc(512 * KiB, s + 1, it);
        release(a, 128 * KiB, s);
        void *c = alloc(64 * KiB, s + 2, it);
        release(b, 512 * KiB, s + 1);
        release(c, 64 * KiB, s + 2);
    }
}

/* The child cannot use the parent's CUDA context (the driver refuses it, as a real one does):
 * what cudaFree answers is not checked, only that the process keeps working and exits. */
static void child(void *l1, void *l2)
{
    cudaFree(l1);
    cudaFree(l2);
    for (int i = 0; i < 50; i++) {
        char *big = malloc(64 * KiB), *small = malloc(100);
        if (!big || !small)
            _exit(3);
        memset(big, i, 64 * KiB);
        memset(small, i, 100);
        if (big[64 * KiB - 1] != (char)i)
            _exit(4);
        free(big);
        free(small);
    }
    exit(0);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 60;
    loop(0, n);
    void *l1 = alloc(256 * KiB, 1001, n), *l2 = alloc(128 * KiB, 1002, n);
    fflush(stdout);
    pid_t pid = fork();
    CT_EXPECT(pid >= 0, "fork failed");
    if (pid == 0)
        child(l1, l2);
    int status = -1;
    CT_EXPECT(waitpid(pid, &status, 0) == pid, "waitpid failed");
    CT_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child did not exit cleanly (status 0x%x)", status);
    loop(n, n);
    release(l1, 256 * KiB, 1001);
    release(l2, 128 * KiB, 1002);
    CT_EXPECT(corrupt == 0, "%lu bytes changed while they were live", corrupt);
    printf("requests %lu\nchecksum %016llx\n", requests, (unsigned long long)checksum);
    return 0;
}
