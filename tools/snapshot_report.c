/* A PyTorch memory snapshot as the report `optmem report` renders: one device domain each. */
#include "report_domain.h"
#include "commands.h"
#include "replanner.h"
#include "snapshot.h"
#include "om_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEAK_SITES 20
#define TIMELINE_POINTS 512
/* The plan drawn in the svg and html pictures: a short search, the same on every run. */
#define REPORT_PLAN_BUDGET_MS 500
#define REPORT_PLAN_MAX_NODES 20000

struct req {
    size_t life; /* index in the snapshot's lifetimes */
    uint64_t birth;
};

static int by_birth(const void *x, const void *y)
{
    const struct req *a = x, *b = y;
    if (a->birth != b->birth)
        return a->birth < b->birth ? -1 : 1;
    return (a->life > b->life) - (a->life < b->life);
}

/* A frame's address: a hash of what it says, so that equal frames merge across files. */
static uint64_t frame_key(const struct om_snap_frame *f)
{
    uint64_t h = om_fnv1a_str(om_fnv1a_str(OM_FNV_OFFSET, f->file), f->name);
    return om_fnv1a_word(h, (uint64_t)f->line);
}

static int fill_sites(const struct om_snapshot *s, struct om_report *r)
{
    r->nsites = s->nsites;
    r->sites = calloc(s->nsites ? s->nsites : 1, sizeof *r->sites);
    if (!r->sites)
        return -ENOMEM;
    for (size_t i = 0; i < s->nsites; i++) {
        const struct om_snap_site *in = &s->sites[i];
        struct om_rsite *o = &r->sites[i];
        o->id = i;
        o->frames = calloc(in->nframes ? in->nframes : 1, sizeof *o->frames);
        if (!o->frames)
            return -ENOMEM;
        o->nframes = in->nframes;
        for (size_t f = 0; f < in->nframes; f++) {
            const struct om_snap_frame *fr = &in->frames[f];
            struct om_rframe *d = &o->frames[f];
            d->address = frame_key(fr);
            d->offset = OM_NO_VALUE;
            d->line = fr->line < 0 ? 0 : fr->line > 0x7fffffff ? 0x7fffffff : (unsigned)fr->line;
            d->function = strdup(fr->name);
            if (!d->function)
                return -ENOMEM;
            /* C++ frames without line information say "??", "" or line 0. */
            if (fr->line <= 0 || strcmp(fr->file, "??") == 0 || fr->file[0] == '\0')
                continue;
            if (!(d->file = strdup(fr->file)))
                return -ENOMEM;
        }
    }
    return 0;
}

/* The live set at the peak: the sites with most bytes in it, largest first. */
static int fill_peak(struct om_report *r)
{
    uint64_t *bytes = calloc(r->nsites ? r->nsites : 1, sizeof *bytes);
    uint64_t *blocks = calloc(r->nsites ? r->nsites : 1, sizeof *blocks);
    int rc = -ENOMEM;
    if (!bytes || !blocks)
        goto out;
    for (size_t i = 0; i < r->nlife; i++) {
        const struct om_rlife *l = &r->life[i];
        if (l->birth <= r->peak_request &&
            (l->death == OM_NO_VALUE || l->death > r->peak_request)) {
            bytes[l->site] += l->size;
            blocks[l->site]++;
        }
    }
    r->peak = calloc(PEAK_SITES, sizeof *r->peak);
    if (!r->peak)
        goto out;
    while (r->npeak < PEAK_SITES) {
        size_t best = SIZE_MAX;
        for (size_t k = 0; k < r->nsites; k++)
            if (blocks[k] && (best == SIZE_MAX || bytes[k] > bytes[best]))
                best = k;
        if (best == SIZE_MAX)
            break;
        r->peak[r->npeak++] = (struct om_rpeak){best, bytes[best], blocks[best]};
        blocks[best] = 0;
    }
    rc = 0;
out:
    free(bytes);
    free(blocks);
    return rc;
}

static int fill_timeline(struct om_report *r)
{
    uint64_t w = 1;
    while (r->nlife / w > TIMELINE_POINTS - 1)
        w *= 2;
    r->timeline_first = 0;
    r->timeline_width = w;
    r->ntimeline = r->nlife ? (r->nlife + w - 1) / w : 0;
    r->timeline = calloc(r->ntimeline ? r->ntimeline : 1, sizeof *r->timeline);
    if (!r->timeline)
        return -ENOMEM;
    for (size_t i = 0; i < r->nlife; i++)
        if (r->live_after[i] > r->timeline[i / w])
            r->timeline[i / w] = r->live_after[i];
    return 0;
}

