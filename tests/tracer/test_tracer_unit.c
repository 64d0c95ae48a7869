/* Unit tests of the tracer's pure parts: period detection, interning, JSON, paths, categories. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tracer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- period detection ---- */

struct starts {
    uint64_t tag[4096];
    int kind[4096];
    unsigned n;
};

static void collect(void *ctx, uint64_t tag, int kind)
{
    struct starts *s = ctx;
    if (kind == OM_START_LOCK) /* as the tracer does: a new lock voids later starts */
        while (s->n && s->tag[s->n - 1] >= tag)
            s->n--;
    assert_true(s->n < 4096);
    s->tag[s->n] = tag;
    s->kind[s->n++] = kind;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static struct om_period det;
static struct starts got;

static int setup_det(void **state)
{
    static int mapped;
    if (!mapped && om_period_init(&det) != 0)
        return -1;
    mapped = 1;
    om_period_reset(&det);
    memset(&got, 0, sizeof got);
    rnd_state = 88172645463325252ull;
    return 0;
}

/* A request whose block is freed before the next one: live bytes stay where they are. */
static void push(uint64_t token, uint64_t tag)
{
    om_period_push(&det, token, tag, 1 << 20, 4096, collect, &got);
}

static void push_all(const uint64_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++)
        push(tokens[i], i);
}

static void assert_starts(uint64_t s0, uint64_t p, uint64_t n)
{
    assert_true(got.n > 0);
    for (unsigned k = 0; k < got.n; k++)
        assert_int_equal(got.tag[k], s0 + k * p);
    /* Every start up to the end of the stream was reported. */
    assert_true(got.tag[got.n - 1] + p >= n);
}

static void test_exact_period(void **state)
{
    uint64_t tokens[23 * 10];
    uint64_t iter[23];
    for (int k = 0; k < 23; k++)
        iter[k] = rnd();
    for (int i = 0; i < 230; i++)
        tokens[i] = iter[i % 23];
    push_all(tokens, 230);
    assert_int_equal(det.p, 23);
    assert_int_equal(det.s0, 0);
    assert_int_equal(det.locks, 1);
    assert_starts(0, 23, 230);
}

/* Iterations that differ at first (lazily created optimizer state) are not part of the
 * period; the first steady iteration starts where the stream becomes periodic. */
static void test_warmup_prefix(void **state)
{
    enum { PREFIX = 50, P = 40, FIRST = P + 3, ITERS = 10 };
    uint64_t tokens[PREFIX + FIRST + P * ITERS], iter[P];
    size_t n = 0;
    for (int k = 0; k < PREFIX; k++)
        tokens[n++] = rnd();
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    for (int k = 0; k < P; k++)
        tokens[n++] = iter[k];
    for (int k = 0; k < FIRST - P; k++) /* state created at the end of the first step */
        tokens[n++] = rnd();
    for (int it = 0; it < ITERS; it++)
        for (int k = 0; k < P; k++)
            tokens[n++] = iter[k];
    push_all(tokens, n);
    assert_int_equal(det.p, P);
    assert_int_equal(det.s0, PREFIX + FIRST);
    assert_starts(PREFIX + FIRST, P, n);
}

static void test_noise_tolerated(void **state)
{
    enum { P = 64, ITERS = 20 };
    uint64_t tokens[P * ITERS], iter[P];
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    for (int i = 0; i < P * ITERS; i++)
        tokens[i] = iter[i % P];
    tokens[8 * P + 17] = rnd(); /* one odd request in two iterations */
    tokens[13 * P + 40] = rnd();
    push_all(tokens, P * ITERS);
    assert_int_equal(det.p, P);
    assert_int_equal(det.locks, 1);
    assert_starts(0, P, P * ITERS);
}

static void test_random_never_locks(void **state)
{
    for (int i = 0; i < 20000; i++)
        push(rnd() % 50, (uint64_t)i);
    assert_int_equal(det.p, 0);
}

/* Identical layers repeat inside an iteration: the lock on the layer ends where the
 * iteration goes on, and the true period wins. */
