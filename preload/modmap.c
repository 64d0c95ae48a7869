/* Position-independent frame keys from a table of executable segments, rebuilt when the
 * loader reports new modules and published by a pointer swap, never under a lock. */
#include "modmap.h"
#include "om_common.h"

#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

struct segment {
    uintptr_t start, end, base;
    uint64_t name_hash;
};

struct table {
    unsigned long long adds; /* the loader's count of modules loaded when this was built */
    size_t n, cap;
    struct segment seg[];
};

static _Atomic(struct table *) current;

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
    struct table *t = data;
    t->adds = info->dlpi_adds;
    uint64_t name = om_fnv1a_str(OM_FNV_OFFSET, info->dlpi_name ? info->dlpi_name : "");
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || t->n == t->cap)
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        t->seg[t->n++] = (struct segment){start, start + ph->p_memsz, info->dlpi_addr, name};
    }
    return 0;
}

static int loader_adds(struct dl_phdr_info *info, size_t size, void *data)
{
    *(unsigned long long *)data = info->dlpi_adds;
    return 1; /* the first module tells the count */
}

static struct table *rebuild(void)
{
    size_t cap = 4096, bytes = sizeof(struct table) + cap * sizeof(struct segment);
    struct table *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return NULL;
    t->cap = cap;
    dl_iterate_phdr(collect, t);
    for (size_t i = 1; i < t->n; i++) { /* insertion sort: a few hundred segments */
        struct segment s = t->seg[i];
        size_t j = i;
        for (; j > 0 && t->seg[j - 1].start > s.start; j--)
            t->seg[j] = t->seg[j - 1];
        t->seg[j] = s;
    }
    /* Tables are never unmapped: another thread may still be searching an older one. */
    atomic_store_explicit(&current, t, memory_order_release);
    return t;
}

static const struct segment *find(const struct table *t, uintptr_t a)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->seg[mid].end <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && t->seg[lo].start <= a ? &t->seg[lo] : NULL;
}

const void *om_modmap_table(void)
{
    return atomic_load_explicit(&current, memory_order_acquire);
}

uint64_t om_modmap_key(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    struct table *t = atomic_load_explicit(&current, memory_order_acquire);
    const struct segment *s = t ? find(t, a) : NULL;
    if (!s) {
        unsigned long long adds = 0;
        dl_iterate_phdr(loader_adds, &adds);
        if (!t || adds != t->adds)
            t = rebuild();
        s = t ? find(t, a) : NULL;
    }
    if (!s) /* not in any module (generated code): the address itself */
        return a;
    return s->name_hash ^ ((a - s->base) * 0x9e3779b97f4a7c15ull);
}
