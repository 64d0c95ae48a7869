/* Gives back the pages of the loaded modules' unwind tables that unwinding read. */
#include "tracer_internal.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

/* The kernel maps the page read and those around it in windows of this size. */
#define FAULT_AROUND ((uintptr_t)64 << 10)

/* Whether the loader wrote into the module's read-only segments (text relocations): then
 * their pages are private copies, and dropping them would undo the relocations. */
static int has_text_relocations(const struct dl_phdr_info *info)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_DYNAMIC)
            continue;
        for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
             d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
                return 1;
    }
    return 0;
}

static const ElfW(Phdr) * segment_of(const struct dl_phdr_info *info, uintptr_t vaddr)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && vaddr >= ph->p_vaddr && vaddr - ph->p_vaddr < ph->p_memsz)
            return ph;
    }
    return NULL;
}

/* One loaded module: the span of its loaded segments and the pages of its unwind tables
 * that may be dropped (from == to: none). */
struct module_tables {
    uintptr_t lo, hi, from, to;
};

/* The modules as the loader had them at (adds, subs): rebuilt only when a module was loaded
 * or unloaded since, so that a drop costs a lookup per frame, not a pass over every
 * module's headers. Used under the loader's lock (inside dl_iterate_phdr's callback) and
 * known_lock, taken there: the loader's lock is not one that tools see. */
static struct {
    struct module_tables *v;
    size_t n, cap;
    unsigned long long adds, subs;
    int valid;
} known;
static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pages to drop of one module, from its program headers. */
static struct module_tables tables_of(const struct dl_phdr_info *info)
{
    struct module_tables m = {UINTPTR_MAX, 0, 0, 0};
    const ElfW(Phdr) *hdr = NULL;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_GNU_EH_FRAME)
            hdr = ph;
        if (ph->p_type == PT_LOAD) {
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
            if (lo < m.lo)
                m.lo = lo;
            if (lo + ph->p_memsz > m.hi)
                m.hi = lo + ph->p_memsz;
        }
    }
    if (!hdr || info->dlpi_addr == getauxval(AT_SYSINFO_EHDR))
        return m; /* the vDSO has no file behind it */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const ElfW(Phdr) *seg = segment_of(info, hdr->p_vaddr);
    /* Only pages that are the file's, never written: a writable segment (RELRO included)
     * holds the program's data, and its copy-on-write pages cannot be read back. Where the
     * tables share an executable segment with code (linked without separate code), they
     * are left alone too: breakpoints and uprobes live in copies of code pages. */
    if (!seg || (seg->p_flags & (PF_W | PF_X)) || seg->p_filesz != seg->p_memsz ||
        has_text_relocations(info))
        return m;
    /* From the window that reading .eh_frame_hdr's first page mapped to the end of the
     * segment: .eh_frame follows the header and .gcc_except_table follows .eh_frame, as
     * GNU ld and lld lay them out. The tables are only found, never read here: a read
     * would map a window of its own. Read-only data that shares the first window is
     * mapped again if it is used. */
    uintptr_t seg_lo = info->dlpi_addr + seg->p_vaddr;
    uintptr_t from = (info->dlpi_addr + hdr->p_vaddr) & ~(FAULT_AROUND - 1);
    if (from < seg_lo)
        from = (seg_lo + page - 1) & ~(page - 1);
    uintptr_t to = (seg_lo + seg->p_memsz) & ~(page - 1);
    if (to > from) {
        m.from = from;
        m.to = to;
    }
    return m;
}

/* Heapsort by start address: qsort may call malloc, the interposed path. */
static void sift_down(struct module_tables *v, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && v[c + 1].lo > v[c].lo)
            c++;
        if (v[i].lo >= v[c].lo)
            return;
        struct module_tables t = v[i];
        v[i] = v[c];
        v[c] = t;
        i = c;
    }
}

static void sort_by_lo(struct module_tables *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(v, i, n);
    for (size_t end = n; end-- > 1;) {
        struct module_tables t = v[0];
        v[0] = v[end];
        v[end] = t;
        sift_down(v, 0, end);
    }
}

static int add_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (known.n == known.cap) {
        size_t cap = known.cap ? 2 * known.cap : 256;
        struct module_tables *v = om_sys_map(cap * sizeof *v);
        if (!v)
            return 1;
        if (known.n)
            memcpy(v, known.v, known.n * sizeof *v);
        om_sys_unmap(known.v, known.cap * sizeof *v);
        known.v = v;
        known.cap = cap;
    }
    struct module_tables m = tables_of(info);
    if (m.lo < m.hi)
        known.v[known.n++] = m;
    return 0;
}

static const struct module_tables *module_at(uintptr_t a)
{
    size_t lo = 0, hi = known.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (known.v[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && a < known.v[lo - 1].hi ? &known.v[lo - 1] : NULL;
}

/* Runs once under the loader's lock (the callback stops the iteration), so no module can be
 * unloaded (and its range reused by some writable mapping) between finding a range and
 * dropping it. */
static int drop_modules(struct dl_phdr_info *info, size_t size, void *data)
{
    const struct om_stack *stack = data;
    if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
        return 1;
    /* Never busy, the loader's lock being held; held at a fork by a thread the child does not
     * have, the child drops nothing (its pages stay, as without optmem). */
    if (pthread_mutex_trylock(&known_lock) != 0)
        return 1;
    if (!known.valid || known.adds != info->dlpi_adds || known.subs != info->dlpi_subs) {
        known.n = 0;
        known.valid = 0;
        if (dl_iterate_phdr(add_module, NULL) != 0)
            goto out;
        sort_by_lo(known.v, known.n);
        known.adds = info->dlpi_adds;
        known.subs = info->dlpi_subs;
        known.valid = 1;
    }
    const struct module_tables *done[OM_TRACER_MAX_DEPTH];
    unsigned ndone = 0;
    for (unsigned f = 0; f < stack->depth; f++) {
        const struct module_tables *m = module_at((uintptr_t)stack->frames[f]);
        if (!m || m->from == m->to)
            continue;
        unsigned i = 0;
        while (i < ndone && done[i] != m)
            i++;
        if (i < ndone)
            continue;
        done[ndone++] = m;
        (void)madvise((void *)m->from, m->to - m->from, MADV_DONTNEED);
    }
out:
    pthread_mutex_unlock(&known_lock);
    return 1;
}

void om_unwind_pages_drop(const struct om_stack *stack)
{
    dl_iterate_phdr(drop_modules, (void *)stack);
}
