/* Turns a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into lifetimes. */
#include "snapshot.h"
#include "om_common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A hostile file could name a new stream in every event; real ones use a handful. */
#define MAX_GROUPS 4096
#define MAX_DEVICES 1024

struct site_slot {
    uint64_t hash;
    size_t site; /* index + 1; 0: empty */
};

struct site_key {
    size_t first, n; /* frames[first .. first + n) of the site's storage */
};

/* Open blocks of one device by address: linear probing, backward-shift deletion. */
struct addr_map {
    uint64_t *key;
    int64_t *dev;
    size_t *val; /* index + 1 into the lifetimes; 0: empty */
    size_t mask, n;
};

struct builder {
    const char *path;
    struct om_snapshot *s;
    char *err;
    size_t errlen;
    int rc;
    size_t cap_life, cap_groups, cap_delta, cap_frames, cap_sites;
    struct site_key *keys;
    struct site_slot *slots;
    size_t slot_mask;
    uint64_t *req; /* per lifetime: time of free_requested, 0 if none */
    struct addr_map open;
    struct delta {
        int64_t cur, max; /* per group: segment bytes since recording began */
    } * delta;
    uint64_t dev_end[MAX_DEVICES]; /* per device: the time after its last event */
};

static int fail(struct builder *b, int rc, const char *fmt, ...)
{
    if (b->rc == 0) {
        int n = snprintf(b->err, b->errlen, "%s: ", b->path);
        if (n >= 0 && (size_t)n < b->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(b->err + n, b->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
        b->rc = rc;
    }
    return b->rc;
}

static int grow(struct builder *b, void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return fail(b, -ENOMEM, "out of memory");
    *p = q;
    *cap = c;
    return 0;
}

/* An integer field; a missing optional one gives dflt. */
/* "where[i][j]", or "where[i]" when j is SIZE_MAX. */
static const char *at_str(char *buf, size_t len, const char *where, size_t i, size_t j)
{
    if (j == SIZE_MAX)
        snprintf(buf, len, "%s[%zu]", where, i);
    else
        snprintf(buf, len, "%s[%zu][%zu]", where, i, j);
    return buf;
}

static int get_int(struct builder *b, const struct om_pv *d, const char *key, bool required,
                   int64_t dflt, int64_t *out, const char *where, size_t i, size_t j)
{
    const struct om_pv *v = om_pv_get(d, key);
    char at[96];
    if (!v || (!required && v->type == OM_PV_NONE)) {
        if (required)
            return fail(b, -EINVAL, "%s has no '%s'", at_str(at, sizeof at, where, i, j), key);
        *out = dflt;
        return 0;
    }
    if (v->type != OM_PV_INT)
        return fail(b, -EINVAL, "%s.%s is %s, not an int", at_str(at, sizeof at, where, i, j), key,
                    om_pv_type_name(v));
    *out = v->u.i;
    return 0;
}

static int get_size(struct builder *b, const struct om_pv *d, const char *key, bool required,
                    uint64_t *out, const char *where, size_t i, size_t j)
{
    int64_t v = 0;
    if (get_int(b, d, key, required, -1, &v, where, i, j) < 0)
        return b->rc;
    if (v == -1 && !required) {
        *out = UINT64_MAX;
        return 0;
    }
    if (v < 0 || (uint64_t)v > OM_SNAP_MAX_SIZE) {
        char at[96];
        return fail(b, -EINVAL, "%s.%s = %lld is not a size (0 to 2^48)",
                    at_str(at, sizeof at, where, i, j), key, (long long)v);
    }
    *out = (uint64_t)v;
    return 0;
}

/* As the caching allocator's round_size: requests below 512 bytes, 0 included, take 512. */
static uint64_t round_up(uint64_t n)
{
    return n < OM_SNAP_ROUND ? OM_SNAP_ROUND
                             : (n + OM_SNAP_ROUND - 1) / OM_SNAP_ROUND * OM_SNAP_ROUND;
}

static size_t group_of(struct builder *b, int64_t device, int64_t stream)
{
    struct om_snapshot *s = b->s;
    for (size_t g = 0; g < s->ngroups; g++)
        if (s->groups[g].device == device && s->groups[g].stream == stream)
            return g;
    if (s->ngroups == MAX_GROUPS) {
        fail(b, -EINVAL, "more than %d device and stream pairs", MAX_GROUPS);
        return SIZE_MAX;
    }
    if (grow(b, (void **)&s->groups, &b->cap_groups, s->ngroups + 1, sizeof *s->groups) < 0 ||
        grow(b, (void **)&b->delta, &b->cap_delta, s->ngroups + 1, sizeof *b->delta) < 0)
        return SIZE_MAX;
    s->groups[s->ngroups] = (struct om_snap_group){.device = device, .stream = stream};
    b->delta[s->ngroups] = (struct delta){0, 0};
    return s->ngroups++;
}

static bool is_python(const char *file)
{
    size_t n = strlen(file);
    return n >= 3 && strcmp(file + n - 3, ".py") == 0;
}

/* The frames that record a C++ stack and the caching allocator's own: they open every C++
 * stack of a snapshot and say nothing of who allocated. */
static bool allocator_frame(const char *name)
{
    return strncmp(name, "torch::unwind", 13) == 0 ||
           strncmp(name, "torch::CapturedTraceback", 24) == 0 ||
           strncmp(name, "torch::cuda::(anonymous namespace)::gather", 42) == 0 ||
           strstr(name, "CachingAllocator") != NULL;
}

static bool same_frame(const struct om_snap_frame *a, const struct om_snap_frame *c)
{
    return a->line == c->line && strcmp(a->file, c->file) == 0 && strcmp(a->name, c->name) == 0;
}

static int rehash_sites(struct builder *b)
{
    size_t n = b->slot_mask ? 2 * (b->slot_mask + 1) : 1024;
    struct site_slot *t = calloc(n, sizeof *t);
    if (!t)
        return fail(b, -ENOMEM, "out of memory");
    for (size_t i = 0; b->slot_mask && i <= b->slot_mask; i++) {
        if (!b->slots[i].site)
            continue;
        size_t k = b->slots[i].hash & (n - 1);
        while (t[k].site)
            k = (k + 1) & (n - 1);
        t[k] = b->slots[i];
    }
    free(b->slots);
    b->slots = t;
    b->slot_mask = n - 1;
    return 0;
}

/* The site of a frames list: appended to the frame storage, kept if new, else dropped. */
static int site_of(struct builder *b, const struct om_pv *frames, const char *where, size_t i,
                   size_t j, uint64_t *site)
{
    struct om_snapshot *s = b->s;
    size_t n = om_pv_len(frames), python = 0, first = s->nframes;

    if (frames && !om_pv_is(frames, OM_PV_LIST) && !om_pv_is(frames, OM_PV_NONE))
        return fail(b, -EINVAL, "%s[%zu][%zu].frames is %s, not a list", where, i, j,
                    om_pv_type_name(frames));
    for (size_t k = 0; k < n; k++) {
        const struct om_pv *f = om_pv_item(frames, k);
        const struct om_pv *file = om_pv_get(f, "filename"), *name = om_pv_get(f, "name");
        const struct om_pv *line = om_pv_get(f, "line");
        if (!om_pv_is(file, OM_PV_STR) || !om_pv_is(name, OM_PV_STR) || !om_pv_is(line, OM_PV_INT))
            return fail(b, -EINVAL,
                        "%s[%zu][%zu].frames[%zu] is not a dict of filename (str), line (int) "
                        "and name (str)",
                        where, i, j, k);
        python += is_python(file->u.str.s);
    }
    if (grow(b, (void **)&s->frames, &b->cap_frames, first + n, sizeof *s->frames) < 0)
        return b->rc;
    size_t skip = 0; /* without Python frames: the C++ stack less its allocator frames */
    while (!python && skip < n &&
           allocator_frame(om_pv_get(om_pv_item(frames, skip), "name")->u.str.s))
        skip++;
    if (skip == n)
        skip = 0;
    uint64_t h = OM_FNV_OFFSET;
    for (size_t k = skip; k < n; k++) {
        const struct om_pv *f = om_pv_item(frames, k);
        const char *file = om_pv_get(f, "filename")->u.str.s;
        if (python && !is_python(file))
            continue;
        struct om_snap_frame *o = &s->frames[s->nframes++];
        o->file = file;
        o->name = om_pv_get(f, "name")->u.str.s;
        o->line = om_pv_get(f, "line")->u.i;
        h = om_fnv1a(h, o->file, strlen(o->file) + 1);
        h = om_fnv1a(h, o->name, strlen(o->name) + 1);
        h = om_fnv1a(h, &o->line, sizeof o->line);
    }
    size_t len = s->nframes - first;
    if ((s->nsites + 1) * 2 > b->slot_mask && rehash_sites(b) < 0)
        return b->rc;
    size_t k = h & b->slot_mask;
    for (; b->slots[k].site; k = (k + 1) & b->slot_mask) {
        if (b->slots[k].hash != h)
            continue;
        const struct site_key *sk = &b->keys[b->slots[k].site - 1];
        bool same = sk->n == len;
        for (size_t x = 0; same && x < len; x++)
            same = same_frame(&s->frames[sk->first + x], &s->frames[first + x]);
        if (same) {
            s->nframes = first;
            *site = b->slots[k].site - 1;
            return 0;
        }
    }
    if (grow(b, (void **)&b->keys, &b->cap_sites, s->nsites + 1, sizeof *b->keys) < 0)
        return b->rc;
    b->keys[s->nsites] = (struct site_key){first, len};
    b->slots[k] = (struct site_slot){h, s->nsites + 1};
    *site = s->nsites++;
    return 0;
}

static int add_life(struct builder *b, size_t group, uint64_t birth, uint64_t size, uint64_t site,
                    uint64_t birth_us, size_t *idx)
{
    struct om_snapshot *s = b->s;
    size_t cap = b->cap_life;
    if (grow(b, (void **)&s->life, &b->cap_life, s->nlife + 1, sizeof *s->life) < 0 ||
        grow(b, (void **)&b->req, &cap, s->nlife + 1, sizeof *b->req) < 0)
        return b->rc;
    s->life[s->nlife] = (struct om_snap_life){.birth = birth,
                                              .death = UINT64_MAX,
                                              .size = size,
                                              .site = site,
                                              .birth_us = birth_us,
                                              .death_us = OM_SNAP_NO_TIME,
                                              .group = group};
    b->req[s->nlife] = 0;
    *idx = s->nlife++;
    return 0;
}

static uint64_t mix(int64_t dev, uint64_t k)
{
    k ^= (uint64_t)dev * UINT64_C(0x9e3779b97f4a7c15);
    k ^= k >> 33;
    k *= UINT64_C(0xff51afd7ed558ccd);
    return k ^ (k >> 33);
}

static int map_put(struct builder *b, int64_t dev, uint64_t key, size_t val)
{
    struct addr_map *m = &b->open;
    if ((m->n + 1) * 2 > m->mask) {
        size_t n = m->mask ? 2 * (m->mask + 1) : 1024;
        uint64_t *k2 = calloc(n, sizeof *k2);
        int64_t *d2 = calloc(n, sizeof *d2);
        size_t *v2 = calloc(n, sizeof *v2);
        if (!k2 || !v2 || !d2) {
            free(k2);
            free(d2);
            free(v2);
            return fail(b, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; m->mask && i <= m->mask; i++) {
            if (!m->val[i])
                continue;
            size_t j = mix(m->dev[i], m->key[i]) & (n - 1);
            while (v2[j])
                j = (j + 1) & (n - 1);
            k2[j] = m->key[i];
            d2[j] = m->dev[i];
            v2[j] = m->val[i];
        }
        free(m->key);
        free(m->dev);
        free(m->val);
        m->key = k2;
        m->dev = d2;
        m->val = v2;
        m->mask = n - 1;
    }
    size_t j = mix(dev, key) & m->mask;
    while (m->val[j] && (m->key[j] != key || m->dev[j] != dev))
        j = (j + 1) & m->mask;
    if (!m->val[j])
        m->n++;
    m->key[j] = key;
    m->dev[j] = dev;
    m->val[j] = val + 1;
    return 0;
}

/* The slot holding (dev, key), or SIZE_MAX. */
static size_t map_find(const struct addr_map *m, int64_t dev, uint64_t key)
{
    if (!m->mask)
        return SIZE_MAX;
    for (size_t j = mix(dev, key) & m->mask; m->val[j]; j = (j + 1) & m->mask)
        if (m->key[j] == key && m->dev[j] == dev)
            return j;
    return SIZE_MAX;
}

static void map_del(struct addr_map *m, size_t i)
{
    for (size_t j = i;;) {
        j = (j + 1) & m->mask;
        if (!m->val[j])
            break;
        size_t k = mix(m->dev[j], m->key[j]) & m->mask;
        /* Moves j back to i unless its home lies cyclically in (i, j]. */
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            m->key[i] = m->key[j];
            m->dev[i] = m->dev[j];
            m->val[i] = m->val[j];
            i = j;
        }
    }
    m->val[i] = 0;
    m->n--;
}

static int add_reserved(struct builder *b, size_t g, int64_t delta)
{
    int64_t *cur = &b->delta[g].cur;
    if (__builtin_add_overflow(*cur, delta, cur))
        return fail(b, -EINVAL, "segment sizes overflow");
    if (*cur > b->delta[g].max)
        b->delta[g].max = *cur;
    return 0;
}

/* Closes an open lifetime at time t. */
static void close_life(struct builder *b, size_t slot, uint64_t t, uint64_t us)
{
    size_t idx = b->open.val[slot] - 1;
    b->s->life[idx].death = t;
    b->s->life[idx].death_us = us;
    map_del(&b->open, slot);
}

static int read_trace(struct builder *b, size_t device, const struct om_pv *events)
{
    static const char *const where = "device_traces";
    size_t n = om_pv_len(events);
    int64_t t0 = -1;

    if (!om_pv_is(events, OM_PV_LIST))
        return fail(b, -EINVAL, "device_traces[%zu] is %s, not a list", device,
                    om_pv_type_name(events));
    for (size_t j = 0; j < n; j++) {
        const struct om_pv *e = om_pv_item(events, j);
        const struct om_pv *action = om_pv_get(e, "action");
        uint64_t t = j + 1, size, us = OM_SNAP_NO_TIME, site;
        int64_t addr = 0, stream = 0, time_us = -1;
        size_t g, slot, idx;

        if (!om_pv_is(e, OM_PV_DICT))
            return fail(b, -EINVAL, "%s[%zu][%zu] is %s, not a dict", where, device, j,
                        om_pv_type_name(e));
        if (!om_pv_is(action, OM_PV_STR))
            return fail(b, -EINVAL, "%s[%zu][%zu].action is missing or not a str", where, device,
                        j);
        if (get_int(b, e, "addr", true, 0, &addr, where, device, j) < 0 ||
            get_size(b, e, "size", true, &size, where, device, j) < 0 ||
            get_int(b, e, "stream", false, 0, &stream, where, device, j) < 0 ||
            get_int(b, e, "time_us", false, -1, &time_us, where, device, j) < 0)
            return b->rc;
        if (time_us >= 0) {
            if (t0 < 0)
                t0 = time_us;
            us = time_us >= t0 ? (uint64_t)(time_us - t0) : 0;
        }
        if ((g = group_of(b, (int64_t)device, stream)) == SIZE_MAX)
            return b->rc;
        const char *a = action->u.str.s;
        slot = map_find(&b->open, (int64_t)device, (uint64_t)addr);
        if (strcmp(a, "alloc") == 0) {
            b->s->groups[g].alloc_events++;
            if (slot != SIZE_MAX) { /* the last block here was not seen freed */
                size_t prev = b->open.val[slot] - 1;
                close_life(b, slot, b->req[prev] ? b->req[prev] : t, us);
            }
            if (site_of(b, om_pv_get(e, "frames"), where, device, j, &site) < 0 ||
                add_life(b, g, t, round_up(size), site, us, &idx) < 0 ||
                map_put(b, (int64_t)device, (uint64_t)addr, idx) < 0)
                return b->rc;
        } else if (strcmp(a, "free_requested") == 0 || strcmp(a, "free_completed") == 0) {
            if (slot == SIZE_MAX) { /* allocated before recording began */
                if (site_of(b, om_pv_get(e, "frames"), where, device, j, &site) < 0 ||
                    add_life(b, g, 0, round_up(size), site, 0, &idx) < 0 ||
                    map_put(b, (int64_t)device, (uint64_t)addr, idx) < 0)
                    return b->rc;
                slot = map_find(&b->open, (int64_t)device, (uint64_t)addr);
            }
            if (a[5] == 'c')
                close_life(b, slot, t, us);
            else if (!b->req[b->open.val[slot] - 1])
                b->req[b->open.val[slot] - 1] = t;
        } else if (strcmp(a, "segment_alloc") == 0 || strcmp(a, "segment_map") == 0) {
            if (add_reserved(b, g, (int64_t)size) < 0)
                return b->rc;
        } else if (strcmp(a, "segment_free") == 0 || strcmp(a, "segment_unmap") == 0) {
            if (add_reserved(b, g, -(int64_t)size) < 0)
                return b->rc;
        }
        /* snapshot, oom and actions of later PyTorch versions hold no buffer. */
    }
    /* Still open at the end: freed if a free was requested, else live to the end. These
     * stay in the map, so that the segments' blocks do not count them twice. */
    for (size_t k = 0; b->open.mask && k <= b->open.mask; k++) {
        if (!b->open.val[k] || b->open.dev[k] != (int64_t)device)
            continue;
        size_t idx = b->open.val[k] - 1;
        b->s->life[idx].death = b->req[idx] ? b->req[idx] : n + 1;
    }
    b->dev_end[device] = n + 1;
    return 0;
}

/* Blocks live when the snapshot was taken that the trace did not open. */
static int read_segments(struct builder *b, const struct om_pv *segs)
{
    static const char *const where = "segments";
    struct om_snapshot *s = b->s;
    size_t n = om_pv_len(segs);

    if (!om_pv_is(segs, OM_PV_LIST))
        return fail(b, -EINVAL, "segments is %s, not a list", om_pv_type_name(segs));
    for (size_t i = 0; i < n; i++) {
        const struct om_pv *seg = om_pv_item(segs, i);
        const struct om_pv *blocks = om_pv_get(seg, "blocks");
        int64_t device = 0, stream = 0, addr = 0;
        uint64_t total = 0;
        size_t g;

        if (!om_pv_is(seg, OM_PV_DICT))
            return fail(b, -EINVAL, "segments[%zu] is %s, not a dict", i, om_pv_type_name(seg));
        if (get_int(b, seg, "device", false, 0, &device, where, i, SIZE_MAX) < 0 ||
            get_int(b, seg, "stream", false, 0, &stream, where, i, SIZE_MAX) < 0 ||
            get_int(b, seg, "address", false, 0, &addr, where, i, SIZE_MAX) < 0 ||
            get_size(b, seg, "total_size", true, &total, where, i, SIZE_MAX) < 0)
            return b->rc;
        if (device < 0 || device > 1023)
            return fail(b, -EINVAL, "segments[%zu].device = %lld is not a device", i,
                        (long long)device);
        if (!om_pv_is(blocks, OM_PV_LIST))
            return fail(b, -EINVAL, "segments[%zu].blocks is missing or not a list", i);
        if ((g = group_of(b, device, stream)) == SIZE_MAX)
            return b->rc;
        if (__builtin_add_overflow(s->groups[g].reserved_end, total, &s->groups[g].reserved_end))
            return fail(b, -EINVAL, "segment sizes overflow");
        uint64_t at = (uint64_t)addr;
        for (size_t k = 0; k < om_pv_len(blocks); k++) {
            const struct om_pv *blk = om_pv_item(blocks, k), *state = om_pv_get(blk, "state");
            uint64_t size, req, site, end = b->dev_end[device] ? b->dev_end[device] : 1;
            int64_t a = 0;
            size_t idx;
            if (!om_pv_is(blk, OM_PV_DICT) || !om_pv_is(state, OM_PV_STR))
                return fail(b, -EINVAL, "segments[%zu].blocks[%zu] is not a dict with a state", i,
                            k);
            if (get_size(b, blk, "size", true, &size, "segments.blocks", i, k) < 0 ||
                get_size(b, blk, "requested_size", false, &req, "segments.blocks", i, k) < 0 ||
                get_int(b, blk, "address", false, (int64_t)at, &a, "segments.blocks", i, k) < 0)
                return b->rc;
            at += size;
            if (strncmp(state->u.str.s, "active", 6) != 0)
                continue;
            /* A block the trace left open is already a lifetime; a block the trace never
             * opened was live before recording began (or the trace lost its alloc). */
            if (map_find(&b->open, device, (uint64_t)a) != SIZE_MAX)
                continue;
            /* torch 1.13 keeps the request and its frames in the block's history, the
             * current allocation last. */
            const struct om_pv *hist = om_pv_get(blk, "history"),
                               *frames = om_pv_get(blk, "frames");
            const struct om_pv *last = om_pv_item(hist, om_pv_len(hist) - 1);
            if (hist && !om_pv_is(hist, OM_PV_LIST))
                return fail(b, -EINVAL, "segments[%zu].blocks[%zu].history is %s, not a list", i, k,
                            om_pv_type_name(hist));
            if (last) {
                if (!om_pv_is(last, OM_PV_DICT))
                    return fail(b, -EINVAL, "segments[%zu].blocks[%zu].history holds %s", i, k,
                                om_pv_type_name(last));
                if (req == UINT64_MAX &&
                    get_size(b, last, "real_size", false, &req, "segments.blocks", i, k) < 0)
                    return b->rc;
                if (!frames)
                    frames = om_pv_get(last, "frames");
            }
            size = round_up(req != UINT64_MAX ? req : size);
            if (site_of(b, frames, where, i, k, &site) < 0 ||
                add_life(b, g, 0, size, site, 0, &idx) < 0)
                return b->rc;
            s->life[idx].death = end;
        }
    }
    return 0;
}

static int by_group_birth(const void *x, const void *y)
{
    const struct om_snap_life *a = x, *c = y;
    if (a->group != c->group)
        return a->group < c->group ? -1 : 1;
    if (a->birth != c->birth)
        return a->birth < c->birth ? -1 : 1;
    return (a->death > c->death) - (a->death < c->death);
}

static int by_device_stream(const void *x, const void *y)
{
    const struct om_snap_group *a = x, *c = y;
    if (a->device != c->device)
        return a->device < c->device ? -1 : 1;
    return (a->stream > c->stream) - (a->stream < c->stream);
}

/* Orders the groups and lifetimes and settles the figures of each group. */
static int finish(struct builder *b)
{
    struct om_snapshot *s = b->s;
    size_t *rank = calloc(s->ngroups ? s->ngroups : 1, sizeof *rank);
    struct om_snap_group *sorted = malloc((s->ngroups ? s->ngroups : 1) * sizeof *sorted);

    if (!rank || !sorted) {
        free(rank);
        free(sorted);
        return fail(b, -ENOMEM, "out of memory");
    }
    /* Reserved bytes when recording began: those at the end less the trace's net change. */
    for (size_t g = 0; g < s->ngroups; g++) {
        struct om_snap_group *gr = &s->groups[g];
        int64_t start = (int64_t)gr->reserved_end - b->delta[g].cur;
        if (start < 0) /* the trace lost segment events: count from the end's figure */
            start = 0;
        gr->native_peak = (uint64_t)start + (uint64_t)b->delta[g].max;
        if (gr->native_peak < gr->reserved_end)
            gr->native_peak = gr->reserved_end;
        gr->end_time = b->dev_end[gr->device] ? b->dev_end[gr->device] : 1;
        gr->nlife = (uint64_t)g; /* the old index, for the ranks below */
    }
    if (s->ngroups) {
        memcpy(sorted, s->groups, s->ngroups * sizeof *sorted);
        qsort(sorted, s->ngroups, sizeof *sorted, by_device_stream);
    }
    for (size_t g = 0; g < s->ngroups; g++) {
        rank[sorted[g].nlife] = g;
        sorted[g].nlife = 0;
    }
    if (s->ngroups)
        memcpy(s->groups, sorted, s->ngroups * sizeof *sorted);
    free(sorted);
    for (size_t i = 0; i < s->nlife; i++) {
        s->life[i].group = rank[s->life[i].group];
        s->groups[s->life[i].group].nlife++;
    }
    free(rank);
    if (s->nlife)
        qsort(s->life, s->nlife, sizeof *s->life, by_group_birth);
    s->sites = calloc(s->nsites ? s->nsites : 1, sizeof *s->sites);
    if (!s->sites)
        return fail(b, -ENOMEM, "out of memory");
    for (size_t i = 0; i < s->nsites; i++)
        s->sites[i] =
            (struct om_snap_site){b->keys[i].n ? s->frames + b->keys[i].first : NULL, b->keys[i].n};
    return 0;
}

int om_snapshot_load(const char *path, struct om_snapshot *s, char *err, size_t errlen)
{
    struct builder b = {.path = path, .s = s, .err = err, .errlen = errlen};
    const struct om_pv *segs, *traces = NULL;
    int rc;

    memset(s, 0, sizeof *s);
    if ((rc = om_pickle_load(path, &s->pk, err, errlen)) < 0)
        return rc;
    if (om_pv_is(s->pk.root, OM_PV_LIST)) {
        s->legacy = true;
        segs = s->pk.root;
    } else if (om_pv_is(s->pk.root, OM_PV_DICT)) {
        segs = om_pv_get(s->pk.root, "segments");
        traces = om_pv_get(s->pk.root, "device_traces");
        if (!segs) {
            fail(&b, -EINVAL, "not a PyTorch memory snapshot: the dict has no 'segments'");
            goto out;
        }
        if (traces && !om_pv_is(traces, OM_PV_LIST) && !om_pv_is(traces, OM_PV_NONE)) {
            fail(&b, -EINVAL, "device_traces is %s, not a list", om_pv_type_name(traces));
            goto out;
        }
    } else {
        fail(&b, -EINVAL, "not a PyTorch memory snapshot: the pickle holds %s",
             om_pv_type_name(s->pk.root));
        goto out;
    }
    if (om_pv_len(traces) > MAX_DEVICES) {
        fail(&b, -EINVAL, "device_traces lists %zu devices (at most %d)", om_pv_len(traces),
             MAX_DEVICES);
        goto out;
    }
    for (size_t d = 0; d < om_pv_len(traces) && b.rc == 0; d++)
        read_trace(&b, d, om_pv_item(traces, d));
    if (b.rc == 0)
        read_segments(&b, segs);
    if (b.rc == 0)
        finish(&b);
out:
    free(b.keys);
    free(b.slots);
    free(b.req);
    free(b.open.key);
    free(b.open.dev);
    free(b.open.val);
    free(b.delta);
    if (b.rc < 0)
        om_snapshot_free(s);
    return b.rc;
}

void om_snapshot_free(struct om_snapshot *s)
{
    free(s->groups);
    free(s->life);
    free(s->sites);
    free(s->frames);
    om_pickle_free(&s->pk);
    memset(s, 0, sizeof *s);
}
