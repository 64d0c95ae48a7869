/* Unit tests of report_breakdown.c: a synthetic training run whose classes are known. */
#include "../../tools/report.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define MAXB 512

/* A run made of births and deaths, numbered as the tracer numbers requests. */
struct sim {
    struct om_rresident all[MAXB]; /* site unused; death OM_NO_VALUE while live */
    uint64_t live_after[MAXB];
    uint64_t seq, live;
};

static size_t born(struct sim *s, uint64_t size)
{
    size_t id = (size_t)s->seq++;
    assert_true(id < MAXB);
    s->all[id] = (struct om_rresident){0, size, id, OM_NO_VALUE};
    s->live += size;
    s->live_after[id] = s->live;
    return id;
}

static void die(struct sim *s, size_t id)
{
    s->all[id].death = s->seq;
    s->live -= s->all[id].size;
}

static const uint64_t param_size[] = {40000, 80000, 80000, 2000};
#define NPARAM 4
#define PARAM_BYTES 202000

/* One training step: zero_grad frees the last step's gradients, the forward keeps three
 * activations (and makes a temporary), the backward frees them as it makes one gradient per
 * parameter (and a temporary, and a per-iteration block of no parameter's size that lives
 * until zero_grad), the step makes two temporaries a parameter (Adam's two states the
 * first time). 18 requests. */
static void step(struct sim *s, size_t *grads, size_t *ngrads, bool first)
{
    for (size_t k = 0; k < *ngrads; k++)
        die(s, grads[k]);
    *ngrads = 0;
    size_t a1 = born(s, 100000), t = born(s, 30000);
    die(s, t);
    size_t a2 = born(s, 200000), a3 = born(s, 50000);
    grads[(*ngrads)++] = born(s, 2000);
    die(s, a3);
    size_t bt = born(s, 60000);
    die(s, bt);
    grads[(*ngrads)++] = born(s, 80000); /* the peak: a1, a2 and two gradients */
    die(s, a2);
    grads[(*ngrads)++] = born(s, 80000);
    grads[(*ngrads)++] = born(s, 40000);
    die(s, a1);
    grads[(*ngrads)++] = born(s, 7777);
    for (size_t p = 0; p < NPARAM; p++) {
        if (first) {
            born(s, param_size[p]);
            born(s, param_size[p]);
        } else {
            size_t t1 = born(s, param_size[p]), t2 = born(s, param_size[p]);
            die(s, t1);
            die(s, t2);
        }
    }
}

#define T 18

/* The report of a run: parameters (a buffer of a parameter's size among them), a data set of
 * a parameter's size, one warm-up step, three steps in the sample. */
static void make_report(struct sim *s, struct om_report *r, struct om_rlife *life,
                        struct om_rresident *res, uint64_t *starts)
{
    memset(s, 0, sizeof *s);
    born(s, 40000);
    born(s, 80000);
    born(s, 80000);
    born(s, 2000); /* a buffer: a parameter's size, born among them */
    born(s, 2000);
    size_t early = born(s, 123456); /* freed inside the sample: other */
    born(s, 80000);                 /* the data set */
    size_t grads[8], ngrads = 0;
    step(s, grads, &ngrads, true);
    uint64_t first = s->seq;
    for (int i = 0; i < 3; i++) {
        step(s, grads, &ngrads, false);
        if (i == 0)
            die(s, early);
    }
    memset(r, 0, sizeof *r);
    r->found = true;
    r->period = T;
    r->sample_first = first;
    r->sample_end = s->seq;
    r->nlife = (size_t)(s->seq - first);
    for (uint64_t q = first; q < s->seq; q++) {
        const struct om_rresident *b = &s->all[q];
        life[q - first] = (struct om_rlife){0, b->size, q, b->death, 0, 0, OM_NO_VALUE};
    }
    r->life = life;
    r->live_after = s->live_after + first;
    for (uint64_t q = 0; q < first; q++)
        if (s->all[q].death == OM_NO_VALUE || s->all[q].death > first)
            res[r->nresident++] = s->all[q];
    r->resident = res;
    r->have_resident = true;
    r->resident_complete = true;
    starts[0] = first + 5; /* the detector's boundary falls anywhere in the step */
    r->starts = starts;
    r->nstarts = 1;
}

