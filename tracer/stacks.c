/* Call sites: stacks captured with the compiler's unwinder, interned with uthash, symbolized for
 * the report. */
#include "tracer_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <unwind.h>

/* Frames of the library that contains the tracer: they are never part of a call site. */
static uintptr_t self_lo[8], self_hi[8];
static unsigned self_nranges;
static uintptr_t self_min, self_max; /* the ranges' hull: most addresses tested lie outside */

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
    self_min = UINTPTR_MAX;
    self_max = 0;
    for (unsigned i = 0; i < n; i++) {
        self_min = lo[i] < self_min ? lo[i] : self_min;
        self_max = hi[i] > self_max ? hi[i] : self_max;
    }
    self_nranges = n;
    return 1;
}

/* Stacks are walked two ways. The full walk is libgcc's DWARF unwinder, the one glibc's
 * backtrace() uses: with glibc's _dl_find_object it takes no lock and allocates nothing,
 * and it opens no file descriptor (libunwind keeps a pipe open in the process to validate
 * addresses, and writes into that descriptor number after the program closed and reused
 * it). It costs a microsecond or two and reads the modules' unwind tables, so every full
 * walk also teaches the fast walk what it saw: for each return address, how far above the
 * frame's stack pointer its caller's frame begins (the CFA). At a given return address that
 * distance is the same at every call, except in functions whose frame size varies
 * (alloca); those are seen to vary and never stepped fast. The fast walk follows the
 * learnt distances from the program's own call into the library, reading each return
 * address where the unwind tables said it is, inside the thread's stack; at the first
 * return address it does not know, the full walk takes over. */

/* Learnt distances: return address -> CFA minus the frame's stack pointer. The table grows
 * by doubling (om_table) from STEP_FIRST slots up to STEP_SLOTS, at most half used. */
#define STEP_FIRST (1u << 10)
#define STEP_SLOTS (1u << 16)
#define STEP_PROBES 8
#define STEP_MAX (1u << 20)             /* a larger frame is taken as a wrong guess */
#define STEP_VARIES UINT32_MAX          /* seen with two distances, or not a plain call frame */
#define STEP_OUTERMOST (UINT32_MAX - 1) /* the last frame of a stack: the walk ends there */

struct step {
    uintptr_t ip;  /* published last, with release */
    uint32_t dist; /* atomic: set once, may become STEP_VARIES */
};

static struct om_table *steps;
static pthread_mutex_t steps_lock = PTHREAD_MUTEX_INITIALIZER;
/* Distances marked STEP_VARIES after they were published: the only change an entry sees. */
static uint32_t step_marks;

static uint32_t step_hash(uintptr_t ip)
{
    return (uint32_t)(((uint64_t)ip * 0x9e3779b97f4a7c15ull) >> 32);
}

static uint32_t step_home(const void *entry)
{
    return step_hash(((const struct step *)entry)->ip);
}

static struct step *step_find(const struct om_table *tab, uintptr_t ip)
{
    struct step *slots = OM_TABLE_SLOTS(struct step, tab);
    uint32_t h = step_hash(ip);
    for (uint32_t i = 0; i < STEP_PROBES; i++) {
        struct step *e = &slots[(h + i) & tab->mask];
        uintptr_t at = __atomic_load_n(&e->ip, __ATOMIC_ACQUIRE);
        /* An empty slot first: a return address of 0 (read where a frame's size varied) is
         * none learnt, and the full walk takes over. */
        if (at == 0)
            return NULL;
        if (at == ip)
            return e;
    }
    return NULL;
}

/* Under steps_lock: the table with room for one more entry, NULL when full or out of
 * memory. A distance found to vary while the entries were copied is marked again in the new
 * table once it is published; step_learn, which marks without the lock, looks for the
 * entry again in whatever table is current after its mark (each side fences between its
 * store and its load, so one of them sees the other's). */
