/* Arena blocks by offset: linear probing with backward-shift deletion (no tombstones). */
#include "blockmap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

static size_t home(const struct om_blockmap *m, size_t off)
{
    uint64_t h = (uint64_t)off * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (m->cap - 1);
}

static struct om_block *map_table(size_t cap)
{
    struct om_block *t =
        mmap(NULL, cap * sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return NULL;
    for (size_t i = 0; i < cap; i++)
        t[i].off = SIZE_MAX;
    return t;
}

int om_blockmap_init(struct om_blockmap *m)
{
    m->cap = 1u << 8; /* grows by doubling */
    m->used = 0;
    m->slots = map_table(m->cap);
    return m->slots ? 0 : -ENOMEM;
}

static struct om_block *insert(struct om_blockmap *m, const struct om_block *b)
{
    size_t i = home(m, b->off);
    while (m->slots[i].off != SIZE_MAX)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = *b;
    m->used++;
    return &m->slots[i];
}

static int grow(struct om_blockmap *m)
{
    struct om_blockmap bigger = {map_table(m->cap * 2), m->cap * 2, 0};
    if (!bigger.slots)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].off != SIZE_MAX)
            insert(&bigger, &m->slots[i]);
    munmap(m->slots, m->cap * sizeof *m->slots);
    *m = bigger;
    return 0;
}

int om_blockmap_put(struct om_blockmap *m, const struct om_block *b, struct om_block **at)
{
    if ((m->used + 1) * 2 > m->cap && grow(m) != 0)
        return -ENOMEM;
    *at = insert(m, b);
    return 0;
}

struct om_block *om_blockmap_get(struct om_blockmap *m, size_t off)
{
    for (size_t i = home(m, off);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i].off == off)
            return &m->slots[i];
        if (m->slots[i].off == SIZE_MAX)
            return NULL;
    }
}

/* Moves later members of the probe run back so that lookups never cross a hole. */
void om_blockmap_remove(struct om_blockmap *m, struct om_block *b)
{
    size_t mask = m->cap - 1, hole = (size_t)(b - m->slots);
    for (size_t i = (hole + 1) & mask; m->slots[i].off != SIZE_MAX; i = (i + 1) & mask) {
        size_t want = home(m, m->slots[i].off);
        /* entry i may fill the hole when its home is not in (hole, i] cyclically */
        if (((i - want) & mask) >= ((i - hole) & mask)) {
            m->slots[hole] = m->slots[i];
            hole = i;
        }
    }
    m->slots[hole].off = SIZE_MAX;
    m->used--;
}
