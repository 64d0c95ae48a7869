/* Unit tests of the extent set (preload/extents.c) against a byte-map model, and its edges. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "extents.h"

#define MODEL_BYTES (1u << 13)

static struct om_extents set;
static unsigned char model[MODEL_BYTES]; /* 1: in the set */

static int setup(void **state)
{
    memset(model, 0, sizeof model);
    return om_extents_init(&set);
}

static int teardown(void **state)
{
    munmap(set.v, set.cap * sizeof *set.v);
    return 0;
}

/* Every property the arena relies on: sorted, coalesced (no two extents touch, else the
 * guard's one lookup would miss a free range spanning both), no empty extent, bytes kept,
 * and exactly the model's bytes in the set. */
static void check_against_model(void)
{
    size_t pos = 0, bytes = 0;
    for (size_t i = 0; i < set.n; i++) {
        const struct om_extent *e = &set.v[i];
        assert_true(e->len > 0);
        assert_true(i == 0 || e->off > pos);
        assert_true(e->off + e->len <= MODEL_BYTES);
        for (; pos < e->off; pos++)
            assert_int_equal(model[pos], 0);
        for (; pos < e->off + e->len; pos++)
            assert_int_equal(model[pos], 1);
        bytes += e->len;
    }
    for (; pos < MODEL_BYTES; pos++)
        assert_int_equal(model[pos], 0);
    assert_int_equal(set.bytes, bytes);
    assert_true(set.n <= set.cap);
}

static ptrdiff_t linear_at_or_below(size_t off)
{
    ptrdiff_t found = -1;
    for (size_t i = 0; i < set.n; i++)
        if (set.v[i].off <= off)
            found = (ptrdiff_t)i;
    return found;
}

static size_t model_set(size_t off, size_t len, unsigned char v)
{
    size_t changed = 0;
    for (size_t i = off; i < off + len; i++) {
        changed += model[i] != v;
        model[i] = v;
    }
    return changed;
}

static void add(size_t off, size_t len)
{
    assert_int_equal(om_extents_add(&set, off, len), 0);
    model_set(off, len, 1);
}

/* The set holds exactly these (off, len) pairs. */
static void expect(const size_t *pairs, size_t n)
{
    assert_int_equal(set.n, n);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(set.v[i].off, pairs[2 * i]);
        assert_int_equal(set.v[i].len, pairs[2 * i + 1]);
        bytes += pairs[2 * i + 1];
    }
    assert_int_equal(set.bytes, bytes);
}

static void test_random_adds_and_removes_match_model(void **state)
{
    uint64_t rng = 987654321;
    size_t max_n = 0;
    for (int step = 0; step < 30000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        /* Mostly short ranges, so the set fragments into hundreds of extents; some long
         * ones, so that adds and removes span many of them. */
        size_t len = (rng >> 60) < 14 ? (rng >> 20) % 17 : (rng >> 20) % 600;
        size_t off = (rng >> 32) % (MODEL_BYTES - len + 1);
        if ((rng >> 29) % 16 < 8) {
            add(off, len);
        } else {
            long expect_removed = (long)model_set(off, len, 0);
            assert_int_equal(om_extents_remove(&set, off, len), expect_removed);
        }
        check_against_model();
        size_t probe = (rng >> 8) % MODEL_BYTES;
        assert_int_equal(om_extents_at_or_below(&set, probe), linear_at_or_below(probe));
        if (set.n > max_n)
            max_n = set.n;
    }
    assert_true(max_n > 100); /* the walk fragmented the set, or it tested little */
}

static void test_remove_strictly_inside_splits(void **state)
{
    add(100, 100);
    assert_int_equal(om_extents_remove(&set, 120, 10), 10);
    expect((const size_t[]){100, 20, 130, 70}, 2);
    /* Touching an end of an extent trims it without a split. */
    assert_int_equal(om_extents_remove(&set, 100, 5), 5);
    assert_int_equal(om_extents_remove(&set, 190, 10), 10);
    expect((const size_t[]){105, 15, 130, 60}, 2);
}

static void test_remove_spanning_several_with_partial_ends(void **state)
{
    add(0, 10);
    add(20, 10);
    add(40, 10);
    add(60, 10);
    /* 5 of the first, all of the two middle ones, 5 of the last. */
    assert_int_equal(om_extents_remove(&set, 5, 60), 30);
    expect((const size_t[]){0, 5, 65, 5}, 2);
    /* Exactly the gap between two extents: nothing. */
    assert_int_equal(om_extents_remove(&set, 5, 60), 0);
    expect((const size_t[]){0, 5, 65, 5}, 2);
    /* From a gap into an extent, and from an extent to past the last one. */
    assert_int_equal(om_extents_remove(&set, 50, 17), 2);
    assert_int_equal(om_extents_remove(&set, 3, 1000), 2 + 3);
    expect((const size_t[]){0, 3}, 1);
    assert_int_equal(om_extents_remove(&set, 0, 3), 3);
    expect(NULL, 0);
    assert_int_equal(om_extents_remove(&set, 0, 100), 0);
}

