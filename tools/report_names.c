/* optmem report: short names for call sites and C++ frames (docs/report-formats.md, "Names"). */
#include "report.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* Frames that only carry a request to an allocator: the C library and operator new,
 * allocator wrappers, PyTorch's tensor creation and dispatch, CPython's and numpy's memory
 * managers. Matched (fnmatch) against the shortened qualified name. */
static const char *const plumbing[] = {
    /* C library, C++ runtime, common allocator wrappers */
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "__libc_*alloc*",
    "__libc_free",
    "_int_*",
    "sysmalloc",
    "operator new*",
    "operator delete*",
    "__gnu_cxx::new_allocator*",
    "std::allocator*",
    "std::__new_allocator*",
    "*_malloc",
    "*_calloc",
    "*_realloc",
    "*xmalloc",
    "*xcalloc",
    "*xrealloc",
    "je_*",
    "tc_*",
    "mi_*",
    "*::alloc_cpu",
    "*::alloc_cuda",
    "*Allocator::allocate*",
    "*Allocator::malloc*",
    "*Allocator::raw_alloc*",
    "*Allocator::*_alloc*",
    "*::allocate",
    "*Allocator*::operator()",
    /* PyTorch: tensor creation and the dispatcher between an op and its kernel */
    "at::detail::empty_*",
    "at::detail::_empty_*",
    "*::create_out",
    "*::set_output*",
    "at::empty*",
    "at::native::empty_*",
    "at::native::resize_*",
    "at::native::zeros*",
    "at::_ops::*",
    "at::redispatch::*",
    "at::meta::*",
    "at::TensorIteratorBase::*",
    "at::TensorIterator::*",
    "at::TensorIteratorConfig::*",
    "at::TensorBase::*",
    "at::Tensor::*",
    "at::TensorImpl::*",
    "c10::impl::*",
    "c10::Dispatcher::*",
    "c10::KernelFunction::*",
    "c10::BoxedKernel::*",
    "c10::TensorImpl::*",
    "c10::StorageImpl::*",
    "c10::make_intrusive*",
    "c10::intrusive_ptr*",
    "c10::Storage::*",
    "torch::autograd::VariableType::*",
    "torch::ADInplaceOrView::*",
    "at::functionalization::*",
    "c10::function_ref*",
    "std::function*",
    "std::*",
    "__gnu_cxx::*",
    /* CPython's memory managers and object allocation */
    "PyMem_*",
    "_PyMem_*",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    "pymalloc_*",
    "_PyObject_GC_*",
    "PyObject_GC_*",
    "gc_alloc",
    "_PyObject_New*",
    "PyType_GenericAlloc",
    "_PyType_AllocNoTrack",
    "arena_map_*",
    "new_arena",
    "allocate_from_new_pool",
    "_PyArena_Malloc",
    "block_new",
    /* numpy's data and dimension allocators */
    "PyDataMem_*",
    "PyArray_malloc",
    "default_malloc",
    "default_calloc",
    "default_realloc",
    "npy_alloc_cache*",
    "_npy_alloc_cache",
    "npy_*alloc*",
    "PyDataMem_UserNEW*",
};

/* Frames of an interpreter, a Python binding, or where a thread or program starts: a site's
 * names come from the frames inside the first of these. */
static const char *const boundary[] = {
    "_PyEval_*",
    "PyEval_*",
    "_PyObject_Call*",
    "PyObject_Call*",
    "_PyObject_Vectorcall*",
    "PyObject_Vectorcall*",
    "_PyVectorcall_*",
    "_PyObject_MakeTpCall",
    "_PyObject_FastCall*",
    "PyObject_FastCall*",
    "cfunction_*",
    "method_vectorcall*",
    "_PyFunction_Vectorcall",
    "slot_tp_*",
    "vectorcall_*",
    "object_vacall",
    "pybind11::*",
    "torch::autograd::THP*",
    "THP*",
    "torch::autograd::python::*",
    "torch::PythonArgParser*",
    "array_function*",
    "ufunc_generic*",
    /* CPython running a file, a module or its start-up */
    "_PyRun_*",
    "PyRun_*",
    "Py_RunMain",
    "Py_BytesMain",
    "Py_Main",
    "pymain_*",
    "Py_Initialize*",
    "_PyImport_*",
    "PyImport_*",
    /* where a thread, a program or a library's initialisation starts */
    "main",
    "_start",
    "__libc_start*",
    "start_thread",
    "clone",
    "clone3",
    "call_init",
    "_dl_*",
    "dl_*",
    "__GI__dl_*",
    "dlopen*",
    "_dlerror_run",
    "*::thread_main",
    "*::execute_native_thread_routine",
    "torch::autograd::Engine::*",
    "torch::autograd::Node::*",
};

