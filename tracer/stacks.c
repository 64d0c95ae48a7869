/* Call sites: stacks captured with the compiler's unwinder, interned with uthash, symbolized for
 * the report. */
#include "tracer_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <unwind.h>

/* Frames of the library that contains the tracer: they are never part of a call site. */
static uintptr_t self_lo[8], self_hi[8];
static unsigned self_nranges;

struct find_self {
    uintptr_t addr;
};

static int find_self_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct find_self *fs = data;
    uintptr_t lo[8], hi[8];
    unsigned n = 0, hit = 0;
    for (unsigned i = 0; i < info->dlpi_phnum && n < 8; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        lo[n] = info->dlpi_addr + ph->p_vaddr;
        hi[n] = lo[n] + ph->p_memsz;
        if (fs->addr >= lo[n] && fs->addr < hi[n])
            hit = 1;
        n++;
    }
    if (!hit)
        return 0;
    memcpy(self_lo, lo, sizeof lo);
    memcpy(self_hi, hi, sizeof hi);
    self_nranges = n;
    return 1;
}

/* The stack walk is libgcc's DWARF unwinder, the one glibc's backtrace() uses: with glibc's
 * _dl_find_object it takes no lock and allocates nothing, and it opens no file descriptor
 * (libunwind keeps a pipe open in the process to validate addresses, and writes into that
 * descriptor number after the program closed and reused it). A frame without unwind
 * tables ends the walk instead of being guessed at. */
struct walk {
    void **frames;
    unsigned n, cap;
};

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    w->frames[w->n++] = (void *)ip;
    return w->n < w->cap ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static inline __attribute__((always_inline)) unsigned walk_stack(void **frames, unsigned cap)
{
    struct walk w = {frames, 0, cap};
    if (cap)
        _Unwind_Backtrace(walk_frame, &w);
    return w.n;
}

/* The first walk finds the unwinder's own tables; it is made now, while the caller still
 * runs alone. */
void om_stack_init(const void *self)
{
    struct find_self fs = {(uintptr_t)self};
    dl_iterate_phdr(find_self_cb, &fs);
    void *frame[1];
    (void)walk_stack(frame, 1);
}

static int in_self(const void *frame)
{
    uintptr_t a = (uintptr_t)frame;
    for (unsigned i = 0; i < self_nranges; i++)
        if (a >= self_lo[i] && a < self_hi[i])
            return 1;
    return 0;
}

void om_stack_trim_self(struct om_stack *stack)
{
    unsigned k = 0;
    while (k < stack->depth && in_self(stack->frames[k]))
        k++;
    if (k) {
        memmove(stack->frames, stack->frames + k, (stack->depth - k) * sizeof(void *));
        stack->depth -= k;
    }
}

/* The full walk: frames of this library are dropped by address, so a tail call in the shim
 * or an inlined helper cannot shift the call site; `skip` counts only when the library's
 * range is unknown (the tracer linked into a test program). */
static __attribute__((noinline)) void capture_walk(struct om_stack *stack, unsigned depth,
                                                   unsigned skip)
{
    enum { SLACK = 16 };
    void *buf[OM_TRACER_MAX_DEPTH + SLACK];
    unsigned n = walk_stack(buf, depth + SLACK);
    unsigned k = 0;
    if (self_nranges) {
        /* The first frames are this function's and its callers' in the library. */
        while (k < n && in_self(buf[k]))
            k++;
    } else {
        k = skip + 2 < n ? skip + 2 : n;
    }
    unsigned d = n - k;
    if (d > depth)
        d = depth;
    memcpy(stack->frames, buf + k, d * sizeof(void *));
    stack->depth = d;
    stack->walked = 1;
}

