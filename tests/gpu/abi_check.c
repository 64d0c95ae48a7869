/* Compares every layout and value cuda/cuda_abi.h and cuda/cupti_abi.h declare with the CUDA
 * toolkit's headers, which only this translation unit includes. Exit status 0: all equal. */
#include "abi_check.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cupti_version.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define OM_ABI_STREAM_LEGACY CU_STREAM_LEGACY
#define OM_ABI_STREAM_PER_THREAD CU_STREAM_PER_THREAD

static size_t abi_real(struct om_abi_item *out)
{
    const struct om_abi_item items[] = {
#include "abi_items.h"
    };
    _Static_assert(sizeof items / sizeof items[0] <= OM_ABI_MAX_ITEMS, "OM_ABI_MAX_ITEMS");
    memcpy(out, items, sizeof items);
    return sizeof items / sizeof items[0];
}

int main(void)
{
    static struct om_abi_item real[OM_ABI_MAX_ITEMS], ours[OM_ABI_MAX_ITEMS];
    size_t n = abi_real(real), m = om_abi_ours(ours);
    if (n != m) {
        printf("MISMATCH: %zu items against the toolkit, %zu against optmem's headers\n", n, m);
        return 1;
    }
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(real[i].expr, ours[i].expr) != 0 || real[i].value != ours[i].value) {
            printf("MISMATCH %s: toolkit %llu, optmem %llu\n", real[i].expr, real[i].value,
                   ours[i].value);
            bad++;
        }
    }
    printf("%zu items compared with the toolkit's headers (CUDA %d, CUPTI API %d), %d differ\n", n,
           CUDA_VERSION, CUPTI_API_VERSION, bad);
    return bad != 0;
}
