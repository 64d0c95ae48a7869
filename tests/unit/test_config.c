/* Unit tests of the OPTMEM_* environment table: defaults, every value form, bad values. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "log.h"

/* A fake environment: name=value pairs. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    for (const char *const *e = fake_env; e && *e; e += 2) {
        if (strcmp(e[0], name) == 0)
            return e[1];
    }
    return NULL;
}

static int load(const char *const *env, struct om_config *cfg)
{
    fake_env = env;
    return om_config_load(cfg, fake_getenv);
}

static void test_defaults(void **state)
{
    struct om_config cfg;
    assert_int_equal(load(NULL, &cfg), 0);
    assert_int_equal(cfg.mode, OM_MODE_PLAN);
    assert_int_equal(cfg.min_bytes, 4096);
    assert_int_equal(cfg.stack_depth, 16);
    assert_int_equal(cfg.warmup, 0);
    assert_int_equal(cfg.devices, OM_DEVICE_CPU);
    assert_int_equal(cfg.verify, 0);
    assert_int_equal(cfg.hugepages, 0);
    assert_int_equal(cfg.log_level, OM_LOG_WARN);
    assert_string_equal(cfg.report, "");
    assert_string_equal(cfg.plan_file, "");
}

static void test_every_variable(void **state)
{
    static const char *const env[] = {"OPTMEM_MODE",
                                      "trace",
                                      "OPTMEM_REPORT",
                                      "out/r.%p.%r.json",
                                      "OPTMEM_MIN_BYTES",
                                      "64K",
                                      "OPTMEM_STACK_DEPTH",
                                      "64",
                                      "OPTMEM_WARMUP",
                                      "3",
                                      "OPTMEM_PLAN_FILE",
                                      "plan.bin",
                                      "OPTMEM_DEVICES",
                                      "cpu,cuda",
                                      "OPTMEM_LOG",
                                      "quiet",
                                      "OPTMEM_VERIFY",
                                      "1",
                                      "OPTMEM_HUGEPAGES",
                                      "1",
                                      "OPTMEM_PLAN_DUMP",
                                      "/tmp/instances",
                                      NULL};
    struct om_config cfg;
    assert_int_equal(load(env, &cfg), 0);
    assert_int_equal(cfg.mode, OM_MODE_TRACE);
    assert_string_equal(cfg.report, "out/r.%p.%r.json");
    assert_int_equal(cfg.min_bytes, 64 * 1024);
    assert_int_equal(cfg.stack_depth, 64);
    assert_int_equal(cfg.warmup, 3);
    assert_string_equal(cfg.plan_file, "plan.bin");
    assert_int_equal(cfg.devices, OM_DEVICE_CPU | OM_DEVICE_CUDA);
    assert_int_equal(cfg.log_level, 0);
    assert_int_equal(cfg.verify, 1);
    assert_int_equal(cfg.hugepages, 1);
    assert_string_equal(cfg.plan_dump, "/tmp/instances");
}

/* OPTMEM_PLAN_DUMP: a directory, unset by default; one too long for its files' names is
 * refused with one line and the default (no dump). */
static void test_plan_dump(void **state)
{
    static char long_dir[4040];
    memset(long_dir, 'd', sizeof long_dir - 1);
    const char *const env[] = {"OPTMEM_LOG", "quiet", "OPTMEM_PLAN_DUMP", long_dir, NULL};
    struct om_config cfg;
    assert_int_equal(load(NULL, &cfg), 0);
    assert_string_equal(cfg.plan_dump, "");
    assert_int_equal(load(env, &cfg), 1);
    assert_string_equal(cfg.plan_dump, "");
}