/* Offsets of optmem's plan of the device's buffers, for the pictures; none on failure. */
static void fill_offsets(struct om_report *r)
{
    om_rp_block *b = calloc(r->nlife ? r->nlife : 1, sizeof *b);
    uint64_t *off = calloc(r->nlife ? r->nlife : 1, sizeof *off);
    om_rp_options opt = {.budget_ms = REPORT_PLAN_BUDGET_MS,
                         .max_nodes = REPORT_PLAN_MAX_NODES,
                         .seed = 1,
                         .alloc = om_cli_rp_heap};
    om_rp_result res;
    if (b && off && r->nlife) {
        for (size_t i = 0; i < r->nlife; i++)
            b[i] = (om_rp_block){.id = i,
                                 .lower = r->life[i].birth,
                                 .upper = r->life[i].death == OM_NO_VALUE ? r->nlife + 1
                                                                          : r->life[i].death,
                                 .size = r->life[i].size};
        if (om_rp_plan(b, r->nlife, &opt, off, &res) == 0 &&
            om_rp_check(b, r->nlife, 0, off, &opt.alloc, NULL, 0) == 0) {
            for (size_t i = 0; i < r->nlife; i++)
                r->life[i].offset = off[i];
            r->sample_has_offsets = true;
        }
    }
    free(b);
    free(off);
}

/* The lifetimes of one device as requests: numbered by birth, a death the number of requests
 * made before it, null for a block still live at the end. */
static int fill_device(const struct om_snapshot *s, int64_t device, struct om_report *r)
{
    size_t n = 0, k = 0;
    struct req *q = NULL;
    int64_t *diff = NULL;
    int rc = -ENOMEM;
    uint64_t end = 1, us0 = UINT64_MAX, us1 = 0;

    for (size_t i = 0; i < s->nlife; i++)
        n += s->groups[s->life[i].group].device == device;
    for (size_t g = 0; g < s->ngroups; g++)
        if (s->groups[g].device == device) {
            end = s->groups[g].end_time;
            r->peak_live += s->groups[g].native_peak;
        }
    if (!(q = calloc(n ? n : 1, sizeof *q)) || !(r->life = calloc(n ? n : 1, sizeof *r->life)) ||
        !(r->live_after = calloc(n ? n : 1, sizeof *r->live_after)) ||
        !(diff = calloc(n + 1, sizeof *diff)))
        goto out;
    for (size_t i = 0; i < s->nlife; i++)
        if (s->groups[s->life[i].group].device == device)
            q[k++] = (struct req){i, s->life[i].birth};
    qsort(q, n, sizeof *q, by_birth);
    r->nlife = n;
    r->sample_first = 0;
    r->sample_end = n;
    r->managed_requests = n;
    for (size_t i = 0; i < n; i++) {
        const struct om_snap_life *l = &s->life[q[i].life];
        /* Requests born before this one died: the first birth at or after the death. */
        size_t lo = i + 1, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (q[mid].birth < l->death)
                lo = mid + 1;
            else
                hi = mid;
        }
        bool live = l->death >= end;
        r->life[i] = (struct om_rlife){
            .site = l->site,
            .size = l->size,
            .birth = i,
            .death = live ? OM_NO_VALUE : lo,
            .birth_ns = l->birth_us == OM_SNAP_NO_TIME ? OM_NO_VALUE : l->birth_us * 1000,
            .death_ns = l->death_us == OM_SNAP_NO_TIME ? OM_NO_VALUE : l->death_us * 1000,
            .offset = OM_NO_VALUE,
        };
        diff[i] += (int64_t)l->size;
        if (!live)
            diff[lo] -= (int64_t)l->size;
        r->sites[l->site].count++;
        r->sites[l->site].total_bytes += l->size;
        if (l->birth_us != OM_SNAP_NO_TIME && l->birth_us < us0)
            us0 = l->birth_us;
        if (l->birth_us != OM_SNAP_NO_TIME && l->birth_us > us1)
            us1 = l->birth_us;
        if (l->death_us != OM_SNAP_NO_TIME && l->death_us > us1)
            us1 = l->death_us;
    }
    int64_t live = 0;
    for (size_t i = 0; i < n; i++) {
        live += diff[i];
        r->live_after[i] = (uint64_t)live;
        if (r->live_after[i] > r->lower_bound) {
            r->lower_bound = r->live_after[i];
            r->peak_request = i;
        }
    }
    r->duration_ns = us0 <= us1 ? (us1 - us0) * 1000 : 0;
    if ((rc = fill_peak(r)) == 0 && (rc = fill_timeline(r)) == 0)
        fill_offsets(r);
