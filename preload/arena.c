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

/* Whether [off, off + len) is free; *at: where off lies among the free extents below top
 * (om_extents_at_or_below), -1 at or above top. */
static int free_at(const struct om_arena *a, size_t off, size_t len, ptrdiff_t *at)
{
    *at = -1;
    if (off >= a->top)
        return 1;
    ptrdiff_t i = *at = om_extents_at_or_below(&a->free, off);
    if (i < 0)
        return 0;
    size_t end = a->free.v[i].off + a->free.v[i].len;
    return end >= off + len || end == a->top; /* a free tail runs on past top */
}

int om_arena_is_free(const struct om_arena *a, size_t off, size_t len)
{
    ptrdiff_t at;
    return free_at(a, off, len, &at);
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
    ptrdiff_t at;
    if (!free_at(a, off, len, &at))
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
    if (at >= 0) /* below top: the free extents are as the test found them */
        (void)om_extents_remove_at(&a->free, at, off, len);
    else
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

/* Whether [from, to) is recorded in the batch to be released later, rather than now. */
static int defer_release(struct om_arena *a, size_t from, size_t to)
{
    struct om_release_batch *b = a->defer;
    if (!b)
        return 0;
    if (b->n && b->v[b->n - 1].off + b->v[b->n - 1].len == from) {
        b->v[b->n - 1].len += to - from;
        return 1;
    }
    if (b->n == OM_RELEASE_BATCH)
        return 0;
    b->v[b->n++] = (struct om_extent){from, to - from};
    return 1;
}

/* [from, to), page-aligned, none of it unbacked, goes back. */
static size_t release_run(struct om_arena *a, size_t from, size_t to)
{
    if (om_extents_reserve(&a->unbacked, 1) != 0 ||
        (!defer_release(a, from, to) &&
         a->backend->release(a->backend->ctx, (uintptr_t)a->base + from, to - from) != 0))
        return 0;
    size_t before = a->unbacked.bytes;
    (void)om_extents_add(&a->unbacked, from, to - from);
    a->released += a->unbacked.bytes - before;
    return a->unbacked.bytes - before;
}

/* The resident pages of [from, to) go back: pages released already and not taken since
 * hold nothing, and a release of them is a system call that frees nothing (a hole's pages,
 * freed and released before, lay between the resident ones of the holes beside it). */
static size_t release_pages(struct om_arena *a, size_t from, size_t to)
{
    from = align_up(from, a->page);
    to &= ~(a->page - 1);
    if (to > om_arena_touched_end(a))
        to = om_arena_touched_end(a); /* above: never touched, or released already */
    size_t released = 0;
    while (from < to && a->backend->release) {
        /* Looked up again each time: a release merges extents of the unbacked set. */
        ptrdiff_t i = om_extents_at_or_below(&a->unbacked, from);
        if (i >= 0 && a->unbacked.v[i].off + a->unbacked.v[i].len > from) {
            from = a->unbacked.v[i].off + a->unbacked.v[i].len;
            continue;
        }
        size_t k = (size_t)(i + 1);
        size_t end = k < a->unbacked.n && a->unbacked.v[k].off < to ? a->unbacked.v[k].off : to;
        released += release_run(a, from, end);
        from = end;
    }
    return released;
}

void om_arena_withhold(struct om_arena *a, struct om_release_batch *b)
{
    size_t kept = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct om_extent e = b->v[i];
        if (om_extents_reserve(&a->free, 1) == 0 &&
            om_extents_remove(&a->free, e.off, e.len) >= 0) {
            b->v[kept++] = e;
            continue;
        }
        /* Left free: released now, so that no request placed on it meanwhile loses data. */
        (void)a->backend->release(a->backend->ctx, (uintptr_t)a->base + e.off, e.len);
    }
    b->n = kept;
}

void om_arena_release_batch(const struct om_arena *a, const struct om_release_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        (void)a->backend->release(a->backend->ctx, (uintptr_t)a->base + b->v[i].off, b->v[i].len);
}

