/* Unit tests of report_names.c: C++ names shortened, plumbing recognised, sites named. */
#include "../../tools/report.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* report_names.c asks the symbolizer for a site's frames: here they are given directly. */
static const struct om_dframe *given;
static size_t ngiven;

int om_sym_site(struct om_symbolizer *s, const struct om_rsite *site, const struct om_dframe **out,
                size_t *n)
{
    (void)s;
    (void)site;
    *out = given;
    *n = ngiven;
    return 0;
}

const char *om_dframe_label(const struct om_dframe *f, char *buf, size_t len)
{
    if (f->function)
        return f->function;
    snprintf(buf, len, "%s+0x%llx", f->module ? f->module : "", (unsigned long long)f->offset);
    return buf;
}

static void expect_short(const char *in, const char *want)
{
    char buf[512];
    const char *got = om_cxx_short(in, buf, sizeof buf);
    if (strcmp(got, want) != 0)
        fail_msg("om_cxx_short(\"%s\") = \"%s\", expected \"%s\"", in, got, want);
}

static void test_shorten(void **state)
{
    (void)state;
    expect_short("main", "main");
    expect_short("site_temp", "site_temp");
    expect_short("c10::alloc_cpu(unsigned long)", "c10::alloc_cpu");
    expect_short("at::native::addmm(at::Tensor const&, at::Tensor const&, at::Tensor const&, "
                 "c10::Scalar const&, c10::Scalar const&)",
                 "at::native::addmm");
    expect_short(
        "std::vector<at::Tensor, std::allocator<at::Tensor> >::_M_realloc_insert<at::Tensor "
        "const&>(__gnu_cxx::__normal_iterator<at::Tensor*, std::vector<at::Tensor> >, "
        "at::Tensor const&)",
        "std::vector::_M_realloc_insert");
    /* nested parentheses: a function pointer argument */
    expect_short("ns::apply(void (*)(int, int (*)(char)), long)", "ns::apply");
    /* a return type, and cv- and ref-qualifiers after the arguments */
    expect_short("std::unique_ptr<Foo, std::default_delete<Foo> > ns::make(int)", "ns::make");
    expect_short("ns::Widget::size() const", "ns::Widget::size");
    expect_short("ns::Widget::take() &&", "ns::Widget::take");
    /* operators keep their symbols */
    expect_short("ns::Functor::operator()(int) const", "ns::Functor::operator()");
    expect_short("bool ns::operator< <int>(ns::Box<int> const&, ns::Box<int> const&)",
                 "ns::operator<");
    expect_short("ns::Stream::operator<<(char const*)", "ns::Stream::operator<<");
    expect_short("operator new(unsigned long)", "operator new");
    expect_short("operator delete[](void*)", "operator delete[]");
    /* lambdas and anonymous namespaces */
    expect_short("at::native::(anonymous namespace)::cpu_kernel(at::TensorIterator&)",
                 "at::native::(anonymous namespace)::cpu_kernel");
    expect_short("at::native::foo(int)::{lambda(long, long)#1}::operator()(long, long) const",
                 "at::native::foo::{lambda}::operator()");
    /* ABI tags and clones */
    expect_short("c10::str[abi:cxx11](char const*)", "c10::str");
    expect_short("ns::hot(int) [clone .cold]", "ns::hot");
    /* a name that is not C++ passes, and a cut-off one does not crash */
    expect_short("pymalloc_alloc", "pymalloc_alloc");
    expect_short("ns::broken(int", "ns::broken");
    char small[8];
    assert_string_equal(om_cxx_short("at::native::addmm(int)", small, sizeof small), "at::nat");
}

