/* MiniMalloc's lifetime CSV (id,lower,upper,size[,alignment]), with optmem's fixed blocks and
 * period, for the CLI, the tests and the preload library's OPTMEM_PLAN_DUMP. */
#include "om_common.h"
#include "rp_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#define LINE_MAX_LEN 4096
#define MAX_COLS 64

enum { COL_ID, COL_LOWER, COL_UPPER, COL_SIZE, COL_ALIGN, COL_FIXED, COL_OFFSET, NCOLS };

static const char *const col_names[NCOLS] = {"id",        "lower", "upper", "size",
                                             "alignment", "fixed", "offset"};

/* A comment line giving the cyclic timeline's period: "# period: P". */
#define PERIOD_KEY "period:"

typedef struct reader {
    const char *path;
    const om_rp_allocator *a;
    char *err;
    size_t errlen;
    om_rp_block *blocks;
    uint64_t *lines; /* line of each block, for duplicate messages */
    size_t n, cap;
    int col[NCOLS]; /* field index of each known column, -1 if absent */
    int ncols;
    uint64_t period, period_line; /* from a "# period: P" line; 0: none */
} reader;

/* Splits a line in place at commas; trims blanks and the line end. Returns the field count. */
static int split(char *line, char **f)
{
    int n = 0;
    char *p = line;

    for (;;) {
        char *end = strchr(p, ',');
        char *e;

        if (end)
            *end = '\0';
        while (isspace((unsigned char)*p))
            p++;
        e = p + strlen(p);
        while (e > p && isspace((unsigned char)e[-1]))
            *--e = '\0';
        if (n < MAX_COLS)
            f[n] = p;
        n++;
        if (!end)
            return n;
        p = end + 1;
    }
}

static int parse_u64(const char *s, uint64_t *v)
{
    uint64_t x = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -2;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    *v = x;
    return 0;
}

static int header(reader *r, char *line, uint64_t lineno)
{
    char *f[MAX_COLS];
    int n = split(line, f);

    if (n > MAX_COLS)
        return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": more than %d columns", r->path, lineno,
                       MAX_COLS),
               -EINVAL;
    for (int c = 0; c < NCOLS; c++)
        r->col[c] = -1;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < NCOLS; c++)
            if (strcmp(f[i], col_names[c]) == 0)
                r->col[c] = i;
    for (int c = 0; c < COL_ALIGN; c++)
        if (r->col[c] < 0)
            return rp_errf(r->err, r->errlen,
                           "%s:%" PRIu64 ": header lacks column '%s' (need id,lower,upper,size)",
                           r->path, lineno, col_names[c]),
                   -EINVAL;
    /* offset is an output column (ignored) unless fixed says which blocks keep theirs. */
    if (r->col[COL_FIXED] >= 0 && r->col[COL_OFFSET] < 0)
        return rp_errf(r->err, r->errlen,
                       "%s:%" PRIu64 ": header has column 'fixed' but no 'offset' to fix blocks at",
                       r->path, lineno),
               -EINVAL;
    if (r->col[COL_FIXED] < 0)
        r->col[COL_OFFSET] = -1;
    r->ncols = n;
    return 0;
}

/* A line starting with '#': a comment, or "# period: P" (once, P at least 1). */
static int comment(reader *r, const char *line, uint64_t lineno)
{
    char value[32];
    const char *p = line + 1;
    uint64_t v;
    size_t len;

    while (isspace((unsigned char)*p))
        p++;
    if (strncmp(p, PERIOD_KEY, strlen(PERIOD_KEY)) != 0)
        return 0;
    p += strlen(PERIOD_KEY);
    while (isspace((unsigned char)*p))
        p++;
    len = strlen(p);
    while (len && isspace((unsigned char)p[len - 1]))
        len--;
    if (len >= sizeof value)
        len = sizeof value - 1;
    memcpy(value, p, len);
    value[len] = '\0';
    if (parse_u64(value, &v) != 0 || v == 0)
        return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": period '%s' is not a positive integer",
                       r->path, lineno, value),
               -EINVAL;
    if (r->period_line)
        return rp_errf(r->err, r->errlen,
                       "%s:%" PRIu64 ": a second period (the first on line %" PRIu64 ")", r->path,
                       lineno, r->period_line),
               -EINVAL;
    r->period = v;
    r->period_line = lineno;
    return 0;
}

