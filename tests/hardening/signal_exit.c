/* A program whose SIGUSR1 handler calls _exit(3), as async-signal-safe code may; the signal
 * is raised by signal_exit_shim.so while this thread is inside the allocator or a fork.
 * usage: signal_exit calls|fork; exits 3 once the handler ran, 0 if it never did. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCKS 20000

static void on_usr1(int sig)
{
    (void)sig;
    _exit(3);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "calls") != 0 && strcmp(argv[1], "fork") != 0)) {
        fprintf(stderr, "usage: signal_exit calls|fork\n");
        return 1;
    }
    signal(SIGUSR1, on_usr1);
    static void *keep[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        if (i == 1)
            setenv("SIGNAL_EXIT_ARM", argv[1], 1); /* the shim raises the signal from here on */
        keep[i] = malloc(5000 + (size_t)(i % 7) * 512);
        memset(keep[i], 1, 64);
        if (i == 100 && strcmp(argv[1], "fork") == 0) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            waitpid(pid, NULL, 0);
        }
    }
    for (int i = 0; i < BLOCKS; i += 2)
        free(keep[i]);
    return 0;
}
