/* Sorted, coalesced sets of byte ranges for the arena. */
#include "extents.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define EXTENTS_INITIAL 4096

int om_extents_init(struct om_extents *s)
{
    memset(s, 0, sizeof *s);
    void *v = mmap(NULL, EXTENTS_INITIAL * sizeof *s->v, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return -ENOMEM;
    s->v = v;
    s->cap = EXTENTS_INITIAL;
    return 0;
}

void om_extents_destroy(struct om_extents *s)
{
    if (s->v)
        munmap(s->v, s->cap * sizeof *s->v);
    memset(s, 0, sizeof *s);
}

int om_extents_reserve(struct om_extents *s, size_t more)
{
    if (s->n + more <= s->cap)
        return 0;
    size_t cap = s->cap * 2;
    while (cap < s->n + more)
        cap *= 2;
    void *grown = mremap(s->v, s->cap * sizeof *s->v, cap * sizeof *s->v, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED)
        return -ENOMEM;
    s->v = grown;
    s->cap = cap;
    return 0;
}

ptrdiff_t om_extents_at_or_below(const struct om_extents *s, size_t off)
{
    if (s->n == 0 || s->v[0].off > off)
        return -1;
    /* v[base].off <= off throughout; the halving has no branch to mispredict (a conditional
     * move), every request and free searches the free extents. */
    const struct om_extent *base = s->v;
    for (size_t n = s->n; n > 1; n -= n / 2)
        base = base[n / 2].off <= off ? base + n / 2 : base;
    return base - s->v;
}

static void insert_at(struct om_extents *s, size_t at, size_t off, size_t len)
{
    memmove(&s->v[at + 1], &s->v[at], (s->n - at) * sizeof s->v[0]);
    s->v[at] = (struct om_extent){off, len};
    s->n++;
}

static void remove_at(struct om_extents *s, size_t at, size_t count)
{
    memmove(&s->v[at], &s->v[at + count], (s->n - at - count) * sizeof s->v[0]);
    s->n -= count;
}

long om_extents_remove(struct om_extents *s, size_t off, size_t len)
{
    size_t end = off + len;
    /* Before the first extent or after the last (pages of a served slot, resident): no
     * search. */
    if (len == 0 || s->n == 0 || end <= s->v[0].off ||
        off >= s->v[s->n - 1].off + s->v[s->n - 1].len)
        return 0;
    ptrdiff_t at = om_extents_at_or_below(s, off);
    /* In a gap between two extents (again a served slot's resident pages): no removal. */
    if (at >= 0 && s->v[at].off + s->v[at].len <= off && s->v[at + 1].off >= end)
        return 0;
    return om_extents_remove_at(s, at, off, len);
}

long om_extents_remove_at(struct om_extents *s, ptrdiff_t first, size_t off, size_t len)
{
    if (len == 0)
        return 0; /* strictly inside an extent, the split below would leave two touching */
    size_t end = off + len, removed = 0;
    size_t i = first < 0 ? 0 : (size_t)first;
    if (i < s->n && s->v[i].off + s->v[i].len <= off)
        i++; /* ends before the range */
    if (i >= s->n || s->v[i].off >= end)
        return 0; /* in a gap between extents (a served slot's resident pages) */
    if (s->v[i].off < off && s->v[i].off + s->v[i].len > end) {
        /* Strictly inside one extent: it splits in two. */
        if (om_extents_reserve(s, 1) != 0)
            return -ENOMEM;
        struct om_extent e = s->v[i];
        s->v[i].len = off - e.off;
        insert_at(s, i + 1, end, e.off + e.len - end);
        s->bytes -= len;
        return (long)len;
    }
    if (i < s->n && s->v[i].off < off) { /* keeps its head */
        removed += s->v[i].off + s->v[i].len - off;
        s->v[i].len = off - s->v[i].off;
        i++;
    }
    size_t whole = i;
    while (whole < s->n && s->v[whole].off + s->v[whole].len <= end)
        removed += s->v[whole++].len;
    if (whole > i)
        remove_at(s, i, whole - i);
    if (i < s->n && s->v[i].off < end) { /* keeps its tail */
        removed += end - s->v[i].off;
        s->v[i].len -= end - s->v[i].off;
        s->v[i].off = end;
    }
    s->bytes -= removed;
    return (long)removed;
}

int om_extents_add(struct om_extents *s, size_t off, size_t len)
{
    ptrdiff_t in = om_extents_at_or_below(s, off);
    if (len == 0 || (in >= 0 && s->v[in].off + s->v[in].len >= off + len))
        return 0; /* already there: the removal below would split, needing room not reserved */
    /* What overlaps goes first, so that the rest is an insertion between neighbours. A
     * range that overlaps nothing (a block given back) has its neighbours found already. */
    size_t after = (size_t)(in + 1);
    int overlaps = (in >= 0 && s->v[in].off + s->v[in].len > off) ||
                   (after < s->n && s->v[after].off < off + len);
    if ((overlaps && om_extents_remove(s, off, len) < 0) || om_extents_reserve(s, 1) != 0)
        return -ENOMEM;
    ptrdiff_t prev = overlaps ? om_extents_at_or_below(s, off) : in;
    size_t next = (size_t)(prev + 1);
    int joins_prev = prev >= 0 && s->v[prev].off + s->v[prev].len == off;
    int joins_next = next < s->n && s->v[next].off == off + len;
    if (joins_prev && joins_next) {
        s->v[prev].len += len + s->v[next].len;
        remove_at(s, next, 1);
    } else if (joins_prev) {
        s->v[prev].len += len;
    } else if (joins_next) {
        s->v[next].off = off;
        s->v[next].len += len;
    } else {
        insert_at(s, next, off, len);
    }
    s->bytes += len;
    return 0;
}
