/* Unit tests of the host arena's extent set against a byte-map model, and of its guard,
 * best fit, page release and resident-page accounting. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

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

static void test_release_range_drops_resident_by_whole_pages(void **state)
{
    size_t p = arena.page;
    /* A and C share their pages with B's ends: B's free range lies on pages 1 to 5, of
     * which only 2 to 4 are whole. */
    assert_int_equal(om_arena_take(&arena, 0, p + 100), 0);          /* A */
    assert_int_equal(om_arena_take(&arena, p + 100, 4 * p - 50), 0); /* B */
    assert_int_equal(om_arena_take(&arena, 5 * p + 50, 3 * p - 50), 0);
    assert_int_equal(om_arena_resident(&arena), 8 * p);
    assert_int_equal(om_arena_give(&arena, p + 100, 4 * p - 50), 0);
    assert_int_equal(om_arena_resident(&arena), 8 * p); /* given, not yet released */
    assert_int_equal(om_arena_release_range(&arena, p + 100, 4 * p - 50), 3 * p);
    assert_int_equal(om_arena_resident(&arena), 5 * p);
    assert_int_equal(arena.released, 3 * p);
    /* Freeing A makes pages 0 and 1 wholly free: they go too, once. */
    assert_int_equal(om_arena_give(&arena, 0, p + 100), 0);
    assert_int_equal(om_arena_release_range(&arena, 0, p + 100), 2 * p);
    assert_int_equal(om_arena_resident(&arena), 3 * p);
    assert_int_equal(arena.released, 5 * p);
    assert_int_equal(om_arena_check(&arena), 0);
    /* Less than a page of free space releases nothing. */
    assert_int_equal(om_arena_take(&arena, 0, 5 * p + 10), 0);
    assert_int_equal(om_arena_give(&arena, 5 * p, 10), 0);
    assert_int_equal(om_arena_release_range(&arena, 5 * p, 10), 0);
    assert_int_equal(om_arena_resident(&arena), 8 * p);
    assert_int_equal(om_arena_check(&arena), 0);
}

/* A hole remembered when it was freed, and partly taken again since, still gives back the
 * pages of its rest (before, the whole range had to be free, and they stayed resident). */
static void test_release_range_after_part_was_taken_again(void **state)
{
    size_t p = arena.page;
    assert_int_equal(om_arena_take(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_give(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_take(&arena, 0, 3 * p + 10), 0);
    assert_int_equal(om_arena_release_range(&arena, 0, 10 * p), 6 * p);
    assert_int_equal(om_arena_resident(&arena), 4 * p);
    assert_int_equal(om_arena_release_range(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_check(&arena), 0);
}

static void test_take_over_released_pages_restores_them(void **state)
{
    size_t p = arena.page;
    assert_int_equal(om_arena_take(&arena, 0, 8 * p), 0);
    assert_int_equal(om_arena_take(&arena, 8 * p, p), 0); /* keeps the top in place */
    assert_int_equal(om_arena_give(&arena, 0, 8 * p), 0);
    assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), 8 * p);
    assert_int_equal(om_arena_resident(&arena), p);
    /* A block lies on every page it touches a byte of: 1 to 3 here, not 0 or 4. */
    assert_int_equal(om_arena_take(&arena, p + 10, 2 * p), 0);
    assert_int_equal(om_arena_resident(&arena), 4 * p);
    /* Within page 3, already back: nothing more. */
    assert_int_equal(om_arena_take(&arena, 3 * p + 100, 10), 0);
    assert_int_equal(om_arena_resident(&arena), 4 * p);
    /* A page-aligned block: exactly its pages. */
    assert_int_equal(om_arena_take(&arena, 5 * p, 2 * p), 0);
    assert_int_equal(om_arena_resident(&arena), 6 * p);
    assert_int_equal(arena.released, 8 * p);
    assert_int_equal(om_arena_check(&arena), 0);
}

static void test_release_free_between_bounds(void **state)
{
    size_t p = arena.page;
    assert_int_equal(om_arena_take(&arena, 0, 2 * p), 0);
    assert_int_equal(om_arena_take(&arena, 5 * p, p), 0);
    assert_int_equal(om_arena_take(&arena, 9 * p, p), 0);
    assert_int_equal(om_arena_taken_end(&arena), 10 * p);
    /* Freeing the highest block moves the taken end down to the next one's end. */
    assert_int_equal(om_arena_give(&arena, 9 * p, p), 0);
    assert_int_equal(om_arena_taken_end(&arena), 6 * p);
    /* Holes [2p, 5p) and [6p, 10p): only their whole pages inside the bounds go back. */
    assert_int_equal(om_arena_release_free(&arena, 2 * p + 10, 4 * p + 10), p);
    assert_int_equal(om_arena_release_free(&arena, 3 * p, 8 * p), p + 2 * p);
    assert_int_equal(om_arena_resident(&arena), 6 * p);
    assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), p + 2 * p);
    assert_int_equal(om_arena_resident(&arena), 3 * p);
    assert_int_equal(om_arena_check(&arena), 0);
    /* Nothing taken at all: the taken end is the start. */
    assert_int_equal(om_arena_give(&arena, 0, 2 * p), 0);
    assert_int_equal(om_arena_give(&arena, 5 * p, p), 0);
    assert_int_equal(om_arena_taken_end(&arena), 0);
}

