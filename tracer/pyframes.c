/* Python frames of call sites: the calling thread's CPython stack, read from its own
 * interpreter frames without the GIL, without allocating and without running Python. */
#include "log.h"
#include "tracer_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Where CPython keeps what the walk reads, per minor version (offsets in bytes on x86-64
 * and aarch64, from each version's headers: 3.11 checked against its installed internal
 * headers and by tests/tracer/python_frames.py; 3.12 and 3.13 read from their headers,
 * checked on hand-made frames (tests/tracer/fake_python.c, FAKE_MINOR) and at run time by
 * the first walks, see `checked` below). */
struct py_layout {
    unsigned minor;
    /* PyThreadState: the current frame is cframe->current_frame (3.11, 3.12) or a field
     * of the thread state itself (ts_cframe < 0, 3.13). */
    int ts_cframe, current_frame, ts_chunk, ts_top;
    /* _PyInterpreterFrame */
    int fr_code, fr_previous, fr_instr, fr_entry, fr_owner, fr_size;
    int owner_cstack; /* the eval loop's C entry frame (3.12+), -1 where there is none */
    /* PyCodeObject */
    int co_filename, co_name, co_firstlineno, co_linetable, co_firsttraceable, co_code;
    /* PyASCIIObject and PyCompactUnicodeObject sizes: where the characters start */
    int str_ascii, str_compact;
};

static const struct py_layout layouts[] = {
    {.minor = 11,
     .ts_cframe = 56,
     .current_frame = 8,
     .ts_chunk = 296,
     .ts_top = 304,
     .fr_code = 32,
     .fr_previous = 48,
     .fr_instr = 56,
     .fr_entry = 68,
     .fr_owner = 69,
     .fr_size = 72,
     .owner_cstack = -1,
     .co_filename = 112,
     .co_name = 120,
     .co_firstlineno = 72,
     .co_linetable = 136,
     .co_firsttraceable = 168,
     .co_code = 184,
     .str_ascii = 48,
     .str_compact = 72},
    {.minor = 12,
     .ts_cframe = 56,
     .current_frame = 0,
     .ts_chunk = 232,
     .ts_top = 240,
     .fr_code = 0,
     .fr_previous = 8,
     .fr_instr = 56,
     .fr_entry = -1,
     .fr_owner = 70,
     .fr_size = 72,
     .owner_cstack = 3,
     .co_filename = 112,
     .co_name = 120,
     .co_firstlineno = 68,
     .co_linetable = 136,
     .co_firsttraceable = 176,
     .co_code = 192,
     .str_ascii = 40,
     .str_compact = 56},
    {.minor = 13,
     .ts_cframe = -1,
     .current_frame = 72,
     .ts_chunk = 232,
     .ts_top = 240,
     .fr_code = 0,
     .fr_previous = 8,
     .fr_instr = 56,
     .fr_entry = -1,
     .fr_owner = 70,
     .fr_size = 72,
     .owner_cstack = 3,
     .co_filename = 112,
     .co_name = 120,
     .co_firstlineno = 68,
     .co_linetable = 136,
     .co_firsttraceable = 184,
     .co_code = 200,
     .str_ascii = 40,
     .str_compact = 56},
};

/* Object header and field offsets shared by every supported version. */
#define OB_TYPE 8
#define VAR_SIZE 16
#define BYTES_DATA 32
#define STR_LENGTH 16
#define STR_STATE 32
#define CHUNK_PREVIOUS 0
#define CHUNK_SIZE 8
#define CHUNK_TOP 16
#define CHUNK_DATA 24
#define CODE_HEADER 208 /* bytes of a code object copied on a miss: covers every field read */

static const struct py_layout *lay; /* NULL: no supported CPython in this process */
static void *(*this_thread_state)(void);
static uintptr_t code_type, unicode_type, bytes_type;
static uintptr_t eval_lo, eval_hi;

/* The threads' memos of their walks ("the walk" below): a key whose destructor hands each back. */
static pthread_key_t py_memo_key;
static int py_memo_key_ok;
static void py_memo_drop(void *memo);

void om_py_init(void)
{
    const unsigned long *version = dlsym(RTLD_DEFAULT, "Py_Version");
    if (!version)
        return; /* not CPython, or one older than 3.11 (which has no Py_Version) */
    unsigned major = (unsigned)(*version >> 24), minor = (unsigned)(*version >> 16) & 0xff;
    const struct py_layout *found = NULL;
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
        if (major == 3 && layouts[i].minor == minor)
            found = &layouts[i];
    void *get = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    void *code = dlsym(RTLD_DEFAULT, "PyCode_Type"), *str = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    void *bytes = dlsym(RTLD_DEFAULT, "PyBytes_Type");
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    if (!found || !get || !code || !str || !bytes) {
        om_debug("python %u.%u: its frames are not read", major, minor);
        return;
    }
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (eval && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size) {
        eval_lo = (uintptr_t)eval;
        eval_hi = eval_lo + sym->st_size;
    }
    *(void **)&this_thread_state = get;
    code_type = (uintptr_t)code;
    unicode_type = (uintptr_t)str;
    bytes_type = (uintptr_t)bytes;
    if (!__atomic_load_n(&py_memo_key_ok, __ATOMIC_ACQUIRE)) /* once: init may run again */
        __atomic_store_n(&py_memo_key_ok, pthread_key_create(&py_memo_key, py_memo_drop) == 0,
                         __ATOMIC_RELEASE);
    __atomic_store_n(&lay, found, __ATOMIC_RELEASE);
    om_debug("python %u.%u: call sites carry its frames", major, minor);
}

int om_py_is_eval(uintptr_t address)
{
    return address >= eval_lo && address < eval_hi;
}

/* Copies n bytes at src through the kernel, which fails cleanly on memory that is not
 * mapped or not readable: what the walk reads for the first time comes this way. */