static void test_training_run(void **state)
{
    (void)state;
    static struct sim s;
    static struct om_rlife life[MAXB];
    static struct om_rresident res[MAXB];
    uint64_t starts[1];
    struct om_report r;
    make_report(&s, &r, life, &res[0], starts);
    struct om_breakdown b;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_true(b.found);
    /* The cycle runs from the low point after zero_grad: the second step of the sample. */
    assert_int_equal(b.first, r.sample_first + T);
    assert_int_equal(b.end, r.sample_first + 2 * T);
    assert_int_equal(b.peak_request, b.first + 6);
    assert_int_equal(b.turn_request, b.first + 4); /* the first gradient */
    assert_int_equal(b.at_peak[OM_BD_PARAMETERS], PARAM_BYTES);
    assert_int_equal(b.blocks_at_peak[OM_BD_PARAMETERS], NPARAM);
    assert_int_equal(b.at_peak[OM_BD_OPTIMIZER], 2 * PARAM_BYTES);
    assert_int_equal(b.at_peak[OM_BD_GRADIENTS], 82000);
    assert_int_equal(b.max_live[OM_BD_GRADIENTS], PARAM_BYTES);
    assert_int_equal(b.born[OM_BD_GRADIENTS], PARAM_BYTES);
    assert_int_equal(b.at_peak[OM_BD_ACTIVATIONS], 300000);
    assert_int_equal(b.max_live[OM_BD_ACTIVATIONS], 350000);
    assert_int_equal(b.born[OM_BD_ACTIVATIONS], 350000);
    assert_int_equal(b.at_peak[OM_BD_TEMPORARIES], 0);
    /* forward 30000, backward 60000, the step's two a parameter, the 7777 of no parameter */
    assert_int_equal(b.born[OM_BD_TEMPORARIES], 30000 + 60000 + 2 * PARAM_BYTES + 7777);
    /* the step's two of the largest parameter, and the 7777 */
    assert_int_equal(b.max_live[OM_BD_TEMPORARIES], 160000 + 7777);
    /* the data set and the buffer (or the parameter it was taken for: the same bytes) */
    assert_int_equal(b.at_peak[OM_BD_OTHER], 80000 + 2000);
    uint64_t sum = 0;
    for (int c = 0; c < OM_NBD; c++)
        sum += b.at_peak[c];
    assert_int_equal(sum, b.peak_bytes);
    assert_int_equal(b.peak_bytes, r.live_after[b.peak_request - r.sample_first]);
}

static void test_not_found(void **state)
{
    (void)state;
    static struct sim s;
    static struct om_rlife life[MAXB];
    static struct om_rresident res[MAXB];
    uint64_t starts[1];
    struct om_report r;
    struct om_breakdown b;
    make_report(&s, &r, life, &res[0], starts);
    r.have_resident = false;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_false(b.found);
    assert_non_null(strstr(b.why, "resident"));
    make_report(&s, &r, life, &res[0], starts);
    r.found = false;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_false(b.found);
    make_report(&s, &r, life, &res[0], starts);
    r.period = 2 * T; /* two periods do not fit in the sample */
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_false(b.found);
    assert_non_null(strstr(b.why, "two iterations"));
}

/* Without gradients that come and go (zero_grad keeping them), no parameter is recognised:
 * the resident blocks stay other rather than being guessed. */