static void test_sub_period_gives_way(void **state)
{
    enum { LAYER = 6, LAYERS = 12, TAIL = 30, ITERS = 12 };
    uint64_t layer[LAYER], tail[TAIL];
    for (int k = 0; k < LAYER; k++)
        layer[k] = rnd();
    for (int k = 0; k < TAIL; k++)
        tail[k] = rnd();
    uint64_t i = 0;
    for (int it = 0; it < ITERS; it++) {
        for (int l = 0; l < LAYERS; l++)
            for (int k = 0; k < LAYER; k++)
                push(layer[k], i++);
        for (int k = 0; k < TAIL; k++)
            push(tail[k], i++);
    }
    assert_int_equal(det.p, LAYER * LAYERS + TAIL);
}

/* A step made only of identical layers and a short seam: every k-gram but the seam's
 * recurs within the step, so the step is first proposed when its seam recurs, at the end
 * of step 1; it has repeated exactly since the start, and is locked there, not a step later. */
static void test_step_of_layers_at_second_seam(void **state)
{
    enum { LAYER = 6, LAYERS = 12, SEAM = 2, STEPS = 5 };
    enum { STEP = LAYER * LAYERS + SEAM };
    uint64_t layer[LAYER], seam[SEAM], i = 0;
    for (int k = 0; k < LAYER; k++)
        layer[k] = rnd();
    for (int k = 0; k < SEAM; k++)
        seam[k] = rnd();
    for (int step = 0; step < STEPS; step++) {
        for (int l = 0; l < LAYERS; l++)
            for (int k = 0; k < LAYER; k++)
                push(layer[k], i++);
        for (int k = 0; k < SEAM; k++)
            push(seam[k], i++);
        if (step >= 1)
            assert_int_equal(det.p, STEP);
    }
    assert_int_equal(det.s0, 0);
    assert_starts(0, STEP, i);
}

/* Layers long enough that the step's one odd request is a substitution the layer's period
 * tolerates: the layer stays locked through the seam, and the step, which repeats exactly,
 * takes over from it once believed. */
static void test_exact_step_replaces_noisy_layer(void **state)
{
    enum { LAYER = 48, LAYERS = 6, STEPS = 6 };
    enum { STEP = LAYER * LAYERS };
    _Static_assert(2 <= LAYER / 16, "the odd request is a tolerated substitution");
    uint64_t layer[LAYER], odd = rnd(), i = 0;
    for (int k = 0; k < LAYER; k++)
        layer[k] = rnd();
    for (int step = 0; step < STEPS; step++) {
        for (int l = 0; l < LAYERS; l++)
            for (int k = 0; k < LAYER; k++)
                push(l == LAYERS - 1 && k == LAYER - 1 ? odd : layer[k], i++);
        if (step == 0)
            assert_int_equal(det.p, LAYER);
        if (step >= 2)
            assert_int_equal(det.p, STEP);
    }
    assert_int_equal(det.locks, 2);
}

/* An exact repeat is believed as soon as one whole period has been compared: a steady
 * step is found at the end of the second one. */
static void test_locks_after_one_period(void **state)
{
    enum { P = 100 };
    uint64_t iter[P];
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    for (uint64_t i = 0; i < 2 * P; i++) {
        assert_int_equal(det.p, 0);
        push(iter[i % P], i);
    }
    assert_int_equal(det.p, P);
    assert_int_equal(det.s0, 0);
    assert_int_equal(om_period_covered(&det), 2 * P);
    assert_starts(0, P, 2 * P);
}

/* The first step ends with a few requests the others do not make (state created lazily):
 * the candidate one step plus those requests long sees them as substitutions within its
 * first period, so it waits for a second one, where the shift shows. */
