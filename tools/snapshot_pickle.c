/* Reads the pickles of torch.cuda.memory._dump_snapshot without building any Python class. */
#include "snapshot_pickle.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Nesting of MARKs: a snapshot nests about six deep; this keeps a hostile file bounded. */
#define MAX_MARKS 4096
/* Largest file read whole; snapshots are a few hundred MB at most. */
#define MAX_FILE_BYTES (UINT64_C(4) << 30)
#define CHUNK_BYTES ((size_t)1 << 20)

struct om_pickle_chunk {
    struct om_pickle_chunk *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
};

struct parser {
    const uint8_t *buf;
    size_t len, pos;
    struct om_pickle *p;
    struct om_pv **stack;
    size_t nstack, capstack;
    size_t marks[MAX_MARKS];
    size_t nmarks;
    struct om_pv **memo;
    size_t nmemo, capmemo;
    char *err;
    size_t errlen;
    int rc;
};

/* Names of every pickle opcode, so that a refused one is named. */
static const char *op_name(uint8_t op)
{
    static const struct {
        uint8_t op;
        const char *name;
    } names[] = {
        {'(', "MARK"},
        {'.', "STOP"},
        {'0', "POP"},
        {'1', "POP_MARK"},
        {'2', "DUP"},
        {'F', "FLOAT"},
        {'I', "INT"},
        {'J', "BININT"},
        {'K', "BININT1"},
        {'L', "LONG"},
        {'M', "BININT2"},
        {'N', "NONE"},
        {'P', "PERSID"},
        {'Q', "BINPERSID"},
        {'R', "REDUCE"},
        {'S', "STRING"},
        {'T', "BINSTRING"},
        {'U', "SHORT_BINSTRING"},
        {'V', "UNICODE"},
        {'X', "BINUNICODE"},
        {'a', "APPEND"},
        {'b', "BUILD"},
        {'c', "GLOBAL"},
        {'d', "DICT"},
        {'}', "EMPTY_DICT"},
        {'e', "APPENDS"},
        {'g', "GET"},
        {'h', "BINGET"},
        {'i', "INST"},
        {'j', "LONG_BINGET"},
        {'l', "LIST"},
        {']', "EMPTY_LIST"},
        {'o', "OBJ"},
        {'p', "PUT"},
        {'q', "BINPUT"},
        {'r', "LONG_BINPUT"},
        {'s', "SETITEM"},
        {'t', "TUPLE"},
        {')', "EMPTY_TUPLE"},
        {'u', "SETITEMS"},
        {'G', "BINFLOAT"},
        {0x80, "PROTO"},
        {0x81, "NEWOBJ"},
        {0x82, "EXT1"},
        {0x83, "EXT2"},
        {0x84, "EXT4"},
        {0x85, "TUPLE1"},
        {0x86, "TUPLE2"},
        {0x87, "TUPLE3"},
        {0x88, "NEWTRUE"},
        {0x89, "NEWFALSE"},
        {0x8a, "LONG1"},
        {0x8b, "LONG4"},
        {'B', "BINBYTES"},
        {'C', "SHORT_BINBYTES"},
        {0x8c, "SHORT_BINUNICODE"},
        {0x8d, "BINUNICODE8"},
        {0x8e, "BINBYTES8"},
        {0x8f, "EMPTY_SET"},
        {0x90, "ADDITEMS"},
        {0x91, "FROZENSET"},
        {0x92, "NEWOBJ_EX"},
        {0x93, "STACK_GLOBAL"},
        {0x94, "MEMOIZE"},
        {0x95, "FRAME"},
        {0x96, "BYTEARRAY8"},
        {0x97, "NEXT_BUFFER"},
        {0x98, "READONLY_BUFFER"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].op == op)
            return names[i].name;
    return "unknown";
}

static int fail(struct parser *ps, int rc, const char *fmt, ...)
{
    if (ps->rc == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err, ps->errlen, fmt, ap);
        va_end(ap);
        ps->rc = rc;
    }
    return ps->rc;
}