static struct om_table *step_room(void)
{
    struct om_table *tab = steps;
    if (!tab) {
        tab = om_table_new(STEP_FIRST, sizeof(struct step));
        __atomic_store_n(&steps, tab, __ATOMIC_RELEASE);
        return tab;
    }
    if (tab->used < (tab->mask + 1) / 2)
        return tab;
    if (tab->mask + 1 >= STEP_SLOTS)
        return NULL;
    struct om_table *fresh = om_table_grow(tab, sizeof(struct step), STEP_PROBES, step_home);
    if (!fresh)
        return NULL;
    __atomic_store_n(&steps, fresh, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    const struct step *old = OM_TABLE_SLOTS(struct step, tab);
    for (uint32_t i = 0; i <= tab->mask; i++) {
        struct step *e;
        if (__atomic_load_n(&old[i].dist, __ATOMIC_RELAXED) == STEP_VARIES && old[i].ip &&
            (e = step_find(fresh, old[i].ip)))
            __atomic_store_n(&e->dist, STEP_VARIES, __ATOMIC_RELAXED);
    }
    return fresh;
}

/* Records one observation; returns 1 when it was news (a return address not seen before,
 * or one seen with another distance). Never waits: with the lock taken (another thread
 * learning, or a fork child whose parent forked meanwhile) the observation is dropped. */
static int step_learn(uintptr_t ip, uint32_t dist)
{
    struct om_table *tab = __atomic_load_n(&steps, __ATOMIC_ACQUIRE);
    struct step *e = tab ? step_find(tab, ip) : NULL;
    if (e) {
        uint32_t had = __atomic_load_n(&e->dist, __ATOMIC_RELAXED);
        if (had == dist || had == STEP_VARIES)
            return 0;
        for (;;) {
            __atomic_store_n(&e->dist, STEP_VARIES, __ATOMIC_RELAXED);
            __atomic_add_fetch(&step_marks, 1, __ATOMIC_SEQ_CST);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            struct om_table *now = __atomic_load_n(&steps, __ATOMIC_SEQ_CST);
            if (now == tab || !(e = step_find(now, ip)))
                return 1;
            tab = now; /* the table grew meanwhile: the copy is marked too */
        }
    }
    int news = 0;
    if (pthread_mutex_trylock(&steps_lock) != 0)
        return 0;
    tab = step_room();
    if (tab && !step_find(tab, ip)) {
        struct step *slots = OM_TABLE_SLOTS(struct step, tab);
        uint32_t h = step_hash(ip);
        for (uint32_t i = 0; i < STEP_PROBES; i++) {
            struct step *slot = &slots[(h + i) & tab->mask];
            if (slot->ip)
                continue;
            __atomic_store_n(&slot->dist, dist, __ATOMIC_RELAXED);
            __atomic_store_n(&slot->ip, ip, __ATOMIC_RELEASE);
            tab->used++;
            news = 1;
            break;
        }
    }
    pthread_mutex_unlock(&steps_lock);
    return news;
}

/* libgcc's _Unwind_GetCFA(ctx) is the stack pointer of the frame ctx describes (its
 * callee's CFA), and the frame's return address lies just below it. */
struct walk {
    void **frames;
    unsigned n, cap;
    uintptr_t sp;  /* the last frame's stack pointer */
    int sp_checks; /* its return address lies at sp - 8 */
    int ended;     /* the unwinder reported the end of the stack */
    int news;      /* the walk taught the fast walk something */
};

static int ret_below(uintptr_t sp, uintptr_t ip)
{
    return *(const uintptr_t *)(sp - 8) == ip;
}

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct walk *w = arg;
    uintptr_t ip = _Unwind_GetIP(ctx), sp = _Unwind_GetCFA(ctx);
    if (ip == 0) {
        w->ended = 1;
        if (w->n && w->sp_checks)
            w->news |= step_learn((uintptr_t)w->frames[w->n - 1], STEP_OUTERMOST);
        return _URC_END_OF_STACK;
    }
    int checks = ret_below(sp, ip);
    if (w->n && w->sp_checks)
        step_learn((uintptr_t)w->frames[w->n - 1], checks && sp > w->sp && sp - w->sp < STEP_MAX
                                                       ? (uint32_t)(sp - w->sp)
                                                       : STEP_VARIES);
    w->frames[w->n++] = (void *)ip;
    w->sp = sp;
    w->sp_checks = checks;
    return w->n < w->cap ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* Walks up to cap frames; *news tells whether the walk taught the fast walk anything. */
static inline __attribute__((always_inline)) unsigned walk_stack(void **frames, unsigned cap,
                                                                 int *news)
{
    struct walk w = {.frames = frames, .cap = cap};
    if (cap && _Unwind_Backtrace(walk_frame, &w) == _URC_END_OF_STACK && !w.ended && w.n &&
        w.n < cap && w.sp_checks) /* no unwind tables above the last frame */
        w.news |= step_learn((uintptr_t)frames[w.n - 1], STEP_OUTERMOST);
    *news = w.news;
    return w.n;
}

/* Distances the calling thread's fast walks read, by stack: each probe of the table is a line
 * that the program's own work has usually evicted, and a walk reads one after the other, so
 * that their misses add up. A thread keeps the stacks it walked in slots chosen by the
 * program's return address into the library, its stack pointer there and the Python stack: a
 * request from a stack walked before finds its distances in one slot (three lines, asked for
 * at once) and the return addresses' lines are asked for together. A slot is only a hint of
 * where to look: a distance is taken from it only for the same return address at the same
 * depth, and every (return address, distance) pair a slot holds was read from the table the
 * memo was filled from while no distance was marked varying (an entry never changes
 * otherwise); when either changes, every slot is emptied (an epoch), so that a walk follows
 * exactly the distances the table holds. Each thread's is mapped at its first walk and handed
 * back when it exits: the library's thread-local storage holds only its pointer, since it
 * must fit the static TLS that dlopen can still give. */
#define WALK_MEMO 16
#define MEMO_SLOTS 128

struct memo_slot {
    uintptr_t ip[WALK_MEMO]; /* 0: none */
    uint32_t dist[WALK_MEMO];
};

/* The call site a slot's stack was last interned as (om_sites_intern), as a hint: the next
 * stack from that slot is compared with it before the index is looked up, in whatever domain
 * it is interned, and the lines that lookup and the record read are asked for as soon as the
 * walk ends. Never dereferenced: at[] only names lines to fetch (a record moved or unmapped
 * since costs a wasted fetch), and the site is taken from the domain's ids. */
#define SITE_LINES 6 /* a record and its key of 16 frames */

struct memo_site {
    uint32_t id1;      /* the site's id + 1; 0: none */
    const void *at[3]; /* its entry in the ids, its hash, its record */
};

struct walk_memo {
    struct memo_slot slot[MEMO_SLOTS]; /* first: the mapping is page-aligned, slots line-aligned */
    const struct om_table *tab;
    uint32_t marks, epoch;
    uint32_t last; /* the slot of the thread's last capture + 1, where it walked fast; 0: none */
    uint32_t slot_epoch[MEMO_SLOTS]; /* a slot is empty unless it equals epoch */
    struct memo_site site[MEMO_SLOTS];
};

static __thread struct walk_memo *tls_memo;
static pthread_key_t memo_key;
static int memo_key_ok;

static void memo_drop(void *memo)
{
    tls_memo = NULL;
    om_sys_free(memo, sizeof(struct walk_memo));
}

/* A library that dlclose unmaps (one loaded by dlopen) must leave no destructor behind for
 * the threads that exit after it: the memos then stay where they are. */
__attribute__((destructor)) static void memo_key_drop(void)
{
    if (__atomic_exchange_n(&memo_key_ok, 0, __ATOMIC_ACQ_REL))
        pthread_key_delete(memo_key);
}

/* The calling thread's memo, emptied unless it was read from tab under marks; NULL where
 * none could be had (the walk then probes the table). */
static struct walk_memo *memo_for(const struct om_table *tab, uint32_t marks)
{
    struct walk_memo *m = tls_memo;
    if (__builtin_expect(!m, 0)) {
        if (!memo_key_ok || !(m = om_sys_alloc(sizeof *m)))
            return NULL;
        if (pthread_setspecific(memo_key, m) != 0) {
            om_sys_free(m, sizeof *m);
            return NULL;
        }
        tls_memo = m;
    }
    if (m->tab != tab || m->marks != marks) {
        if (++m->epoch == 0) { /* wrapped: no slot may still carry the new epoch */
            memset(m->slot_epoch, 0, sizeof m->slot_epoch);
            m->epoch = 1;
        }
        m->tab = tab;
        m->marks = marks;
    }
    return m;
}

/* The slot of a stack that starts at (ip, sp) under Python stack py, emptied unless it was
 * filled under the memo's epoch; its lines are asked for at once. */
static struct memo_slot *memo_slot(struct walk_memo *m, uintptr_t ip, uintptr_t sp, uint32_t py)
{
    uint64_t h = ((uint64_t)ip ^ (uint64_t)sp << 17 ^ (uint64_t)py << 40) * 0x9e3779b97f4a7c15ull;
    uint32_t i = (uint32_t)(h >> 32) & (MEMO_SLOTS - 1);
    struct memo_slot *s = &m->slot[i];
    __builtin_prefetch(&s->ip[0], 1);
    __builtin_prefetch(&s->ip[8], 1);
    __builtin_prefetch(&s->dist[0], 1);
    if (m->slot_epoch[i] != m->epoch) {
        memset(s->ip, 0, sizeof s->ip);
        m->slot_epoch[i] = m->epoch;
    }
    return s;
}

/* The first walk finds the unwinder's own tables; it is made now, while the caller still
 * runs alone. */
void om_stack_init(const void *self)
{
    struct find_self fs = {(uintptr_t)self};
    dl_iterate_phdr(find_self_cb, &fs);
    if (!memo_key_ok) /* once: the tracer may be started again (tests) */
        memo_key_ok = pthread_key_create(&memo_key, memo_drop) == 0;
    void *frame[1];
    int news;
    (void)walk_stack(frame, 1, &news);
}

static int in_self(const void *frame)
{
    uintptr_t a = (uintptr_t)frame;
    if (a < self_min || a >= self_max)
        return 0;
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
static __attribute__((noinline)) void full_walk(struct om_stack *stack, unsigned depth,
                                                unsigned skip)
{
    enum { SLACK = 16 };
    void *buf[OM_TRACER_MAX_DEPTH + SLACK];
    int news;
    unsigned n = walk_stack(buf, depth + SLACK, &news);
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
    stack->walked = news;
    stack->full = 1;
}

/* The program's return address into the library and the stack pointer of the program's
 * frame at that call, from the library's own frame pointers (it is built with them). 0,
 * or -1 where the chain does not lead out plausibly. */
static __attribute__((always_inline)) inline int program_call(uintptr_t *ip, uintptr_t *sp)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    for (int hop = 0; hop < 8; hop++) {
        uintptr_t ret = fp[1];
        if (!in_self((const void *)ret)) {
            *ip = ret;
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

/* The calling thread's stack, [lo, hi): the fast walk starts inside it and never reads at
 * or above hi. hi == 1: unknown, never walk fast. */
static __thread uintptr_t tls_stack_lo, tls_stack_hi;

extern void *__libc_stack_end;

#define MAIN_STACK_MAX ((uintptr_t)1 << 30)

static void find_stack(void)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0), end = (uintptr_t)__libc_stack_end;
    tls_stack_lo = 0;
    tls_stack_hi = 1;
    if ((pid_t)syscall(SYS_gettid) == getpid() && here < end && end - here < MAIN_STACK_MAX) {
        /* The initial thread's stack (pthread_getattr_np would read /proc/self/maps). */
        tls_stack_lo = end - MAIN_STACK_MAX;
        tls_stack_hi = end;
        return;
    }
    pthread_attr_t attr;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && here >= (uintptr_t)addr &&
        here < (uintptr_t)addr + size) {
        tls_stack_lo = (uintptr_t)addr;
        tls_stack_hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&attr);
}

uintptr_t om_stack_top(void)
{
    if (__builtin_expect(tls_stack_hi == 0, 0))
        find_stack();
    return tls_stack_hi > 1 ? tls_stack_hi : 0;
}

/* What om_stack_room leaves to the frames below the caller's (signal handlers among them),
 * and what it grants where the thread's stack is not known. */
#define ROOM_MARGIN ((uintptr_t)256 << 10)
#define ROOM_UNKNOWN ((size_t)256 << 10)
#define ROOM_MIN ((size_t)16 << 10)

size_t om_stack_room(void)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (om_stack_top() == 0 || here < tls_stack_lo)
        return ROOM_UNKNOWN;
    uintptr_t lo = tls_stack_lo;
    struct rlimit lim;
    /* The initial thread's stack grows down to its limit below the top, not to the span
     * find_stack allows it. */
    if ((pid_t)syscall(SYS_gettid) == getpid() && getrlimit(RLIMIT_STACK, &lim) == 0 &&
        lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < tls_stack_hi - lo)
        lo = tls_stack_hi - (uintptr_t)lim.rlim_cur;
    return here > lo + ROOM_MARGIN + ROOM_MIN ? here - lo - ROOM_MARGIN : ROOM_MIN;
}