static void test_first_step_extra_tail(void **state)
{
    enum { P = 64, EXTRA = 3, STEPS = 8 };
    _Static_assert(EXTRA <= (P + EXTRA) / 16, "the extra requests look like substitutions");
    uint64_t iter[P], i = 0;
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    for (int step = 0; step < STEPS; step++) {
        for (int k = 0; k < P; k++)
            push(iter[k], i++);
        for (int k = 0; step == 0 && k < EXTRA; k++)
            push(rnd(), i++);
        if (step == 2)
            assert_int_equal(det.p, P);
    }
    assert_int_equal(det.locks, 1);
    assert_int_equal(det.p, P);
    assert_int_equal(det.s0, P + EXTRA);
    assert_starts(P + EXTRA, P, i);
}

/* A training step of identical layers: a forward layer keeps its activation for the
 * backward pass, a backward layer frees it; gradients live until the next step's
 * zero_grad; the first step creates the optimizer's state. The layers repeat exactly but
 * their live bytes climb or fall: only the step is ever locked, at the end of step 2. */
struct model {
    uint64_t live, tag;
};

static void model_push(struct model *m, uint64_t token, uint64_t size, int kept)
{
    m->live += size;
    om_period_push(&det, token, m->tag++, m->live, size, collect, &got);
    if (!kept)
        m->live -= size;
}

static void test_training_layers_not_locked(void **state)
{
    enum { LAYERS = 4, FWD = 20, BWD = 30, OPT = 10, STATE = 8, STEPS = 8 };
    enum { ACT = 256 << 10, GRAD = 64 << 10, TEMP = 32 << 10 };
    uint64_t embed[3], fwd[FWD], bwd[BWD], opt[OPT];
    for (int k = 0; k < 3; k++)
        embed[k] = rnd();
    for (int k = 0; k < FWD; k++)
        fwd[k] = rnd();
    for (int k = 0; k < BWD; k++)
        bwd[k] = rnd();
    for (int k = 0; k < OPT; k++)
        opt[k] = rnd();
    const uint64_t step_len = 3 + LAYERS * (FWD + BWD) + OPT;
    struct model m = {.live = 8 << 20};
    for (int k = 0; k < 40; k++) /* building the model */
        model_push(&m, rnd(), 128 << 10, 1);
    for (int step = 0; step < STEPS; step++) {
        if (step > 0)
            m.live -= LAYERS * GRAD; /* zero_grad(set_to_none=True) */
        for (int k = 0; k < 3; k++)
            model_push(&m, embed[k], TEMP, 0);
        for (int l = 0; l < LAYERS; l++)
            for (int k = 0; k < FWD; k++)
                model_push(&m, fwd[k], k == 0 ? ACT : TEMP, k == 0);
        for (int l = 0; l < LAYERS; l++) {
            m.live -= ACT;
            for (int k = 0; k < BWD; k++)
                model_push(&m, bwd[k], k == 0 ? GRAD : TEMP, k == 0);
        }
        for (int k = 0; step == 0 && k < STATE; k++)
            model_push(&m, rnd(), GRAD, 1);
        for (int k = 0; k < OPT; k++)
            model_push(&m, opt[k], TEMP, 0);
        assert_int_equal(det.p, step < 2 ? 0 : step_len);
    }
    assert_int_equal(det.locks, 1);
    /* The optimizer's requests that end the first step already repeat. */
    assert_int_equal(det.s0, 40 + step_len + STATE - OPT);
    assert_int_equal(om_period_covered(&det), m.tag - det.s0);
}

/* A step that keeps a block for good (outputs kept for the epoch's metrics) is still a
 * period, believed after four of them rather than one. */
static void test_leaky_step_locks_late(void **state)
{
    enum { P = 40 };
    uint64_t iter[P];
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    struct model m = {.live = 1 << 20};
    for (uint64_t i = 0; i < 6 * P; i++) {
        assert_int_equal(det.p, i < 5 * P ? 0 : P);
        int k = (int)(i % P);
        model_push(&m, iter[k], k == 7 ? 64 << 10 : 4096, k == 7);
    }
    assert_int_equal(det.p, P);
    assert_int_equal(det.s0, 0);
}

/* A helper thread allocates at random moments: detection runs on the main thread's
 * requests, and starts are tagged with global sequence numbers. */
