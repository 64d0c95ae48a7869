/* Planned slots, and the index that finds a request's slot by its token. */
#ifndef OPTMEM_PRELOAD_SLOTS_H
#define OPTMEM_PRELOAD_SLOTS_H

#include <stddef.h>
#include <stdint.h>

struct om_stack;

/* Where a request goes. token 0: no slot (the request is placed by best fit). The cheap
 * key of the request last served at the slot by its full key, and what the full key named
 * then (docs/serving.md, "Served by cheap key"); all 0 in a plan just made. */
struct om_slot {
    uint64_t token, offset, len, alignment;
    /* Another token the slot's request now comes with (its call site's stack changed while
     * the plan served: docs/serving.md, "Requests made from a new stack"); 0: none. */
    uint64_t alt;
    uint64_t cheap;    /* 0: none seen */
    uint32_t site;     /* the tracer's call site of that request, its id + 1 */
    uint32_t since;    /* requests served by the cheap key since the last full serve */
    uint8_t confirmed; /* full serves since that agreed with cheap and site */
    uint8_t ambiguous; /* the cheap key once named another request: full serves only */
    uint8_t cheap_alt; /* the cheap key was learnt from a request of alt, not of token */
};

/* Slots chained by token: open addressing on the token, chains in slot order. */
struct om_slot_index {
    uint32_t *first;  /* by token: the first slot with it + 1; 0 marks an empty entry */
    uint32_t *unused; /* by token: the next slot not taken yet + 1; 0 when all are */
    uint32_t *next;   /* by slot: the next slot with the same token + 1; 0 at the end */
    size_t cap, nslots;
};

/* A request's token: its call-site stack (position-independent frame keys) and size. */
uint64_t om_token_of(const struct om_stack *stack, size_t size);

/* Indexes slots[0, n): 0 or -ENOMEM. Frees what ix held before. */
int om_slot_index_build(struct om_slot_index *ix, const struct om_slot *slots, size_t n);
void om_slot_index_free(struct om_slot_index *ix);

/* Every slot of token whose length is len takes alt as its other token; how many did. */
size_t om_slot_index_set_alt(const struct om_slot_index *ix, struct om_slot *slots, uint64_t token,
                             uint64_t len, uint64_t alt);

/* The first slot at or after `from` with this token, cyclically; UINT64_MAX if none. */
uint64_t om_slot_index_find(const struct om_slot_index *ix, const struct om_slot *slots,
                            uint64_t token, uint64_t from);

/* The next slot of this token not taken yet, which it takes; UINT64_MAX if none. */
uint64_t om_slot_index_take(struct om_slot_index *ix, const struct om_slot *slots, uint64_t token);

#endif