int om_arena_restore(struct om_arena *a, struct om_release_batch *b)
{
    while (b->n) {
        const struct om_extent *e = &b->v[b->n - 1];
        if (om_extents_add(&a->free, e->off, e->len) != 0)
            return -ENOMEM;
        b->n--;
    }
    return 0;
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

/* Adds to `out` the pages of [lo, hi) (page-aligned) that are not resident. */
static int add_unbacked_pages(const struct om_arena *a, struct om_extents *out, size_t lo,
                              size_t hi)
{
    size_t touched_end = om_arena_touched_end(a);
    if (hi > touched_end && om_extents_add(out, lo > touched_end ? lo : touched_end,
                                           hi - (lo > touched_end ? lo : touched_end)) != 0)
        return -ENOMEM;
    ptrdiff_t i = om_extents_at_or_below(&a->unbacked, lo);
    for (size_t k = i < 0 ? 0 : (size_t)i; k < a->unbacked.n && a->unbacked.v[k].off < hi; k++) {
        size_t u_lo = a->unbacked.v[k].off, u_hi = u_lo + a->unbacked.v[k].len;
        u_lo = u_lo > lo ? u_lo : lo;
        u_hi = u_hi < hi ? u_hi : hi;
        if (u_hi > u_lo && om_extents_add(out, u_lo, u_hi - u_lo) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* Adds to `out` the pages of [lo, hi) (page-aligned) wholly free and not resident. */
static int add_empty_pages(const struct om_arena *a, struct om_extents *out, size_t lo, size_t hi)
{
    size_t page = a->page, tail = om_arena_taken_end(a); /* free from there on */
    ptrdiff_t i = om_extents_at_or_below(&a->free, lo);
    for (size_t k = i < 0 ? 0 : (size_t)i; k < a->free.n && a->free.v[k].off < hi; k++) {
        size_t f_lo = align_up(a->free.v[k].off, page);
        size_t f_hi = (a->free.v[k].off + a->free.v[k].len) & ~(page - 1);
        f_lo = f_lo > lo ? f_lo : lo;
        f_hi = f_hi < hi ? f_hi : hi;
        if (f_hi > f_lo && add_unbacked_pages(a, out, f_lo, f_hi) != 0)
            return -ENOMEM;
    }
    tail = align_up(tail > lo ? tail : lo, page);
    return hi > tail ? add_unbacked_pages(a, out, tail, hi) : 0;
}

/* Moves [from, from + n) to [to, to + n), both free and page-aligned, and keeps the books:
 * the source is no longer resident, the destination is, and lies below top and touched. */
static int move_pages(struct om_arena *a, size_t from, size_t to, size_t n)
{
    if (om_extents_reserve(&a->unbacked, 3) != 0 || om_extents_reserve(&a->free, 1) != 0)
        return -ENOMEM;
    int rc =
        a->backend->move(a->backend->ctx, (uintptr_t)a->base + from, (uintptr_t)a->base + to, n);
    if (rc != 0)
        return rc;
    size_t touched_end = om_arena_touched_end(a);
    (void)om_extents_add(&a->unbacked, from, n);
    if (to > touched_end) /* untouched pages below the destination stay so */
        (void)om_extents_add(&a->unbacked, touched_end, to - touched_end);
    (void)om_extents_remove(&a->unbacked, to, n);
    if (to + n > a->touched)
        a->touched = to + n;
    if (to + n > a->top) { /* free space, now in the books as the free tail */
        (void)om_extents_add(&a->free, a->top, to + n - a->top);
        a->top = to + n;
    }
    return 0;
}

/* Adds to src the whole free pages inside [from, to) that are resident, and removes those
 * on which a range of keep lies. 0 or -ENOMEM. */
static int add_idle_pages(const struct om_arena *a, struct om_extents *src, size_t from, size_t to,
                          const struct om_extents *keep)
{
    size_t page = a->page;
    /* Free extents end at or below top, and top at or below touched_end. */
    ptrdiff_t first = om_extents_at_or_below(&a->free, from);
    for (size_t i = first < 0 ? 0 : (size_t)first; i < a->free.n && a->free.v[i].off < to; i++) {
        size_t lo = align_up(a->free.v[i].off > from ? a->free.v[i].off : from, page);
        size_t end = a->free.v[i].off + a->free.v[i].len;
        size_t hi = (end < to ? end : to) & ~(page - 1);
        if (hi > lo && om_extents_add(src, lo, hi - lo) != 0)
            return -ENOMEM;
    }
    first = om_extents_at_or_below(&a->unbacked, from);
    for (size_t i = first < 0 ? 0 : (size_t)first; i < a->unbacked.n && a->unbacked.v[i].off < to;
         i++)
        if (om_extents_remove(src, a->unbacked.v[i].off, a->unbacked.v[i].len) < 0)
            return -ENOMEM;
    for (size_t i = 0; i < keep->n && src->n; i++) {
        size_t lo = keep->v[i].off & ~(page - 1);
        size_t hi = align_up(keep->v[i].off + keep->v[i].len, page);
        if (om_extents_remove(src, lo, hi - lo) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* Moves src's pages onto dst's, in order, while moves are left. Returns the bytes moved. */
static size_t move_runs(struct om_arena *a, const struct om_extents *src,
                        const struct om_extents *dst, size_t *moves_left, struct om_move_run *run)
{
    size_t moved = 0, si = 0, di = 0, s_done = 0, d_done = 0;
    while (si < src->n && di < dst->n) {
        size_t s_left = src->v[si].len - s_done, d_left = dst->v[di].len - d_done;
        size_t n = s_left < d_left ? s_left : d_left, s = src->v[si].off + s_done;
        size_t d = dst->v[di].off + d_done;
        int goes_on = run && run->src_end == s && run->dst_end == d;
        if ((!goes_on && !*moves_left) || move_pages(a, s, d, n) != 0)
            break;
        moved += n;
        *moves_left -= !goes_on;
        if (run)
            *run = (struct om_move_run){s + n, d + n};
        s_done = n == s_left ? 0 : s_done + n;
        si += n == s_left;
        d_done = n == d_left ? 0 : d_done + n;
        di += n == d_left;
    }
    return moved;
}

size_t om_arena_move_onto(struct om_arena *a, size_t off, size_t len, const struct om_extents *keep,
                          size_t *moves_left)
{
    size_t page = a->page, moved = 0;
    struct om_extents src, dst;
    if (!*moves_left || !a->backend->move || om_extents_init(&src) != 0)
        return 0;
    if (om_extents_init(&dst) != 0)
        goto out_src;
    if (add_empty_pages(a, &dst, align_up(off, page), (off + len) & ~(page - 1)) == 0 && dst.n &&
        add_idle_pages(a, &src, 0, SIZE_MAX, keep) == 0)
        moved = move_runs(a, &src, &dst, moves_left, NULL);
    om_extents_destroy(&dst);
out_src:
    om_extents_destroy(&src);
    return moved;
}

size_t om_arena_move_into(struct om_arena *a, size_t from, size_t to, const struct om_extents *keep,
                          size_t *moves_left, struct om_move_run *run)
{
    size_t page = a->page, moved = 0;
    struct om_extents src, dst;
    if ((!*moves_left && !run) || !a->backend->move || om_extents_init(&src) != 0)
        return 0;
    if (om_extents_init(&dst) != 0)
        goto out_src;
    /* Sources: whole free pages inside [from, to), resident, on which no kept range lies. */
    if (add_idle_pages(a, &src, from, to, keep) != 0 || !src.n)
        goto out;
    /* Destinations: the kept pages that are wholly free and not resident. */
    for (size_t i = 0; i < keep->n; i++) {
        size_t lo = keep->v[i].off & ~(page - 1);
        size_t hi = align_up(keep->v[i].off + keep->v[i].len, page);
        if (hi > a->reserved)
            hi = a->reserved & ~(page - 1);
        if (add_empty_pages(a, &dst, lo, hi) != 0)
            goto out;
    }
    moved = move_runs(a, &src, &dst, moves_left, run);
out:
    om_extents_destroy(&dst);
out_src:
    om_extents_destroy(&src);
    return moved;
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
    if (check_set(&a->free, a->top) != 0 || check_set(&a->unbacked, om_arena_touched_end(a)) != 0 ||
        a->top > om_arena_touched_end(a))
        return -EFAULT;
    return 0;
}