static void test_two_threads(void **state)
{
    enum { P = 31, ITERS = 14, MAIN = 1000, HELPER = 1001 };
    static struct om_threads threads;
    memset(&threads, 0, sizeof threads);
    uint64_t iter[P], seq = 0;
    uint64_t main_index_of[P * ITERS * 3];
    for (int k = 0; k < P; k++)
        iter[k] = rnd();
    for (uint64_t m = 0; m < P * ITERS;) {
        int helper = rnd() % 10 < 3;
        uint32_t tid = helper ? HELPER : MAIN;
        uint64_t token = helper ? rnd() : iter[m % P];
        if (om_threads_note(&threads, tid))
            om_period_reset(&det);
        if (tid == threads.det_tid)
            push(token, seq);
        main_index_of[seq] = helper ? UINT64_MAX : m;
        if (!helper)
            m++;
        seq++;
    }
    assert_int_equal(threads.det_tid, MAIN);
    assert_int_equal(det.p, P);
    assert_true(got.n >= ITERS - 4);
    for (unsigned k = 0; k < got.n; k++)
        assert_int_equal(main_index_of[got.tag[k]] % P, 0);
}

static void test_threads_switch_to_majority(void **state)
{
    static struct om_threads threads;
    memset(&threads, 0, sizeof threads);
    int switched = 0;
    for (int i = 0; i < 100; i++)
        switched += om_threads_note(&threads, 7); /* start-up thread */
    for (int i = 0; i < 9000; i++)
        switched += om_threads_note(&threads, i % 4 ? 9 : 7);
    assert_int_equal(threads.det_tid, 9);
    assert_int_equal(switched, 1);
}

/* ---- interning ---- */

static void test_interning(void **state)
{
    static struct om_sites sites;
    struct om_stack a = {.depth = 3, .frames = {(void *)0x1000, (void *)0x2000, (void *)0x3000}};
    struct om_stack b = a, c = a;
    b.frames[2] = (void *)0x3001;
    c.depth = 2;
    struct om_site *sa = om_sites_intern(&sites, &a);
    assert_non_null(sa);
    assert_ptr_equal(om_sites_intern(&sites, &a), sa);
    struct om_site *sb = om_sites_intern(&sites, &b), *sc = om_sites_intern(&sites, &c);
    assert_true(sb != sa && sc != sa && sc != sb);
    assert_int_equal(sa->id, 0);
    assert_int_equal(sb->id, 1);
    assert_int_equal(sc->id, 2);
    /* Enough sites for the index to grow several times, from the tracer's memory. */
    for (uintptr_t i = 0; i < 20000; i++) {
        struct om_stack s = {.depth = 2, .frames = {(void *)(i * 16), (void *)0x42}};
        struct om_site *site = om_sites_intern(&sites, &s);
        assert_non_null(site);
        assert_int_equal(site->id, i + 3);
    }
    for (uintptr_t i = 0; i < 20000; i += 997) {
        struct om_stack s = {.depth = 2, .frames = {(void *)(i * 16), (void *)0x42}};
        assert_int_equal(om_sites_intern(&sites, &s)->id, i + 3);
    }
    assert_int_equal(sites.count, 20003);
    assert_ptr_equal(sites.by_id[1], sb);
    assert_int_equal(sa->frames[1], (void *)0x2000);
}

static int fold_once(const struct om_site *s, void *ctx)
{
    (void)ctx;
    return s->count == 1;
}

/* Folding: sites that share their innermost frames become one entry whose counters add up
 * exactly, their ids name it, and a folded stack seen again is a new site of the same hash
 * (the detector's token). */