/* ---- the call-site cache ----
 * A full walk costs about a microsecond and reads the modules' unwind tables. The
 * program's return address into the library and its stack pointer at that call name a
 * call path as well as the stack does, in nearly every case: the walk is made once per
 * such key and its frames kept. Two paths that share a key (the same return address at the
 * same stack depth; a thread's stack reused by another) are caught by walking again at the
 * 1st, 2nd, 4th ... EARLY_RESAMPLES-th hit, so that paths taken in turn within one
 * iteration are told apart before it is planned, and at every RESAMPLE-th hit after: a
 * key whose walks differ is marked ambiguous and walked every time. A
 * wrong stack for a while costs the plan a miss, never an overlap: the pool's guard does
 * not depend on call sites. */

#define CACHE_SLOTS (1u << 14)
#define CACHE_PROBES 8
#define EARLY_RESAMPLES 16
#define RESAMPLE 65536

struct cached {
    unsigned depth;
    void *frames[];
};

struct cache_slot {
    uintptr_t ra, sp;
    const struct cached *stack; /* published last: readers load it with acquire */
    uint32_t hits;
    uint32_t ambiguous;
};

static struct cache_slot *cache;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t cache_used;

/* The first return address out of this library and the stack pointer the program's
 * frame has there, from the library's own frame pointers (it is built with them). 0, or
 * -1 where the chain does not lead out plausibly. */
static __attribute__((always_inline)) inline int program_call(uintptr_t *ra, uintptr_t *sp)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    for (int hop = 0; hop < 8; hop++) {
        uintptr_t ret = fp[1];
        if (!in_self((const void *)ret)) {
            *ra = ret;
            *sp = (uintptr_t)(fp + 2);
            return 0;
        }
        const uintptr_t *up = (const uintptr_t *)fp[0];
        if (up <= fp || (uintptr_t)up - (uintptr_t)fp > (1u << 20) || ((uintptr_t)up & 7))
            return -1;
        fp = up;
    }
    return -1;
}

static uint32_t cache_hash(uintptr_t ra, uintptr_t sp)
{
    uint64_t h = (uint64_t)ra * 0x9e3779b97f4a7c15ull ^ (uint64_t)sp * 0xc2b2ae3d27d4eb4full;
    return (uint32_t)(h >> 40) & (CACHE_SLOTS - 1);
}

static struct cache_slot *cache_find(uintptr_t ra, uintptr_t sp)
{
    struct cache_slot *tab = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
    if (!tab)
        return NULL;
    uint32_t h = cache_hash(ra, sp);
    for (uint32_t i = 0; i < CACHE_PROBES; i++) {
        struct cache_slot *s = &tab[(h + i) & (CACHE_SLOTS - 1)];
        if (!__atomic_load_n(&s->stack, __ATOMIC_ACQUIRE))
            return NULL;
        if (s->ra == ra && s->sp == sp)
            return s;
    }
    return NULL;
}

static int same_frames(const struct cached *c, const struct om_stack *stack)
{
    return c->depth == stack->depth &&
           memcmp(c->frames, stack->frames, stack->depth * sizeof(void *)) == 0;
}

/* Keeps a walk under its key. Never waits: with the lock taken (another thread inserting,
 * or a fork child whose parent forked meanwhile) the walk is simply not kept. */
static void cache_insert(uintptr_t ra, uintptr_t sp, const struct om_stack *stack)
{
    if (pthread_mutex_trylock(&cache_lock) != 0)
        return;
    if (!cache)
        __atomic_store_n(&cache, om_sys_alloc(CACHE_SLOTS * sizeof *cache), __ATOMIC_RELEASE);
    if (!cache || cache_used >= CACHE_SLOTS / 2)
        goto out;
    uint32_t h = cache_hash(ra, sp);
    for (uint32_t i = 0; i < CACHE_PROBES; i++) {
        struct cache_slot *s = &cache[(h + i) & (CACHE_SLOTS - 1)];
        if (s->stack) {
            if (s->ra == ra && s->sp == sp)
                goto out;
            continue;
        }
        struct cached *c = om_sys_alloc(sizeof *c + stack->depth * sizeof(void *));
        if (!c)
            goto out;
        c->depth = stack->depth;
        memcpy(c->frames, stack->frames, stack->depth * sizeof(void *));
        s->ra = ra;
        s->sp = sp;
        __atomic_store_n(&s->stack, c, __ATOMIC_RELEASE);
        cache_used++;
        goto out;
    }
out:
    pthread_mutex_unlock(&cache_lock);
}