static void test_no_gradients(void **state)
{
    (void)state;
    static struct sim s;
    static struct om_rlife life[MAXB];
    static struct om_rresident res[MAXB];
    uint64_t starts[1];
    struct om_report r;
    struct om_breakdown b;
    make_report(&s, &r, life, &res[0], starts);
    for (size_t i = 0; i < r.nlife; i++)
        if (life[i].death == r.sample_first + T || life[i].death == r.sample_first + 2 * T ||
            life[i].death == r.sample_first + 3 * T)
            life[i].death = OM_NO_VALUE;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_true(b.found);
    assert_int_equal(b.at_peak[OM_BD_PARAMETERS], 0);
    assert_int_equal(b.at_peak[OM_BD_OPTIMIZER], 0);
    assert_int_equal(b.max_live[OM_BD_GRADIENTS], 0);
}

/* Gradients kept from one step to the next (zero_grad(set_to_none=False)): born in the
 * first backward at the gradients' call site and never freed; each later backward makes the
 * incoming gradients at that site again and frees them once added in. Sites: 1 the model's
 * parameters and a buffer of a parameter's size, 2 a data set of a parameter's size, 3 the
 * activations, 4 the gradients, 5 the optimizer's state, 6 the step's temporaries. */
static size_t born_at(struct sim *s, uint64_t size, uint64_t site)
{
    size_t id = born(s, size);
    s->all[id].site = site;
    return id;
}

static void kept_step(struct sim *s, bool first)
{
    size_t a1 = born_at(s, 100000, 3), a2 = born_at(s, 200000, 3);
    for (size_t p = NPARAM; p-- > 0;) {
        size_t g = born_at(s, param_size[p], 4);
        if (!first)
            die(s, g); /* added into the kept gradient */
        if (p == 2)
            die(s, a2);
    }
    die(s, a1);
    for (size_t p = 0; p < NPARAM; p++) {
        if (first) {
            born_at(s, param_size[p], 5);
            born_at(s, param_size[p], 5);
        } else {
            size_t t = born_at(s, param_size[p], 6);
            die(s, t);
        }
    }
}

#define KEPT_T 10 /* requests of a steady kept_step */

static void test_kept_gradients(void **state)
{
    (void)state;
    static struct sim s;
    static struct om_rlife life[MAXB];
    static struct om_rresident res[MAXB];
    memset(&s, 0, sizeof s);
    for (size_t p = 0; p < NPARAM; p++)
        born_at(&s, param_size[p], 1);
    born_at(&s, 2000, 1);  /* a buffer of a parameter's size */
    born_at(&s, 80000, 2); /* the data set */
    kept_step(&s, true);
    uint64_t first = s.seq;
    for (int i = 0; i < 3; i++)
        kept_step(&s, false);
    struct om_report r;
    memset(&r, 0, sizeof r);
    r.found = true;
    r.period = KEPT_T;
    r.sample_first = first;
    r.sample_end = s.seq;
    r.nlife = (size_t)(s.seq - first);
    for (uint64_t q = first; q < s.seq; q++) {
        const struct om_rresident *b = &s.all[q];
        life[q - first] = (struct om_rlife){b->site, b->size, q, b->death, 0, 0, OM_NO_VALUE};
    }
    r.life = life;
    r.live_after = s.live_after + first;
    for (uint64_t q = 0; q < first; q++)
        if (s.all[q].death == OM_NO_VALUE || s.all[q].death > first)
            res[r.nresident++] = s.all[q];
    r.resident = res;
    r.have_resident = true;
    r.resident_complete = true;
    struct om_breakdown b;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_true(b.found);
    assert_true(b.kept_gradients);
    assert_int_equal(b.at_peak[OM_BD_PARAMETERS], PARAM_BYTES);
    assert_int_equal(b.blocks_at_peak[OM_BD_PARAMETERS], NPARAM);
    assert_int_equal(b.at_peak[OM_BD_GRADIENTS], PARAM_BYTES);
    assert_int_equal(b.max_live[OM_BD_GRADIENTS], PARAM_BYTES);
    assert_int_equal(b.born[OM_BD_GRADIENTS], 0);
    assert_int_equal(b.at_peak[OM_BD_OPTIMIZER], 2 * PARAM_BYTES);
    assert_int_equal(b.at_peak[OM_BD_OTHER], 2000 + 80000);
    uint64_t sum = 0;
    for (int c = 0; c < OM_NBD; c++)
        sum += b.at_peak[c];
    assert_int_equal(sum, b.peak_bytes);

    /* Without the later backwards' gradients at the kept ones' site, nothing is guessed. */
    for (size_t i = 0; i < r.nlife; i++)
        if (life[i].site == 4)
            life[i].site = 7;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_true(b.found);
    assert_false(b.kept_gradients);
    assert_int_equal(b.at_peak[OM_BD_PARAMETERS], 0);
    assert_int_equal(b.at_peak[OM_BD_GRADIENTS], 0);
}

