/* The ABI items of abi_items.h as cuda/cuda_abi.h and cuda/cupti_abi.h declare them. */
#include "abi_check.h"
#include "cupti_abi.h"

#include <string.h>

#define OM_ABI_STREAM_LEGACY OM_CU_STREAM_LEGACY
#define OM_ABI_STREAM_PER_THREAD OM_CU_STREAM_PER_THREAD

size_t om_abi_ours(struct om_abi_item *out)
{
    const struct om_abi_item items[] = {
#include "abi_items.h"
    };
    _Static_assert(sizeof items / sizeof items[0] <= OM_ABI_MAX_ITEMS, "OM_ABI_MAX_ITEMS");
    memcpy(out, items, sizeof items);
    size_t n = sizeof items / sizeof items[0];
#ifdef OM_ABI_SELFTEST
    /* The check must be able to fail: one layout made wrong on purpose. */
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i].expr, "sizeof(CUpti_ActivityMemory4)") == 0)
            out[i].value += 8;
#endif
    return n;
}