void om_stack_capture(struct om_stack *stack, unsigned depth, unsigned skip)
{
    if (depth > OM_TRACER_MAX_DEPTH)
        depth = OM_TRACER_MAX_DEPTH;
    uintptr_t ra, sp;
    if (!self_nranges || program_call(&ra, &sp) != 0) {
        capture_walk(stack, depth, skip);
        return;
    }
    struct cache_slot *s = cache_find(ra, sp);
    const struct cached *c = s ? __atomic_load_n(&s->stack, __ATOMIC_ACQUIRE) : NULL;
    if (c && c->depth <= depth && !__atomic_load_n(&s->ambiguous, __ATOMIC_RELAXED)) {
        uint32_t hits = __atomic_add_fetch(&s->hits, 1, __ATOMIC_RELAXED);
        if (hits <= EARLY_RESAMPLES ? (hits & (hits - 1)) != 0 : hits % RESAMPLE != 0) {
            stack->walked = 0;
            stack->depth = c->depth;
            memcpy(stack->frames, c->frames, c->depth * sizeof(void *));
            return;
        }
    }
    capture_walk(stack, depth, skip);
    if (!s)
        cache_insert(ra, sp, stack);
    else if (c && !same_frames(c, stack))
        __atomic_store_n(&s->ambiguous, 1, __ATOMIC_RELAXED);
}

static int grow_ids(struct om_sites *sites)
{
    uint32_t cap = sites->capacity ? sites->capacity * 2 : 256;
    struct om_site **fresh = om_sys_alloc(cap * sizeof *fresh);
    if (!fresh)
        return -1;
    if (sites->count)
        memcpy(fresh, sites->by_id, sites->count * sizeof *fresh);
    /* The old array is kept: the symbolizer may be reading it without the lock. */
    __atomic_store_n(&sites->by_id, fresh, __ATOMIC_RELEASE);
    sites->capacity = cap;
    return 0;
}

struct om_site *om_sites_intern(struct om_sites *sites, const struct om_stack *stack)
{
    struct om_site *s = NULL;
    size_t keylen = stack->depth * sizeof(void *);
    HASH_FIND(hh, sites->hash, stack->frames, keylen, s);
    if (s)
        return s;
    if (sites->count == sites->capacity && grow_ids(sites) != 0)
        return NULL;
    s = om_sys_alloc(sizeof *s);
    void **frames = om_sys_alloc(keylen ? keylen : 1);
    if (!s || !frames) {
        om_sys_free(s, sizeof *s);
        om_sys_free(frames, keylen ? keylen : 1);
        return NULL;
    }
    memcpy(frames, stack->frames, keylen);
    s->frames = frames;
    s->depth = stack->depth;
    s->id = sites->count;
    s->life_req_min = UINT64_MAX;
    s->life_ns_min = UINT64_MAX;
    s->min_size = UINT64_MAX;
    HASH_ADD_KEYPTR(hh, sites->hash, s->frames, keylen, s);
    sites->by_id[s->id] = s;
    __atomic_store_n(&sites->count, s->id + 1, __ATOMIC_RELEASE);
    return s;
}

/* ---- symbolization ---- */

struct module {
    uintptr_t bias;
    uintptr_t lo[8], hi[8];
    unsigned n;
    const char *path;
};

#define MAX_MODULES 2048
static struct module *modules;
static unsigned nmodules;

