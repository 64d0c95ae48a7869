/* PyTorch memory snapshots as lifetimes per device and stream, with native peaks and sites. */
#ifndef OPTMEM_TOOLS_SNAPSHOT_H
#define OPTMEM_TOOLS_SNAPSHOT_H

#include "snapshot_pickle.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OM_SNAP_NO_TIME UINT64_MAX
/* PyTorch's caching allocator rounds every request up to a multiple of this. */
#define OM_SNAP_ROUND 512
/* Larger sizes are refused as corrupt: no sum of them can overflow. */
#define OM_SNAP_MAX_SIZE (UINT64_C(1) << 48)

struct om_snap_frame {
    const char *file, *name; /* owned by the snapshot's pickle */
    int64_t line;
};

/* Frames that allocated, innermost first: the Python ones (file *.py), or when there is none
 * (autograd's threads) the C++ ones below the caching allocator's. */
struct om_snap_site {
    const struct om_snap_frame *frames;
    size_t nframes;
};

/* One buffer; times are event numbers on its device (0: before recording began, the end:
 * still live when the snapshot was taken); [birth, death). */
struct om_snap_life {
    uint64_t birth, death, size, site;
    uint64_t birth_us, death_us; /* OM_SNAP_NO_TIME when the trace has no time_us */
    uint64_t group;              /* index in om_snapshot.groups */
};

struct om_snap_group {
    int64_t device, stream;
    uint64_t native_peak;  /* most bytes reserved from the driver (segments), replayed */
    uint64_t reserved_end; /* segments when the snapshot was taken */
    uint64_t nlife, alloc_events, end_time;
};

struct om_snapshot {
    struct om_pickle pk;
    bool legacy;                  /* torch 1.13's list of segments: no trace */
    struct om_snap_group *groups; /* by device, then stream */
    size_t ngroups;
    struct om_snap_life *life; /* by group, then birth */
    size_t nlife;
    struct om_snap_site *sites;
    size_t nsites;
    struct om_snap_frame *frames; /* storage of every site's frames */
    size_t nframes;
};

/* snapshot.c */

/* Reads a snapshot; on failure err holds one line naming the file. 0, -EINVAL, -ENOMEM,
 * -errno of the file. */
int om_snapshot_load(const char *path, struct om_snapshot *s, char *err, size_t errlen);
void om_snapshot_free(struct om_snapshot *s);

/* snapshot_report.c */

struct om_report;
struct om_rdomains;
/* The report of one device of a snapshot, as om_report_load_domain gives a report's domain:
 * domain "cuda:N", or the host's ("cpu"), which shows the first device since a snapshot has
 * no host memory. devices (or NULL) gets the snapshot's devices; *shown (malloc'd) the name
 * of the domain shown. Sites are the Python frames; the lifetimes carry the offsets of an
 * optmem plan of the device. On failure err holds one line and nothing is left to free. */
int om_snapshot_report(const char *path, const char *domain, struct om_report *r,
                       struct om_rdomains *devices, char **shown, char *err, size_t errlen);

#endif