static void *arena_alloc(struct parser *ps, size_t n)
{
    struct om_pickle *p = ps->p;
    struct om_pickle_chunk *c = p->chunks;

    n = (n + 15) & ~(size_t)15;
    if (n > p->arena_limit - p->arena_bytes) {
        fail(ps, -ENOMEM, "pickle needs more memory than %zu bytes", p->arena_limit);
        return NULL;
    }
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        c = malloc(sizeof *c + cap);
        if (!c) {
            fail(ps, -ENOMEM, "out of memory");
            return NULL;
        }
        c->used = 0;
        c->cap = cap;
        c->next = p->chunks;
        p->chunks = c;
    }
    void *r = c->data + c->used;
    c->used += n;
    p->arena_bytes += n;
    return r;
}

static struct om_pv *new_value(struct parser *ps, enum om_pv_type type)
{
    struct om_pv *v = arena_alloc(ps, sizeof *v);
    if (v) {
        memset(v, 0, sizeof *v);
        v->type = type;
    }
    return v;
}

/* Grows a list, tuple or dict's array in the arena; the old one is dropped (at most half
 * of what the arena holds for arrays). */
static int seq_reserve(struct parser *ps, struct om_pv *v, size_t extra)
{
    size_t need = v->u.seq.n * (v->type == OM_PV_DICT ? 2 : 1) + extra;
    if (need <= v->u.seq.cap)
        return 0;
    size_t cap = v->u.seq.cap ? v->u.seq.cap : 4;
    while (cap < need)
        cap *= 2;
    struct om_pv **a = arena_alloc(ps, cap * sizeof *a);
    if (!a)
        return ps->rc;
    if (v->u.seq.cap)
        memcpy(a, v->u.seq.v, v->u.seq.cap * sizeof *a);
    v->u.seq.v = a;
    v->u.seq.cap = cap;
    return 0;
}

static int push(struct parser *ps, struct om_pv *v)
{
    if (!v)
        return ps->rc;
    if (ps->nstack == ps->capstack) {
        size_t cap = ps->capstack ? ps->capstack * 2 : 64;
        struct om_pv **s = realloc(ps->stack, cap * sizeof *s);
        if (!s)
            return fail(ps, -ENOMEM, "out of memory");
        ps->stack = s;
        ps->capstack = cap;
    }
    ps->stack[ps->nstack++] = v;
    return 0;
}

/* The values above the innermost mark. */
static size_t above_mark(struct parser *ps)
{
    return ps->nmarks ? ps->nstack - ps->marks[ps->nmarks - 1] : ps->nstack;
}

static const uint8_t *take(struct parser *ps, size_t n, size_t at)
{
    if (n > ps->len - ps->pos) {
        fail(ps, -EINVAL, "truncated pickle: opcode %s at offset %zu needs %zu more bytes",
             op_name(ps->buf[at]), at, n);
        return NULL;
    }
    const uint8_t *r = ps->buf + ps->pos;
    ps->pos += n;
    return r;
}

static uint64_t le(const uint8_t *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            if (c == 0)
                return false;
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07;
        } else {
            return false;
        }
        if (k > n - i - 1)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

static int push_str(struct parser *ps, size_t n, size_t at)
{
    const uint8_t *s = take(ps, n, at);
    if (!s)
        return ps->rc;
    if (!utf8_valid(s, n))
        return fail(ps, -EINVAL, "string at offset %zu is not valid UTF-8 or holds a NUL character",
                    at);
    struct om_pv *v = new_value(ps, OM_PV_STR);
    char *c = v ? arena_alloc(ps, n + 1) : NULL;
    if (!c)
        return ps->rc;
    memcpy(c, s, n);
    c[n] = '\0';
    v->u.str.s = c;
    v->u.str.len = n;
    return push(ps, v);
}

static int push_int(struct parser *ps, int64_t i)
{
    struct om_pv *v = new_value(ps, OM_PV_INT);
    if (v)
        v->u.i = i;
    return push(ps, v);
}