static int grow(reader *r)
{
    size_t cap = r->cap ? 2 * r->cap : 256;
    om_rp_block *nb = r->a->alloc(r->a->ctx, cap * sizeof(*nb));
    uint64_t *nl = r->a->alloc(r->a->ctx, cap * sizeof(*nl));

    if (!nb || !nl) {
        if (nb)
            r->a->release(r->a->ctx, nb, cap * sizeof(*nb));
        if (nl)
            r->a->release(r->a->ctx, nl, cap * sizeof(*nl));
        return -ENOMEM;
    }
    if (r->n) {
        memcpy(nb, r->blocks, r->n * sizeof(*nb));
        memcpy(nl, r->lines, r->n * sizeof(*nl));
    }
    if (r->cap) {
        r->a->release(r->a->ctx, r->blocks, r->cap * sizeof(*nb));
        r->a->release(r->a->ctx, r->lines, r->cap * sizeof(*nl));
    }
    r->blocks = nb;
    r->lines = nl;
    r->cap = cap;
    return 0;
}

static int row(reader *r, char *line, uint64_t lineno)
{
    char *f[MAX_COLS];
    int n = split(line, f);
    uint64_t v[NCOLS] = {0};
    om_rp_block *b;
    char msg[160];

    if (n != r->ncols)
        return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": %d fields, the header has %d", r->path,
                       lineno, n, r->ncols),
               -EINVAL;
    for (int c = 0; c < NCOLS; c++) {
        int rc;
        if (r->col[c] < 0)
            continue;
        rc = parse_u64(f[r->col[c]], &v[c]);
        if (rc == -2)
            return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": %s '%s' is too large", r->path,
                           lineno, col_names[c], f[r->col[c]]),
                   -EINVAL;
        if (rc < 0)
            return rp_errf(r->err, r->errlen,
                           "%s:%" PRIu64 ": %s '%s' is not a non-negative integer", r->path, lineno,
                           col_names[c], f[r->col[c]]),
                   -EINVAL;
    }
    if (r->n == r->cap && grow(r) < 0)
        return rp_errf(r->err, r->errlen, "%s: out of memory", r->path), -ENOMEM;
    b = &r->blocks[r->n];
    memset(b, 0, sizeof(*b));
    b->id = v[COL_ID];
    b->lower = v[COL_LOWER];
    b->upper = v[COL_UPPER];
    b->size = v[COL_SIZE];
    b->align = v[COL_ALIGN];
    if (v[COL_FIXED] > 1)
        return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": fixed '%s' is not 0 or 1", r->path,
                       lineno, f[r->col[COL_FIXED]]),
               -EINVAL;
    b->fixed = (int)v[COL_FIXED];
    b->offset = b->fixed ? v[COL_OFFSET] : 0;
    /* The same checks as the planner's, but named by file and line. */
    if (om_rp_validate(b, 1, 0, msg, sizeof(msg)) < 0)
        return rp_errf(r->err, r->errlen, "%s:%" PRIu64 ": %s", r->path, lineno, msg), -EINVAL;
    r->lines[r->n++] = lineno;
    return 0;
}

static int no_duplicates(reader *r)
{
    rp_mem m = {r->a, NULL};
    rp_kv *kv = rp_alloc(&m, r->n + 1, sizeof(*kv));
    int rc = 0;

    if (!kv) {
        rp_errf(r->err, r->errlen, "%s: out of memory", r->path);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->n; i++) {
        kv[i].k1 = r->blocks[i].id;
        kv[i].k2 = r->lines[i];
        kv[i].v = (uint32_t)i;
    }
    rp_sort_kv(kv, r->n);
    for (size_t i = 1; i < r->n; i++) {
        if (kv[i].k1 == kv[i - 1].k1) {
            rp_errf(r->err, r->errlen,
                    "%s:%" PRIu64 ": duplicate id %" PRIu64 " (first on line %" PRIu64 ")", r->path,
                    kv[i].k2, kv[i].k1, kv[i - 1].k2);
            rc = -EINVAL;
            break;
        }
    }
    rp_mem_free_all(&m);
    return rc;
}

int om_rp_csv_read(const char *path, const om_rp_allocator *alloc, om_rp_block **blocks, size_t *n,
                   char *err, size_t errlen)
{
    uint64_t period;
    return om_rp_csv_read_instance(path, alloc, blocks, n, &period, err, errlen);
}

