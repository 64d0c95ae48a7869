/* optmem report --format memory-viz: a domain as a PyTorch memory snapshot pickle, no Python. */
#include "commands.h"
#include "replanner.h"
#include "report_domain.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Where the domain's one segment starts: reports record offsets, not addresses, and 0 would
 * read as a null pointer. */
#define MEMVIZ_BASE UINT64_C(0x7f0000000000)
/* Python's pickler puts at most this many items under one MARK; readers expect no more. */
#define BATCH 1000

/* Pickle opcodes (protocol 2): containers, strings and integers only. */
enum {
    OP_PROTO = 0x80,
    OP_STOP = '.',
    OP_MARK = '(',
    OP_EMPTY_DICT = '}',
    OP_EMPTY_LIST = ']',
    OP_SETITEMS = 'u',
    OP_APPEND = 'a',
    OP_APPENDS = 'e',
    OP_BININT1 = 'K',
    OP_BININT = 'J',
    OP_LONG1 = 0x8a,
    OP_BINUNICODE = 'X',
    OP_LONG_BINPUT = 'r',
    OP_LONG_BINGET = 'j',
};

struct writer {
    FILE *out;
    uint32_t next_memo;
    uint32_t *site_memo; /* per site: memo index + 1 of its frames list, 0 before its first */
    struct om_symbolizer *sym;
    const struct om_report *r;
};

static void op(struct writer *w, int c)
{
    fputc(c, w->out);
}

static void le32(struct writer *w, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        fputc((int)(v >> (8 * i) & 0xff), w->out);
}

/* Python reads LONG1 as two's complement: a top bit set takes one more byte. */
static void pk_uint(struct writer *w, uint64_t v)
{
    if (v < 256) {
        op(w, OP_BININT1);
        fputc((int)v, w->out);
    } else if (v <= INT32_MAX) {
        op(w, OP_BININT);
        le32(w, (uint32_t)v);
    } else {
        unsigned n = 0;
        for (uint64_t x = v; x; x >>= 8)
            n++;
        bool extra = v >> (8 * n - 1) & 1;
        op(w, OP_LONG1);
        fputc((int)(n + extra), w->out);
        for (unsigned i = 0; i < n; i++)
            fputc((int)(v >> (8 * i) & 0xff), w->out);
        if (extra)
            fputc(0, w->out);
    }
}

/* The length of a valid UTF-8 sequence at s, or 0. */
static size_t utf8_seq(const unsigned char *s)
{
    size_t n = s[0] < 0x80             ? 1
               : (s[0] & 0xe0) == 0xc0 ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (n == 0 || (n == 2 && s[0] < 0xc2) || (n == 4 && s[0] > 0xf4))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
        return 0; /* overlong, surrogate */
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
        return 0;
    return n;
}

/* Unpicklers decode strings as strict UTF-8: a path's stray bytes become U+FFFD. */
static void pk_str(struct writer *w, const char *str)
{
    static const char repl[] = "\xef\xbf\xbd";
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    size_t len = 0;
    for (size_t i = 0, n; s[i]; i += n ? n : 1)
        len += (n = utf8_seq(s + i)) ? n : 3;
    op(w, OP_BINUNICODE);
    le32(w, (uint32_t)len);
    for (size_t i = 0, n; s[i]; i += n ? n : 1) {
        if ((n = utf8_seq(s + i)))
            fwrite(s + i, 1, n, w->out);
        else
            fwrite(repl, 1, 3, w->out);
    }
}

static void key_uint(struct writer *w, const char *k, uint64_t v)
{
    pk_str(w, k);
    pk_uint(w, v);
}

static void key_str(struct writer *w, const char *k, const char *v)
{
    pk_str(w, k);
    pk_str(w, v);
}

/* A list's items go in batches; count is the number written so far, the item comes next. */
static void list_item(struct writer *w, size_t count)
{
    if (count % BATCH == 0) {
        if (count)
            op(w, OP_APPENDS);
        op(w, OP_MARK);
    }
}

static void list_end(struct writer *w, size_t count)
{
    if (count)
        op(w, OP_APPENDS);
}

/* A site's frames, innermost first: written once, then fetched from the pickle's memo. */
static int pk_frames(struct writer *w, uint64_t site)
{
    uint32_t *memo = &w->site_memo[site];
    if (*memo) {
        op(w, OP_LONG_BINGET);
        le32(w, *memo - 1);
        return 0;
    }
    const struct om_dframe *f;
    size_t n;
    int rc = om_sym_site(w->sym, &w->r->sites[site], &f, &n);
    if (rc != 0)
        return rc;
    char buf[512];
    op(w, OP_EMPTY_LIST);
    for (size_t k = 0; k < n; k++) {
        list_item(w, k);
        op(w, OP_EMPTY_DICT);
        op(w, OP_MARK);
        key_str(w, "filename", f[k].file ? f[k].file : f[k].module ? f[k].module : "??");
        key_uint(w, "line", f[k].file ? f[k].line : 0);
        key_str(w, "name", om_dframe_label(&f[k], buf, sizeof buf));
        op(w, OP_SETITEMS);
    }
    list_end(w, n);
    op(w, OP_LONG_BINPUT);
    le32(w, w->next_memo);
    *memo = ++w->next_memo;
    return 0;
}