/* Asks for the lines where the slot says the return addresses above sp lie, all at once: the
 * walk below reads each only after the one before, so that their misses would come one after
 * another. A hint only: a line of another stack shape is fetched for nothing, and nothing is
 * read. */
static inline void memo_prefetch(const struct memo_slot *s, uintptr_t sp, uintptr_t top)
{
    for (unsigned k = 0; k < WALK_MEMO && s->ip[k]; k++) {
        uint32_t dist = s->dist[k];
        if (dist == STEP_OUTERMOST || sp + dist > top || sp + dist < sp)
            break;
        sp += dist;
        __builtin_prefetch((const void *)(sp - 8));
    }
}

/* Follows the learnt distances up from the program's call; 0 with the stack complete, -1
 * where the full walk must take over. */
static int fast_walk(struct om_stack *stack, unsigned depth, uintptr_t ip, uintptr_t sp)
{
    const struct om_table *tab = __atomic_load_n(&steps, __ATOMIC_ACQUIRE);
    uint32_t marks = __atomic_load_n(&step_marks, __ATOMIC_ACQUIRE);
    if (__builtin_expect(tls_stack_hi == 0, 0))
        find_stack();
    uintptr_t top = tls_stack_hi;
    /* Off the thread's stack (a signal handler on an alternate stack): the full walk. */
    if (!tab || sp < tls_stack_lo || sp >= top)
        return -1;
    struct walk_memo *m = memo_for(tab, marks);
    struct memo_slot *s = m ? memo_slot(m, ip, sp, stack->py_stack) : NULL;
    if (s && s->ip[0] == ip)
        memo_prefetch(s, sp, top);
    unsigned n = 0;
    while (n < depth) {
        uint32_t dist;
        if (s && n < WALK_MEMO && ip && s->ip[n] == ip) {
            dist = s->dist[n];
        } else {
            const struct step *e = step_find(tab, ip);
            dist = e ? __atomic_load_n(&e->dist, __ATOMIC_RELAXED) : STEP_VARIES;
            if (s && n < WALK_MEMO) {
                s->ip[n] = dist != STEP_VARIES ? ip : 0;
                s->dist[n] = dist;
            }
        }
        stack->frames[n++] = (void *)ip;
        if (dist == STEP_OUTERMOST)
            break;
        if (dist == STEP_VARIES || sp + dist > top || sp + dist < sp)
            return -1;
        sp += dist;
        ip = *(const uintptr_t *)(sp - 8);
    }
    stack->depth = n;
    stack->walked = 0;
    stack->full = 0;
    if (s) {
        uint32_t i = (uint32_t)(s - m->slot);
        const struct memo_site *h = &m->site[i];
        m->last = i + 1;
        if (h->id1) { /* what interning it will read, while the caller allocates */
            __builtin_prefetch(h->at[0]);
            __builtin_prefetch(h->at[1]);
            for (unsigned k = 0; k < SITE_LINES; k++)
                __builtin_prefetch((const char *)h->at[2] + 64 * k, 1);
        }
    }
    return 0;
}