static int memo_put(struct parser *ps, uint64_t idx, size_t at)
{
    if (ps->nstack == 0 || above_mark(ps) == 0)
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu: nothing to memoize",
                    op_name(ps->buf[at]), at);
    /* Picklers number memo entries from 0 up; a larger index than the input could have
     * numbered is refused so that the memo stays within a multiple of the input. */
    if (idx > ps->pos)
        return fail(ps, -EINVAL, "pickle memo index %llu at offset %zu is out of range",
                    (unsigned long long)idx, at);
    if (idx >= ps->capmemo) {
        size_t cap = ps->capmemo ? ps->capmemo : 256;
        while (cap <= idx)
            cap *= 2;
        struct om_pv **m = realloc(ps->memo, cap * sizeof *m);
        if (!m)
            return fail(ps, -ENOMEM, "out of memory");
        memset(m + ps->capmemo, 0, (cap - ps->capmemo) * sizeof *m);
        ps->memo = m;
        ps->capmemo = cap;
    }
    ps->memo[idx] = ps->stack[ps->nstack - 1];
    if (idx >= ps->nmemo)
        ps->nmemo = idx + 1;
    return 0;
}

static int memo_get(struct parser *ps, uint64_t idx, size_t at)
{
    if (idx >= ps->nmemo || !ps->memo[idx])
        return fail(ps, -EINVAL, "pickle memo index %llu at offset %zu was never stored",
                    (unsigned long long)idx, at);
    return push(ps, ps->memo[idx]);
}

static bool hashable(const struct om_pv *k)
{
    return k->type != OM_PV_LIST && k->type != OM_PV_DICT;
}

/* Adds the n values on top of the stack to the container just below them. */
static int fill(struct parser *ps, size_t n, size_t at)
{
    uint8_t op = ps->buf[at];
    if (ps->nstack < n + 1 || above_mark(ps) < n + 1)
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu: stack underflow", op_name(op),
                    at);
    struct om_pv *c = ps->stack[ps->nstack - n - 1];
    struct om_pv **items = ps->stack + ps->nstack - n;
    bool dict = op == 's' || op == 'u';
    if (c->type != (dict ? OM_PV_DICT : OM_PV_LIST))
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu applies to %s, not a %s",
                    op_name(op), at, om_pv_type_name(c), dict ? "dict" : "list");
    if (dict && n % 2)
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu: a key without its value",
                    op_name(op), at);
    for (size_t i = 0; dict && i < n; i += 2)
        if (!hashable(items[i]))
            return fail(ps, -EINVAL, "pickle opcode %s at offset %zu: %s as a dict key",
                        op_name(op), at, om_pv_type_name(items[i]));
    if (n == 0)
        return 0;
    if (seq_reserve(ps, c, n) < 0)
        return ps->rc;
    memcpy(c->u.seq.v + c->u.seq.n * (dict ? 2 : 1), items, n * sizeof *items);
    c->u.seq.n += dict ? n / 2 : n;
    ps->nstack -= n;
    return 0;
}

static int make_tuple(struct parser *ps, size_t n, size_t at)
{
    if (above_mark(ps) < n)
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu: stack underflow",
                    op_name(ps->buf[at]), at);
    struct om_pv *t = new_value(ps, OM_PV_TUPLE);
    if (!t || (n && !(t->u.seq.v = arena_alloc(ps, n * sizeof *t->u.seq.v))))
        return ps->rc;
    t->u.seq.cap = n;
    if (n)
        memcpy(t->u.seq.v, ps->stack + ps->nstack - n, n * sizeof *t->u.seq.v);
    t->u.seq.n = n;
    ps->nstack -= n;
    return push(ps, t);
}

static int pop_mark(struct parser *ps, size_t at, size_t *n)
{
    if (ps->nmarks == 0)
        return fail(ps, -EINVAL, "pickle opcode %s at offset %zu without a MARK",
                    op_name(ps->buf[at]), at);
    *n = above_mark(ps);
    ps->nmarks--;
    return 0;
}