static void test_bad_values_take_defaults(void **state)
{
    static const char *const env[] = {"OPTMEM_LOG",
                                      "quiet",
                                      "OPTMEM_MODE",
                                      "fast",
                                      "OPTMEM_MIN_BYTES",
                                      "12Q",
                                      "OPTMEM_STACK_DEPTH",
                                      "65",
                                      "OPTMEM_WARMUP",
                                      "-1",
                                      "OPTMEM_DEVICES",
                                      "gpu",
                                      "OPTMEM_VERIFY",
                                      "yes",
                                      "OPTMEM_REPORT",
                                      "r.%x.json",
                                      "OPTMEM_HUGEPAGES",
                                      "2",
                                      NULL};
    struct om_config cfg;
    assert_int_equal(load(env, &cfg), 8);
    assert_int_equal(cfg.mode, OM_MODE_PLAN);
    assert_int_equal(cfg.min_bytes, 4096);
    assert_int_equal(cfg.stack_depth, 16);
    assert_int_equal(cfg.warmup, 0);
    assert_int_equal(cfg.devices, OM_DEVICE_CPU);
    assert_int_equal(cfg.verify, 0);
    assert_int_equal(cfg.hugepages, 0);
    assert_string_equal(cfg.report, "");
}

static void test_sizes(void **state)
{
    size_t v;
    assert_int_equal(om_parse_size("4096", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(om_parse_size("64k", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(om_parse_size("16MiB", &v), 0);
    assert_int_equal(v, 16u << 20);
    assert_int_equal(om_parse_size("2G", &v), 0);
    assert_int_equal(v, (size_t)2 << 30);
    assert_int_equal(om_parse_size("", &v), -EINVAL);
    assert_int_equal(om_parse_size("-1", &v), -EINVAL);
    assert_int_equal(om_parse_size(" 1", &v), -EINVAL);
    assert_int_equal(om_parse_size("1KB2", &v), -EINVAL);
    assert_int_equal(om_parse_size("99999999999999999999", &v), -ERANGE);
    assert_int_equal(om_parse_size("17179869184G", &v), -ERANGE);
}

static void test_zero_and_limits(void **state)
{
    static const char *const env[] = {
        "OPTMEM_LOG", "quiet", "OPTMEM_MIN_BYTES", "0", "OPTMEM_STACK_DEPTH", "0", "OPTMEM_WARMUP",
        "auto",       NULL};
    struct om_config cfg;
    assert_int_equal(load(env, &cfg), 2);
    assert_int_equal(cfg.min_bytes, 4096);
    assert_int_equal(cfg.stack_depth, 16);
    assert_int_equal(cfg.warmup, 0);
}

/* Runs fn with stderr sent into a pipe and returns what it wrote (at most cap - 1 bytes). */
static void capture_stderr(void (*fn)(void), char *out, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = read(fds[0], out, cap - 1);
    close(fds[0]);
    out[n > 0 ? n : 0] = '\0';
}

static void twenty_warnings_and_infos(void)
{
    for (int i = 0; i < 20; i++) {
        om_warn("warning %d", i);
        om_info("info %d", i);
    }
}

/* By default only warnings are written, and at most OM_LOG_MAX_WARNINGS of them; the last
 * one says that the rest are not shown. */
static void test_log_levels_and_cap(void **state)
{
    char out[8192];
    om_log_level = OM_LOG_WARN;
    capture_stderr(twenty_warnings_and_infos, out, sizeof out);
    int lines = 0;
    for (const char *c = out; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, OM_LOG_MAX_WARNINGS);
    assert_null(strstr(out, "info"));
    assert_non_null(strstr(out, "optmem: warning 15 (further warnings are not shown)\n"));
    assert_null(strstr(out, "warning 16"));
    om_log_level = OM_LOG_INFO;
    capture_stderr(twenty_warnings_and_infos, out, sizeof out);
    assert_non_null(strstr(out, "optmem: info 19\n"));
    assert_null(strstr(out, "warning"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_variable),
        cmocka_unit_test(test_plan_dump),
        cmocka_unit_test(test_bad_values_take_defaults),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_zero_and_limits),
        cmocka_unit_test(test_log_levels_and_cap),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