static const char *copy_str(const char *s)
{
    size_t n = strlen(s);
    char *c = om_sys_alloc(n + 1);
    if (c)
        memcpy(c, s, n + 1);
    return c;
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    if (nmodules == MAX_MODULES)
        return 1;
    struct module *m = &modules[nmodules];
    memset(m, 0, sizeof *m);
    m->bias = info->dlpi_addr;
    for (unsigned i = 0; i < info->dlpi_phnum && m->n < 8; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        m->lo[m->n] = info->dlpi_addr + ph->p_vaddr;
        m->hi[m->n] = m->lo[m->n] + ph->p_memsz;
        m->n++;
    }
    const char *name = info->dlpi_name;
    if (!name || !*name) {
        /* The main program has no name here. */
        static char exe[4096];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[len > 0 ? len : 0] = '\0';
        name = exe;
    }
    m->path = copy_str(name);
    nmodules++;
    return 0;
}

static const struct module *module_of(uintptr_t a)
{
    for (unsigned i = 0; i < nmodules; i++)
        for (unsigned j = 0; j < modules[i].n; j++)
            if (a >= modules[i].lo[j] && a < modules[i].hi[j])
                return &modules[i];
    return NULL;
}

/* dladdr scans a module's whole symbol table, which is slow for libtorch: each address
 * is resolved once, and names are given up after a time budget (the CLI symbolizes
 * module+offset with libdw anyway). */
struct name_entry {
    uintptr_t addr;
    const char *name;
    UT_hash_handle hh;
};
static struct name_entry *names;
#define NAME_BUDGET_NS 3000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *function_of(uintptr_t a, uint64_t deadline)
{
    struct name_entry *e = NULL;
    HASH_FIND(hh, names, &a, sizeof a, e);
    if (e)
        return e->name;
    if (now_ns() > deadline)
        return NULL;
    Dl_info info;
    const char *name = NULL;
    /* A return address may be one past the end of a noreturn call: look it up at a - 1. */
    if (dladdr((void *)(a - 1), &info) && info.dli_sname && info.dli_saddr)
        name = copy_str(info.dli_sname);
    e = om_sys_alloc(sizeof *e);
    if (e) {
        e->addr = a;
        e->name = name;
        HASH_ADD(hh, names, addr, sizeof e->addr, e);
    }
    return name;
}

static int symbolize_table(struct om_sites *sites, uint64_t deadline)
{
    uint32_t n = __atomic_load_n(&sites->count, __ATOMIC_ACQUIRE);
    struct om_site **by_id = __atomic_load_n(&sites->by_id, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++) {
        struct om_site *s = by_id[i];
        if (s->info)
            continue;
        struct om_frame_info *info = om_sys_alloc((s->depth ? s->depth : 1) * sizeof *info);
        if (!info)
            return -ENOMEM;
        for (uint32_t f = 0; f < s->depth; f++) {
            uintptr_t a = (uintptr_t)s->frames[f];
            const struct module *m = module_of(a);
            if (m) {
                info[f].module = m->path;
                info[f].offset = a - m->bias;
            }
            info[f].function = function_of(a, deadline);
        }
        __atomic_store_n(&s->info, info, __ATOMIC_RELEASE);
    }
    return 0;
}

void om_sites_symbolize(struct om_sites *const *tables, unsigned n)
{
    if (!modules)
        modules = om_sys_map(MAX_MODULES * sizeof *modules);
    if (!modules)
        return;
    nmodules = 0;
    dl_iterate_phdr(module_cb, NULL);
    /* One budget for all domains: a report waits for names at most this long. */
    uint64_t deadline = now_ns() + NAME_BUDGET_NS;
    for (unsigned t = 0; t < n; t++)
        if (symbolize_table(tables[t], deadline) != 0)
            return;
}

const char *om_category_name(int category)
{
    static const char *const n[OM_CAT_COUNT] = {"temporary", "per_iteration", "persistent"};
    return category >= 0 && category < OM_CAT_COUNT ? n[category] : "unknown";
}