static void test_folding(void **state)
{
    static struct om_sites sites;
    enum { N = 100 };
    struct om_stack st[N + 1];
    for (unsigned i = 0; i <= N; i++) {
        st[i] = (struct om_stack){.depth = 10};
        for (unsigned k = 0; k < 8; k++)
            st[i].frames[k] = (void *)(uintptr_t)(0x1000 + 16 * k + (i == N ? 8 : 0));
        st[i].frames[8] = (void *)(uintptr_t)(0x9000 + 16 * i);
        st[i].frames[9] = (void *)0x42;
        struct om_site *s = om_sites_intern(&sites, &st[i]);
        assert_int_equal(s->id, i);
        s->count = i == N ? 2 : 1;
        s->total_bytes = s->min_size = s->max_size = 1000 + i;
        s->freed = 1;
        s->life_req_min = s->life_req_max = s->life_req_sum = i + 1;
        s->life_ns_min = s->life_ns_max = s->life_ns_sum = 10 * (i + 1);
        s->cat_bytes[OM_CAT_TEMPORARY] = i;
    }
    uint64_t hash5 = sites.hashes[5];
    assert_int_equal(om_sites_fold(&sites, fold_once, NULL, NULL), N);
    struct om_site *f = sites.by_id[0];
    assert_true(f->fold);
    assert_int_equal(f->id, N + 1);
    assert_int_equal(f->depth, 8);
    assert_int_equal(f->frames[7], (void *)(0x1000 + 16 * 7));
    assert_int_equal(f->nfolded, N);
    assert_int_equal(f->count, N);
    assert_int_equal(f->total_bytes, N * 1000 + N * (N - 1) / 2);
    assert_int_equal(f->min_size, 1000);
    assert_int_equal(f->max_size, 1000 + N - 1);
    assert_int_equal(f->freed, N);
    assert_int_equal(f->life_req_min, 1);
    assert_int_equal(f->life_req_max, N);
    assert_int_equal(f->life_req_sum, N * (N + 1) / 2);
    assert_int_equal(f->life_ns_sum, 10 * N * (N + 1) / 2);
    assert_int_equal(f->cat_bytes[OM_CAT_TEMPORARY], N * (N - 1) / 2);
    for (unsigned i = 0; i < N; i++)
        assert_ptr_equal(sites.by_id[i], f);
    assert_int_equal(sites.by_id[N]->id, N); /* requested twice: kept */
    assert_false(sites.by_id[N]->fold);
    struct om_site *again = om_sites_intern(&sites, &st[5]);
    assert_int_equal(again->id, N + 2);
    assert_int_equal(sites.hashes[N + 2], hash5);
    assert_ptr_equal(om_sites_intern(&sites, &st[N]), sites.by_id[N]);
    /* Folded again, into the same fold; nothing else qualifies. */
    again->count = 1;
    assert_int_equal(om_sites_fold(&sites, fold_once, NULL, NULL), 1);
    assert_ptr_equal(sites.by_id[N + 2], f);
    assert_int_equal(f->nfolded, N + 1);
    assert_int_equal(sites.count, N + 3);
}

static void relink_count(void *ctx)
{
    (*(int *)ctx)++;
}

/* Once folded sites leave the records' blocks more dead than live, the records still named
 * move into one block: by_id names the copies, whose keys still match their stacks. */
static void test_fold_compaction(void **state)
{
    static struct om_sites sites;
    enum { N = 4000, KEEP = 7 };
    struct om_stack st = {.depth = 12};
    for (unsigned i = 0; i < N; i++) {
        for (unsigned k = 0; k < 12; k++)
            st.frames[k] = (void *)(uintptr_t)(0x1000 + 16 * k + (k == 10 ? 16 * i : 0));
        struct om_site *s = om_sites_intern(&sites, &st);
        assert_int_equal(s->id, i);
        s->count = i % (N / KEEP) == 0 ? 5 : 1; /* a few requested more than once */
        s->total_bytes = 100;
    }
    int relinked = 0;
    assert_int_equal(om_sites_fold(&sites, fold_once, relink_count, &relinked), N - KEEP - 1);
    assert_int_equal(relinked, 1);
    assert_int_equal(sites.moves, 1);
    assert_int_equal(sites.dead_bytes, 0);
    uint64_t total = 0;
    for (unsigned i = 0; i < N; i++) {
        const struct om_site *s = sites.by_id[i];
        assert_true(s->frames == (void *const *)(s + 1));
        if (s->id == i) {
            assert_int_equal(s->count, 5);
            for (unsigned k = 0; k < 12; k++)
                st.frames[k] = (void *)(uintptr_t)(0x1000 + 16 * k + (k == 10 ? 16 * i : 0));
            assert_ptr_equal(om_sites_intern(&sites, &st), s);
        } else {
            assert_true(sites.by_id[s->id] == s && s->fold);
        }
    }
    for (unsigned i = 0; i < sites.count; i++)
        total += sites.by_id[i]->id == i ? sites.by_id[i]->total_bytes : 0;
    assert_int_equal(total, 100 * N);
}