/* One recorded lifetime and where it lies. */
struct blk {
    const struct om_rlife *l;
    uint64_t addr;
};

/* A block's bytes: a request of 0 bytes still takes an address of its own. */
static uint64_t bsize(const struct om_rlife *l)
{
    return l->size ? l->size : 1;
}

/* Addresses: the arena offsets the report recorded, the other blocks placed around them by
 * the replanner's greedy (deterministic) placement; without consistent offsets, all of them
 * placed. *top gets the segment's size. */
static int place(const struct om_report *r, struct blk *b, size_t n, uint64_t *top)
{
    om_rp_block *rb = calloc(n ? n : 1, sizeof *rb);
    uint64_t *off = calloc(n ? n : 1, sizeof *off);
    om_rp_options opt = {.algo = OM_RP_ALGO_GREEDY, .alloc = om_cli_rp_heap};
    om_rp_result res;
    int rc = -ENOMEM;
    if (!rb || !off)
        goto out;
    *top = 0;
    uint64_t t0 = n ? b[0].l->birth : 0; /* blocks come in birth order */
    for (int fixed = 1; fixed >= 0; fixed--) {
        for (size_t i = 0; i < n; i++) {
            const struct om_rlife *l = b[i].l;
            uint64_t lower = l->birth - t0;
            uint64_t upper = (l->death == OM_NO_VALUE ? r->sample_end : l->death) - t0;
            rb[i] = (om_rp_block){.id = i,
                                  .lower = lower,
                                  .upper = upper > lower ? upper : lower + 1,
                                  .size = bsize(l),
                                  .fixed = fixed && l->offset != OM_NO_VALUE,
                                  .offset = l->offset == OM_NO_VALUE ? 0 : l->offset};
        }
        rc = om_rp_plan(rb, n, &opt, off, &res);
        if (rc == 0)
            rc = om_rp_check(rb, n, 0, off, &opt.alloc, NULL, 0);
        if (rc != -EINVAL)
            break;
    }
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        b[i].addr = MEMVIZ_BASE + off[i];
        if (off[i] + rb[i].size > *top)
            *top = off[i] + rb[i].size;
    }
out:
    free(rb);
    free(off);
    return rc;
}

static int by_addr(const void *x, const void *y)
{
    const struct blk *a = *(struct blk *const *)x, *c = *(struct blk *const *)y;
    return (a->addr > c->addr) - (a->addr < c->addr);
}

/* Frees in the order they happened: by death, then by birth. */
static int by_death(const void *x, const void *y)
{
    const struct blk *a = *(struct blk *const *)x, *c = *(struct blk *const *)y;
    if (a->l->death != c->l->death)
        return a->l->death < c->l->death ? -1 : 1;
    return (a->l->birth > c->l->birth) - (a->l->birth < c->l->birth);
}

static void pk_gap(struct writer *w, uint64_t addr, uint64_t size)
{
    op(w, OP_EMPTY_DICT);
    op(w, OP_MARK);
    key_uint(w, "address", addr);
    key_uint(w, "size", size);
    key_uint(w, "requested_size", 0);
    key_str(w, "state", "inactive");
    pk_str(w, "frames");
    op(w, OP_EMPTY_LIST);
    op(w, OP_SETITEMS);
}

/* The segment as it stood when the report was written: its blocks live then, and the gaps
 * between them, tiling it from its address. */