static int step(struct parser *ps, bool *stop)
{
    size_t at = ps->pos, n = 0;
    const uint8_t *b;
    uint8_t op = ps->buf[ps->pos++];

    switch (op) {
    case 0x80: /* PROTO */
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        if (at != 0 || b[0] < 2 || b[0] > 5)
            return fail(ps, -EINVAL, "pickle protocol %u at offset %zu is not supported (2 to 5)",
                        b[0], at);
        return 0;
    case 0x95: /* FRAME: a length hint for buffered readers; the file is already in memory */
        if (!(b = take(ps, 8, at)))
            return ps->rc;
        if (le(b, 8) > ps->len - ps->pos)
            return fail(ps, -EINVAL,
                        "truncated pickle: FRAME at offset %zu is longer than the "
                        "rest of the file",
                        at);
        return 0;
    case '}':
        return push(ps, new_value(ps, OM_PV_DICT));
    case ']':
        return push(ps, new_value(ps, OM_PV_LIST));
    case ')':
        return make_tuple(ps, 0, at);
    case '(':
        if (ps->nmarks == MAX_MARKS)
            return fail(ps, -EINVAL, "pickle nests deeper than %d MARKs at offset %zu", MAX_MARKS,
                        at);
        ps->marks[ps->nmarks++] = ps->nstack;
        return 0;
    case 's':
        return fill(ps, 2, at);
    case 'a':
        return fill(ps, 1, at);
    case 'u':
    case 'e':
        if (pop_mark(ps, at, &n) < 0)
            return ps->rc;
        return fill(ps, n, at);
    case 't':
        if (pop_mark(ps, at, &n) < 0)
            return ps->rc;
        return make_tuple(ps, n, at);
    case 0x85:
    case 0x86:
    case 0x87:
        return make_tuple(ps, (size_t)(op - 0x84), at);
    case 0x8c: /* SHORT_BINUNICODE */
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        return push_str(ps, b[0], at);
    case 'X':
    case 0x8d: /* BINUNICODE, BINUNICODE8 */
        if (!(b = take(ps, op == 'X' ? 4 : 8, at)))
            return ps->rc;
        n = le(b, op == 'X' ? 4 : 8) > SIZE_MAX ? SIZE_MAX : (size_t)le(b, op == 'X' ? 4 : 8);
        return push_str(ps, n, at);
    case 'K':
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        return push_int(ps, b[0]);
    case 'M':
        if (!(b = take(ps, 2, at)))
            return ps->rc;
        return push_int(ps, (int64_t)le(b, 2));
    case 'J':
        if (!(b = take(ps, 4, at)))
            return ps->rc;
        return push_int(ps, (int32_t)(uint32_t)le(b, 4));
    case 0x8a: { /* LONG1: little-endian two's complement */
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        size_t k = b[0];
        if (k > 8)
            return fail(ps, -EINVAL, "integer at offset %zu does not fit in 64 bits", at);
        if (!(b = take(ps, k, at)))
            return ps->rc;
        uint64_t u = le(b, k);
        if (k > 0 && k < 8 && (b[k - 1] & 0x80))
            u |= ~UINT64_C(0) << (8 * k);
        return push_int(ps, (int64_t)u);
    }
    case 'G': { /* BINFLOAT: big-endian IEEE double */
        if (!(b = take(ps, 8, at)))
            return ps->rc;
        uint64_t u = 0;
        double d;
        for (int i = 0; i < 8; i++)
            u = u << 8 | b[i];
        memcpy(&d, &u, sizeof d);
        struct om_pv *v = new_value(ps, OM_PV_FLOAT);
        if (v)
            v->u.f = d;
        return push(ps, v);
    }
    case 'N':
        return push(ps, new_value(ps, OM_PV_NONE));
    case 0x88:
    case 0x89: {
        struct om_pv *v = new_value(ps, OM_PV_BOOL);
        if (v)
            v->u.i = op == 0x88;
        return push(ps, v);
    }
    case 'q':
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        return memo_put(ps, b[0], at);
    case 'r':
        if (!(b = take(ps, 4, at)))
            return ps->rc;
        return memo_put(ps, le(b, 4), at);
    case 0x94:
        return memo_put(ps, ps->nmemo, at);
    case 'h':
        if (!(b = take(ps, 1, at)))
            return ps->rc;
        return memo_get(ps, b[0], at);
    case 'j':
        if (!(b = take(ps, 4, at)))
            return ps->rc;
        return memo_get(ps, le(b, 4), at);
    case '0': /* POP */
        if (above_mark(ps) == 0)
            return fail(ps, -EINVAL, "pickle opcode POP at offset %zu: stack underflow", at);
        ps->nstack--;
        return 0;
    case '.':
        if (ps->nstack != 1 || ps->nmarks)
            return fail(ps, -EINVAL, "pickle STOP at offset %zu leaves %zu values and %zu marks",
                        at, ps->nstack, ps->nmarks);
        ps->p->root = ps->stack[0];
        *stop = true;
        return 0;
    default:
        return fail(ps, -EINVAL,
                    "pickle opcode 0x%02x (%s) at offset %zu is not supported: a memory "
                    "snapshot holds plain dicts, lists, strings and numbers only",
                    op, op_name(op), at);
    }
}