static bool matches(const char *const *pats, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (fnmatch(pats[i], name, 0) == 0)
            return true;
    return false;
}

bool om_name_is_plumbing(const char *shortened)
{
    return matches(plumbing, sizeof plumbing / sizeof *plumbing, shortened);
}

static bool is_boundary(const char *shortened)
{
    return matches(boundary, sizeof boundary / sizeof *boundary, shortened);
}

/* Past a bracketed group that opens at s[0]; NULL when it does not close. A '<' or '>' of
 * operator<, operator<< and the like is skipped by the caller. */
static const char *skip_group(const char *s)
{
    int depth = 0;
    for (; *s; s++) {
        if (*s == '(' || *s == '<' || *s == '[' || *s == '{')
            depth++;
        else if ((*s == ')' || *s == '>' || *s == ']' || *s == '}') && --depth == 0)
            return s + 1;
    }
    return NULL;
}

/* An operator's own symbols, so that its '(' '<' are not taken for arguments or templates. */
static size_t operator_len(const char *s)
{
    if (strncmp(s, "operator", 8) != 0 ||
        (s[8] && (s[8] == '_' || (s[8] >= 'a' && s[8] <= 'z') || (s[8] >= 'A' && s[8] <= 'Z'))))
        return 0;
    static const char *const ops[] = {
        "()", "[]", "<<=", ">>=", "<=>", "->*", "<<", ">>", "<=", ">=", "->", "<",  ">",
        "==", "!=", "+=",  "-=",  "*=",  "/=",  "%=", "&=", "|=", "^=", "&&", "||", "++",
        "--", "+",  "-",   "*",   "/",   "%",   "&",  "|",  "^",  "~",  "!",  "=",  ","};
    const char *p = s + 8;
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (strncmp(p, ops[i], strlen(ops[i])) == 0)
            return (size_t)(p - s) + strlen(ops[i]);
    /* new, delete, a conversion: the word after it belongs to the name */
    if (*s && s[8] == ' ') {
        p = s + 9;
        while (*p && *p != '(' && *p != '<' && *p != ' ')
            p++;
        if (strncmp(p, "[]", 2) == 0)
            p += 2;
        return (size_t)(p - s);
    }
    return 8;
}

/* Drops argument lists, template arguments, ABI tags, cv-qualifiers and the return type
 * from a demangled C++ name, keeping its qualification: lambdas become {lambda}, and
 * "(anonymous namespace)" stays. Names that are not C++ pass unchanged. */
char *om_cxx_short(const char *in, char *buf, size_t len)
{
    size_t o = 0;
    for (const char *s = in; *s;) {
        size_t op = s == in || s[-1] == ':' || s[-1] == ' ' ? operator_len(s) : 0;
        if (op) {
            for (size_t k = 0; k < op && o + 1 < len; k++)
                buf[o++] = s[k];
            s += op;
            continue;
        }
        if (strncmp(s, "(anonymous namespace)", 21) == 0) {
            for (size_t k = 0; k < 21 && o + 1 < len; k++)
                buf[o++] = s[k];
            s += 21;
            continue;
        }
        if (strncmp(s, "{lambda(", 8) == 0) {
            const char *end = skip_group(s);
            if (!end)
                break;
            const char *tag = "{lambda}";
            for (size_t k = 0; tag[k] && o + 1 < len; k++)
                buf[o++] = tag[k];
            s = end;
            continue;
        }
        if (*s == '(' || *s == '<' || *s == '[') {
            const char *end = skip_group(s);
            if (!end)
                break;
            s = end;
            continue;
        }
        if (*s == ' ') {
            /* A space at top level ends a return type ("void ns::f") or starts a qualifier
             * ("const", "&&") after the arguments: only a following name counts. */
            const char *next = s + 1;
            if (strncmp(next, "const", 5) == 0 || strncmp(next, "volatile", 8) == 0 ||
                *next == '&' || *next == '[')
                break;
            if (*next == '<' || *next == '(') { /* "operator< <int>(...)" */
                s = next;
                continue;
            }
            o = 0;
            s = next;
            continue;
        }
        if (*s == ':' && s[1] == ':') {
            if (o + 2 < len) {
                buf[o++] = ':';
                buf[o++] = ':';
            }
            s += 2;
            continue;
        }
        if (o + 1 < len)
            buf[o++] = *s;
        s++;
    }
    if (len)
        buf[o < len ? o : len - 1] = '\0';
    if (o == 0 && len) /* nothing but brackets: keep what was given */
        snprintf(buf, len, "%s", in);
    return buf;
}

