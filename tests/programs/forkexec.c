/* fork from a multithreaded parent, and exec: the child keeps allocating and freeing,
 * also memory inherited from the parent, and an exec'd program keeps the preload. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCKS 64

static atomic_int stop;

/* Keeps the allocator's locks busy while the main thread forks. */
static void *churn(void *arg)
{
    unsigned n = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&stop)) {
        size_t size = 16 + (n++ * 4099) % (256 * 1024);
        char *p = malloc(size);
        p[0] = p[size - 1] = 1;
        free(p);
    }
    return NULL;
}

static int preloaded(void)
{
    return dlsym(RTLD_DEFAULT, "optmem_version") != NULL;
}

static int child_work(char **inherited, const char *self)
{
    int bad = 0;
    for (int i = 0; i < BLOCKS; i++) { /* inherited blocks: check, grow, free */
        size_t size = 1000 + (size_t)i * 3000;
        for (size_t j = 0; j < size; j += 512)
            bad += inherited[i][j] != (char)i;
        char *q = realloc(inherited[i], size * 2);
        bad += q == NULL || q[0] != (char)i;
        free(q);
    }
    for (int i = 0; i < 1000; i++) {
        char *p = malloc(100 + (size_t)i * 97);
        memset(p, 7, 100 + (size_t)i * 97);
        free(p);
    }
    if (bad)
        return 1;
    char flag[2] = {preloaded() ? '1' : '0', 0};
    execl(self, self, "--exec-child", flag, (char *)NULL);
    perror("execl");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--exec-child") == 0) {
        char *p = malloc(1 << 20);
        memset(p, 1, 1 << 20);
        free(p);
        int same = preloaded() == (argv[2][0] == '1');
        printf("exec child: preload %s\n", same ? "as in parent" : "LOST");
        return !same;
    }
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, churn, (void *)(uintptr_t)i);
    char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        size_t size = 1000 + (size_t)i * 3000;
        blocks[i] = malloc(size);
        memset(blocks[i], i, size);
    }
    int failures = 0;
    for (int round = 0; round < 20; round++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(child_work(blocks, argv[0]));
        int status = 0;
        waitpid(pid, &status, 0);
        failures += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < BLOCKS; i++)
        free(blocks[i]);
    printf("forks 20 failures %d\n", failures);
    return failures != 0;
}