static int pk_segment(struct writer *w, int64_t device, struct blk **live, size_t nlive,
                      uint64_t top)
{
    uint64_t used = 0;
    for (size_t i = 0; i < nlive; i++)
        used += bsize(live[i]->l);
    op(w, OP_EMPTY_DICT);
    op(w, OP_MARK);
    key_uint(w, "device", (uint64_t)device);
    key_uint(w, "address", MEMVIZ_BASE);
    key_uint(w, "total_size", top);
    key_uint(w, "allocated_size", used);
    key_uint(w, "active_size", used);
    key_uint(w, "requested_size", used);
    key_uint(w, "stream", 0);
    key_str(w, "segment_type", "large");
    pk_str(w, "blocks");
    op(w, OP_EMPTY_LIST);
    size_t count = 0;
    uint64_t at = MEMVIZ_BASE;
    for (size_t i = 0; i < nlive; i++) {
        const struct blk *b = live[i];
        if (b->addr > at) {
            list_item(w, count++);
            pk_gap(w, at, b->addr - at);
        }
        list_item(w, count++);
        op(w, OP_EMPTY_DICT);
        op(w, OP_MARK);
        key_uint(w, "address", b->addr);
        key_uint(w, "size", bsize(b->l));
        key_uint(w, "requested_size", b->l->size);
        key_str(w, "state", "active_allocated");
        pk_str(w, "frames");
        int rc = pk_frames(w, b->l->site);
        if (rc != 0)
            return rc;
        /* torch 1.13's and 2.0's readers take a block's request and frames from here. */
        pk_str(w, "history");
        op(w, OP_EMPTY_LIST);
        op(w, OP_EMPTY_DICT);
        op(w, OP_MARK);
        key_uint(w, "addr", b->addr);
        key_uint(w, "real_size", b->l->size);
        pk_str(w, "frames");
        if ((rc = pk_frames(w, b->l->site)) != 0)
            return rc;
        op(w, OP_SETITEMS);
        op(w, OP_APPEND);
        op(w, OP_SETITEMS);
        at = b->addr + bsize(b->l);
    }
    if (top > at - MEMVIZ_BASE) {
        list_item(w, count++);
        pk_gap(w, at, MEMVIZ_BASE + top - at);
    }
    list_end(w, count);
    op(w, OP_SETITEMS);
    return 0;
}

static void pk_event_head(struct writer *w, const char *action, uint64_t addr, uint64_t size,
                          uint64_t us)
{
    op(w, OP_EMPTY_DICT);
    op(w, OP_MARK);
    key_str(w, "action", action);
    key_uint(w, "addr", addr);
    key_uint(w, "size", size);
    key_uint(w, "stream", 0);
    key_uint(w, "time_us", us);
    pk_str(w, "frames");
}

/* The trace: the segment's allocation, then every lifetime's alloc and, when it ended within
 * the sample, its free_requested and free_completed, in request order. */
static int pk_trace(struct writer *w, struct blk *b, size_t n, struct blk **dead, size_t ndead,
                    uint64_t top)
{
    size_t count = 0, d = 0;
    uint64_t us = 0;
    op(w, OP_EMPTY_LIST);
    if (n == 0)
        return 0;
    /* Resident blocks have no times in the report: they take the first time known, the
     * sample's first request's, so that times never go back. */
    for (size_t i = 0; i < n; i++)
        if (b[i].l->birth_ns != OM_NO_VALUE) {
            us = b[i].l->birth_ns / 1000;
            break;
        }
    list_item(w, count++);
    pk_event_head(w, "segment_alloc", MEMVIZ_BASE, top, us);
    op(w, OP_EMPTY_LIST);
    op(w, OP_SETITEMS);
    for (size_t i = 0; i <= n; i++) {
        /* A block is live during requests [birth, death): its free comes before request death. */
        for (; d < ndead && (i == n || dead[d]->l->death <= b[i].l->birth); d++) {
            const struct blk *f = dead[d];
            if (f->l->death_ns != OM_NO_VALUE)
                us = f->l->death_ns / 1000;
            for (int k = 0; k < 2; k++) {
                list_item(w, count++);
                pk_event_head(w, k ? "free_completed" : "free_requested", f->addr, bsize(f->l), us);
                op(w, OP_EMPTY_LIST); /* the report has no stack of the free */
                op(w, OP_SETITEMS);
            }
        }
        if (i == n)
            break;
        if (b[i].l->birth_ns != OM_NO_VALUE)
            us = b[i].l->birth_ns / 1000;
        list_item(w, count++);
        pk_event_head(w, "alloc", b[i].addr, bsize(b[i].l), us);
        int rc = pk_frames(w, b[i].l->site);
        if (rc != 0)
            return rc;
        op(w, OP_SETITEMS);
    }
    list_end(w, count);
    return 0;
}

/* The device number of a domain: N of "cuda:N"; the host is shown as device 0. */
static int64_t device_of(const char *domain)
{
    const char *colon = domain ? strrchr(domain, ':') : NULL;
    if (!colon || om_domain_is_host(domain))
        return 0;
    char *end;
    long long v = strtoll(colon + 1, &end, 10);
    return *end || v < 0 || v > 1023 ? 0 : (int64_t)v;
}

static int by_birth(const void *x, const void *y)
{
    const struct om_rlife *a = x, *c = y;
    return (a->birth > c->birth) - (a->birth < c->birth);
}

