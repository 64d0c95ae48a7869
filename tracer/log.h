/* Diagnostics on stderr, every line prefixed "optmem:", formatted without allocating. */
#ifndef OPTMEM_TRACER_LOG_H
#define OPTMEM_TRACER_LOG_H

/* quiet: nothing; warn (the default): problems only, as LD_PRELOAD allocators are silent
 * unless something went wrong; info: what the engine does (plans, saved plans); debug. */
enum om_log_level { OM_LOG_QUIET = 0, OM_LOG_WARN = 1, OM_LOG_INFO = 2, OM_LOG_DEBUG = 3 };

/* Warnings a process writes at most; the last one says that the rest are dropped. */
#define OM_LOG_MAX_WARNINGS 16

/* Set once from the configuration. */
extern int om_log_level;

void om_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define om_warn(...) om_log(OM_LOG_WARN, __VA_ARGS__)
#define om_info(...) om_log(OM_LOG_INFO, __VA_ARGS__)
#define om_debug(...) om_log(OM_LOG_DEBUG, __VA_ARGS__)

#endif
