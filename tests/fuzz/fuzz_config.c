/* Fuzz target: the OPTMEM_* environment table, every variable's value taken from the input. */
#include "config.h"
#include "fuzz_util.h"

#include <errno.h>
#include <string.h>

/* The input split at NUL bytes: the n-th variable the table asks for gets the n-th piece,
 * so the target follows the table whatever variables it gains; missing pieces are unset. */
static const uint8_t *in_data;
static size_t in_size, in_pos;
static char piece[4096];

static const char *fake_getenv(const char *name)
{
    (void)name;
    if (in_pos >= in_size)
        return NULL;
    const uint8_t *start = in_data + in_pos;
    const uint8_t *end = memchr(start, 0, in_size - in_pos);
    size_t len = end ? (size_t)(end - start) : in_size - in_pos;
    in_pos += len + 1;
    if (len == 1 && start[0] == 0xff) /* one 0xff byte: this variable is unset */
        return NULL;
    if (len >= sizeof piece)
        len = sizeof piece - 1;
    memcpy(piece, start, len);
    piece[len] = '\0';
    return piece;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in_data = data;
    in_size = size;
    in_pos = 0;
    struct om_config cfg;
    memset(&cfg, 0xa5, sizeof cfg); /* load must set every field, whatever was there */
    int bad = om_config_load(&cfg, fake_getenv);
    FUZZ_CHECK(bad >= 0 && bad <= 32);
    FUZZ_CHECK(cfg.mode == OM_MODE_OFF || cfg.mode == OM_MODE_TRACE || cfg.mode == OM_MODE_PLAN);
    FUZZ_CHECK(memchr(cfg.report, 0, sizeof cfg.report) != NULL);
    FUZZ_CHECK(memchr(cfg.plan_file, 0, sizeof cfg.plan_file) != NULL);
    FUZZ_CHECK(cfg.min_bytes >= 1);
    FUZZ_CHECK(cfg.stack_depth >= 1 && cfg.stack_depth <= OM_STACK_DEPTH_MAX);
    FUZZ_CHECK(cfg.warmup <= 1000000);
    FUZZ_CHECK(cfg.devices != 0 &&
               (cfg.devices & ~(unsigned)(OM_DEVICE_CPU | OM_DEVICE_CUDA)) == 0);
    FUZZ_CHECK(cfg.log_level >= 0 && cfg.log_level <= 3);
    FUZZ_CHECK(cfg.verify == 0 || cfg.verify == 1);
    FUZZ_CHECK(om_mode_name(cfg.mode) != NULL);

    /* The size parser alone, on the first piece, must agree with itself. */
    size_t v;
    if (size && size < sizeof piece) {
        char text[sizeof piece];
        memcpy(text, data, size);
        text[size] = '\0';
        int rc = om_parse_size(text, &v);
        FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
    }
    return 0;
}