static void test_sysmem(void **state)
{
    char *p[64];
    for (int i = 0; i < 64; i++) {
        size_t size = (size_t)(i * 97 % 9000) + 1;
        p[i] = om_sys_alloc(size);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 16, 0);
        for (size_t k = 0; k < size; k++)
            assert_int_equal(p[i][k], 0);
        memset(p[i], 0xab, size);
    }
    for (int i = 0; i < 64; i++)
        om_sys_free(p[i], (size_t)(i * 97 % 9000) + 1);
    char *q = om_sys_alloc(100); /* reused from a free list, zeroed again */
    for (int k = 0; k < 100; k++)
        assert_int_equal(q[k], 0);
    om_sys_free(q, 100);
}

/* ---- tables grown by doubling ---- */

struct test_entry {
    uint64_t key, value, spare;
};

static uint32_t test_home(const void *entry)
{
    return (uint32_t)((((const struct test_entry *)entry)->key * 0x9e3779b97f4a7c15ull) >> 32);
}

static const struct test_entry *test_find(const struct om_table *t, uint64_t key)
{
    const struct test_entry *slots = OM_TABLE_SLOTS(const struct test_entry, t);
    struct test_entry probe = {key, 0, 0};
    uint32_t h = test_home(&probe);
    for (uint32_t i = 0; i < 8; i++) {
        const struct test_entry *e = &slots[(h + i) & t->mask];
        if (e->key == key)
            return e;
        if (e->key == 0)
            return NULL;
    }
    return NULL;
}

/* Fills each table to half its slots, then grows it: every entry so far is found in the
 * grown table with its value, and the table it replaced still holds its own. */
static void test_table_grow(void **state)
{
    struct om_table *t = om_table_new(16, sizeof(struct test_entry)), *old[8];
    assert_non_null(t);
    assert_int_equal(t->mask, 15);
    uint64_t next = 1;
    for (int round = 0; round < 8; round++) {
        struct test_entry *slots = OM_TABLE_SLOTS(struct test_entry, t);
        while (t->used < (t->mask + 1) / 2) {
            uint32_t h = test_home(&(struct test_entry){next, 0, 0});
            for (uint32_t i = 0; i < 8; i++) {
                struct test_entry *e = &slots[(h + i) & t->mask];
                if (e->key == 0) {
                    *e = (struct test_entry){next, next * 3, 0};
                    t->used++;
                    break;
                }
            }
            next++;
        }
        old[round] = t;
        t = om_table_grow(old[round], sizeof(struct test_entry), 8, test_home);
        assert_non_null(t);
        assert_int_equal(t->mask + 1, 2 * (old[round]->mask + 1));
        assert_int_equal(t->used, old[round]->used);
    }
    assert_int_equal(t->mask + 1, 16 << 8);
    for (int round = 0; round < 8; round++) {
        const struct test_entry *slots = OM_TABLE_SLOTS(const struct test_entry, old[round]);
        for (uint32_t i = 0; i <= old[round]->mask; i++) {
            if (slots[i].key == 0)
                continue;
            const struct test_entry *e = test_find(t, slots[i].key);
            assert_non_null(e);
            assert_int_equal(e->value, slots[i].key * 3);
            assert_ptr_equal(test_find(old[round], slots[i].key), &slots[i]);
        }
    }
    uint32_t found = 0;
    for (uint64_t key = 1; key < next; key++)
        found += test_find(t, key) != NULL;
    assert_int_equal(found, t->used);
    assert_null(test_find(t, next));
    /* An entry that is not a whole number of words is refused. */
    assert_null(om_table_grow(t, 12, 8, test_home));
}