static int denied; /* process_vm_readv is not permitted here (a seccomp filter) */
static int safe_read(void *dst, uintptr_t src, size_t n)
{
    struct iovec local = {dst, n}, remote = {(void *)src, n};
    if (!src)
        return -1;
    int saved = errno; /* the program's, across its malloc */
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got < 0 && (errno == EPERM || errno == ENOSYS))
        __atomic_store_n(&denied, 1, __ATOMIC_RELAXED);
    errno = saved;
    return got == (ssize_t)n ? 0 : -1;
}

/* n ranges in one call: 0 when every one was read whole. */
static int safe_readv(struct iovec *local, struct iovec *remote, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!remote[i].iov_base && remote[i].iov_len)
            return -1;
        total += remote[i].iov_len;
    }
    int saved = errno;
    ssize_t got = process_vm_readv(getpid(), local, n, remote, n, 0);
    if (got < 0 && (errno == EPERM || errno == ENOSYS))
        __atomic_store_n(&denied, 1, __ATOMIC_RELAXED);
    errno = saved;
    return got == (ssize_t)total ? 0 : -1;
}

static uintptr_t word(const unsigned char *buf, int at)
{
    uintptr_t v;
    memcpy(&v, buf + at, sizeof v);
    return v;
}

static int32_t int32_at(const unsigned char *buf, int at)
{
    int32_t v;
    memcpy(&v, buf + at, sizeof v);
    return v;
}

/* ---- frames by id: (file, function, line), interned ---- */

struct py_key {
    const char *file, *function;
    uint64_t line;
};

struct py_rec {
    struct py_key key;
    uint32_t id;
};

static pthread_mutex_t py_lock = PTHREAD_MUTEX_INITIALIZER;
static struct om_text *strs;
static struct om_id_index recs; /* by the hash of the key */
static struct py_rec **by_id;   /* append-only; old copies are kept for readers */
static uint32_t nrecs, caprecs;

/* Under py_lock, file and function interned. OM_PY_NONE when out of memory. */
static uint32_t intern_frame(const char *file, const char *function, uint32_t line)
{
    struct py_key key = {file, function, line};
    uint32_t hash = om_hash_bytes(&key, sizeof key);
    for (uint32_t pos = 0, id; (id = om_id_index_next(&recs, hash, &pos));)
        if (memcmp(&by_id[id - 1]->key, &key, sizeof key) == 0)
            return id - 1;
    if (nrecs == caprecs) {
        uint32_t cap = caprecs ? caprecs * 2 : 256;
        struct py_rec **fresh = om_sys_alloc(cap * sizeof *fresh);
        if (!fresh)
            return OM_PY_NONE;
        if (nrecs)
            memcpy(fresh, by_id, nrecs * sizeof *fresh);
        __atomic_store_n(&by_id, fresh, __ATOMIC_RELEASE);
        caprecs = cap;
    }
    struct py_rec *r = om_sys_alloc(sizeof *r);
    if (!r || om_id_index_add(&recs, hash, nrecs) != 0) {
        om_sys_free(r, sizeof *r);
        return OM_PY_NONE;
    }
    r->key = key;
    r->id = nrecs;
    by_id[r->id] = r;
    __atomic_store_n(&nrecs, r->id + 1, __ATOMIC_RELEASE);
    return r->id;
}

int om_py_frame(uint32_t id, const char **file, const char **function, uint32_t *line)
{
    uint32_t n = __atomic_load_n(&nrecs, __ATOMIC_ACQUIRE);
    struct py_rec **ids = __atomic_load_n(&by_id, __ATOMIC_ACQUIRE);
    if (id >= n || !ids)
        return -ENOENT;
    *file = ids[id]->key.file;
    *function = ids[id]->key.function;
    *line = (uint32_t)ids[id]->key.line;
    return 0;
}

/* ---- resolving a code object at an instruction, once ---- */

/* A str's shape from its header: 0 for a compact str of 1-, 2- or 4-byte characters. */
static int str_shape(const struct py_layout *L, const unsigned char *head, unsigned *kind,
                     size_t *length, size_t *data_at)
{
    uint32_t state;
    memcpy(&state, head + STR_STATE, sizeof state);
    unsigned compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    int64_t n = (int64_t)word(head, STR_LENGTH);
    *kind = (state >> 2) & 7;
    if (word(head, OB_TYPE) != unicode_type || !compact ||
        (*kind != 1 && *kind != 2 && *kind != 4) || n < 0)
        return -1;
    *length = n > 255 ? 255 : (size_t)n;
    *data_at = (size_t)(ascii ? L->str_ascii : L->str_compact);
    return 0;
}