int om_pickle_parse(const uint8_t *buf, size_t len, struct om_pickle *p, char *err, size_t errlen)
{
    struct parser ps = {.buf = buf, .len = len, .p = p, .err = err, .errlen = errlen};
    bool stop = false;

    memset(p, 0, sizeof *p);
    /* Each opcode byte makes at most one value and one array slot, strings are copied once,
     * and arrays grow by doubling: this covers any valid pickle with room to spare. */
    p->arena_limit = len > SIZE_MAX / 128 ? SIZE_MAX : 96 * len + ((size_t)1 << 20);
    if (len == 0 || buf[0] != 0x80) {
        fail(&ps, -EINVAL, "not a pickle of protocol 2 or later (no PROTO opcode at offset 0)");
        goto out;
    }
    while (!stop && ps.rc == 0) {
        if (ps.pos >= len) {
            fail(&ps, -EINVAL, "truncated pickle: no STOP opcode before the end at offset %zu",
                 len);
            break;
        }
        step(&ps, &stop);
    }
out:
    free(ps.stack);
    free(ps.memo);
    if (ps.rc < 0)
        om_pickle_free(p);
    return ps.rc;
}

int om_pickle_load(const char *path, struct om_pickle *p, char *err, size_t errlen)
{
    char msg[400];
    struct stat st;
    uint8_t *buf = NULL;
    int rc;
    FILE *f = fopen(path, "rb");

    memset(p, 0, sizeof *p);
    if (!f) {
        rc = -errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > MAX_FILE_BYTES) {
        rc = -EINVAL;
        snprintf(err, errlen, "%s: not a regular file of at most 4 GiB", path);
        goto out;
    }
    if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
        goto out;
    }
    if ((rc = om_pickle_parse(buf, (size_t)st.st_size, p, msg, sizeof msg)) < 0)
        snprintf(err, errlen, "%s: %s", path, msg);
out:
    free(buf);
    fclose(f);
    return rc;
}

void om_pickle_free(struct om_pickle *p)
{
    while (p->chunks) {
        struct om_pickle_chunk *c = p->chunks;
        p->chunks = c->next;
        free(c);
    }
    memset(p, 0, sizeof *p);
}

bool om_pickle_sniff(const char *path)
{
    struct stat st;
    FILE *f = fopen(path, "rb");
    int c = EOF;
    /* A pipe would lose the byte read here: only regular files are looked at. */
    if (f && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
        c = fgetc(f);
    if (f)
        fclose(f);
    return c == 0x80;
}

const struct om_pv *om_pv_get(const struct om_pv *dict, const char *key)
{
    const struct om_pv *r = NULL;
    if (!dict || dict->type != OM_PV_DICT)
        return NULL;
    for (size_t i = 0; i < dict->u.seq.n; i++) {
        const struct om_pv *k = dict->u.seq.v[2 * i];
        if (k->type == OM_PV_STR && strcmp(k->u.str.s, key) == 0)
            r = dict->u.seq.v[2 * i + 1];
    }
    return r;
}

const struct om_pv *om_pv_item(const struct om_pv *seq, size_t i)
{
    if (!seq || (seq->type != OM_PV_LIST && seq->type != OM_PV_TUPLE) || i >= seq->u.seq.n)
        return NULL;
    return seq->u.seq.v[i];
}

size_t om_pv_len(const struct om_pv *seq)
{
    if (!seq || (seq->type != OM_PV_LIST && seq->type != OM_PV_TUPLE))
        return 0;
    return seq->u.seq.n;
}

bool om_pv_is(const struct om_pv *v, enum om_pv_type type)
{
    return v && v->type == type;
}

const char *om_pv_type_name(const struct om_pv *v)
{
    static const char *const names[] = {"None",  "a bool", "an int",  "a float",
                                        "a str", "a list", "a tuple", "a dict"};
    if (!v)
        return "missing value";
    return names[v->type];
}
