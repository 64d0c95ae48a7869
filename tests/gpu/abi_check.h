/* One item of the ABI comparison: an expression of abi_items.h and its value, computed once
 * against the toolkit's headers (abi_check.c) and once against optmem's (abi_ours.c). */
#ifndef OPTMEM_TESTS_ABI_CHECK_H
#define OPTMEM_TESTS_ABI_CHECK_H

#include <stddef.h>

struct om_abi_item {
    const char *expr;
    unsigned long long value;
};

#define OM_ABI(expr) {#expr, (unsigned long long)(expr)},
#define OM_ABI_FIELD(type, member)                                                                 \
    OM_ABI(offsetof(type, member)) OM_ABI(sizeof(((type *)0)->member))

#define OM_ABI_MAX_ITEMS 256

/* Fills out with the items as optmem's headers declare them; returns how many. */
size_t om_abi_ours(struct om_abi_item *out);

#endif
