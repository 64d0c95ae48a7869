/* Fork under the tracer: a helper thread allocates while the main thread forks; parent and
 * child each write their own report (%p), and the parent also dumps one on demand.
 * Usage: fork_report DUMP_PATH. Exit status 0 when both processes finished. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PARENT_BEFORE 5
#define CHILD_REQUESTS 7
#define PARENT_AFTER 4

static atomic_int stop;

/* Exported (ENABLE_EXPORTS), so that dladdr names them in the report. */
void *site_parent(size_t n);
void *site_child(size_t n);

__attribute__((noinline)) void *site_parent(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *site_child(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* Small requests only, so that the counts of managed ones stay exact; they still take
 * the real allocator's locks around fork. */
static void *churn(void *arg)
{
    while (!atomic_load(&stop))
        free(malloc(100));
    return arg;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "optmem_dump");
    if (!dump)
        return 3;
    pthread_t t;
    if (pthread_create(&t, NULL, churn, NULL) != 0)
        return 4;
    void *keep[PARENT_BEFORE];
    for (int i = 0; i < PARENT_BEFORE; i++)
        keep[i] = site_parent(16384);
    pid_t pid = fork();
    if (pid < 0)
        return 5;
    if (pid == 0) {
        for (int i = 0; i < CHILD_REQUESTS; i++)
            free(site_child(8192));
        free(keep[0]); /* an inherited block dies in the child */
        exit(0);
    }
    for (int i = 0; i < PARENT_AFTER; i++)
        free(site_parent(16384));
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 6;
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    if (dump(argv[1]) != 0)
        return 7;
    for (int i = 0; i < PARENT_BEFORE; i++)
        free(keep[i]);
    return 0;
}
