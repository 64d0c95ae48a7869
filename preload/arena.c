/* An arena: a backend's reservation, its free extents, and page release. */
#include "arena.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXTENTS_INITIAL 4096

int om_arena_init(struct om_arena *a, const struct om_backend *backend, size_t reserve)
{
    memset(a, 0, sizeof *a);
    uintptr_t base;
    int rc = backend->reserve(backend->ctx, &reserve, &base);
    if (rc != 0)
        return rc;
    void *extents = mmap(NULL, EXTENTS_INITIAL * sizeof(struct om_extent), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (extents == MAP_FAILED)
        return -errno; /* the reservation stays: address space, or one device block */
    a->backend = backend;
    a->page = backend->page ? backend->page : (size_t)sysconf(_SC_PAGESIZE);
    a->base = (unsigned char *)base;
    a->reserved = reserve;
    a->free = extents;
    a->capfree = EXTENTS_INITIAL;
    return 0;
}

/* Index of the last extent starting at or below off, or -1. */
static ptrdiff_t extent_at_or_below(const struct om_arena *a, size_t off)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)a->nfree - 1, found = -1;
    while (lo <= hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if (a->free[mid].off <= off) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

static int reserve_extents(struct om_arena *a, size_t more)
{
    if (a->nfree + more <= a->capfree)
        return 0;
    size_t old = a->capfree * sizeof(struct om_extent);
    void *grown = mremap(a->free, old, old * 2, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED)
        return -ENOMEM;
    a->free = grown;
    a->capfree *= 2;
    return 0;
}

static void insert_extent(struct om_arena *a, size_t at, size_t off, size_t len)
{
    memmove(&a->free[at + 1], &a->free[at], (a->nfree - at) * sizeof a->free[0]);
    a->free[at] = (struct om_extent){off, len};
    a->nfree++;
}

static void remove_extent(struct om_arena *a, size_t at)
{
    memmove(&a->free[at], &a->free[at + 1], (a->nfree - at - 1) * sizeof a->free[0]);
    a->nfree--;
}

int om_arena_is_free(const struct om_arena *a, size_t off, size_t len)
{
    if (off >= a->top)
        return 1;
    ptrdiff_t i = extent_at_or_below(a, off);
    if (i < 0)
        return 0;
    size_t end = a->free[i].off + a->free[i].len;
    return end >= off + len || end == a->top; /* a free tail runs on past top */
}

static size_t align_up(size_t x, size_t alignment)
{
    return (x + alignment - 1) & ~(alignment - 1);
}

int om_arena_best_fit(const struct om_arena *a, size_t len, size_t alignment, size_t floor,
                      size_t *off)
{
    size_t best = SIZE_MAX, best_waste = SIZE_MAX;
    size_t tail = a->top; /* where the end of the arena starts being free */
    for (size_t i = 0; i < a->nfree; i++) {
        const struct om_extent *e = &a->free[i];
        size_t end = e->off + e->len;
        if (end == a->top)
            tail = e->off;
        if (end <= floor)
            continue;
        size_t start = align_up(e->off > floor ? e->off : floor, alignment);
        if (start >= end || end - start < len || end == a->top)
            continue;
        size_t waste = e->len - len;
        if (waste < best_waste) {
            best = start;
            best_waste = waste;
        }
    }
    if (best == SIZE_MAX)
        best = align_up(tail > floor ? tail : floor, alignment);
    if (best > a->reserved || a->reserved - best < len)
        return -ENOMEM;
    *off = best;
    return 0;
}

int om_arena_take(struct om_arena *a, size_t off, size_t len)
{
    if (off > a->reserved || a->reserved - off < len)
        return -ENOMEM;
    if (!om_arena_is_free(a, off, len))
        return -EBUSY;
    if (reserve_extents(a, 2) != 0)
        return -ENOMEM;
    if (a->backend->map) {
        size_t from = off & ~(a->page - 1), to = align_up(off + len, a->page);
        if (a->backend->map(a->backend->ctx, (uintptr_t)a->base + from, to - from) != 0)
            return -ENOMEM;
    }
    size_t end = off + len;
    if (off >= a->top) {
        /* Beyond the top: the gap below becomes free (joining a free tail if any). */
        if (off > a->top) {
            if (a->nfree && a->free[a->nfree - 1].off + a->free[a->nfree - 1].len == a->top)
                a->free[a->nfree - 1].len += off - a->top;
            else
                insert_extent(a, a->nfree, a->top, off - a->top);
        }
        a->top = end;
    } else {
        size_t i = (size_t)extent_at_or_below(a, off);
        struct om_extent e = a->free[i];
        size_t e_end = e.off + e.len;
        if (end > a->top) { /* the range runs past the free tail */
            e_end = end;
            a->top = end;
        }
        remove_extent(a, i);
        if (e_end > end)
            insert_extent(a, i, end, e_end - end);
        if (off > e.off)
            insert_extent(a, i, e.off, off - e.off);
    }
    if (end > a->touched)
        a->touched = end;
    a->used_bytes += len;
    return 0;
}

int om_arena_give(struct om_arena *a, size_t off, size_t len)
{
    if (reserve_extents(a, 1) != 0)
        return -ENOMEM;
    ptrdiff_t prev = extent_at_or_below(a, off);
    size_t next = (size_t)(prev + 1);
    int joins_prev = prev >= 0 && a->free[prev].off + a->free[prev].len == off;
    int joins_next = next < a->nfree && a->free[next].off == off + len;
    if (joins_prev && joins_next) {
        a->free[prev].len += len + a->free[next].len;
        remove_extent(a, next);
    } else if (joins_prev) {
        a->free[prev].len += len;
    } else if (joins_next) {
        a->free[next].off = off;
        a->free[next].len += len;
    } else {
        insert_extent(a, next, off, len);
    }
    a->used_bytes -= len;
    return 0;
}

static size_t release_pages(struct om_arena *a, size_t from, size_t to)
{
    from = align_up(from, a->page);
    to &= ~(a->page - 1);
    if (to <= from || !a->backend->release ||
        a->backend->release(a->backend->ctx, (uintptr_t)a->base + from, to - from) != 0)
        return 0;
    a->released += to - from;
    return to - from;
}

size_t om_arena_release_tail(struct om_arena *a, size_t keep)
{
    if (!a->nfree)
        return 0;
    struct om_extent *last = &a->free[a->nfree - 1];
    if (last->off + last->len != a->top)
        return 0;
    size_t page = a->page;
    size_t new_top = last->off > keep ? last->off : keep;
    size_t from = align_up(new_top, page), to = align_up(a->top, page);
    if (new_top >= a->top || to <= from || to - from < OM_ARENA_RELEASE_MIN)
        return 0;
    size_t released = release_pages(a, from, to);
    if (!released)
        return 0;
    if (new_top == last->off)
        a->nfree--;
    else
        last->len = new_top - last->off;
    a->top = new_top;
    if (a->touched > from)
        a->touched = from;
    return released;
}

size_t om_arena_release_range(struct om_arena *a, size_t off, size_t len)
{
    ptrdiff_t i = extent_at_or_below(a, off);
    if (i < 0 || a->free[i].off + a->free[i].len < off + len)
        return 0;
    size_t page = a->page;
    /* The pages the range lies on, as far as they are free: neighbours may be free too. */
    size_t from = off & ~(page - 1), to = align_up(off + len, page);
    if (from < a->free[i].off)
        from = a->free[i].off;
    if (to > a->free[i].off + a->free[i].len)
        to = a->free[i].off + a->free[i].len;
    return release_pages(a, from, to);
}

size_t om_arena_release_free(struct om_arena *a)
{
    size_t released = 0;
    for (size_t i = 0; i < a->nfree; i++)
        released += release_pages(a, a->free[i].off, a->free[i].off + a->free[i].len);
    return released;
}

int om_arena_check(const struct om_arena *a)
{
    size_t prev_end = 0;
    for (size_t i = 0; i < a->nfree; i++) {
        const struct om_extent *e = &a->free[i];
        if (e->len == 0 || (i > 0 && e->off <= prev_end) || e->off + e->len > a->top)
            return -EFAULT; /* empty, unsorted, uncoalesced or past the top */
        prev_end = e->off + e->len;
    }
    return 0;
}
