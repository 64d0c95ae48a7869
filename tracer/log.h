/* Diagnostics on stderr, every line prefixed "optmem:", formatted without allocating. */
#ifndef OPTMEM_TRACER_LOG_H
#define OPTMEM_TRACER_LOG_H

enum om_log_level { OM_LOG_QUIET = 0, OM_LOG_INFO = 1, OM_LOG_DEBUG = 2 };

/* Set once from the configuration; warnings and errors print unless quiet. */
extern int om_log_level;

void om_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define om_warn(...) om_log(OM_LOG_INFO, __VA_ARGS__)
#define om_info(...) om_log(OM_LOG_INFO, __VA_ARGS__)
#define om_debug(...) om_log(OM_LOG_DEBUG, __VA_ARGS__)

#endif
