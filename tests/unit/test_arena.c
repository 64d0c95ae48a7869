/* Unit tests of the host arena's extent set against a byte-map model, and of its guard,
 * best fit and page release. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "arena.h"

#define MODEL_BYTES (1u << 16)

static struct om_arena arena;
static unsigned char model[MODEL_BYTES]; /* 1: taken */

static int setup(void **state)
{
    memset(model, 0, sizeof model);
    return om_arena_init(&arena, &om_host_backend, (size_t)1 << 30);
}

static int model_free(size_t off, size_t len)
{
    for (size_t i = off; i < off + len && i < MODEL_BYTES; i++)
        if (model[i])
            return 0;
    return 1;
}

static void model_set(size_t off, size_t len, unsigned char v)
{
    memset(model + off, v, len);
}

static void test_take_and_give_match_model(void **state)
{
    uint64_t rng = 12345;
    struct {
        size_t off, len;
    } taken[256];
    size_t ntaken = 0;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t off = (rng >> 20) % (MODEL_BYTES - 512), len = 1 + (rng >> 40) % 511;
        if ((rng >> 33) % 3 != 0 || ntaken == 0) {
            int expect_free = model_free(off, len);
            assert_int_equal(om_arena_is_free(&arena, off, len), expect_free);
            int rc = om_arena_take(&arena, off, len);
            assert_int_equal(rc, expect_free ? 0 : -EBUSY);
            if (rc == 0 && ntaken < 256) {
                model_set(off, len, 1);
                taken[ntaken].off = off;
                taken[ntaken++].len = len;
            } else if (rc == 0) {
                assert_int_equal(om_arena_give(&arena, off, len), 0);
            }
        } else {
            size_t k = (rng >> 45) % ntaken;
            assert_int_equal(om_arena_give(&arena, taken[k].off, taken[k].len), 0);
            model_set(taken[k].off, taken[k].len, 0);
            taken[k] = taken[--ntaken];
        }
        assert_int_equal(om_arena_check(&arena), 0);
    }
    size_t used = 0;
    for (size_t i = 0; i < MODEL_BYTES; i++)
        used += model[i];
    assert_int_equal(arena.used_bytes, used);
}

static void test_best_fit_prefers_smallest_hole(void **state)
{
    /* [0,100) taken, hole [100,400), [400,500) taken, hole [500,550), [550,600) taken. */
    assert_int_equal(om_arena_take(&arena, 0, 100), 0);
    assert_int_equal(om_arena_take(&arena, 400, 100), 0);
    assert_int_equal(om_arena_take(&arena, 550, 50), 0);
    size_t off;
    assert_int_equal(om_arena_best_fit(&arena, 40, 1, 0, &off), 0);
    assert_int_equal(off, 500);
    assert_int_equal(om_arena_best_fit(&arena, 200, 1, 0, &off), 0);
    assert_int_equal(off, 100);
    assert_int_equal(om_arena_best_fit(&arena, 400, 1, 0, &off), 0);
    assert_int_equal(off, 600); /* no hole fits: the end */
    assert_int_equal(om_arena_best_fit(&arena, 40, 64, 0, &off), 0);
    assert_int_equal(off, 128); /* aligned inside the big hole; the small one cannot */
    assert_int_equal(om_arena_best_fit(&arena, 40, 1, 520, &off), 0);
    assert_int_equal(off, 600); /* the floor excludes both holes */
    assert_int_equal(om_arena_best_fit(&arena, (size_t)2 << 30, 1, 0, &off), -ENOMEM);
}

static void test_release_tail(void **state)
{
    size_t mib = (size_t)1 << 20;
    assert_int_equal(om_arena_take(&arena, 0, 4096), 0);
    assert_int_equal(om_arena_take(&arena, 4096, 8 * mib), 0);
    memset(arena.base + 4096, 0xee, 8 * mib);
    assert_int_equal(om_arena_give(&arena, 4096, 8 * mib), 0);
    /* keep covers all but a little: nothing worth releasing */
    assert_int_equal(om_arena_release_tail(&arena, 8 * mib), 0);
    size_t released = om_arena_release_tail(&arena, 4096);
    assert_true(released >= 8 * mib - 4096);
    assert_int_equal(arena.top, 4096);
    assert_int_equal(om_arena_check(&arena), 0);
    /* released pages read as zero when taken again */
    assert_int_equal(om_arena_take(&arena, 4096, 8 * mib), 0);
    assert_int_equal(arena.base[4096 + 5 * mib], 0);
}

