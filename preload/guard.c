/* The re-entry guard's per-thread depth (initial-exec TLS: reading it never allocates). */
#include "guard.h"

__thread int om_guard_depth;