/* The last component of a qualified name, with the one before it when that is a class (by
 * the usual convention, capitalised) or the last says little alone: an operator, a lambda,
 * call, redispatch, apply or run. */
static const char *leaf(char *q)
{
    /* PyTorch's generated dispatcher entries, at::_ops::OP::call, are named by their op. */
    if (strncmp(q, "at::_ops::", 10) == 0 && strstr(q + 10, "::")) {
        *strstr(q + 10, "::") = '\0';
        return q + 10;
    }
    const char *last = q, *prev = q;
    int depth = 0;
    for (const char *s = q; *s; s++) {
        if (*s == '(' || *s == '{')
            depth++;
        else if (*s == ')' || *s == '}')
            depth--;
        else if (depth == 0 && s[0] == ':' && s[1] == ':') {
            prev = last;
            last = s + 2;
            s++;
        }
    }
    static const char *const generic[] = {"call", "redispatch", "apply", "run", "operator"};
    bool vague = *last == '{' || (*prev >= 'A' && *prev <= 'Z');
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        vague |= strncmp(last, generic[i], strlen(generic[i])) == 0 &&
                 (!last[strlen(generic[i])] || i == 4);
    return vague ? prev : last;
}

const char *om_frame_name(const struct om_dframe *f, bool full, char *buf, size_t len)
{
    const char *label = om_dframe_label(f, buf, len);
    if (full || !f->function)
        return label;
    return om_cxx_short(f->function, buf, len);
}

static void append(char *buf, size_t len, size_t *o, const char *s);

/* A Python source frame from a user's file, not an installed package or the library. */
static bool user_python(const struct om_dframe *f)
{
    return f->file && !f->module && !strstr(f->file, "site-packages") &&
           !strstr(f->file, "dist-packages") && !strstr(f->file, "lib/python3") &&
           !strstr(f->file, "\\Lib\\") && f->file[0] != '<';
}

/* "model.py:41 forward": a Python frame by its file's base name, line and function. */
static void append_python(char *buf, size_t len, size_t *o, const struct om_dframe *f)
{
    const char *base = f->file;
    for (const char *c = f->file; *c; c++)
        if (*c == '/' || *c == '\\')
            base = c + 1;
    char line[32];
    snprintf(line, sizeof line, ":%u", f->line);
    append(buf, len, o, base);
    append(buf, len, o, line);
    if (f->function) {
        append(buf, len, o, " ");
        append(buf, len, o, f->function);
    }
}

static void append(char *buf, size_t len, size_t *o, const char *s)
{
    size_t n = strlen(s);
    if (*o + 1 >= len)
        return;
    if (n > len - *o - 1)
        n = len - *o - 1;
    memcpy(buf + *o, s, n);
    *o += n;
    buf[*o] = '\0';
}

enum { SKIP, PLUMBING, BOUNDARY, MEANINGFUL };

static int classify(const struct om_dframe *f, char *buf, size_t len)
{
    if (!f->function || (f->file && !f->module))
        return SKIP; /* unnamed, or a Python source frame */
    const char *s = om_cxx_short(f->function, buf, len);
    if (om_name_is_plumbing(s))
        return PLUMBING;
    return is_boundary(s) ? BOUNDARY : MEANINGFUL;
}

/* The frame a site is named by (where), the outermost meaningful frame inside the first
 * boundary (entry), the innermost user Python frame (py); n for none. *meaningful is false
 * when no meaningful native frame was found (where is plumbing or a boundary). */
