/* An arena: a backend's reservation, its free extents, and page release. */
#include "arena.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int om_arena_init(struct om_arena *a, const struct om_backend *backend, size_t reserve)
{
    memset(a, 0, sizeof *a);
    uintptr_t base;
    int rc = backend->reserve(backend->ctx, &reserve, &base);
    if (rc != 0)
        return rc;
    /* On failure the reservation stays: address space, or one device block. */
    if (om_extents_init(&a->free) != 0 || om_extents_init(&a->unbacked) != 0)
        return -ENOMEM;
    a->backend = backend;
    a->page = backend->page ? backend->page : (size_t)sysconf(_SC_PAGESIZE);
    a->base = (unsigned char *)base;
    a->reserved = reserve;
    return 0;
}

int om_arena_is_free(const struct om_arena *a, size_t off, size_t len)
{
    if (off >= a->top)
        return 1;
    ptrdiff_t i = om_extents_at_or_below(&a->free, off);
    if (i < 0)
        return 0;
    size_t end = a->free.v[i].off + a->free.v[i].len;
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
    for (size_t i = 0; i < a->free.n; i++) {
        const struct om_extent *e = &a->free.v[i];
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
    /* Every update below then succeeds: a split needs one extent, a gap below the top one. */
    if (om_extents_reserve(&a->free, 2) != 0 || om_extents_reserve(&a->unbacked, 1) != 0)
        return -ENOMEM;
    size_t from = off & ~(a->page - 1), to = align_up(off + len, a->page);
    if (a->backend->map &&
        a->backend->map(a->backend->ctx, (uintptr_t)a->base + from, to - from) != 0)
        return -ENOMEM;
    size_t end = off + len;
    if (off > a->top)
        om_extents_add(&a->free, a->top, off - a->top); /* the gap joins a free tail if any */
    (void)om_extents_remove(&a->free, off, len);
    if (end > a->top)
        a->top = end;
    (void)om_extents_remove(&a->unbacked, from, to - from);
    if (end > a->touched)
        a->touched = end;
    a->used_bytes += len;
    if (a->used_bytes > a->peak_used)
        a->peak_used = a->used_bytes;
    return 0;
}

int om_arena_give(struct om_arena *a, size_t off, size_t len)
{
    if (om_extents_add(&a->free, off, len) != 0)
        return -ENOMEM;
    a->used_bytes -= len;
    return 0;
}

static size_t release_pages(struct om_arena *a, size_t from, size_t to)
{
    from = align_up(from, a->page);
    to &= ~(a->page - 1);
    if (to > om_arena_touched_end(a))
        to = om_arena_touched_end(a); /* above: never touched, or released already */
    if (to <= from || !a->backend->release || om_extents_reserve(&a->unbacked, 1) != 0 ||
        a->backend->release(a->backend->ctx, (uintptr_t)a->base + from, to - from) != 0)
        return 0;
    size_t before = a->unbacked.bytes;
    (void)om_extents_add(&a->unbacked, from, to - from);
    a->released += a->unbacked.bytes - before;
    return a->unbacked.bytes - before;
}

size_t om_arena_release_tail(struct om_arena *a, size_t keep)
{
    if (!a->free.n)
        return 0;
    struct om_extent *last = &a->free.v[a->free.n - 1];
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
        a->free.n--;
    else
        last->len = new_top - last->off;
    a->free.bytes -= a->top - new_top;
    a->top = new_top;
    if (a->touched > from) {
        (void)om_extents_remove(&a->unbacked, from, om_arena_touched_end(a) - from);
        a->touched = from;
    }
    return released;
}

size_t om_arena_release_range(struct om_arena *a, size_t off, size_t len)
{
    /* The pages the range lies on, as far as they are free: neighbours may be free too, and
     * parts of it may have been taken again since it was freed. */
    return om_arena_release_free(a, off & ~(a->page - 1), align_up(off + len, a->page));
}

size_t om_arena_release_free(struct om_arena *a, size_t from, size_t to)
{
    size_t released = 0;
    ptrdiff_t i = om_extents_at_or_below(&a->free, from);
    /* Indices, not a pointer: the unbacked set may move, the free one does not. */
    for (size_t k = i < 0 ? 0 : (size_t)i; k < a->free.n && a->free.v[k].off < to; k++) {
        size_t lo = a->free.v[k].off, hi = lo + a->free.v[k].len;
        released += release_pages(a, lo > from ? lo : from, hi < to ? hi : to);
    }
    return released;
}

size_t om_arena_taken_end(const struct om_arena *a)
{
    const struct om_extent *last = a->free.n ? &a->free.v[a->free.n - 1] : NULL;
    return last && last->off + last->len == a->top ? last->off : a->top;
}

static int check_set(const struct om_extents *s, size_t limit)
{
    size_t prev_end = 0, bytes = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct om_extent *e = &s->v[i];
        if (e->len == 0 || (i > 0 && e->off <= prev_end) || e->off + e->len > limit)
            return -EFAULT; /* empty, unsorted, uncoalesced or past the limit */
        prev_end = e->off + e->len;
        bytes += e->len;
    }
    return bytes == s->bytes ? 0 : -EFAULT;
}

int om_arena_check(const struct om_arena *a)
{
    if (check_set(&a->free, a->top) != 0 || check_set(&a->unbacked, om_arena_touched_end(a)) != 0)
        return -EFAULT;
    return 0;
}
