/* Subcommands of the optmem CLI: each takes the arguments after its name. */
#ifndef OPTMEM_TOOLS_COMMANDS_H
#define OPTMEM_TOOLS_COMMANDS_H

/* Exit codes shared by every subcommand (documented in docs/optmem.1). */
enum {
    OM_EXIT_OK = 0,
    OM_EXIT_FAILURE = 1, /* the work failed: bad input file, I/O error */
    OM_EXIT_USAGE = 2,   /* bad command line */
};

int om_cmd_run(int argc, char **argv);
int om_cmd_plan(int argc, char **argv);

int om_cmd_report(int argc, char **argv);

/* rp_heap.c: the replanner's scratch memory from the CLI's heap, for every command that
 * plans. */
extern const struct om_rp_allocator om_cli_rp_heap;

#endif