static void test_release_twice_counts_once(void **state)
{
    size_t p = arena.page;
    assert_int_equal(om_arena_take(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_take(&arena, 10 * p, p), 0);
    assert_int_equal(om_arena_give(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_release_range(&arena, 0, 10 * p), 10 * p);
    assert_int_equal(om_arena_release_range(&arena, 0, 10 * p), 0);
    assert_int_equal(om_arena_release_range(&arena, 3 * p, 2 * p), 0); /* inside it */
    assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), 0);
    assert_int_equal(arena.released, 10 * p);
    assert_int_equal(om_arena_resident(&arena), p);
    /* Taking some back and releasing all again counts only what was taken. */
    assert_int_equal(om_arena_take(&arena, 4 * p, p), 0);
    assert_int_equal(om_arena_give(&arena, 4 * p, p), 0);
    assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), p);
    assert_int_equal(arena.released, 11 * p);
    assert_int_equal(om_arena_resident(&arena), p);
    assert_int_equal(om_arena_check(&arena), 0);
}

static void test_release_tail_forgets_unbacked_above_it(void **state)
{
    size_t p = arena.page, mib = (size_t)1 << 20;
    assert_int_equal(om_arena_take(&arena, 0, p), 0);
    assert_int_equal(om_arena_take(&arena, p, 4 * mib), 0);
    assert_int_equal(om_arena_take(&arena, p + 4 * mib, p), 0);
    assert_int_equal(om_arena_give(&arena, p, 4 * mib), 0);
    /* Some pages of what becomes the tail are released already, as holes. */
    assert_int_equal(om_arena_release_range(&arena, p, 4 * mib), 4 * mib);
    assert_int_equal(om_arena_give(&arena, p + 4 * mib, p), 0);
    size_t released = om_arena_release_tail(&arena, 0);
    assert_int_equal(released, p); /* only the page not released before */
    assert_int_equal(arena.released, 4 * mib + p);
    assert_int_equal(arena.top, p);
    assert_int_equal(om_arena_touched_end(&arena), p);
    assert_int_equal(arena.unbacked.bytes, 0);
    assert_int_equal(om_arena_resident(&arena), p);
    assert_int_equal(om_arena_check(&arena), 0);
    /* Above the top, pages come back as the top rises, none counted twice. */
    assert_int_equal(om_arena_take(&arena, p, 3 * p), 0);
    assert_int_equal(om_arena_resident(&arena), 4 * p);
    assert_int_equal(om_arena_check(&arena), 0);
}

