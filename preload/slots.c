/* Planned slots by token: tokens from position-independent stacks, an index over mmap. */
#include "slots.h"
#include "modmap.h"
#include "om_common.h"
#include "tracer.h"

#include <errno.h>
#include <string.h>

/* The keys of the calling thread's last stack, by depth, for the table they came from:
 * consecutive requests share most of their frames. An address in no module is keyed by
 * itself only until a module is loaded there, which om_modmap_key checks: not memoised.
 * The default depth's worth, kept small: the library's thread-local storage must fit the
 * static TLS that dlopen (PyTorch's pluggable allocator) can still give. */
#define TOK_MEMO 16
static __thread const void *tok_frame[TOK_MEMO];
static __thread uint64_t tok_key[TOK_MEMO];
static __thread const void *tok_table;

uint64_t om_token_of(const struct om_stack *stack, size_t size)
{
    const void *table = om_modmap_table();
    if (table != tok_table) {
        memset(tok_frame, 0, sizeof tok_frame);
        tok_table = table;
    }
    uint64_t h = OM_FNV_OFFSET ^ size;
    for (unsigned i = 0; i < stack->depth; i++) {
        const void *a = stack->frames[i];
        uint64_t key;
        if (i < TOK_MEMO && a && tok_frame[i] == a) {
            key = tok_key[i];
        } else {
            key = om_modmap_key(a);
            if (i < TOK_MEMO) {
                tok_frame[i] = key != (uint64_t)(uintptr_t)a ? a : NULL;
                tok_key[i] = key;
            }
        }
        h = om_fnv1a_word(h, key);
    }
    return h | 1; /* 0 marks a slot that has no token */
}

static size_t home(const struct om_slot_index *ix, uint64_t token)
{
    return (size_t)((token * 0x9e3779b97f4a7c15ull) >> 24) & (ix->cap - 1);
}

/* The index entry of this token, or the empty entry where it would go. */
static size_t entry_of(const struct om_slot_index *ix, const struct om_slot *slots, uint64_t token)
{
    size_t i = home(ix, token);
    while (ix->first[i] && slots[ix->first[i] - 1].token != token)
        i = (i + 1) & (ix->cap - 1);
    return i;
}

void om_slot_index_free(struct om_slot_index *ix)
{
    om_sys_unmap(ix->first, ix->cap * sizeof *ix->first);
    om_sys_unmap(ix->unused, ix->cap * sizeof *ix->unused);
    om_sys_unmap(ix->next, ix->nslots * sizeof *ix->next);
    memset(ix, 0, sizeof *ix);
}

int om_slot_index_build(struct om_slot_index *ix, const struct om_slot *slots, size_t n)
{
    om_slot_index_free(ix);
    ix->cap = 16;
    while (ix->cap < 2 * n)
        ix->cap *= 2;
    ix->nslots = n;
    ix->first = om_sys_map(ix->cap * sizeof *ix->first);
    ix->unused = om_sys_map(ix->cap * sizeof *ix->unused);
    ix->next = om_sys_map(n * sizeof *ix->next);
    if (!ix->first || !ix->unused || !ix->next) {
        om_slot_index_free(ix);
        return -ENOMEM;
    }
    for (size_t s = n; s-- > 0;) { /* backwards, so that chains run forwards */
        if (!slots[s].token)
            continue;
        size_t i = entry_of(ix, slots, slots[s].token);
        ix->next[s] = ix->first[i];
        ix->first[i] = ix->unused[i] = (uint32_t)s + 1;
    }
    return 0;
}

size_t om_slot_index_set_alt(const struct om_slot_index *ix, struct om_slot *slots, uint64_t token,
                             uint64_t len, uint64_t alt)
{
    size_t n = 0;
    if (!ix->cap || !token)
        return 0;
    for (uint32_t s = ix->first[entry_of(ix, slots, token)]; s; s = ix->next[s - 1]) {
        struct om_slot *sl = &slots[s - 1];
        if (sl->len != len || sl->alt == alt)
            continue;
        if (sl->cheap_alt) /* its cheap key named the alt it had */
            sl->cheap = sl->site = sl->cheap_alt = sl->confirmed = sl->since = 0;
        sl->alt = alt;
        n++;
    }
    return n;
}

uint64_t om_slot_index_find(const struct om_slot_index *ix, const struct om_slot *slots,
                            uint64_t token, uint64_t from)
{
    if (!ix->cap)
        return UINT64_MAX;
    uint32_t first = ix->first[entry_of(ix, slots, token)];
    if (!first)
        return UINT64_MAX;
    for (uint32_t s = first; s; s = ix->next[s - 1])
        if (s - 1 >= from)
            return s - 1;
    return first - 1;
}

uint64_t om_slot_index_take(struct om_slot_index *ix, const struct om_slot *slots, uint64_t token)
{
    if (!ix->cap)
        return UINT64_MAX;
    size_t i = entry_of(ix, slots, token);
    uint32_t s = ix->unused[i];
    if (!ix->first[i] || !s)
        return UINT64_MAX;
    ix->unused[i] = ix->next[s - 1];
    return s - 1;
}