/* What the export holds, for whoever reads it: the viewers ignore keys they do not know. */
static void pk_metadata(struct writer *w, size_t nsample, size_t nresident)
{
    const struct om_report *r = w->r;
    /* The report holds every lifetime when its sample begins with the domain's first request
     * (the timeline's first); else the sample and the blocks live at its start. */
    bool all = r->sample_first <= r->timeline_first;
    pk_str(w, "optmem");
    op(w, OP_EMPTY_DICT);
    op(w, OP_MARK);
    key_str(w, "lifetimes", all ? "all" : "sample");
    key_str(w, "covers",
            all ? "every lifetime of the domain"
                : "the report's sample (its most recent requests, whole iterations) and the "
                  "blocks born before it and live at its first request; blocks born and freed "
                  "before the sample are not in the report");
    key_uint(w, "first_request", r->sample_first);
    key_uint(w, "end_request", r->sample_end);
    key_uint(w, "sample_lifetimes", nsample);
    key_uint(w, "resident_lifetimes", nresident);
    key_uint(w, "resident_omitted_bytes", r->resident_omitted_bytes);
    op(w, OP_SETITEMS);
}

static int write_snapshot(struct writer *w, int64_t device)
{
    const struct om_report *r = w->r;
    size_t n = 0, nlive = 0, ndead = 0, nres = 0;
    for (size_t i = 0; i < r->nlife; i++)
        n += r->life[i].site != OM_NO_VALUE && r->life[i].site < r->nsites;
    /* The blocks born before the sample and live at its start (parameters, optimizer state)
     * come first, in birth order, without times: the report has none for them. */
    struct om_rlife *res = calloc(r->nresident ? r->nresident : 1, sizeof *res);
    struct blk *b = calloc(n + r->nresident ? n + r->nresident : 1, sizeof *b);
    struct blk **live = calloc(n + r->nresident ? n + r->nresident : 1, sizeof *live);
    struct blk **dead = calloc(n + r->nresident ? n + r->nresident : 1, sizeof *dead);
    uint64_t top = 0;
    int rc = -ENOMEM;
    if (!res || !b || !live || !dead)
        goto out;
    for (size_t i = 0; i < r->nresident; i++) {
        const struct om_rresident *x = &r->resident[i];
        res[nres++] = (struct om_rlife){x->site,     x->size,     x->birth,   x->death,
                                        OM_NO_VALUE, OM_NO_VALUE, OM_NO_VALUE};
    }
    qsort(res, nres, sizeof *res, by_birth);
    n = 0;
    for (size_t i = 0; i < nres; i++)
        b[n++].l = &res[i];
    for (size_t i = 0; i < r->nlife; i++)
        if (r->life[i].site != OM_NO_VALUE && r->life[i].site < r->nsites)
            b[n++].l = &r->life[i];
    if ((rc = place(r, b, n, &top)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (b[i].l->death == OM_NO_VALUE)
            live[nlive++] = &b[i];
        else
            dead[ndead++] = &b[i];
    }
    qsort(live, nlive, sizeof *live, by_addr);
    qsort(dead, ndead, sizeof *dead, by_death);

    fputc(OP_PROTO, w->out);
    fputc(2, w->out);
    op(w, OP_EMPTY_DICT);
    op(w, OP_MARK);
    pk_str(w, "segments");
    op(w, OP_EMPTY_LIST);
    if (n) {
        op(w, OP_MARK);
        if ((rc = pk_segment(w, device, live, nlive, top)) != 0)
            goto out;
        op(w, OP_APPENDS);
    }
    /* One trace per device up to the one shown: the viewers index the list by device. */
    pk_str(w, "device_traces");
    op(w, OP_EMPTY_LIST);
    for (int64_t d = 0; d <= device; d++) {
        list_item(w, (size_t)d);
        if (d < device)
            op(w, OP_EMPTY_LIST);
        else if ((rc = pk_trace(w, b, n, dead, ndead, top)) != 0)
            goto out;
    }
    list_end(w, (size_t)device + 1);
    pk_str(w, "allocator_settings");
    op(w, OP_EMPTY_DICT);
    pk_metadata(w, n - nres, nres);
    op(w, OP_SETITEMS);
    op(w, OP_STOP);
    rc = ferror(w->out) ? -EIO : 0;
out:
    free(res);
    free(b);
    free(live);
    free(dead);
    return rc;
}

int om_render_memviz_in(const struct om_merged *m, const struct om_render *o,
                        const struct om_domain_view *v)
{
    if (m->nreports != 1)
        return -EINVAL;
    const struct om_report *r = &m->reports[0];
    struct writer w = {.out = o->out, .sym = o->sym, .r = r};
    w.site_memo = calloc(r->nsites ? r->nsites : 1, sizeof *w.site_memo);
    if (!w.site_memo)
        return -ENOMEM;
    int rc = write_snapshot(&w, device_of(v->shown));
    free(w.site_memo);
    return rc;
}