/* malloc(0) with no red zone is a take of 0 bytes, placed by best fit inside a hole. */
static void test_empty_take_inside_a_hole(void **state)
{
    size_t p = arena.page;
    assert_int_equal(om_arena_take(&arena, 0, 100), 0);
    assert_int_equal(om_arena_take(&arena, 4 * p, 100), 0);
    size_t off;
    assert_int_equal(om_arena_best_fit(&arena, 0, 16, 0, &off), 0);
    assert_true(off > 100 && off < 4 * p);
    assert_int_equal(om_arena_take(&arena, off, 0), 0);
    assert_int_equal(om_arena_check(&arena), 0);
    assert_int_equal(om_arena_is_free(&arena, 100, 4 * p - 100), 1);
    assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), 3 * p);
    assert_int_equal(om_arena_take(&arena, 2 * p, 0), 0); /* page-aligned, on released pages */
    assert_int_equal(om_arena_check(&arena), 0);
    assert_int_equal(om_arena_resident(&arena), 2 * p);
}

/* A page-level model of residency, kept apart from the arena's extents: a page counts
 * while it lies below the end of the last page touched (arena.h: "may be resident") and
 * has not been released since a block last lay on it. */
#define RES_SPACE ((size_t)4 << 20)
#define RES_MAX_PAGES (RES_SPACE / 4096)
#define RES_LIVE 16

static struct {
    size_t off, len;
} live[RES_LIVE];
static size_t nlive, m_top, m_touched_end, m_released;
static unsigned char m_unbacked[RES_MAX_PAGES];

static size_t m_release(size_t from, size_t to)
{
    size_t p = arena.page, n = 0;
    from = (from + p - 1) / p;
    to = (to < m_touched_end ? to : m_touched_end) / p;
    for (size_t i = from; i < to; i++) {
        n += !m_unbacked[i];
        m_unbacked[i] = 1;
    }
    m_released += n * p;
    return n * p;
}

static size_t m_resident(void)
{
    size_t n = 0;
    for (size_t i = 0; i < m_touched_end / arena.page; i++)
        n += !m_unbacked[i];
    return n * arena.page;
}

static int m_overlaps_live(size_t off, size_t len)
{
    for (size_t k = 0; k < nlive; k++)
        if (live[k].off < off + len && off < live[k].off + live[k].len)
            return 1;
    return 0;
}

static void m_take(size_t off, size_t len)
{
    size_t p = arena.page, end = off + len;
    live[nlive].off = off;
    live[nlive++].len = len;
    if (end > m_top)
        m_top = end;
    for (size_t i = off / p; i < (end + p - 1) / p; i++)
        m_unbacked[i] = 0;
    if ((end + p - 1) / p * p > m_touched_end)
        m_touched_end = (end + p - 1) / p * p;
}

/* Whole pages of free space inside [lo, hi): the runs between live blocks below the top. */
static size_t m_release_free_in(size_t lo, size_t hi)
{
    size_t released = 0, pos = 0;
    if (hi > m_top)
        hi = m_top;
    while (pos < hi) {
        size_t next = m_top, next_end = m_top; /* the first live block at or above pos */
        for (size_t k = 0; k < nlive; k++)
            if (live[k].off >= pos && live[k].off < next) {
                next = live[k].off;
                next_end = live[k].off + live[k].len;
            }
        size_t from = pos > lo ? pos : lo, to = next < hi ? next : hi;
        if (to > from)
            released += m_release(from, to);
        pos = next_end;
    }
    return released;
}

/* The pages a range lies on, as far as they are free (parts of it may be live again). */
static size_t m_release_range(size_t off, size_t len)
{
    size_t p = arena.page;
    return m_release_free_in(off / p * p, (off + len + p - 1) / p * p);
}

static size_t m_release_free(void)
{
    return m_release_free_in(0, SIZE_MAX);
}

static int m_resident_page(size_t i)
{
    return i * arena.page < m_touched_end && !m_unbacked[i];
}

/* om_arena_move_into with sources in [slo, shi) and one kept range [klo, khi), page by
 * page: resident free pages below the top, wholly inside the sources' range, that the kept
 * range does not lie on go, in order, onto its free pages that are not resident, a move per
 * stretch where both sides run on. */