/* Characters of kind bytes each as UTF-8, at most cap - 1 bytes. */
static void decode(const unsigned char *chars, unsigned kind, size_t length, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < length; i++) {
        uint32_t c = kind == 1 ? chars[i]
                     : kind == 2
                         ? (uint32_t)chars[2 * i] | (uint32_t)chars[2 * i + 1] << 8
                         : (uint32_t)chars[4 * i] | (uint32_t)chars[4 * i + 1] << 8 |
                               (uint32_t)chars[4 * i + 2] << 16 | (uint32_t)chars[4 * i + 3] << 24;
        unsigned char enc[4];
        size_t k;
        if ((c >= 0xd800 && c < 0xe000) || c > 0x10ffff)
            c = '?'; /* a lone surrogate (an undecodable file name): not UTF-8 */
        if (c < 0x80) {
            enc[0] = (unsigned char)c;
            k = 1;
        } else if (c < 0x800) {
            enc[0] = (unsigned char)(0xc0 | c >> 6);
            enc[1] = (unsigned char)(0x80 | (c & 0x3f));
            k = 2;
        } else if (c < 0x10000) {
            enc[0] = (unsigned char)(0xe0 | c >> 12);
            enc[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            enc[2] = (unsigned char)(0x80 | (c & 0x3f));
            k = 3;
        } else {
            enc[0] = (unsigned char)(0xf0 | (c >> 18 & 7));
            enc[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
            enc[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            enc[3] = (unsigned char)(0x80 | (c & 0x3f));
            k = 4;
        }
        if (o + k >= cap)
            break;
        memcpy(out + o, enc, k);
        o += k;
    }
    out[o] = '\0';
}

/* A code object's location table, copied. */
struct table {
    const unsigned char *bytes;
    size_t size, pos;
};

static int next_byte(struct table *t)
{
    return t->pos < t->size ? t->bytes[t->pos++] : -1;
}

/* A varint of the location table: 6 bits a byte, bit 6 says another follows. */
static int read_varint(struct table *t, uint32_t *out)
{
    uint32_t v = 0;
    for (unsigned shift = 0; shift < 32; shift += 6) {
        int b = next_byte(t);
        if (b < 0)
            return -1;
        v |= (uint32_t)(b & 63) << shift;
        if (!(b & 64)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Where a scan of a location table stands at the start of an entry: the entry's first byte
 * (read, t->pos past it), the line before the entry's delta and the entry's first code unit. */
struct scan {
    size_t pos;
    int first;
    int64_t line, addr;
};

/* The line of the code unit at index instr, from the location table (the format of
 * CPython 3.11 to 3.13, Objects/locations.md): entries start with a byte whose top bit is
 * set, bits 3-6 a code and bits 0-2 the code units covered minus one; codes 13 and 14 carry
 * a signed line delta, 10 to 12 a delta of code - 10, 15 no location. 0 when unknown. The
 * scan starts at *at where that entry does not lie past instr (the entry that held the
 * last instruction asked for: a function runs forward), else at the table's start, and *at
 * is left at the entry that holds instr: the same line either way. */
static uint32_t line_of(struct table *t, int32_t first, int32_t instr, struct scan *at)
{
    int64_t line = first, addr = 0;
    int b;
    if (at->pos && at->addr <= instr) {
        t->pos = at->pos;
        b = at->first;
        line = at->line;
        addr = at->addr;
    } else {
        b = next_byte(t);
    }
    while (b >= 0) {
        if (!(b & 0x80))
            return 0; /* not the start of an entry: a table we do not understand */
        struct scan here = {t->pos, b, line, addr};
        unsigned code = ((unsigned)b >> 3) & 15, len = ((unsigned)b & 7) + 1;
        if (code == 13 || code == 14) {
            uint32_t v;
            if (read_varint(t, &v) != 0)
                return 0;
            line += v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
        } else if (code >= 10 && code <= 12) {
            line += code - 10;
        }
        if (instr < addr + len) {
            *at = here;
            return code == 15 || line <= 0 || line > UINT32_MAX ? 0 : (uint32_t)line;
        }
        addr += len;
        /* The rest of the entry: bytes without the top bit. */
        while ((b = next_byte(t)) >= 0 && !(b & 0x80))
            ;
    }
    return 0;
}

/* ---- code objects, each read once ---- */

/* What resolving a code object at any instruction needs: its file and function, interned,
 * its first line and first traceable instruction, its whole location table, copied. All of
 * it is immutable for the code object's life, so that each new instruction of a code object
 * already read is resolved without a system call, where each took three. Immutable once
 * published but for where the last scan of its table stopped (under py_lock); the stamp
 * (the location table's address) tells another code object at a freed one's address. */
struct code_rec {
    uintptr_t code, stamp;
    const char *file, *function;
    int32_t first_line, first_traceable;
    size_t table_size; /* 0: lines unknown */
    size_t bytes;      /* the record's own size */
    struct scan scan;  /* under py_lock: pos 0 when none */
    unsigned char table[];
};

/* Under py_lock: *table with room for one more entry (mapped at the first, grown by
 * doubling while below max slots and half used); NULL when full or out of memory. Its
 * entries are immutable once published, so the copy needs no reconciling. */
static struct om_table *py_room(struct om_table **table, size_t entry, uint32_t first, uint32_t max,
                                unsigned probes, uint32_t (*home)(const void *))
{
    struct om_table *tab = *table, *fresh;
    if (!tab)
        fresh = om_table_new(first, entry);
    else if (tab->used < (tab->mask + 1) / 2)
        return tab;
    else if (tab->mask + 1 >= max)
        return NULL;
    else
        fresh = om_table_grow(tab, entry, probes, home);
    if (fresh)
        __atomic_store_n(table, fresh, __ATOMIC_RELEASE);
    return fresh;
}

/* Grows by doubling (om_table) from CODE_FIRST slots up to CODE_SLOTS, at most half used. */
#define CODE_FIRST (1u << 8)
#define CODE_SLOTS (1u << 14)
#define CODE_PROBES 8
static struct om_table *codes; /* open addressing by code address; slots set once */

static uint32_t code_hash(uintptr_t code)
{
    return (uint32_t)((((uint64_t)code >> 4) * 0x9e3779b97f4a7c15ull) >> 32);
}

static uint32_t code_home(const void *entry)
{
    return code_hash((*(struct code_rec *const *)entry)->code);
}

/* The record of the code object at code, NULL when there is none. Its stamp is read only
 * once a record of that address is found, in place where the caller may (as in cache_find:
 * an address that held a code object when it was read, in a frame of the live chain), and
 * is returned in *stamp. */
static const struct code_rec *code_find(uintptr_t code, uintptr_t stamp_at, int in_place,
                                        uintptr_t *stamp)
{
    const struct om_table *tab = __atomic_load_n(&codes, __ATOMIC_ACQUIRE);
    if (!tab)
        return NULL;
    struct code_rec **slots = OM_TABLE_SLOTS(struct code_rec *, tab);
    uint32_t h = code_hash(code);
    int have = 0;
    for (uint32_t i = 0; i < CODE_PROBES; i++) {
        const struct code_rec *c = __atomic_load_n(&slots[(h + i) & tab->mask], __ATOMIC_ACQUIRE);
        if (!c)
            return NULL;
        if (c->code != code)
            continue;
        if (!have) {
            if (in_place)
                *stamp = *(const uintptr_t *)stamp_at;
            else if (safe_read(stamp, stamp_at, sizeof *stamp) != 0)
                return NULL;
            have = 1;
        }
        if (c->stamp == *stamp)
            return c;
    }
    return NULL;
}

/* Under py_lock: c is kept where a probe finds it, unless the table is full (then it is
 * only used by the walk that read it, and read again next time). 0 when kept. */
static int code_add(struct code_rec *c)
{
    struct om_table *tab =
        py_room(&codes, sizeof c, CODE_FIRST, CODE_SLOTS, CODE_PROBES, code_home);
    if (!tab)
        return -1;
    struct code_rec **slots = OM_TABLE_SLOTS(struct code_rec *, tab);
    uint32_t h = code_hash(c->code);
    for (uint32_t i = 0; i < CODE_PROBES; i++) {
        struct code_rec **slot = &slots[(h + i) & tab->mask];
        if (*slot && (*slot)->code == c->code && (*slot)->stamp == c->stamp)
            return -1; /* another thread read it too */
        if (*slot)
            continue;
        __atomic_store_n(slot, c, __ATOMIC_RELEASE);
        tab->used++;
        return 0;
    }
    return -1;
}

/* Bytes read at first from the code object's file name, name and location table: their
 * headers and, for most, their characters and bytes too, so that no third read is needed. */
#define OBJECT_SPAN 512

/* Reads the code object at code: its record (kept in the table, or to be freed by the
 * caller when *kept is 0), NULL when code is not a readable code object or memory ran out.
 * Up to three reads: the code object; the first OBJECT_SPAN bytes of its file name, name
 * and location table (their headers only where a span cannot be read whole, past the end
 * of a mapping); what of their characters and bytes those did not cover. */
static const struct code_rec *read_code(const struct py_layout *L, uintptr_t code, int *kept)
{
    unsigned char head[CODE_HEADER];
    *kept = 0;
    if (safe_read(head, code, (size_t)L->co_code) != 0 || word(head, OB_TYPE) != code_type)
        return NULL;
    uintptr_t obj[3] = {word(head, L->co_filename), word(head, L->co_name),
                        word(head, L->co_linetable)};
    unsigned char heads[3][OBJECT_SPAN] = {{0}};
    struct iovec local[3], remote[3];
    for (int k = 0; k < 3; k++) {
        local[k] = (struct iovec){heads[k], OBJECT_SPAN};
        remote[k] = (struct iovec){(void *)obj[k], OBJECT_SPAN};
    }
    int spans = safe_readv(local, remote, 3) == 0;
    for (int k = 0; k < 3 && !spans; k++)
        local[k].iov_len = remote[k].iov_len = k < 2 ? (size_t)L->str_ascii : BYTES_DATA;
    char text[2][1024];
    strcpy(text[0], "?");
    strcpy(text[1], "?");
    unsigned kind[2] = {1, 1};
    size_t length[2] = {0, 0}, at[2] = {0, 0}, table_size = 0;
    int strs_ok = 0, table_ok = 0;
    if (spans || safe_readv(local, remote, 3) == 0) {
        strs_ok = str_shape(L, heads[0], &kind[0], &length[0], &at[0]) == 0 &&
                  str_shape(L, heads[1], &kind[1], &length[1], &at[1]) == 0;
        table_ok = word(heads[2], OB_TYPE) == bytes_type && word(heads[2], VAR_SIZE) < (1u << 24);
    }
    if (table_ok)
        table_size = word(heads[2], VAR_SIZE);
    size_t bytes = sizeof(struct code_rec) + table_size;
    struct code_rec *c = om_sys_alloc(bytes);
    if (!c)
        return NULL;
    c->bytes = bytes;
    unsigned char chars[2][255 * 4] = {{0}};
    unsigned more = 0; /* ranges the spans did not cover */
    for (int k = 0; k < 3; k++) {
        unsigned char *to = k < 2 ? chars[k] : c->table;
        size_t from = k < 2 ? at[k] : BYTES_DATA;
        size_t n = k < 2 ? (strs_ok ? length[k] * kind[k] : 0) : table_size;
        if (spans && from + n <= OBJECT_SPAN) {
            memcpy(to, heads[k] + from, n);
        } else if (n) {
            local[more] = (struct iovec){to, n};
            remote[more++] = (struct iovec){(void *)(obj[k] + from), n};
        }
    }
    if ((strs_ok || table_ok) && (more == 0 || safe_readv(local, remote, more) == 0)) {
        for (int k = 0; k < 2 && strs_ok; k++)
            decode(chars[k], kind[k], length[k], text[k], sizeof text[k]);
    } else {
        table_size = 0; /* no line */
    }
    c->code = code;
    c->stamp = obj[2];
    c->first_line = int32_at(head, L->co_firstlineno);
    c->first_traceable = int32_at(head, L->co_firsttraceable);
    c->table_size = table_size;
    pthread_mutex_lock(&py_lock);
    c->file = om_text_intern(&strs, text[0]);
    c->function = om_text_intern(&strs, text[1]);
    *kept = c->file && c->function && code_add(c) == 0;
    pthread_mutex_unlock(&py_lock);
    if (!c->file || !c->function) {
        om_sys_free(c, c->bytes);
        return NULL;
    }
    return c;
}

/* The frame id of the code object c at instr, OM_PY_SKIP for a frame that has not started
 * (before its first traceable instruction), OM_PY_NONE when out of memory. */
static uint32_t code_frame(const struct code_rec *c, int32_t instr)
{
    if (instr < c->first_traceable)
        return OM_PY_SKIP;
    struct table t = {c->table, c->table_size, 0};
    pthread_mutex_lock(&py_lock);
    uint32_t line = line_of(&t, c->first_line, instr, (struct scan *)&c->scan);
    uint32_t id = intern_frame(c->file, c->function, line);
    pthread_mutex_unlock(&py_lock);
    return id;
}

/* The frame id of code at instr (and the code's stamp), from its record, read first where
 * there is none; OM_PY_NONE when code is not a readable code object. The stamp is read in
 * place only where the caller may (see cache_find). */
static uint32_t resolve(const struct py_layout *L, uintptr_t code, int32_t instr, int in_place,
                        uintptr_t *stamp)
{
    const struct code_rec *c = code_find(code, code + (uintptr_t)L->co_linetable, in_place, stamp);
    if (c)
        return code_frame(c, instr);
    int kept;
    c = read_code(L, code, &kept);
    if (!c)
        return OM_PY_NONE;
    *stamp = c->stamp;
    uint32_t id = code_frame(c, instr);
    if (!kept)
        om_sys_free((void *)c, c->bytes);
    return id;
}

/* ---- the cache: (code object, instruction, stamp) -> frame id ---- */

/* Entries are immutable once published (code is stored last, with release); the stamp is
 * the code object's location table, so that another code object at a freed one's address
 * is not taken for it. */
#define CACHE_FIRST (1u << 10)
#define CACHE_SLOTS (1u << 16)
#define CACHE_PROBES 8

struct cache_entry {
    uintptr_t code, stamp;
    int32_t instr;
    uint32_t id;
};

static struct om_table *cache; /* grows as the table of code objects does */

static uint32_t cache_hash(uintptr_t code, int32_t instr)
{
    uint64_t h = ((uint64_t)code >> 4) ^ ((uint64_t)(uint32_t)instr << 40);
    return (uint32_t)((h * 0x9e3779b97f4a7c15ull) >> 32);
}

static uint32_t cache_home(const void *entry)
{
    const struct cache_entry *e = entry;
    return cache_hash(e->code, e->instr);
}

/* The id cached for code at instr, OM_PY_NONE when there is none. The stamp is read only
 * once (code, instr) matched an entry, so a code object is read in place only at an address
 * that held a code object when it was resolved: a garbage pointer is never read here. */
static uint32_t cache_find(uintptr_t code, int32_t instr, uintptr_t stamp_at, int in_place)
{
    const struct om_table *tab = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
    if (!tab)
        return OM_PY_NONE;
    const struct cache_entry *slots = OM_TABLE_SLOTS(const struct cache_entry, tab);
    uint32_t h = cache_hash(code, instr);
    uintptr_t stamp = 0;
    int have = 0;
    for (uint32_t i = 0; i < CACHE_PROBES; i++) {
        const struct cache_entry *e = &slots[(h + i) & tab->mask];
        uintptr_t at = __atomic_load_n(&e->code, __ATOMIC_ACQUIRE);
        if (at == 0)
            return OM_PY_NONE;
        if (at != code || e->instr != instr)
            continue;
        if (!have) {
            if (in_place)
                stamp = *(const uintptr_t *)stamp_at;
            else if (safe_read(&stamp, stamp_at, sizeof stamp) != 0)
                return OM_PY_NONE;
            have = 1;
        }
        if (e->stamp == stamp)
            return e->id;
    }
    return OM_PY_NONE;
}

static void cache_add(uintptr_t code, int32_t instr, uintptr_t stamp, uint32_t id)
{
    pthread_mutex_lock(&py_lock);
    struct om_table *tab = py_room(&cache, sizeof(struct cache_entry), CACHE_FIRST, CACHE_SLOTS,
                                   CACHE_PROBES, cache_home);
    if (tab) {
        struct cache_entry *slots = OM_TABLE_SLOTS(struct cache_entry, tab);
        uint32_t h = cache_hash(code, instr);
        for (uint32_t i = 0; i < CACHE_PROBES; i++) {
            struct cache_entry *e = &slots[(h + i) & tab->mask];
            if (e->code == code && e->instr == instr && e->stamp == stamp)
                break; /* another thread added it */
            if (e->code)
                continue;
            e->stamp = stamp;
            e->instr = instr;
            e->id = id;
            __atomic_store_n(&e->code, code, __ATOMIC_RELEASE);
            tab->used++;
            break;
        }
    }
    pthread_mutex_unlock(&py_lock);
}

/* ---- the walk ---- */

#define MAX_CHUNKS 8
#define MAX_HOPS 256 /* frames followed at most, skipped ones included */
#define CHECKED_WALKS 64

/* Until a walk has read a code object where the layout says (checked), every read goes
 * through safe_read and is checked: a layout that does not fit the interpreter (a patch
 * release that moved a field) turns Python frames off instead of faulting. */
static int checked;
static unsigned failed_checks, checked_walks;

struct chunks {
    uintptr_t lo[MAX_CHUNKS], hi[MAX_CHUNKS];
    unsigned n;
    uintptr_t stack_lo, stack_hi; /* the caller's part of this thread's C stack */
};

/* A word at addr: in place once the layout is checked, else through the kernel. */
static int read_word(uintptr_t addr, uintptr_t *out)
{
    if (addr & 7)
        return -1;
    if (__atomic_load_n(&checked, __ATOMIC_RELAXED)) {
        *out = *(const uintptr_t *)addr;
        return 0;
    }
    return safe_read(out, addr, sizeof *out);
}

/* The thread's data stack: the chunks that hold its frames, each up to its top. Frames of
 * generators and coroutines live in their objects, and 3.12's entry frames on the C
 * stack. */
static int find_chunks(const struct py_layout *L, uintptr_t ts, struct chunks *c)
{
    uintptr_t chunk, top;
    c->n = 0;
    if (read_word(ts + (uintptr_t)L->ts_chunk, &chunk) != 0 ||
        read_word(ts + (uintptr_t)L->ts_top, &top) != 0)
        return -1;
    while (chunk && c->n < MAX_CHUNKS) {
        uintptr_t lo = chunk + CHUNK_DATA, size, index, previous;
        if (read_word(chunk + CHUNK_SIZE, &size) != 0 ||
            read_word(chunk + CHUNK_PREVIOUS, &previous) != 0 ||
            (c->n > 0 && read_word(chunk + CHUNK_TOP, &index) != 0))
            return -1;
        if (c->n > 0)
            top = lo + index * sizeof(void *);
        if (top < lo || top - lo > size)
            return -1;
        c->lo[c->n] = lo;
        c->hi[c->n] = top;
        c->n++;
        chunk = previous;
    }
    return 0;
}

/* Whether a frame lies where the interpreter keeps its live frames: the thread's data
 * stack below its top, or the C stack above this call (an entry frame). */
static int in_place(const struct chunks *c, uintptr_t frame, size_t size)
{
    for (unsigned i = 0; i < c->n; i++)
        if (frame >= c->lo[i] && frame + size <= c->hi[i])
            return 1;
    return frame >= c->stack_lo && frame + size <= c->stack_hi;
}

/* The walk's first reads disagreed with the layout: no Python frames from now on. */
static void layout_failed(const char *what)
{
    if (__atomic_load_n(&checked, __ATOMIC_RELAXED) ||
        __atomic_add_fetch(&failed_checks, 1, __ATOMIC_RELAXED) != 1)
        return;
    __atomic_store_n(&lay, NULL, __ATOMIC_RELEASE);
    if (__atomic_load_n(&denied, __ATOMIC_RELAXED))
        om_warn("python: process_vm_readv is not permitted; call sites carry no Python frames");
    else
        om_warn("python: %s does not match this interpreter's layout; call sites carry no "
                "Python frames",
                what);
}

/* What the calling thread's walks found, hop by hop, kept by the frame they started from: a
 * program allocates from the same frames again and again, so a frame seen at the same code,
 * instruction and stamp takes its id from here instead of the shared cache, and a stack seen
 * before takes its id without the table's lock. Requests from different frames interleave
 * (one layer's, then another's), hence slots, chosen by the innermost frame's address: a slot
 * is only where to look, each hop being checked against the live frame as it is followed.
 * Each thread's is mapped at its first walk and handed back when it exits: the library's
 * thread-local storage holds only its pointer, since it must fit the static TLS that dlopen
 * can still give. */
#define MEMO 24                      /* hops a slot keeps */
#define MEMO_CSTACK (UINT32_MAX - 2) /* the id of an entry frame on the C stack (3.12+) */
#define PY_SLOTS 64
#define SLOT_FRAMES 16 /* a longer stack is interned every time */

struct memo_hop {
    uintptr_t frame; /* where the frame was read in place: 0 when it was not */
    uintptr_t code, instr, stamp;
    uint32_t id;
};

struct memo_slot {
    struct memo_hop hop[MEMO];
    uint32_t stack, n; /* the stack last interned from this slot: its id and frames */
    uint32_t frames[SLOT_FRAMES];
};

struct py_memo {
    struct memo_slot slot[PY_SLOTS];
};

static __thread struct py_memo *tls_py_memo;
/* The frame the thread's last walk started from, read in place then: 0 when none. */
static __thread uintptr_t last_top;
static void py_memo_drop(void *memo)
{
    tls_py_memo = NULL;
    om_sys_free(memo, sizeof(struct py_memo));
}

/* A library that dlclose unmaps (one loaded by dlopen) must leave no destructor behind for
 * the threads that exit after it: the memos then stay where they are. */
__attribute__((destructor)) static void py_memo_key_drop(void)
{
    if (__atomic_exchange_n(&py_memo_key_ok, 0, __ATOMIC_ACQ_REL))
        pthread_key_delete(py_memo_key);
}

/* The slot of walks that start at frame, its first hops' lines asked for; NULL where the
 * thread has no memo (the walk then uses the shared cache alone). */
static struct memo_slot *memo_slot(uintptr_t frame)
{
    struct py_memo *m = tls_py_memo;
    if (__builtin_expect(!m, 0)) {
        if (!__atomic_load_n(&py_memo_key_ok, __ATOMIC_ACQUIRE) || !(m = om_sys_alloc(sizeof *m)))
            return NULL;
        if (pthread_setspecific(py_memo_key, m) != 0) {
            om_sys_free(m, sizeof *m);
            return NULL;
        }
        tls_py_memo = m;
    }
    uint32_t i = (uint32_t)(((uint64_t)frame * 0x9e3779b97f4a7c15ull) >> 32) & (PY_SLOTS - 1);
    struct memo_slot *s = &m->slot[i];
    for (unsigned k = 0; k < 10; k++)
        __builtin_prefetch((const char *)s + 64 * k);
    return s;
}

/* Asks for the lines replay will read, where the slot says they are (each frame's fields and
 * its code object's stamp), all at once: replay follows the chain a pointer at a time, so
 * that lines the program's own work evicted would miss one after another. A hint only: a
 * frame gone since is fetched for nothing, and nothing is read. */
static void replay_prefetch(const struct py_layout *L, const struct memo_slot *s)
{
    for (unsigned hop = 0; hop < MEMO && s->hop[hop].frame; hop++) {
        __builtin_prefetch((const void *)(s->hop[hop].frame + (uintptr_t)L->fr_code));
        __builtin_prefetch((const void *)(s->hop[hop].frame + (uintptr_t)L->fr_size - 1));
        if (s->hop[hop].code)
            __builtin_prefetch((const void *)(s->hop[hop].code + (uintptr_t)L->co_linetable));
    }
}

/* Follows the current frame's chain for as long as it is the one memoised, hop for hop:
 * the same frames at the same addresses, running the same code (its stamp read in place:
 * a live frame holds its code object) at the same instruction. Only frames that an earlier
 * walk read in place are read here, and only once they are reached through the live chain,
 * so the chunks of the data stack need not be found again. A request made from the lines
 * of the last ones takes its frames from here, at a few loads a frame. Returns the hops
 * followed; *frame is where the walk goes on, *n the frames written. */
static unsigned replay(const struct py_layout *L, const struct memo_slot *s, uintptr_t *frame,
                       uint32_t *out, unsigned cap, unsigned *n)
{
    unsigned hop = 0, k = 0;
    uintptr_t at = *frame;
    while (at && k < cap && hop < MEMO && at == s->hop[hop].frame) {
        const unsigned char *f = (const unsigned char *)at;
        const struct memo_hop *h = &s->hop[hop];
        uint32_t id = h->id;
        int cstack = L->owner_cstack >= 0 && (char)f[L->fr_owner] == (char)L->owner_cstack;
        if (cstack != (id == MEMO_CSTACK))
            break;
        if (!cstack) {
            uintptr_t code = word(f, L->fr_code);
            if (code != h->code || word(f, L->fr_instr) != h->instr ||
                *(const uintptr_t *)(code + (uintptr_t)L->co_linetable) != h->stamp)
                break;
            if (id != OM_PY_SKIP)
                out[k++] = id << 1 | (L->fr_entry >= 0 && f[L->fr_entry] ? 1u : 0u);
        } else if (k) {
            out[k - 1] |= 1; /* the frame above was entered from C */
        }
        at = word(f, L->fr_previous);
        hop++;
    }
    *frame = at;
    *n = k;
    return hop;
}

/* The frames of the calling thread's Python stack, innermost first, up to cap. */
static unsigned walk(uint32_t *out, unsigned cap, struct memo_slot **slot)
{
    *slot = NULL;
    last_top = 0;
    const struct py_layout *L = __atomic_load_n(&lay, __ATOMIC_ACQUIRE);
    if (!L || !cap)
        return 0;
    uintptr_t ts = (uintptr_t)this_thread_state();
    if (!ts)
        return 0; /* a thread that runs no Python */
    int fast = __atomic_load_n(&checked, __ATOMIC_RELAXED);
    uintptr_t holder = ts, frame;
    if (L->ts_cframe >= 0 && read_word(ts + (uintptr_t)L->ts_cframe, &holder) != 0) {
        layout_failed("the thread state");
        return 0;
    }
    if (!holder)
        return 0;
    if (read_word(holder + (uintptr_t)L->current_frame, &frame) != 0) {
        layout_failed("the current frame");
        return 0;
    }
    if (!frame)
        return 0;
    struct memo_slot *s = fast ? memo_slot(frame) : NULL;
    if (s && frame == s->hop[0].frame)
        replay_prefetch(L, s);
    *slot = s;
    uintptr_t top = frame;
    unsigned n = 0, resolved = 0, hop = s ? replay(L, s, &frame, out, cap, &n) : 0;
    if (hop)
        last_top = top; /* read in place when it was memoised */
    if (!frame || n == cap || hop == MAX_HOPS)
        return n;
    struct chunks chunks;
    if (find_chunks(L, ts, &chunks) != 0) {
        layout_failed("the data stack");
        return 0;
    }
    chunks.stack_lo = (uintptr_t)__builtin_frame_address(0);
    chunks.stack_hi = om_stack_top();
    int early = 0; /* the walk ended at a frame it could not read */
    unsigned char copy[128];
    for (; frame && n < cap && hop < MAX_HOPS; hop++) {
        const unsigned char *f;
        uintptr_t at = frame;
        if (frame & 7) {
            early = 1;
            break;
        }
        if (fast && in_place(&chunks, frame, (size_t)L->fr_size))
            f = (const unsigned char *)frame; /* the interpreter's live frames */
        else if (safe_read(copy, frame, (size_t)L->fr_size) == 0)
            f = copy; /* a generator's frame, in its object */
        else {
            early = 1;
            break;
        }
        uintptr_t code = word(f, L->fr_code), instr_ptr = word(f, L->fr_instr);
        char owner = (char)f[L->fr_owner];
        frame = word(f, L->fr_previous);
        if (L->owner_cstack >= 0 && owner == (char)L->owner_cstack) {
            if (n)
                out[n - 1] |= 1; /* the frame above was entered from C */
            if (hop == 0 && fast && f != copy)
                last_top = at;
            if (s && hop < MEMO)
                s->hop[hop] = (struct memo_hop){fast && f != copy ? at : 0, 0, 0, 0, MEMO_CSTACK};
            continue;
        }
        if (!code || (code & 7)) {
            early = 1;
            break;
        }
        intptr_t units = ((intptr_t)instr_ptr - (intptr_t)(code + (uintptr_t)L->co_code)) / 2;
        if (units < -1 || units > INT32_MAX) {
            early = 1;
            break;
        }
        int32_t instr = (int32_t)units;
        uintptr_t stamp_at = code + (uintptr_t)L->co_linetable;
        uint32_t id = OM_PY_NONE;
        if (hop == 0 && fast && f != copy)
            last_top = at;
        int memo = s && fast && f != copy && hop < MEMO, hit = 0;
        struct memo_hop *h = memo ? &s->hop[hop] : NULL;
        if (memo && h->code == code && h->instr == instr_ptr &&
            h->stamp == *(const uintptr_t *)stamp_at) {
            id = h->id; /* read in place: the code object was one when memoised */
            hit = 1;
        } else if (fast) {
            id = cache_find(code, instr, stamp_at, f != copy);
        }
        if (id == OM_PY_NONE) {
            uintptr_t stamp;
            id = resolve(L, code, instr, fast && f != copy, &stamp);
            if (id == OM_PY_NONE) {
                early = 1;
                break;
            }
            cache_add(code, instr, stamp, id);
        }
        if (memo && !hit)
            *h = (struct memo_hop){at, code, instr_ptr, *(const uintptr_t *)stamp_at, id};
        else if (memo)
            h->frame = at;
        else if (s && hop < MEMO)
            s->hop[hop].frame = 0;
        resolved++;
        if (id == OM_PY_SKIP)
            continue;
        out[n++] = id << 1 | (L->fr_entry >= 0 && f[L->fr_entry] ? 1u : 0u);
    }
    if (!fast && early && resolved == 0) {
        layout_failed("the innermost frame");
        return 0;
    }
    /* A walk that found code objects where the layout put them: the layout fits. */
    if (!fast && resolved &&
        __atomic_add_fetch(&checked_walks, 1, __ATOMIC_RELAXED) >= CHECKED_WALKS)
        __atomic_store_n(&checked, 1, __ATOMIC_RELAXED);
    return n;
}

int om_py_cheap_key(uint64_t *key)
{
    const struct py_layout *L = __atomic_load_n(&lay, __ATOMIC_ACQUIRE);
    *key = 0;
    if (!L)
        return 0;
    if (!__atomic_load_n(&checked, __ATOMIC_RELAXED))
        return -1;
    uintptr_t ts = (uintptr_t)this_thread_state(), holder = ts, frame;
    if (!ts)
        return 0;
    if (L->ts_cframe >= 0)
        holder = *(const uintptr_t *)(ts + (uintptr_t)L->ts_cframe);
    if (!holder)
        return 0;
    frame = *(const uintptr_t *)(holder + (uintptr_t)L->current_frame);
    if (!frame)
        return 0;
    /* Read in place where the interpreter keeps the thread's live frames: the top chunk of
     * its data stack, or the frame the last walk started from, read in place then. */
    uintptr_t chunk = *(const uintptr_t *)(ts + (uintptr_t)L->ts_chunk),
              top = *(const uintptr_t *)(ts + (uintptr_t)L->ts_top);
    int live = chunk && frame >= chunk + CHUNK_DATA && frame + (uintptr_t)L->fr_size <= top;
    if (!live && frame != last_top)
        return -1;
    *key = frame ^ (word((const unsigned char *)frame, L->fr_instr) * 0x9e3779b97f4a7c15ull);
    return 0;
}

/* ---- stacks by id: sequences of frames, interned ---- */

struct py_stack_rec {
    uint32_t id, n;
    uint32_t *frames;
};

static struct om_id_index stacks_index;    /* by the hash of the frames */
static struct py_stack_rec **stacks_by_id; /* append-only; old copies are kept for readers */
static uint32_t nstacks = 1, capstacks;    /* id 0: no Python frames */

/* Under py_lock. 0 when out of memory. */
static uint32_t intern_stack(const uint32_t *frames, unsigned n)
{
    struct py_stack_rec *r = NULL;
    uint32_t hash = om_hash_bytes(frames, n * sizeof *frames);
    for (uint32_t pos = 0, id; (id = om_id_index_next(&stacks_index, hash, &pos));) {
        r = stacks_by_id[id - 1];
        if (r->n == n && memcmp(r->frames, frames, n * sizeof *frames) == 0)
            return r->id;
    }
    if (nstacks == capstacks || !stacks_by_id) {
        uint32_t cap = capstacks ? capstacks * 2 : 256;
        struct py_stack_rec **fresh = om_sys_alloc(cap * sizeof *fresh);
        if (!fresh)
            return 0;
        if (stacks_by_id)
            memcpy(fresh, stacks_by_id, nstacks * sizeof *fresh);
        __atomic_store_n(&stacks_by_id, fresh, __ATOMIC_RELEASE);
        capstacks = cap;
    }
    r = om_sys_alloc(sizeof *r);
    uint32_t *copy = om_sys_alloc(n * sizeof *copy);
    if (!r || !copy || om_id_index_add(&stacks_index, hash, nstacks) != 0) {
        om_sys_free(r, sizeof *r);
        om_sys_free(copy, n * sizeof *copy);
        return 0;
    }
    memcpy(copy, frames, n * sizeof *copy);
    r->frames = copy;
    r->n = n;
    r->id = nstacks;
    stacks_by_id[r->id] = r;
    __atomic_store_n(&nstacks, r->id + 1, __ATOMIC_RELEASE);
    return r->id;
}

int om_py_stack(uint32_t stack, const uint32_t **frames, unsigned *n)
{
    uint32_t count = __atomic_load_n(&nstacks, __ATOMIC_ACQUIRE);
    struct py_stack_rec **ids = __atomic_load_n(&stacks_by_id, __ATOMIC_ACQUIRE);
    if (stack == 0 || stack >= count || !ids)
        return -ENOENT;
    *frames = ids[stack]->frames;
    *n = ids[stack]->n;
    return 0;
}

uint32_t om_py_capture(unsigned cap)
{
    uint32_t frames[OM_TRACER_MAX_DEPTH];
    struct memo_slot *s;
    unsigned n = walk(frames, cap < OM_TRACER_MAX_DEPTH ? cap : OM_TRACER_MAX_DEPTH, &s);
    if (n == 0)
        return 0;
    /* The same frames as the stack this slot last interned: the same id (ids never change). */
    if (s && s->stack && n == s->n && memcmp(frames, s->frames, n * sizeof *frames) == 0)
        return s->stack;
    pthread_mutex_lock(&py_lock);
    uint32_t id = intern_stack(frames, n);
    pthread_mutex_unlock(&py_lock);
    if (id && s && n <= SLOT_FRAMES) {
        memcpy(s->frames, frames, n * sizeof *frames);
        s->n = n;
        s->stack = id;
    }
    return id;
}

void om_py_atfork_prepare(void)
{
    pthread_mutex_lock(&py_lock);
}

void om_py_atfork_parent(void)
{
    pthread_mutex_unlock(&py_lock);
}

void om_py_atfork_child(void)
{
    pthread_mutex_init(&py_lock, NULL);
}
