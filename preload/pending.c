/* Stream-ordered frees of device blocks: queued behind fences, reused at once by their own
 * stream and by another once it waits for the fence. */
#include "pending.h"
#include "tracer.h"

#include <errno.h>
#include <string.h>

#define PENDING_INITIAL 256

static struct om_pending_free *entry(const struct om_pending *p, size_t i)
{
    return &p->q[(p->head + i) % p->cap];
}

static int grow(struct om_pending *p)
{
    size_t cap = p->cap ? p->cap * 2 : PENDING_INITIAL;
    struct om_pending_free *q = om_sys_map(cap * sizeof *q);
    if (!q)
        return -ENOMEM;
    for (size_t i = 0; i < p->n; i++)
        q[i] = *entry(p, i);
    if (p->q)
        om_sys_unmap(p->q, p->cap * sizeof *p->q);
    p->q = q;
    p->cap = cap;
    p->head = 0;
    return 0;
}

int om_pending_add(struct om_pending *p, size_t off, size_t len, uintptr_t stream, uintptr_t fence)
{
    if (p->n == p->cap && grow(p) != 0)
        return -ENOMEM;
    *entry(p, p->n++) = (struct om_pending_free){off, len, stream, fence};
    p->live++;
    return 0;
}

static void drop(struct om_pending *p, const struct om_arena *a, struct om_pending_free *e)
{
    a->backend->fence_drop(a->backend->ctx, e->fence);
    e->len = 0;
    p->live--;
}

void om_pending_settle(struct om_pending *p, struct om_arena *a,
                       void (*given)(void *ctx, size_t off, size_t len), void *ctx)
{
    while (p->n) {
        struct om_pending_free *e = entry(p, 0);
        if (e->len) {
            if (!a->backend->fence_passed(a->backend->ctx, e->fence))
                return;
            if (om_arena_give(a, e->off, e->len) != 0)
                return; /* the extent table cannot grow: try again later */
            size_t off = e->off, len = e->len;
            drop(p, a, e);
            if (given)
                given(ctx, off, len);
        }
        p->head = (p->head + 1) % p->cap;
        p->n--;
    }
}

static int overlaps(const struct om_pending_free *e, size_t off, size_t len)
{
    return e->len && e->off < off + len && off < e->off + e->len;
}

/* A leftover piece of a claimed range: taken again, pending behind a fresh fence, which
 * passes after the original one since it is recorded later on the same stream. */
static void keep_pending(struct om_pending *p, struct om_arena *a, size_t off, size_t len,
                         uintptr_t stream)
{
    uintptr_t fence;
    if (len == 0 || om_arena_take(a, off, len) != 0)
        return; /* it was given back with the claim: nothing but this request can hold it */
    if (a->backend->fence_record(a->backend->ctx, stream, &fence) != 0) {
        p->lost_bytes += len;
        return;
    }
    if (om_pending_add(p, off, len, stream, fence) != 0) {
        a->backend->fence_drop(a->backend->ctx, fence);
        p->lost_bytes += len;
    }
}

int om_pending_best_fit(const struct om_pending *p, size_t len, size_t alignment, size_t floor,
                        uintptr_t stream, size_t *off)
{
    size_t best_waste = SIZE_MAX;
    for (size_t i = 0; i < p->n; i++) {
        const struct om_pending_free *e = entry(p, i);
        if (!e->len || e->stream != stream || e->off < floor)
            continue;
        size_t at = (e->off + alignment - 1) & ~(alignment - 1);
        if (at - e->off > e->len || e->len - (at - e->off) < len)
            continue;
        size_t waste = e->len - len;
        if (waste < best_waste) {
            best_waste = waste;
            *off = at;
        }
    }
    return best_waste == SIZE_MAX ? -ENOENT : 0;
}

int om_pending_take(struct om_pending *p, struct om_arena *a, size_t off, size_t len,
                    uintptr_t stream)
{
    size_t claimed = 0, n = p->n;
    for (size_t i = 0; i < n; i++) {
        struct om_pending_free *e = entry(p, i);
        if (overlaps(e, off, len) && e->stream != stream && !a->backend->fence_wait)
            return -EBUSY;
        claimed += overlaps(e, off, len);
    }
    if (claimed == 0)
        return om_arena_take(a, off, len);
    /* Ranges freed on other streams: this stream waits for their fences on the device. */
    for (size_t i = 0; i < n; i++) {
        struct om_pending_free *e = entry(p, i);
        if (overlaps(e, off, len) && e->stream != stream &&
            a->backend->fence_wait(a->backend->ctx, stream, e->fence) != 0)
            return -EBUSY;
    }
    int rc = 0;
    size_t given = 0;
    for (; given < n && rc == 0; given++) {
        struct om_pending_free *e = entry(p, given);
        if (overlaps(e, off, len))
            rc = om_arena_give(a, e->off, e->len);
    }
    if (rc != 0)
        given--; /* that one was not given */
    if (rc == 0)
        rc = om_arena_take(a, off, len);
    for (size_t i = 0; i < given; i++) {
        struct om_pending_free *e = entry(p, i);
        if (!overlaps(e, off, len))
            continue;
        if (rc != 0) {
            om_arena_take(a, e->off, e->len); /* as it was: still pending */
            continue;
        }
        struct om_pending_free was = *e;
        drop(p, a, e);
        keep_pending(p, a, was.off, off > was.off ? off - was.off : 0, stream);
        size_t end = off + len, was_end = was.off + was.len;
        keep_pending(p, a, end, was_end > end ? was_end - end : 0, stream);
    }
    return rc;
}