static void test_add_bridges_and_covers(void **state)
{
    add(0, 10);
    add(20, 10);
    add(10, 10); /* touches both: one extent */
    expect((const size_t[]){0, 30}, 1);
    add(40, 10);
    add(60, 10);
    add(25, 40); /* overlaps three, bridging them */
    expect((const size_t[]){0, 70}, 1);
    add(100, 10);
    add(120, 10);
    add(140, 10);
    add(95, 100); /* covers three wholly */
    expect((const size_t[]){0, 70, 95, 100}, 2);
    add(80, 15); /* touches only the next one */
    add(70, 5);  /* touches only the previous one */
    expect((const size_t[]){0, 75, 80, 115}, 2);
    add(10, 20); /* inside one already: nothing changes, bytes are not counted twice */
    expect((const size_t[]){0, 75, 80, 115}, 2);
    add(75, 5);
    expect((const size_t[]){0, 195}, 1);
}

static void test_zero_length(void **state)
{
    add(100, 100);
    add(300, 10);
    add(150, 0);
    add(250, 0);
    add(200, 0); /* at the end of an extent: must not make an empty one */
    expect((const size_t[]){100, 100, 300, 10}, 2);
    /* Strictly inside, at either end, in a gap, past the end: nothing, and no split that
     * would leave two extents touching. */
    size_t at[] = {150, 100, 200, 250, 300, 305, 310, 5000};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        assert_int_equal(om_extents_remove(&set, at[i], 0), 0);
        expect((const size_t[]){100, 100, 300, 10}, 2);
    }
}

static void test_at_or_below(void **state)
{
    assert_int_equal(om_extents_at_or_below(&set, 0), -1);
    assert_int_equal(om_extents_at_or_below(&set, SIZE_MAX), -1);
    add(10, 5);
    add(20, 5);
    add(30, 5);
    assert_int_equal(om_extents_at_or_below(&set, 9), -1);
    assert_int_equal(om_extents_at_or_below(&set, 10), 0);
    assert_int_equal(om_extents_at_or_below(&set, 17), 0);
    assert_int_equal(om_extents_at_or_below(&set, 20), 1);
    assert_int_equal(om_extents_at_or_below(&set, 29), 1);
    assert_int_equal(om_extents_at_or_below(&set, 30), 2);
    assert_int_equal(om_extents_at_or_below(&set, SIZE_MAX), 2);
}

/* Far more extents than the first table holds: the table grows and keeps them. */
static void test_grows_past_initial_table(void **state)
{
    size_t n = 3 * (set.cap > 0 ? set.cap : 1) + 7;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(om_extents_add(&set, 4 * i, 2), 0);
    assert_int_equal(set.n, n);
    assert_int_equal(set.bytes, 2 * n);
    /* Removing the second byte of every extent splits nothing; then join all gaps. */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(om_extents_remove(&set, 4 * i + 1, 1), 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(set.v[i].off, 4 * i);
        assert_int_equal(set.v[i].len, 1);
    }
    assert_int_equal(om_extents_add(&set, 0, 4 * n), 0);
    expect((const size_t[]){0, 4 * n}, 1);
}

/* reserve(more) promises room for `more` extents, however many that is. */
static void test_reserve_gives_the_room_asked(void **state)
{
    size_t more = 5 * set.cap;
    assert_int_equal(om_extents_reserve(&set, more), 0);
    assert_true(set.cap >= set.n + more);
    for (size_t i = 0; i < more; i++)
        assert_int_equal(om_extents_add(&set, 4 * i, 2), 0);
    assert_int_equal(set.n, more);
}

/* After reserve(1) on a full table, no add or remove may need memory: the arena ignores
 * their return after reserving (a released range released again is an add inside an
 * extent already there). */
static void test_reserved_room_suffices(void **state)
{
    size_t cap = set.cap;
    for (size_t i = 0; i + 1 < cap; i++)
        assert_int_equal(om_extents_add(&set, 4 * i, 3), 0);
    assert_int_equal(om_extents_reserve(&set, 1), 0);
    assert_int_equal(set.cap, cap);
    struct om_extent *v = set.v;
    assert_int_equal(om_extents_add(&set, 4 * 10 + 1, 1), 0); /* strictly inside one */
    assert_int_equal(om_extents_add(&set, 4 * 20, 3), 0);     /* exactly one */
    assert_int_equal(set.cap, cap);
    assert_ptr_equal(set.v, v);
    assert_int_equal(set.n, cap - 1);
    assert_int_equal(om_extents_remove(&set, 4 * 30 + 1, 1), 1); /* the one split */
    assert_int_equal(set.cap, cap);
    assert_int_equal(set.n, cap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_random_adds_and_removes_match_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_strictly_inside_splits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_spanning_several_with_partial_ends, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_add_bridges_and_covers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_length, setup, teardown),
        cmocka_unit_test_setup_teardown(test_at_or_below, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grows_past_initial_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_gives_the_room_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserved_room_suffices, setup, teardown),
    };
    return cmocka_run_group_tests_name("extents", tests, NULL, NULL);
}