void om_stack_capture(struct om_stack *stack, unsigned depth, unsigned skip)
{
    if (depth > OM_TRACER_MAX_DEPTH)
        depth = OM_TRACER_MAX_DEPTH;
    uintptr_t ip, sp;
    stack->py_stack = om_py_capture(depth);
    if (tls_memo)
        tls_memo->last = 0;
    if (self_nranges && program_call(&ip, &sp) == 0 && fast_walk(stack, depth, ip, sp) == 0)
        return;
    full_walk(stack, depth, skip);
}

/* The site the calling thread's last capture's slot was last interned as: a hint. */
static struct memo_site *site_hint(void)
{
    struct walk_memo *m = tls_memo;
    return m && m->last ? &m->site[m->last - 1] : NULL;
}

static void site_note(struct memo_site *h, const struct om_sites *sites, const struct om_site *s)
{
    if (h)
        *h = (struct memo_site){s->id + 1, {&sites->by_id[s->id], &sites->hashes[s->id], s}};
}

/* One word into a key, every bit of it reaching every bit of the key. */
static inline uint64_t cheap_mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

uint64_t om_stack_cheap_key(size_t size)
{
    uintptr_t ip, sp;
    uint64_t py;
    if (!self_nranges || program_call(&ip, &sp) != 0 || om_py_cheap_key(&py) != 0)
        return 0;
    /* The depth rather than the address: the same call made on another thread's stack. */
    uintptr_t top = om_stack_top();
    uint64_t h = cheap_mix(cheap_mix(cheap_mix(size, ip), top > sp ? top - sp : sp), py);
    return h | 1;
}