/* ---- JSON ---- */

static char json_out[4096];

static void json_capture(void (*fill)(struct om_json *))
{
    int fd = memfd_create("json", 0);
    assert_true(fd >= 0);
    char buf[8]; /* tiny: every value crosses flushes */
    struct om_json w;
    om_json_init(&w, fd, buf, sizeof buf);
    fill(&w);
    assert_int_equal(om_json_flush(&w), 0);
    ssize_t n = pread(fd, json_out, sizeof json_out - 1, 0);
    assert_true(n >= 0);
    json_out[n] = '\0';
    close(fd);
}

static void fill_strings(struct om_json *w)
{
    om_json_begin(w, '[');
    om_json_str(w, "plain");
    om_json_str(w, "q\"b\\s/");
    om_json_str(w, "\n\r\t\b\f\x01\x1f");
    om_json_str(w, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    om_json_str(w, "bad\xff\xc3(\xe2\x82\xed\xa0\x80");
    om_json_strn(w, "nul\0in", 6);
    om_json_str(w, NULL);
    om_json_end(w, ']');
}

static void test_json_escaping(void **state)
{
    json_capture(fill_strings);
    assert_string_equal(json_out, "[\"plain\",\"q\\\"b\\\\s/\",\"\\n\\r\\t\\b\\f\\u0001\\u001f\","
                                  "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
                                  "\"bad\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\","
                                  "\"nul\\u0000in\",null]");
}

static void fill_values(struct om_json *w)
{
    om_json_begin(w, '{');
    om_json_key(w, "u");
    om_json_u64(w, UINT64_MAX);
    om_json_key(w, "i");
    om_json_i64(w, INT64_MIN);
    om_json_key(w, "z");
    om_json_u64(w, 0);
    om_json_key(w, "h");
    om_json_hex(w, 0x7f00dead0);
    om_json_key(w, "h0");
    om_json_hex(w, 0);
    om_json_key(w, "r");
    om_json_begin(w, '[');
    om_json_ratio(w, 1, 3);
    om_json_ratio(w, 2, 3);
    om_json_ratio(w, 1999, 1000);
    om_json_ratio(w, 19999, 10000);
    om_json_ratio(w, 5, 0);
    om_json_end(w, ']');
    om_json_key(w, "b");
    om_json_bool(w, 1);
    om_json_end(w, '}');
}

static void test_json_values(void **state)
{
    json_capture(fill_values);
    assert_string_equal(json_out, "{\"u\":18446744073709551615,\"i\":-9223372036854775808,"
                                  "\"z\":0,\"h\":\"0x7f00dead0\",\"h0\":\"0x0\","
                                  "\"r\":[0.333,0.667,1.999,2.000,null],\"b\":true}");
}

/* ---- report paths ---- */

static void test_path_expand(void **state)
{
    char out[64];
    assert_int_equal(om_path_expand("r_%p_%r_%%.json", 4242, 3, out, sizeof out), 0);
    assert_string_equal(out, "r_4242_3_%.json");
    assert_int_equal(om_path_expand("plain", 1, 0, out, sizeof out), 0);
    assert_string_equal(out, "plain");
    assert_int_equal(om_path_expand("%q", 1, 0, out, sizeof out), -EINVAL);
    assert_int_equal(om_path_expand("trailing%", 1, 0, out, sizeof out), -EINVAL);
    assert_int_equal(om_path_expand("%p%p%p", 1234567890, 0, out, 20), -ENAMETOOLONG);
    assert_int_equal(om_path_expand("%p", 1234567890, 0, out, 11), 0);
    assert_int_equal(om_path_expand("%p", 1234567890, 0, out, 10), -ENAMETOOLONG);

    unsetenv("RANK");
    unsetenv("LOCAL_RANK");
    assert_int_equal(om_env_rank(), 0);
    setenv("LOCAL_RANK", "5", 1);
    assert_int_equal(om_env_rank(), 5);
    setenv("RANK", "12", 1);
    assert_int_equal(om_env_rank(), 12);
    setenv("RANK", "x", 1); /* not a rank: the next one counts */
    assert_int_equal(om_env_rank(), 5);
    unsetenv("RANK");
    unsetenv("LOCAL_RANK");
}

/* ---- categories ---- */

static void test_categories(void **state)
{
    struct om_iter_acct a;
    memset(&a, 0, sizeof a);
    om_acct_birth(&a, 1000); /* a parameter, before the first iteration */
    uint64_t param_iter = a.iter_no;
    om_acct_boundary(&a, 1);
    uint64_t cross_iter = 0;
    for (int it = 0; it < 3; it++) {
        uint64_t it_no = a.iter_no;
        om_acct_birth(&a, 10); /* temporary */
        if (it > 0)            /* last iteration's arc dies after this iteration's first request */
            assert_int_equal(om_acct_death(&a, 200, cross_iter), OM_CAT_PER_ITERATION);
        om_acct_birth(&a, 20);
        om_acct_birth(&a, 200); /* arc over the boundary */
        cross_iter = it_no;
        assert_int_equal(om_acct_death(&a, 10, it_no), OM_CAT_TEMPORARY);
        assert_int_equal(om_acct_death(&a, 20, it_no), OM_CAT_TEMPORARY);
        om_acct_boundary(&a, 100 * (uint64_t)(it + 1));
    }
    assert_true(a.have_last);
    assert_int_equal(a.last_start, 200);
    assert_int_equal(a.last_end, 300);
    assert_int_equal(a.last_bytes[OM_CAT_TEMPORARY], 30);
    assert_int_equal(a.last_blocks[OM_CAT_TEMPORARY], 2);
    assert_int_equal(a.last_bytes[OM_CAT_PER_ITERATION], 200);
    assert_int_equal(a.last_bytes[OM_CAT_PERSISTENT], 1000);
    assert_int_equal(a.last_blocks[OM_CAT_PERSISTENT], 1);
    /* Peak of the iteration: the parameter, the old arc and the first temporary, or the
     * parameter, two temporaries and the new arc. */
    assert_int_equal(a.last_peak, 1000 + 10 + 20 + 200);
    assert_int_equal(om_acct_death(&a, 1000, param_iter), OM_CAT_PERSISTENT);

    /* A restart (period found after the fact) does not report the partial iteration. */
    struct om_iter_acct b;
    memset(&b, 0, sizeof b);
    om_acct_birth(&b, 5);
    om_acct_restart(&b, 10);
    om_acct_boundary(&b, 20);
    assert_false(b.have_last);
    om_acct_boundary(&b, 30);
    assert_true(b.have_last);
    assert_int_equal(b.last_bytes[OM_CAT_PERSISTENT], 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_exact_period, setup_det),
        cmocka_unit_test_setup(test_warmup_prefix, setup_det),
        cmocka_unit_test_setup(test_noise_tolerated, setup_det),
        cmocka_unit_test_setup(test_random_never_locks, setup_det),
        cmocka_unit_test_setup(test_sub_period_gives_way, setup_det),
        cmocka_unit_test_setup(test_locks_after_one_period, setup_det),
        cmocka_unit_test_setup(test_step_of_layers_at_second_seam, setup_det),
        cmocka_unit_test_setup(test_exact_step_replaces_noisy_layer, setup_det),
        cmocka_unit_test_setup(test_first_step_extra_tail, setup_det),
        cmocka_unit_test_setup(test_training_layers_not_locked, setup_det),
        cmocka_unit_test_setup(test_leaky_step_locks_late, setup_det),
        cmocka_unit_test_setup(test_two_threads, setup_det),
        cmocka_unit_test(test_threads_switch_to_majority),
        cmocka_unit_test(test_interning),
        cmocka_unit_test(test_folding),
        cmocka_unit_test(test_fold_compaction),
        cmocka_unit_test(test_sysmem),
        cmocka_unit_test(test_table_grow),
        cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_json_values),
        cmocka_unit_test(test_path_expand),
        cmocka_unit_test(test_categories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
