/* Report checkpoints: a thread of optmem's rewrites the report while the program works, so
 * that a process killed by a signal (SIGKILL from the OOM killer too) leaves one. */
#ifndef OPTMEM_PRELOAD_CHECKPOINT_H
#define OPTMEM_PRELOAD_CHECKPOINT_H

/* How often a working process's report is rewritten, at most: a killed process's report
 * is at most this (plus one poll and the write) older than its end. */
#define OM_CHECKPOINT_INTERVAL_MS 2000
/* How often the thread looks whether a checkpoint is due (a plan made, time passed). */
#define OM_CHECKPOINT_POLL_MS 250

/* After a managed request (inside the engine): the first one of a process that writes a
 * report starts the thread; a process with no managed request never has one. */
void om_checkpoint_note_request(void);

/* The thread does not survive fork: the child starts its own when it works. */
void om_checkpoint_atfork_child(void);

/* Exit: no checkpoint starts after this (the report written at exit is the last). */
void om_checkpoint_stop(void);

#endif
