/* Diagnostics on stderr: one write(2) per line so lines from threads never interleave. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int om_log_level = OM_LOG_INFO;

void om_log(int level, const char *fmt, ...)
{
    if (level > om_log_level)
        return;
    int saved_errno = errno; /* logging must never change what the host program sees */
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
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
    errno = saved_errno;
}
