/* Fuzz target: om_saved_plan_read on arbitrary OPTMEM_PLAN_FILE contents. */
#include "fuzz_util.h"
#include "om_common.h"
#include "saved_plan.h"

#include <errno.h>
#include <string.h>

/* The file's layout (saved_plan.c): 8-byte magic, then program, nprologue, period, peak,
 * lower_bound and checksum as uint64_t, then the slots. */
#define HEADER_BYTES 56
#define PROGRAM_AT 8
#define CHECKSUM_AT 48

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The first input byte steers: bit 0 stamps this program's id and bit 1 a correct checksum
 * into the header, so that the fuzzer gets past both checks and into the slots; bit 2 picks
 * a small arena. The rest is the file. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint64_t program;
    static uint8_t file[1 << 20];
    if (!program)
        program = om_saved_plan_program();
    if (size < 1 || size - 1 > sizeof file)
        return 0;
    uint8_t flags = data[0];
    size_t n = size - 1;
    memcpy(file, data + 1, n);
    if (n >= HEADER_BYTES) {
        if (flags & 1)
            memcpy(file + PROGRAM_AT, &program, sizeof program);
        if (flags & 2) {
            uint64_t sum = om_fnv1a(OM_FNV_OFFSET, file + HEADER_BYTES, n - HEADER_BYTES);
            memcpy(file + CHECKSUM_AT, &sum, sizeof sum);
        }
    }
    uint64_t arena = (flags & 4) ? (uint64_t)1 << 20 : (uint64_t)1 << 40;

    struct om_saved_plan plan;
    char err[256] = "";
    int rc = om_saved_plan_read(fuzz_file(file, n), program, arena, &plan, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == -EINVAL)
        FUZZ_CHECK(err[0] != '\0');
    if (rc != 0)
        return 0;
    /* What the pool does with a plan it accepted: every slot inside the arena, and every
     * prologue slot handed out once, in file order. */
    for (uint64_t i = 0; i < plan.nprologue + plan.period; i++) {
        const struct om_slot *s = &plan.slots[i];
        if (s->token)
            FUZZ_CHECK(s->offset <= arena && s->len <= arena - s->offset);
    }
    for (uint64_t i = 0; i < plan.nprologue; i++) {
        uint64_t token = plan.slots[i].token;
        if (!token)
            continue;
        uint64_t s = om_slot_index_take(&plan.prologue, plan.slots, token);
        FUZZ_CHECK(s == i);
    }
    om_saved_plan_free(&plan);
    return 0;
}