int om_rp_csv_read_instance(const char *path, const om_rp_allocator *alloc, om_rp_block **blocks,
                            size_t *n, uint64_t *period, char *err, size_t errlen)
{
    reader r = {path, alloc, err, errlen, NULL, NULL, 0, 0, {0}, 0, 0, 0};
    char line[LINE_MAX_LEN];
    uint64_t lineno = 0;
    int rc = 0, have_header = 0;
    FILE *f;

    *blocks = NULL;
    *n = 0;
    *period = 0;
    if (!(f = fopen(path, "r"))) {
        rc = -errno;
        rp_errf(err, errlen, "%s: %s", path, strerror(errno));
        return rc;
    }
    while (fgets(line, sizeof(line), f)) {
        size_t len = strlen(line);
        char *p = line;

        lineno++;
        if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = -EINVAL;
            rp_errf(err, errlen, "%s:%" PRIu64 ": line too long", path, lineno);
            goto out;
        }
        if (lineno == 1 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb &&
            (unsigned char)p[2] == 0xbf)
            p += 3;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            continue;
        if (*p == '#') {
            if ((rc = comment(&r, p, lineno)) < 0)
                goto out;
            continue;
        }
        rc = have_header ? row(&r, p, lineno) : header(&r, p, lineno);
        if (rc < 0)
            goto out;
        have_header = 1;
    }
    if (ferror(f)) {
        rc = -EIO;
        rp_errf(err, errlen, "%s: read error", path);
        goto out;
    }
    if (!have_header) {
        rc = -EINVAL;
        rp_errf(err, errlen, "%s:1: empty file, expected the header id,lower,upper,size", path);
        goto out;
    }
    if ((rc = no_duplicates(&r)) < 0)
        goto out;
out:
    fclose(f);
    if (r.cap)
        alloc->release(alloc->ctx, r.lines, r.cap * sizeof(*r.lines));
    if (rc < 0) {
        if (r.cap)
            alloc->release(alloc->ctx, r.blocks, r.cap * sizeof(*r.blocks));
        return rc;
    }
    /* Handed out with the capacity recorded nowhere: copy to an exact-size array. */
    if (r.n) {
        om_rp_block *exact = alloc->alloc(alloc->ctx, r.n * sizeof(*exact));
        if (!exact) {
            alloc->release(alloc->ctx, r.blocks, r.cap * sizeof(*r.blocks));
            rp_errf(err, errlen, "%s: out of memory", path);
            return -ENOMEM;
        }
        memcpy(exact, r.blocks, r.n * sizeof(*exact));
        alloc->release(alloc->ctx, r.blocks, r.cap * sizeof(*r.blocks));
        *blocks = exact;
    }
    *n = r.n;
    *period = r.period;
    return 0;
}

void om_rp_csv_free(const om_rp_allocator *alloc, om_rp_block *blocks, size_t n)
{
    if (blocks && n)
        alloc->release(alloc->ctx, blocks, n * sizeof(*blocks));
}

/* Output without stdio and without malloc (the preload library writes from inside an
 * interposed allocator): lines go through a buffer on the stack. */
typedef struct writer {
    int fd, rc;
    size_t used;
    char buf[4096];
} writer;

static void flush(writer *w)
{
    if (w->rc == 0)
        w->rc = om_write_all(w->fd, w->buf, w->used);
    w->used = 0;
}

static void put(writer *w, const char *text)
{
    for (; *text; text++) {
        if (w->used == sizeof w->buf)
            flush(w);
        w->buf[w->used++] = *text;
    }
}

static void put_u64(writer *w, uint64_t v, char sep)
{
    char digits[24], *p = digits + sizeof digits;
    *--p = '\0';
    if (sep)
        *--p = sep;
    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    put(w, p);
}

int om_rp_csv_write_fd(int fd, const om_rp_block *blocks, size_t n, uint64_t period,
                       const uint64_t *offsets, const char *comment_text)
{
    writer w = {.fd = fd};
    int aligned = 0, fixed = 0;

    for (size_t i = 0; i < n; i++) {
        aligned |= blocks[i].align > 1;
        fixed |= blocks[i].fixed;
    }
    if (comment_text) {
        put(&w, "# ");
        put(&w, comment_text);
        put(&w, "\n");
    }
    if (period) {
        put(&w, "# " PERIOD_KEY " ");
        put_u64(&w, period, '\n');
    }
    put(&w, "id,lower,upper,size");
    put(&w, aligned ? ",alignment" : "");
    put(&w, fixed ? ",fixed" : "");
    put(&w, offsets || fixed ? ",offset\n" : "\n");
    for (size_t i = 0; i < n; i++) {
        const om_rp_block *b = &blocks[i];
        int more = aligned || fixed || offsets;
        put_u64(&w, b->id, ',');
        put_u64(&w, b->lower, ',');
        put_u64(&w, b->upper, ',');
        put_u64(&w, b->size, more ? ',' : '\n');
        if (aligned)
            put_u64(&w, b->align ? b->align : 1, fixed || offsets ? ',' : '\n');
        if (fixed)
            put_u64(&w, (uint64_t)b->fixed, ',');
        if (offsets || fixed)
            put_u64(&w, offsets ? offsets[i] : b->fixed ? b->offset : 0, '\n');
    }
    flush(&w);
    return w.rc;
}

int om_rp_csv_write(FILE *f, const om_rp_block *blocks, size_t n, const uint64_t *offsets)
{
    if (fflush(f) != 0)
        return -errno;
    return om_rp_csv_write_fd(fileno(f), blocks, n, 0, offsets, NULL);
}