out:
    free(q);
    free(diff);
    return rc;
}

static int fill_domains(const struct om_snapshot *s, struct om_rdomains *d)
{
    for (size_t g = 0; g < s->ngroups; g++) {
        if (d->n && strtoll(d->v[d->n - 1].name + 5, NULL, 10) == s->groups[g].device)
            continue;
        struct om_rdomain *v = realloc(d->v, (d->n + 1) * sizeof *v);
        if (!v)
            return -ENOMEM;
        d->v = v;
        char name[32];
        snprintf(name, sizeof name, "cuda:%lld", (long long)s->groups[g].device);
        d->v[d->n] = (struct om_rdomain){.name = strdup(name)};
        if (!d->v[d->n].name)
            return -ENOMEM;
        d->n++;
    }
    return 0;
}

int om_snapshot_report(const char *path, const char *domain, struct om_report *r,
                       struct om_rdomains *devices, char **shown, char *err, size_t errlen)
{
    struct om_snapshot s;
    struct om_rdomains own = {NULL, 0};
    struct om_rdomains *d = devices ? devices : &own;
    int64_t device = -1;
    int rc;

    memset(r, 0, sizeof *r);
    *d = (struct om_rdomains){NULL, 0};
    *shown = NULL;
    if ((rc = om_snapshot_load(path, &s, err, errlen)) < 0)
        return rc;
    if ((rc = fill_domains(&s, d)) < 0)
        goto nomem;
    if (d->n == 0) {
        snprintf(err, errlen, "%s: the snapshot holds no device memory", path);
        rc = -EINVAL;
        goto fail;
    }
    /* The host domain, the default, shows the first device: a snapshot has no host memory. */
    for (size_t i = 0; i < d->n; i++)
        if (om_domain_is_host(domain) || strcmp(d->v[i].name, domain) == 0) {
            device = strtoll(d->v[i].name + 5, NULL, 10);
            break;
        }
    if (device < 0) {
        int len = snprintf(err, errlen, "%s: no memory domain '%s' in this snapshot (it has", path,
                           domain);
        for (size_t i = 0; i < d->n && len >= 0 && (size_t)len < errlen; i++)
            len += snprintf(err + len, errlen - (size_t)len, "%s%s", i ? ", " : " ", d->v[i].name);
        if (len >= 0 && (size_t)len < errlen)
            snprintf(err + len, errlen - (size_t)len, ")");
        rc = -ENOENT;
        goto fail;
    }
    if (!(r->path = strdup(path)) || !(r->exe = strdup(path)) ||
        !(r->argv = calloc(1, sizeof *r->argv)) || !(r->mode = strdup("snapshot")) ||
        !(r->method = strdup("none (PyTorch snapshot)")) || !(*shown = malloc(32)))
        goto nomem;
    snprintf(*shown, 32, "cuda:%lld", (long long)device);
    r->period = r->first_steady = OM_NO_VALUE;
    if ((rc = fill_sites(&s, r)) < 0 || (rc = fill_device(&s, device, r)) < 0)
        goto nomem;
    /* Only the shown device is counted: the others would cost a plan each. */
    for (size_t i = 0; i < d->n; i++)
        if (strtoll(d->v[i].name + 5, NULL, 10) == device)
            d->v[i] = (struct om_rdomain){d->v[i].name, r->managed_requests, r->lower_bound,
                                          r->peak_live};
    om_snapshot_free(&s);
    om_rdomains_free(&own);
    return 0;
nomem:
    snprintf(err, errlen, "%s: out of memory", path);
    rc = -ENOMEM;
fail:
    free(*shown);
    *shown = NULL;
    om_report_free(r);
    om_rdomains_free(d);
    om_snapshot_free(&s);
    return rc;
}