static size_t m_move_into(size_t slo, size_t shi, size_t klo, size_t khi, size_t *moves_left)
{
    size_t p = arena.page, k0 = klo / p, k1 = (khi + p - 1) / p, n = RES_MAX_PAGES;
    static unsigned char src[RES_MAX_PAGES], dst[RES_MAX_PAGES];
    for (size_t i = 0; i < n; i++) {
        int kept = i >= k0 && i < k1, free_page = !m_overlaps_live(i * p, p);
        int in_range = i * p >= slo && (i + 1) * p <= shi;
        src[i] = in_range && !kept && free_page && (i + 1) * p <= m_top && m_resident_page(i);
        dst[i] = kept && free_page && !m_resident_page(i);
    }
    size_t s = 0, d = 0, moved = 0;
    for (;;) {
        while (s < n && !src[s])
            s++;
        while (d < n && !dst[d])
            d++;
        if (s == n || d == n || !*moves_left)
            return moved;
        size_t len = 0;
        while (s + len < n && d + len < n && src[s + len] && dst[d + len])
            len++;
        for (size_t i = m_touched_end / p; i < d; i++)
            m_unbacked[i] = 1; /* untouched below the destination: not resident */
        for (size_t i = 0; i < len; i++) {
            m_unbacked[s + i] = 1;
            m_unbacked[d + i] = 0;
        }
        if ((d + len) * p > m_touched_end)
            m_touched_end = (d + len) * p;
        if ((d + len) * p > m_top)
            m_top = (d + len) * p;
        moved += len * p;
        --*moves_left;
        s += len;
        d += len;
    }
}

