/* The lifetime CSV reader: good files, and one clear FILE:LINE error for each kind of nonsense. */
#include "rp_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/om_rp_csv_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(dir);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Reads text as a CSV file; returns the rc and leaves the message in err. */
static int read_text(const char *text, char *err, size_t errlen, om_rp_block **b, size_t *n)
{
    char path[128];
    int rc;

    snprintf(path, sizeof(path), "%s/in.csv", dir);
    write_file(path, text);
    rc = om_rp_csv_read(path, &t_alloc, b, n, err, errlen);
    unlink(path);
    return rc;
}

static void expect_error(const char *text, const char *want)
{
    char err[512] = "", where[160];
    om_rp_block *b = NULL;
    size_t n = 99;

    assert_int_equal(read_text(text, err, sizeof(err), &b, &n), -EINVAL);
    snprintf(where, sizeof(where), "%s/in.csv:%s", dir, want);
    if (!strstr(err, where))
        fail_msg("message '%s' lacks '%s'", err, where);
    assert_null(b);
    assert_int_equal(n, 0);
    assert_int_equal(t_live_bytes(), 0);
}

static void test_good(void **state)
{
    char err[512] = "";
    om_rp_block *b;
    size_t n;
    (void)state;

    /* Columns in any order, extra columns ignored, blank lines and CRLF tolerated. */
    assert_int_equal(read_text("size,upper,offset,lower,id,alignment\r\n"
                               "8,4,0,0,1,16\r\n\r\n"
                               " 16 , 9 ,8, 2 ,2,0\n",
                               err, sizeof(err), &b, &n),
                     0);
    assert_int_equal(n, 2);
    assert_int_equal(b[0].id, 1);
    assert_int_equal(b[0].size, 8);
    assert_int_equal(b[0].align, 16);
    assert_int_equal(b[1].lower, 2);
    assert_int_equal(b[1].upper, 9);
    assert_int_equal(b[1].fixed, 0);
    om_rp_csv_free(&t_alloc, b, n);
    assert_int_equal(read_text("id,lower,upper,size\n", err, sizeof(err), &b, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(t_live_bytes(), 0);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("id,lower,upper,size\n1,0,4,8\n2,0,x,8\n", "3: upper 'x' is not a non-negative");
    expect_error("id,lower,upper,size\n1,-1,4,8\n", "2: lower '-1' is not a non-negative");
    expect_error("id,lower,size\n1,0,8\n", "1: header lacks column 'upper'");
    expect_error("id,lower,upper,size\n1,0,4\n", "2: 3 fields, the header has 4");
    expect_error("id,lower,upper,size\n1,4,4,8\n", "2: block 1: lower 4 >= upper 4");
    expect_error("id,lower,upper,size\n1,0,4,0\n", "2: block 1: size is 0");
    expect_error("id,lower,upper,size,alignment\n1,0,4,8,3\n",
                 "2: block 1: alignment 3 is not a power of two");
    expect_error("id,lower,upper,size\n1,0,4,99999999999999999999\n", "2: size '9999");
    expect_error("id,lower,upper,size\n7,0,4,8\n3,0,4,8\n7,1,2,8\n",
                 "4: duplicate id 7 (first on line 2)");
    expect_error("", "1: empty file");
}

static void test_missing_file(void **state)
{
    char err[512] = "", path[128];
    om_rp_block *b;
    size_t n;
    (void)state;

    snprintf(path, sizeof(path), "%s/nope.csv", dir);
    assert_int_equal(om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "nope.csv: No such file"));
}

static void test_write_roundtrip(void **state)
{
    char err[512] = "", path[128];
    om_rp_block *b;
    size_t n;
    uint64_t off[2] = {0, 64};
    FILE *f;
    (void)state;

    assert_int_equal(read_text("id,lower,upper,size,alignment\n1,0,4,8,64\n2,1,5,8,64\n", err,
                               sizeof(err), &b, &n),
                     0);
    snprintf(path, sizeof(path), "%s/out.csv", dir);
    assert_non_null(f = fopen(path, "w"));
    assert_int_equal(om_rp_csv_write(f, b, n, off), 0);
    fclose(f);
    om_rp_csv_free(&t_alloc, b, n);
    assert_int_equal(om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(b[1].align, 64);
    om_rp_csv_free(&t_alloc, b, n);
    unlink(path);
    assert_int_equal(t_live_bytes(), 0);
}

/* optmem's additions: comments, the period, fixed blocks; written by om_rp_csv_write_fd and
 * read back as they were. */
static void test_period_and_fixed(void **state)
{
    char err[512] = "", path[128];
    om_rp_block in[3] = {{.id = 1, .lower = 0, .upper = 4, .size = 64, .align = 16},
                         {.id = 2, .lower = 3, .upper = 9, .size = 32},
                         {.id = 9, .lower = 0, .upper = 6, .size = 128, .offset = 256, .fixed = 1}},
                *b;
    size_t n;
    uint64_t period;
    int fd;
    (void)state;

    snprintf(path, sizeof(path), "%s/cyclic.csv", dir);
    assert_true((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
    assert_int_equal(om_rp_csv_write_fd(fd, in, 3, 6, NULL, "a test instance"), 0);
    close(fd);
    assert_int_equal(om_rp_csv_read_instance(path, &t_alloc, &b, &n, &period, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    assert_int_equal(period, 6);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(b[i].id, in[i].id);
        assert_int_equal(b[i].upper, in[i].upper);
        assert_int_equal(b[i].size, in[i].size);
        assert_int_equal(b[i].fixed, in[i].fixed);
        assert_int_equal(b[i].offset, in[i].offset);
    }
    assert_int_equal(b[0].align, 16);
    om_rp_csv_free(&t_alloc, b, n);
    /* Read without the period, the file is the same set of blocks. */
    assert_int_equal(om_rp_csv_read(path, &t_alloc, &b, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    om_rp_csv_free(&t_alloc, b, n);
    unlink(path);
    /* A plain MiniMalloc file has no period; offset without fixed is ignored. */
    assert_int_equal(read_text("# made by hand\nid,lower,upper,size,offset\n1,0,4,8,999\n", err,
                               sizeof(err), &b, &n),
                     0);
    assert_int_equal(b[0].fixed, 0);
    assert_int_equal(b[0].offset, 0);
    om_rp_csv_free(&t_alloc, b, n);
    expect_error("# period: 0\nid,lower,upper,size\n1,0,4,8\n",
                 "1: period '0' is not a positive integer");
    expect_error("# period: x\nid,lower,upper,size\n1,0,4,8\n",
                 "1: period 'x' is not a positive integer");
    expect_error("# period: 8\nid,lower,upper,size\n# period: 9\n1,0,4,8\n",
                 "3: a second period (the first on line 1)");
    expect_error("id,lower,upper,size,fixed\n1,0,4,8,1\n", "1: header has column 'fixed'");
    expect_error("id,lower,upper,size,fixed,offset\n1,0,4,8,2,0\n", "2: fixed '2' is not 0 or 1");
    assert_int_equal(t_live_bytes(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_write_roundtrip),
        cmocka_unit_test(test_period_and_fixed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