/* SGD updating in place: the step makes no block, so the backward's last gradient (the first
 * layer's) is born after the iteration's last block that died in it, where a step's final
 * temporaries usually are (rule 3b). 6 requests a step; momentum born in the first. */
static void inplace_step(struct sim *s, size_t *grads, size_t *ngrads, bool first)
{
    for (size_t k = 0; k < *ngrads; k++)
        die(s, grads[k]);
    *ngrads = 0;
    size_t a1 = born(s, 100000), a2 = born(s, 200000);
    grads[(*ngrads)++] = born(s, 30000);
    die(s, a2);
    size_t t = born(s, 60000);
    die(s, t);
    grads[(*ngrads)++] = born(s, 80000);
    die(s, a1);
    grads[(*ngrads)++] = born(s, 40000); /* after the last temporary */
    if (first) {
        born(s, 40000);
        born(s, 80000);
        born(s, 30000);
    }
}

static void test_inplace_step(void **state)
{
    (void)state;
    static struct sim s;
    static struct om_rlife life[MAXB];
    static struct om_rresident res[MAXB];
    memset(&s, 0, sizeof s);
    born(&s, 40000);
    born(&s, 80000);
    born(&s, 30000);
    born(&s, 40000); /* a data set of the first parameter's size, born after the parameters */
    size_t grads[4], ngrads = 0;
    inplace_step(&s, grads, &ngrads, true);
    uint64_t first = s.seq;
    for (int i = 0; i < 3; i++)
        inplace_step(&s, grads, &ngrads, false);
    struct om_report r;
    memset(&r, 0, sizeof r);
    r.found = true;
    r.period = 6;
    r.sample_first = first;
    r.sample_end = s.seq;
    r.nlife = (size_t)(s.seq - first);
    for (uint64_t q = first; q < s.seq; q++)
        life[q - first] = (struct om_rlife){0, s.all[q].size, q, s.all[q].death, 0, 0, OM_NO_VALUE};
    r.life = life;
    r.live_after = s.live_after + first;
    for (uint64_t q = 0; q < first; q++)
        if (s.all[q].death == OM_NO_VALUE || s.all[q].death > first)
            res[r.nresident++] = s.all[q];
    r.resident = res;
    r.have_resident = true;
    r.resident_complete = true;
    uint64_t starts[1] = {first + 2};
    r.starts = starts;
    r.nstarts = 1;
    struct om_breakdown b;
    assert_int_equal(om_breakdown(&r, &b), 0);
    assert_true(b.found);
    assert_false(b.kept_gradients);
    assert_int_equal(b.first, first + 6);
    assert_int_equal(b.at_peak[OM_BD_PARAMETERS], 150000);
    assert_int_equal(b.blocks_at_peak[OM_BD_PARAMETERS], 3);
    assert_int_equal(b.max_live[OM_BD_GRADIENTS], 150000);
    assert_int_equal(b.born[OM_BD_GRADIENTS], 150000);
    assert_int_equal(b.at_peak[OM_BD_OPTIMIZER], 150000);
    assert_int_equal(b.born[OM_BD_TEMPORARIES], 60000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_run), cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_no_gradients), cmocka_unit_test(test_kept_gradients),
        cmocka_unit_test(test_inplace_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
