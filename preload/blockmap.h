/* Arena blocks by offset: an open-addressing table over mmap, so that free, realloc and
 * malloc_usable_size find a block in O(1) without allocating through malloc. */
#ifndef OPTMEM_PRELOAD_BLOCKMAP_H
#define OPTMEM_PRELOAD_BLOCKMAP_H

#include <stddef.h>
#include <stdint.h>

struct om_block {
    size_t off; /* key; SIZE_MAX marks an empty entry */
    size_t len; /* bytes taken in the arena, red zone included */
    size_t size;
    uint32_t record;     /* index + 1 in the iteration being recorded or in the ring, 0 for none */
    uint32_t generation; /* of the recording that record refers to, or of the plan that
                            placed the block */
    uint32_t log;        /* index + 1 in the request log of a saved plan, 0 for none */
    uint32_t flags;
};

enum {
    OM_BLOCK_PLANNED = 1,  /* placed at a planned offset */
    OM_BLOCK_PROLOGUE = 2, /* at a saved plan's prologue slot */
    OM_BLOCK_RING = 4      /* record is an index in the ring of the requests learnt */
};

struct om_blockmap {
    struct om_block *slots;
    size_t cap, used;
};

int om_blockmap_init(struct om_blockmap *m);
/* Inserts a block whose offset is not in the map; *at: where it lies until the map next
 * changes. 0 or -ENOMEM. */
int om_blockmap_put(struct om_blockmap *m, const struct om_block *b, struct om_block **at);
struct om_block *om_blockmap_get(struct om_blockmap *m, size_t off);
void om_blockmap_remove(struct om_blockmap *m, struct om_block *b);

#define OM_BLOCKMAP_FOREACH(m, b)                                                                  \
    for (struct om_block *b = (m)->slots; b < (m)->slots + (m)->cap; b++)                          \
        if (b->off != SIZE_MAX)

#endif