static void test_plumbing(void **state)
{
    (void)state;
    static const char *const yes[] = {"malloc",
                                      "operator new",
                                      "c10::alloc_cpu",
                                      "c10::DefaultCPUAllocator::allocate",
                                      "at::detail::empty_generic",
                                      "at::detail::empty_cpu",
                                      "at::empty",
                                      "at::_ops::empty_memory_format::call",
                                      "_PyObject_Malloc",
                                      "PyMem_Malloc",
                                      "PyDataMem_UserNEW",
                                      "default_malloc",
                                      "std::vector::_M_realloc_insert"};
    static const char *const no[] = {"at::native::addmm", "at::native::mkldnn_convolution",
                                     "site_temp",         "main",
                                     "PyList_New",        "train_step"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        if (!om_name_is_plumbing(yes[i]))
            fail_msg("%s is not taken for plumbing", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (om_name_is_plumbing(no[i]))
            fail_msg("%s is taken for plumbing", no[i]);
}

static const char *name_of(const struct om_dframe *f, size_t n, bool full, char *buf, size_t len)
{
    given = f;
    ngiven = n;
    return om_site_name(NULL, NULL, full, buf, len);
}

#define FN(name)                                                                                   \
    {                                                                                              \
        .function = (name), .module = "libtorch_cpu.so"                                            \
    }

static void test_site_names(void **state)
{
    (void)state;
    char buf[256];
    /* PyTorch: plumbing and unnamed frames skipped, the entry below the Python binding */
    const struct om_dframe conv[] = {
        FN("c10::alloc_cpu(unsigned long)"),
        {.module = "libc10.so", .offset = 0x1b1e2},
        FN("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*)"),
        FN("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)"),
        FN("at::native::mkldnn_convolution(at::Tensor const&, at::Tensor const&)"),
        FN("at::_ops::mkldnn_convolution::call(at::Tensor const&)"),
        FN("at::native::conv2d(at::Tensor const&, at::Tensor const&)"),
        FN("torch::autograd::THPVariable_conv2d(_object*, _object*, _object*)"),
        FN("_PyEval_EvalFrameDefault"),
        FN("main"),
    };
    assert_string_equal(name_of(conv, 10, false, buf, sizeof buf),
                        "mkldnn_convolution \xe2\x86\x90 conv2d");
    assert_string_equal(name_of(conv, 10, true, buf, sizeof buf),
                        "at::native::mkldnn_convolution(at::Tensor const&, at::Tensor const&) "
                        "\xe2\x86\x90 at::native::conv2d(at::Tensor const&, at::Tensor const&)");
    /* a user Python frame wins over the native entry; library Python frames do not */
    const struct om_dframe py[] = {
        FN("c10::alloc_cpu(unsigned long)"),
        FN("at::native::addmm(at::Tensor const&)"),
        FN("at::native::linear(at::Tensor const&)"),
        {.function = "forward",
         .file = "/usr/lib/python3/dist-packages/torch/nn/linear.py",
         .line = 114},
        {.function = "forward", .file = "/home/u/model.py", .line = 41},
    };
    assert_string_equal(name_of(py, 5, false, buf, sizeof buf),
                        "addmm \xe2\x86\x90 model.py:41 forward");
    /* no meaningful native frame (the kernel's own frames unnamed): the library's Python
     * frame that asked names the site, before the user's line */
    const struct om_dframe bn[] = {
        FN("c10::alloc_cpu(unsigned long)"),
        FN("at::native::empty_like(at::Tensor const&)"),
        FN("at::_ops::empty_like::call(at::Tensor const&)"),
        {.module = "libtorch_cpu.so", .offset = 0xdb4112},
        {.function = "batch_norm",
         .file = "/usr/lib/python3/dist-packages/torch/nn/functional.py",
         .line = 2450},
        {.function = "train", .file = "/home/u/train.py", .line = 17},
    };
    assert_string_equal(name_of(bn, 6, false, buf, sizeof buf),
                        "functional.py:2450 batch_norm \xe2\x86\x90 train.py:17 train");
    assert_string_equal(name_of(bn, 5, false, buf, sizeof buf), "functional.py:2450 batch_norm");
    /* an extension without symbols (numpy): its library's Python frame, generated code
     * skipped; the user's own line alone when it is the innermost */
    const struct om_dframe np[] = {
        {.module = "_multiarray_umath.so", .offset = 0xde138},
        FN("PyObject_Call"),
        {.function = "concatenate", .file = "<__array_function__ internals>", .line = 200},
        {.function = "hstack",
         .file = "/usr/lib/python3/dist-packages/numpy/core/shape_base.py",
         .line = 370},
        {.function = "main", .file = "/home/u/fit.py", .line = 15},
    };
    assert_string_equal(name_of(np, 5, false, buf, sizeof buf),
                        "shape_base.py:370 hstack \xe2\x86\x90 fit.py:15 main");
    const struct om_dframe rng[] = {
        {.module = "_multiarray_umath.so", .offset = 0xde138},
        FN("PyObject_Vectorcall"),
        {.function = "data", .file = "/home/u/fit.py", .line = 7},
        FN("PyEval_EvalCode"),
        FN("_PyRun_SimpleFileObject"),
    };
    assert_string_equal(name_of(rng, 5, false, buf, sizeof buf), "fit.py:7 data");
    /* an op that computes keeps its name under a library's Python frame */
    const struct om_dframe cat[] = {
        FN("c10::alloc_cpu(unsigned long)"),
        FN("at::native::empty_cpu(c10::ArrayRef<long>)"),
        FN("at::_ops::cat::call(c10::ArrayRef<at::Tensor>, long)"),
        {.function = "forward",
         .file = "/usr/lib/python3/dist-packages/torchvision/models/squeezenet.py",
         .line = 31},
        {.function = "train", .file = "/home/u/train.py", .line = 17},
    };
    assert_string_equal(name_of(cat, 5, false, buf, sizeof buf),
                        "cat \xe2\x86\x90 train.py:17 train");
    /* the user's own frame first: the op stays, the user's line replaces its entry */
    const struct om_dframe randn[] = {
        FN("c10::alloc_cpu(unsigned long)"),
        FN("at::native::empty_cpu(c10::ArrayRef<long>)"),
        FN("at::_ops::randn::call(c10::ArrayRef<c10::SymInt>)"),
        {.function = "make_batch", .file = "/home/u/train.py", .line = 6},
    };
    assert_string_equal(name_of(randn, 4, false, buf, sizeof buf),
                        "randn \xe2\x86\x90 train.py:6 make_batch");
    /* a C program: no entry past main */
    const struct om_dframe c[] = {FN("malloc"), FN("site_temp"), FN("main"), FN("_start")};
    assert_string_equal(name_of(c, 4, false, buf, sizeof buf), "site_temp");
    /* malloc straight from main: main, not malloc; an unnamed frame: its module+offset */
    const struct om_dframe direct[] = {FN("malloc"), FN("main"), FN("_start")};
    assert_string_equal(name_of(direct, 3, false, buf, sizeof buf), "main");
    const struct om_dframe bare[] = {{.module = "prog", .offset = 0x1abe}, FN("__libc_start_main")};
    assert_string_equal(name_of(bare, 2, false, buf, sizeof buf), "prog+0x1abe");
    /* all plumbing: the outermost plumbing frame, not the allocator */
    const struct om_dframe all[] = {FN("c10::alloc_cpu(unsigned long)"),
                                    FN("at::native::empty_like(at::Tensor const&)"),
                                    FN("PyObject_Call")};
    assert_string_equal(name_of(all, 3, false, buf, sizeof buf), "empty_like");
    /* methods keep their class; a short buffer is cut, not overrun */
    const struct om_dframe m[] = {FN("torch::Library::_impl(char const*)")};
    assert_string_equal(name_of(m, 1, false, buf, sizeof buf), "Library::_impl");
    assert_string_equal(name_of(conv, 10, false, buf, 6), "mkldn");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shorten),
        cmocka_unit_test(test_plumbing),
        cmocka_unit_test(test_site_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