static size_t m_release_tail(size_t keep)
{
    size_t p = arena.page, run = 0;
    for (size_t k = 0; k < nlive; k++)
        if (live[k].off + live[k].len > run)
            run = live[k].off + live[k].len;
    if (m_top == 0 || run >= m_top)
        return 0; /* no free tail */
    size_t new_top = run > keep ? run : keep;
    size_t from = (new_top + p - 1) / p * p, to = (m_top + p - 1) / p * p;
    if (new_top >= m_top || to <= from || to - from < OM_ARENA_RELEASE_MIN)
        return 0;
    size_t released = m_release(from, to);
    if (!released)
        return 0; /* the arena trims only when the kernel got pages back */
    m_top = new_top;
    for (size_t i = from / p; i < m_touched_end / p; i++)
        m_unbacked[i] = 0;
    m_touched_end = from;
    return released;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* Free resident pages move onto kept pages that are not resident, with their bytes and no
 * fault, the books follow, and pages that a live block or a kept range lies on stay. */
static void test_move_into_kept_pages(void **state)
{
    size_t p = arena.page;
    struct om_extents keep;
    assert_int_equal(om_extents_init(&keep), 0);
    assert_int_equal(om_arena_take(&arena, 0, 8 * p), 0);
    memset(arena.base, 0xab, 8 * p);
    assert_int_equal(om_arena_give(&arena, 0, 8 * p), 0);
    assert_int_equal(om_arena_take(&arena, p, 100), 0);         /* live: page 1 stays */
    assert_int_equal(om_extents_add(&keep, 7 * p + 10, 10), 0); /* kept: page 7 stays */
    assert_int_equal(om_extents_add(&keep, 16 * p, 4 * p), 0);  /* beyond top, untouched */
    assert_int_equal(om_arena_resident(&arena), 8 * p);
    /* Page 0 goes to 16 in the one move allowed; then, with sources only from page 3 on,
     * pages 3 and 4 to 17 and 18, and then page 2 to 19. */
    size_t moves = 1;
    assert_int_equal(om_arena_move_into(&arena, 0, SIZE_MAX, &keep, &moves, NULL), p);
    assert_int_equal(moves, 0);
    assert_int_equal(om_arena_move_into(&arena, 0, SIZE_MAX, &keep, &moves, NULL), 0);
    moves = 128;
    assert_int_equal(om_arena_move_into(&arena, 3 * p - 1, 5 * p + 1, &keep, &moves, NULL), 2 * p);
    assert_int_equal(moves, 127);
    assert_int_equal(om_arena_move_into(&arena, 0, SIZE_MAX, &keep, &moves, NULL), p);
    assert_int_equal(om_arena_resident(&arena), 8 * p);
    assert_int_equal(arena.top, 20 * p);
    assert_int_equal(om_arena_check(&arena), 0);
    for (size_t i = 16; i < 20; i++)
        assert_int_equal(arena.base[i * p + 5], 0xab);
    assert_int_equal(arena.base[2 * p + 5], 0); /* moved last */
    assert_int_equal(arena.base[3 * p + 5], 0);
    /* Writing faults nothing in (counted after the reads, which under AddressSanitizer
     * fault in the shadow of these pages). */
    long before = minor_faults();
    memset(arena.base + 16 * p, 0, 4 * p);
    assert_int_equal(minor_faults() - before, 0);
    assert_int_equal(arena.base[0], 0); /* the source reads as fresh zero pages */
    assert_int_equal(arena.base[2 * p], 0);
    assert_int_equal(arena.base[5 * p], 0xab); /* not needed, not moved */
    assert_int_equal(arena.base[7 * p], 0xab);
    assert_int_equal(arena.base[p + 200], 0xab);
    /* The kept pages are resident now: nothing more to move. */
    assert_int_equal(om_arena_move_into(&arena, 0, SIZE_MAX, &keep, &moves, NULL), 0);
    assert_int_equal(om_arena_check(&arena), 0);
    om_extents_destroy(&keep);
}

/* A layout in slices: a move that goes on from where the last one ended, source and
 * destination both, takes no move of the budget; one that does not, does. */
static void test_move_run_goes_on(void **state)
{
    size_t p = arena.page;
    struct om_extents keep;
    assert_int_equal(om_extents_init(&keep), 0);
    assert_int_equal(om_arena_take(&arena, 0, 8 * p), 0);
    memset(arena.base, 0xcd, 8 * p);
    assert_int_equal(om_arena_give(&arena, 0, 8 * p), 0);
    assert_int_equal(om_extents_add(&keep, 16 * p, 8 * p), 0);
    struct om_move_run run = {0, 0};
    size_t moves = 1;
    /* Pages 0 and 1 to 16 and 17: the one move allowed. */
    assert_int_equal(om_arena_move_into(&arena, 0, 2 * p, &keep, &moves, &run), 2 * p);
    assert_int_equal(moves, 0);
    assert_int_equal(run.src_end, 2 * p);
    assert_int_equal(run.dst_end, 18 * p);
    /* Pages 2 and 3 go on to 18 and 19 with none left. */
    assert_int_equal(om_arena_move_into(&arena, 2 * p, 4 * p, &keep, &moves, &run), 2 * p);
    assert_int_equal(moves, 0);
    /* Page 5 would start a run of its own: none is left for it. */
    assert_int_equal(om_arena_move_into(&arena, 5 * p, 6 * p, &keep, &moves, &run), 0);
    /* Without a run, the budget is all there is: page 4 does not go on. */
    assert_int_equal(om_arena_move_into(&arena, 4 * p, 5 * p, &keep, &moves, NULL), 0);
    assert_int_equal(om_arena_resident(&arena), 8 * p);
    for (size_t i = 16; i < 20; i++)
        assert_int_equal(arena.base[i * p + 5], 0xcd);
    assert_int_equal(om_arena_check(&arena), 0);
    om_extents_destroy(&keep);
}

static void test_resident_matches_page_model(void **state)
{
    size_t p = arena.page;
    assert_true(p >= 4096 && RES_SPACE % p == 0);
    nlive = m_top = m_touched_end = m_released = 0;
    memset(m_unbacked, 0, sizeof m_unbacked);
    size_t hits[5] = {0}; /* nonzero releases: range, free, tail; takes on released pages;
                           * moves */
    uint64_t rng = 24680;
    for (int step = 0; step < 6000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned op = (unsigned)((rng >> 58) % 34);
        size_t len = 1 + (rng >> 20) % (16 * p);
        if (op < 14 && nlive < RES_LIVE) {
            size_t off, align = (size_t)1 << ((rng >> 40) % 13);
            if (op < 7)
                off = (rng >> 33) % (RES_SPACE - len);
            else if (om_arena_best_fit(&arena, len, align, 0, &off) != 0 || off + len > RES_SPACE)
                continue;
            int expect_free = !m_overlaps_live(off, len);
            size_t before = m_resident();
            assert_int_equal(om_arena_take(&arena, off, len), expect_free ? 0 : -EBUSY);
            if (expect_free) {
                m_take(off, len);
                hits[3] += m_resident() > before;
            }
        } else if (op < 26 && nlive > 0) {
            size_t k = (rng >> 33) % nlive, off = live[k].off;
            len = live[k].len;
            assert_int_equal(om_arena_give(&arena, off, len), 0);
            live[k] = live[--nlive];
            if (op < 20) {
                size_t expect = m_release_range(off, len);
                assert_int_equal(om_arena_release_range(&arena, off, len), expect);
                hits[0] += expect != 0;
            }
        } else if (op < 28) {
            size_t off = (rng >> 33) % RES_SPACE;
            size_t expect = m_release_range(off, len);
            assert_int_equal(om_arena_release_range(&arena, off, len), expect);
            hits[0] += expect != 0;
        } else if (op < 29) {
            size_t expect = m_release_free();
            assert_int_equal(om_arena_release_free(&arena, 0, SIZE_MAX), expect);
            hits[1] += expect != 0;
        } else if (op < 32) {
            size_t keep = (rng >> 33) % 2 ? 0 : (rng >> 36) % (m_top + 1);
            size_t expect = m_release_tail(keep);
            assert_int_equal(om_arena_release_tail(&arena, keep), expect);
            hits[2] += expect != 0;
        } else if (op < 34) {
            size_t lo = (rng >> 33) % RES_SPACE, moves = 1 + (rng >> 50) % 4;
            len = len < RES_SPACE - lo ? len : RES_SPACE - lo;
            /* Sources from anywhere, or from a range that need not be page-aligned. */
            size_t s_lo = 0, s_hi = SIZE_MAX;
            if ((rng >> 45) % 2) {
                s_lo = (rng >> 13) % RES_SPACE;
                s_hi = s_lo + (rng >> 3) % (RES_SPACE / 2);
            }
            struct om_extents keep;
            assert_int_equal(om_extents_init(&keep), 0);
            assert_int_equal(om_extents_add(&keep, lo, len), 0);
            size_t m_moves = moves, expect = m_move_into(s_lo, s_hi, lo, lo + len, &m_moves);
            assert_int_equal(om_arena_move_into(&arena, s_lo, s_hi, &keep, &moves, NULL), expect);
            assert_int_equal(moves, m_moves);
            om_extents_destroy(&keep);
            hits[4] += expect != 0;
        }
        assert_int_equal(om_arena_check(&arena), 0);
        assert_int_equal(arena.top, m_top);
        assert_int_equal(om_arena_touched_end(&arena), m_touched_end);
        assert_true(om_arena_resident(&arena) <= om_arena_touched_end(&arena));
        assert_int_equal(om_arena_resident(&arena), m_resident());
        assert_int_equal(arena.released, m_released);
    }
    for (int i = 0; i < 5; i++)
        assert_true(hits[i] >= 20); /* every path ran, or the walk tested little */
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
        cmocka_unit_test_setup(test_release_range_drops_resident_by_whole_pages, setup),
        cmocka_unit_test_setup(test_release_range_after_part_was_taken_again, setup),
        cmocka_unit_test_setup(test_take_over_released_pages_restores_them, setup),
        cmocka_unit_test_setup(test_release_twice_counts_once, setup),
        cmocka_unit_test_setup(test_release_free_between_bounds, setup),
        cmocka_unit_test_setup(test_release_tail_forgets_unbacked_above_it, setup),
        cmocka_unit_test_setup(test_empty_take_inside_a_hole, setup),
        cmocka_unit_test_setup(test_move_into_kept_pages, setup),
        cmocka_unit_test_setup(test_move_run_goes_on, setup),
        cmocka_unit_test_setup(test_resident_matches_page_model, setup),
        cmocka_unit_test(test_backend_maps_before_use_and_releases_whole_chunks),
    };
    return cmocka_run_group_tests_name("arena", tests, NULL, NULL);
}