/* A backend like a device's: 2 MiB chunks mapped before use and unmapped when wholly
 * free, over host memory so that the test can see what is mapped. */
#define CHUNK ((size_t)2 << 20)
#define CHUNKS 64
static int chunk_mapped[CHUNKS];
static uintptr_t chunk_base;
static int fail_map;

static int chunk_reserve(void *ctx, size_t *len, uintptr_t *base)
{
    if (*len > CHUNKS * CHUNK)
        *len = CHUNKS * CHUNK; /* may give less than asked, as one fixed device block does */
    return om_host_backend.reserve(ctx, len, base) == 0 ? (chunk_base = *base, 0) : -ENOMEM;
}

static int chunk_map(void *ctx, uintptr_t addr, size_t len)
{
    assert_int_equal((addr - chunk_base) % CHUNK, 0);
    assert_int_equal(len % CHUNK, 0);
    if (fail_map)
        return -ENOMEM;
    for (size_t c = (addr - chunk_base) / CHUNK; c < (addr - chunk_base + len) / CHUNK; c++)
        chunk_mapped[c] = 1;
    return 0;
}

static int chunk_release(void *ctx, uintptr_t addr, size_t len)
{
    assert_int_equal((addr - chunk_base) % CHUNK, 0);
    assert_int_equal(len % CHUNK, 0);
    for (size_t c = (addr - chunk_base) / CHUNK; c < (addr - chunk_base + len) / CHUNK; c++)
        chunk_mapped[c] = 0;
    return 0;
}

static const struct om_backend chunk_backend = {
    .name = "chunks",
    .page = CHUNK,
    .reserve = chunk_reserve,
    .map = chunk_map,
    .release = chunk_release,
};

static void test_backend_maps_before_use_and_releases_whole_chunks(void **state)
{
    struct om_arena a;
    memset(chunk_mapped, 0, sizeof chunk_mapped);
    fail_map = 0;
    assert_int_equal(om_arena_init(&a, &chunk_backend, (size_t)1 << 40), 0);
    assert_int_equal(a.reserved, CHUNKS * CHUNK);
    /* A block straddling chunks 0 and 1 maps both; one in chunk 3 maps only it. */
    assert_int_equal(om_arena_take(&a, CHUNK - 4096, 8192), 0);
    assert_int_equal(om_arena_take(&a, 3 * CHUNK + 100, 1000), 0);
    assert_true(chunk_mapped[0] && chunk_mapped[1] && !chunk_mapped[2] && chunk_mapped[3]);
    /* A failing map leaves the arena unchanged. */
    fail_map = 1;
    assert_int_equal(om_arena_take(&a, 10 * CHUNK, 4096), -ENOMEM);
    assert_int_equal(om_arena_is_free(&a, 10 * CHUNK, 4096), 1);
    fail_map = 0;
    /* Freeing the first block releases chunks 0 and 1 (wholly free now), not chunk 3,
     * which another block still uses. */
    assert_int_equal(om_arena_give(&a, CHUNK - 4096, 8192), 0);
    om_arena_release_range(&a, CHUNK - 4096, 8192);
    assert_true(!chunk_mapped[0] && !chunk_mapped[1] && chunk_mapped[3]);
    /* Beyond the reservation the backend gave, nothing is handed out. */
    size_t off;
    assert_int_equal(om_arena_best_fit(&a, CHUNKS * CHUNK, 1, 0, &off), -ENOMEM);
    assert_int_equal(om_arena_check(&a), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_take_and_give_match_model, setup),
        cmocka_unit_test_setup(test_best_fit_prefers_smallest_hole, setup),
        cmocka_unit_test_setup(test_release_tail, setup),
        cmocka_unit_test(test_backend_maps_before_use_and_releases_whole_chunks),
    };
    return cmocka_run_group_tests_name("arena", tests, NULL, NULL);
}