static int grow_ids(struct om_sites *sites)
{
    uint32_t cap = sites->capacity ? sites->capacity * 2 : 256;
    struct om_site **fresh = om_sys_alloc(cap * sizeof *fresh);
    uint64_t *hashes = om_sys_alloc(cap * sizeof *hashes);
    if (!fresh || !hashes) {
        om_sys_free(fresh, cap * sizeof *fresh);
        om_sys_free(hashes, cap * sizeof *hashes);
        return -1;
    }
    if (sites->count) {
        memcpy(fresh, sites->by_id, sites->count * sizeof *fresh);
        memcpy(hashes, sites->hashes, sites->count * sizeof *hashes);
    }
    /* The old array is kept: the symbolizer may be reading it without the lock. */
    __atomic_store_n(&sites->by_id, fresh, __ATOMIC_RELEASE);
    om_sys_free(sites->hashes, sites->capacity * sizeof *sites->hashes);
    sites->hashes = hashes;
    sites->capacity = cap;
    return 0;
}

/* The sites index's hash: one multiply a word (a deep stack's key is 136 bytes, and every
 * request looks its site up). */
static uint64_t site_hash(void *const *key, unsigned n)
{
    uint64_t h = n;
    for (unsigned i = 0; i < n; i++)
        h = (h ^ (uintptr_t)key[i]) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* ---- the sites' memory: a region of their own, compacted once folding left it half dead ---- */

struct om_site_block {
    struct om_site_block *next;
    size_t size, used; /* bytes of data */
    char data[];
};

#define SITE_BLOCK (256u * 1024)

/* A site (or fold) record and its key, size bytes, zeroed: the record first, the key after
 * it. NULL when out of memory. */
static struct om_site *site_mem(struct om_sites *sites, size_t size)
{
    struct om_site_block *b = sites->blocks;
    size = (size + 15) & ~(size_t)15;
    if (!b || b->size - b->used < size) {
        size_t want = sizeof *b + (size > SITE_BLOCK ? size : SITE_BLOCK);
        b = om_sys_map(want);
        if (!b)
            return NULL;
        b->size = want - sizeof *b;
        b->next = sites->blocks;
        sites->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    sites->live_bytes += size;
    return p;
}

static size_t site_bytes(const struct om_site *s)
{
    return (sizeof *s + (s->depth + 1) * sizeof(void *) + 15) & ~(size_t)15;
}

static struct om_site *site_new(struct om_sites *sites, void *const *key, unsigned depth)
{
    struct om_site *s = site_mem(sites, sizeof *s + (depth + 1) * sizeof(void *));
    if (!s)
        return NULL;
    s->frames = (void **)(s + 1);
    memcpy(s->frames, key, (depth + 1) * sizeof(void *));
    s->depth = depth;
    s->life_req_min = s->life_ns_min = s->min_size = UINT64_MAX;
    return s;
}

static void blocks_unmap(struct om_site_block *b)
{
    while (b) {
        struct om_site_block *next = b->next;
        om_sys_unmap(b, sizeof *b + b->size);
        b = next;
    }
}

/* Compaction, in steps that the caller's lock is let go between: begin (under the lock)
 * takes the blocks away from the sites, whose new records go into new blocks from then on;
 * the block for the copies is mapped outside the lock; the records still named are copied
 * in slices of OM_MOVE_SLICE, in id order, under the lock; finish (under the lock) copies
 * again each record changed since its copy (every change of a record's counters gives it a
 * new mod_event: the tracer stamps it with the domain's event count, which only grows), makes
 * by_id name the copies and calls relink; the old blocks are unmapped outside the lock. */
int om_sites_move_begin(struct om_sites *sites, struct om_sites_move *m)
{
    *m = (struct om_sites_move){0};
    /* Amortized: a compaction moves the live bytes, fewer than the dead ones left since the
     * last. */
    if (!(sites->dead_bytes > sites->live_bytes && sites->dead_bytes >= SITE_BLOCK))
        return 0;
    m->old = sites->blocks;
    m->want = sites->live_bytes;
    m->dead = sites->dead_bytes;
    m->end = sites->count;
    sites->blocks = NULL;
    sites->live_bytes = sites->dead_bytes = 0;
    return 1;
}

int om_sites_move_map(struct om_sites_move *m)
{
    if (!m->want)
        return 0;
    struct om_site_block *b = om_sys_map(sizeof *b + m->want);
    if (!b)
        return -ENOMEM;
    b->size = m->want;
    b->used = 0;
    m->fresh = b;
    return 0;
}

int om_sites_move_slice(struct om_sites *sites, struct om_sites_move *m)
{
    m->copied = 0;
    if (!m->fresh)
        return 1;
    for (; m->next < m->end && m->copied < OM_MOVE_SLICE; m->next++) {
        const struct om_site *s = sites->by_id[m->next];
        if (s->id != m->next)
            continue;
        struct om_site *c = (struct om_site *)(m->fresh->data + m->fresh->used);
        memcpy(c, s, site_bytes(s));
        c->frames = (void **)(c + 1);
        m->fresh->used += site_bytes(s);
        m->copied++;
    }
    return m->next == m->end;
}

/* Appends the chain b at the end of the sites' blocks (new records go into the first). */
static void blocks_append(struct om_sites *sites, struct om_site_block *b)
{
    struct om_site_block **at = &sites->blocks;
    while (*at)
        at = &(*at)->next;
    *at = b;
}

int om_sites_move_finish(struct om_sites *sites, struct om_sites_move *m, void (*relink)(void *ctx),
                         void *ctx)
{
    m->copied = 0;
    if (m->want && (!m->fresh || m->next != m->end)) {
        /* Nothing moves: the old blocks are the sites' again. */
        blocks_append(sites, m->old);
        sites->live_bytes += m->want;
        sites->dead_bytes += m->dead;
        m->old = NULL;
        return -ENOMEM;
    }
    char *at = m->fresh ? m->fresh->data : NULL;
    for (uint32_t i = 0; i < m->end; i++) {
        struct om_site *s = sites->by_id[i];
        if (s->id != i)
            continue;
        struct om_site *c = (struct om_site *)at;
        at += site_bytes(s);
        if (c->mod_event != s->mod_event) {
            memcpy(c, s, sizeof *s); /* the key after it never changes */
            c->frames = (void **)(c + 1);
            m->copied++;
        }
        sites->by_id[i] = c;
    }
    for (uint32_t i = 0; i < m->end; i++)
        if (sites->by_id[i]->id != i) /* still the old fold: it was not moved yet */
            sites->by_id[i] = sites->by_id[sites->by_id[i]->id];
    if (m->fresh) {
        m->fresh->next = NULL;
        blocks_append(sites, m->fresh);
        sites->live_bytes += m->want;
        m->fresh = NULL;
    }
    if (relink)
        relink(ctx);
    sites->moves++;
    return 0;
}

void om_sites_move_end(struct om_sites_move *m)
{
    blocks_unmap(m->old);
    blocks_unmap(m->fresh); /* mapped, but never used: the move was given up */
    m->old = m->fresh = NULL;
}

/* The site that id names, where it is still its own (not folded) and its key is the stack's:
 * no other site can be. NULL otherwise. */
static struct om_site *site_named(const struct om_sites *sites, uint32_t id,
                                  const struct om_stack *stack, void *const *key)
{
    struct om_site *s = sites->by_id[id];
    return s->id == id && s->depth == stack->depth && s->py_stack == stack->py_stack &&
                   memcmp(s->frames, key, stack->depth * sizeof(void *)) == 0
               ? s
               : NULL;
}

struct om_site *om_sites_intern(struct om_sites *sites, const struct om_stack *stack)
{
    struct om_site *s = NULL;
    /* The key: native frames and the Python stack, so that stacks that differ only in their
     * Python frames are different sites. */
    unsigned depth = stack->depth;
    void *key[OM_TRACER_MAX_DEPTH + 1];
    memcpy(key, stack->frames, depth * sizeof(void *));
    key[depth] = (void *)(uintptr_t)stack->py_stack;
    /* The hint is taken on the same test as the index's candidates. */
    struct memo_site *h = site_hint();
    if (h && h->id1 && h->id1 - 1 < sites->count && (s = site_named(sites, h->id1 - 1, stack, key)))
        return s;
    uint64_t hash = site_hash(key, depth + 1);
    uint32_t hashv = (uint32_t)(hash >> 32);
    for (uint32_t pos = 0, id; (id = om_id_index_next(&sites->index, hashv, &pos));)
        if ((s = site_named(sites, id - 1, stack, key))) {
            site_note(h, sites, s);
            return s;
        }
    if (sites->count == sites->capacity && grow_ids(sites) != 0)
        return NULL;
    if (!(s = site_new(sites, key, depth)))
        return NULL;
    if (om_id_index_add(&sites->index, hashv, sites->count) != 0) {
        sites->live_bytes -= site_bytes(s); /* left unused in its block */
        sites->dead_bytes += site_bytes(s);
        return NULL;
    }
    s->py_stack = stack->py_stack;
    s->id = sites->count;
    sites->by_id[s->id] = s;
    sites->hashes[s->id] = hash;
    __atomic_store_n(&sites->count, s->id + 1, __ATOMIC_RELEASE);
    site_note(h, sites, s);
    return s;
}

/* ---- folds: sites seen once, long ago, kept as one entry per innermost frames ---- */

/* A fold's key: the innermost native frames, up to and including the first frame of
 * CPython's eval loop (what runs the innermost Python frame), at most OM_FOLD_FRAMES; and
 * that Python frame's id + 1 (0: none). */
static unsigned fold_key(const struct om_site *s, void **key)
{
    unsigned n = s->depth < OM_FOLD_FRAMES ? s->depth : OM_FOLD_FRAMES, k = 0;
    while (k < n) {
        key[k] = s->frames[k];
        if (om_py_is_eval((uintptr_t)s->frames[k++]))
            break;
    }
    const uint32_t *py = NULL;
    unsigned np = 0;
    key[k] = (void *)(uintptr_t)0;
    if (s->py_stack && om_py_stack(s->py_stack, &py, &np) == 0 && np > 0)
        key[k] = (void *)(uintptr_t)((py[0] >> 1) + 1);
    return k;
}

static struct om_site *fold_of(struct om_sites *sites, const struct om_site *s)
{
    void *key[OM_FOLD_FRAMES + 1];
    unsigned depth = fold_key(s, key);
    uint32_t py_top = (uint32_t)(uintptr_t)key[depth];
    uint64_t hash = site_hash(key, depth + 1);
    uint32_t hashv = (uint32_t)(hash >> 32);
    struct om_site *f;
    for (uint32_t pos = 0, id; (id = om_id_index_next(&sites->folds, hashv, &pos));) {
        f = sites->by_id[id - 1];
        if (f->depth == depth && f->py_top == py_top &&
            memcmp(f->frames, key, depth * sizeof(void *)) == 0)
            return f;
    }
    if (sites->count == sites->capacity && grow_ids(sites) != 0)
        return NULL;
    if (!(f = site_new(sites, key, depth)))
        return NULL;
    if (om_id_index_add(&sites->folds, hashv, sites->count) != 0) {
        sites->live_bytes -= site_bytes(f);
        sites->dead_bytes += site_bytes(f);
        return NULL;
    }
    f->fold = 1;
    f->py_top = py_top;
    f->id = sites->count;
    sites->by_id[f->id] = f;
    sites->hashes[f->id] = hash;
    __atomic_store_n(&sites->count, f->id + 1, __ATOMIC_RELEASE);
    return f;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* The fold takes s's counters: every one of them is a sum, a minimum or a maximum. */
static void fold_add(struct om_site *f, const struct om_site *s)
{
    f->nfolded++;
    f->count += s->count;
    f->total_bytes += s->total_bytes;
    f->min_size = min64(f->min_size, s->min_size);
    f->max_size = max64(f->max_size, s->max_size);
    f->freed += s->freed;
    f->life_req_min = min64(f->life_req_min, s->life_req_min);
    f->life_req_max = max64(f->life_req_max, s->life_req_max);
    f->life_req_sum += s->life_req_sum;
    f->life_ns_min = min64(f->life_ns_min, s->life_ns_min);
    f->life_ns_max = max64(f->life_ns_max, s->life_ns_max);
    f->life_ns_sum += s->life_ns_sum;
    for (int c = 0; c < OM_CAT_COUNT; c++)
        f->cat_bytes[c] += s->cat_bytes[c];
    f->last_seq = max64(f->last_seq, s->last_seq);
}

void om_fold_pass_begin(const struct om_sites *sites, struct om_fold_pass *pass)
{
    *pass = (struct om_fold_pass){.end = sites->count};
}

int om_sites_fold_slice(struct om_sites *sites, struct om_fold_pass *pass,
                        int (*foldable)(const struct om_site *s, void *ctx), void *ctx)
{
    uint32_t stop =
        pass->end - pass->next > OM_FOLD_EXAMINE ? pass->next + OM_FOLD_EXAMINE : pass->end;
    pass->folded = 0;
    for (; pass->next < stop && pass->folded < OM_FOLD_SLICE; pass->next++) {
        uint32_t i = pass->next;
        struct om_site *s = sites->by_id[i];
        if (s->id != i || s->fold || !foldable(s, ctx))
            continue;
        struct om_site *f = fold_of(sites, s);
        if (!f)
            return -ENOMEM;
        fold_add(f, s);
        sites->by_id[i] = f;
        sites->live_bytes -= site_bytes(s);
        sites->dead_bytes += site_bytes(s);
        pass->folded++;
    }
    return pass->next == pass->end;
}

int om_sites_fold(struct om_sites *sites, int (*foldable)(const struct om_site *s, void *ctx),
                  void (*relink)(void *ctx), void *ctx)
{
    struct om_fold_pass pass;
    int folded = 0, rc;
    om_fold_pass_begin(sites, &pass);
    do {
        rc = om_sites_fold_slice(sites, &pass, foldable, ctx);
        folded += pass.folded;
    } while (rc == 0);
    if (rc < 0)
        return rc;
    struct om_sites_move m;
    if (om_sites_move_begin(sites, &m)) {
        rc = om_sites_move_map(&m);
        while (rc == 0 && om_sites_move_slice(sites, &m) == 0)
            ;
        (void)om_sites_move_finish(sites, &m, relink, ctx);
        om_sites_move_end(&m);
    }
    return folded;
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

const char *om_text_intern(struct om_text **table, const char *s)
{
    struct om_text *e = NULL;
    size_t n = strlen(s);
    HASH_FIND(hh, *table, s, n, e);
    if (e)
        return e->text;
    e = om_sys_alloc(sizeof *e + n + 1);
    if (!e)
        return NULL;
    memcpy(e->text, s, n + 1);
    HASH_ADD_KEYPTR(hh, *table, e->text, n, e);
    return e->text;
}

/* Module paths, kept for the process's life: frames resolved by one report point at them, and
 * each report scans the modules anew. */
static struct om_text *paths;

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
    m->path = om_text_intern(&paths, name);
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

void om_frames_symbolize(const uintptr_t *addresses, struct om_frame_info *info, uint32_t n,
                         int with_names)
{
    if (!modules)
        modules = om_sys_map(MAX_MODULES * sizeof *modules);
    if (!modules || n == 0)
        return;
    nmodules = 0;
    dl_iterate_phdr(module_cb, NULL);
    /* One budget a call: a report waits for names at most this long. */
    uint64_t deadline = now_ns() + NAME_BUDGET_NS;
    for (uint32_t i = 0; i < n; i++) {
        uintptr_t a = addresses[i];
        if (!info[i].module) {
            const struct module *m = module_of(a);
            if (m) {
                info[i].module = m->path;
                info[i].offset = a - m->bias;
            }
        }
        if (with_names && !info[i].function)
            info[i].function = function_of(a, deadline);
    }
}

const char *om_category_name(int category)
{
    static const char *const n[OM_CAT_COUNT] = {"temporary", "per_iteration", "persistent"};
    return category >= 0 && category < OM_CAT_COUNT ? n[category] : "unknown";
}
