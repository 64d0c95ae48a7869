/* The optmem command: dispatches to its subcommands. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

struct om_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct om_command commands[] = {
    {"run", om_cmd_run, "run a command with optmem preloaded and summarise its memory"},
    {"report", om_cmd_report, "summarise lifetime reports: text, json, chrome, folded, svg, html"},
    {"plan", om_cmd_plan, "place a lifetime set (CSV: id,lower,upper,size) in one pool"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: optmem COMMAND [ARGS...]\n\n"
                 "optmem plans where the buffers of a training program live, so that buffers\n"
                 "that are never live together share bytes.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'optmem COMMAND --help' describes one command. Exit codes: 0 success, 1 the\n"
                 "work failed, 2 bad usage; 'run' returns the exit status of its command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return OM_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return OM_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("optmem %s\n", OPTMEM_VERSION);
        return OM_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "optmem: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return OM_EXIT_USAGE;
}