static void pick(const struct om_dframe *f, size_t n, size_t *wherep, size_t *entryp, size_t *pyp,
                 bool *meaningful)
{
    char a[512];
    size_t where = n, entry = n, plumb = n, py = n, outside = n, bound = n;
    bool inside = true;
    for (size_t k = 0; k < n; k++) {
        int c = classify(&f[k], a, sizeof a);
        if (c == BOUNDARY && bound == n)
            bound = k;
        inside &= c != BOUNDARY;
        if (!inside) {
            if (c == MEANINGFUL && outside == n)
                outside = k;
        } else if (c == PLUMBING && where == n) {
            plumb = k;
        } else if (c == MEANINGFUL && where == n) {
            where = k;
        } else if (c == MEANINGFUL) {
            entry = k;
        }
    }
    for (size_t k = 0; k < n && py == n; k++)
        if (user_python(&f[k]))
            py = k;
    /* Nothing meaningful inside the first boundary: the innermost meaningful frame past it,
     * else the outermost of several plumbing frames (the nearest to what asked, a PyTorch op
     * often), else the boundary (main, an interpreter's frame), else the innermost frame. */
    *meaningful = where < n || outside < n;
    if (where == n)
        where = outside < n                  ? outside
                : plumb < n && plumb > 0     ? plumb
                : bound < n && f[0].function ? bound
                                             : 0;
    *wherep = where;
    *entryp = entry;
    *pyp = py;
}

size_t om_site_where(struct om_symbolizer *sym, const struct om_rsite *site)
{
    const struct om_dframe *f;
    size_t n, where, entry, py;
    bool meaningful;
    if (om_sym_site(sym, site, &f, &n) != 0 || n == 0)
        return 0;
    pick(f, n, &where, &entry, &py, &meaningful);
    return where;
}

const char *om_site_name(struct om_symbolizer *sym, const struct om_rsite *site, bool full,
                         char *buf, size_t len)
{
    const struct om_dframe *f;
    size_t n;
    if (len == 0)
        return buf;
    buf[0] = '\0';
    if (om_sym_site(sym, site, &f, &n) != 0 || n == 0)
        return "?";
    char a[512], b[512];
    size_t where, entry, py;
    bool meaningful;
    pick(f, n, &where, &entry, &py, &meaningful);
    size_t o = 0;
    if (where == py) { /* a Python frame of the user's own: it says it all */
        append_python(buf, len, &o, &f[py]);
        return buf;
    }
    const char *w = full || !f[where].function ? om_frame_name(&f[where], full, a, sizeof a)
                                               : leaf(om_cxx_short(f[where].function, a, sizeof a));
    /* Nothing meaningful among the native frames, and the frame chosen says nothing of what
     * the memory is for: an unnamed frame (an extension without symbols, numpy's) or an op
     * that only makes an empty tensor (a kernel whose own frames have no symbols, torch.empty
     * in a module's __init__). The innermost Python frame that asked names the site instead
     * (a library's, before the user's line: batch_norm, a Conv2d's __init__, numpy's hstack;
     * or the user's own line alone), skipping generated code (<__array_function__
     * internals>). An op that computes (cat, randn) keeps its name. */
    const char *op = f[where].function ? leaf(om_cxx_short(f[where].function, b, sizeof b)) : "";
    bool vague =
        !f[where].function || strncmp(op, "empty", 5) == 0 || strncmp(op, "resize", 6) == 0;
    size_t lib = n;
    for (size_t k = 0; k < n && lib == n && !meaningful && vague; k++)
        if (f[k].file && !f[k].module && f[k].file[0] != '<')
            lib = k;
    if (lib < n && lib == py) {
        append_python(buf, len, &o, &f[py]);
        return buf;
    }
    if (lib < n) {
        append_python(buf, len, &o, &f[lib]);
        if (py < n) {
            append(buf, len, &o, " \xe2\x86\x90 ");
            append_python(buf, len, &o, &f[py]);
        }
        return buf;
    }
    append(buf, len, &o, w);
    if (py < n) {
        append(buf, len, &o, " \xe2\x86\x90 ");
        append_python(buf, len, &o, &f[py]);
    } else if (entry < n) {
        const char *e = full ? om_frame_name(&f[entry], full, b, sizeof b)
                             : leaf(om_cxx_short(f[entry].function, b, sizeof b));
        if (strcmp(e, w) != 0) {
            append(buf, len, &o, " \xe2\x86\x90 ");
            append(buf, len, &o, e);
        }
    }
    return buf;
}
