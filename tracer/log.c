/* Diagnostics on stderr: one write(2) per line so lines from threads never interleave. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int om_log_level = OM_LOG_WARN;

/* Warnings written so far by this process (a fork child inherits the count). */
static unsigned warnings;

void om_log(int level, const char *fmt, ...)
{
    if (level > om_log_level)
        return;
    int saved_errno = errno; /* logging must never change what the host program sees */
    int last = 0;
    if (level == OM_LOG_WARN) {
        unsigned n = __atomic_fetch_add(&warnings, 1, __ATOMIC_RELAXED);
        if (n >= OM_LOG_MAX_WARNINGS)
            goto out;
        last = n == OM_LOG_MAX_WARNINGS - 1;
    }
    char line[1024];
    size_t prefix = sizeof "optmem: " - 1;
    memcpy(line, "optmem: ", prefix);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + prefix, sizeof line - prefix - 1, fmt, ap);
    va_end(ap);
    size_t len = prefix + (n < 0 ? 0 : (size_t)n);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    if (last) {
        static const char more[] = " (further warnings are not shown)";
        if (len + sizeof more < sizeof line - 1) {
            memcpy(line + len, more, sizeof more - 1);
            len += sizeof more - 1;
        }
    }
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
out:
    errno = saved_errno;
}
