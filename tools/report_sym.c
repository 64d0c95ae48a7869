/* optmem report: turns a report's module+offset frames into functions, files, lines and
 * inlined frames with elfutils' libdw, reading local files only. */
#include "om_common.h"
#include "report.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct module {
    char *path;
    Dwfl *dwfl; /* NULL: the file is missing or not ELF; frames then show module+offset */
    Dwfl_Module *mod;
    Dwarf_Addr bias;
};

/* A resolved frame, or a resolved site (key.site set): both cached, since ranks and sites
 * share most frames. */
struct entry {
    const char *module;
    uint64_t offset;
    const struct om_rsite *site;
    struct om_dframe *frames;
    size_t n;
};

struct om_symbolizer {
    bool symbolize;
    char **owned; /* demangled names */
    size_t nowned;
    struct module *mods;
    size_t nmods;
    struct entry *tab;
    size_t cap, used;
};

static char *debuginfo_path;
static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

int om_sym_open(bool symbolize, struct om_symbolizer **out)
{
    struct om_symbolizer *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->symbolize = symbolize;
    s->cap = 1024;
    s->tab = calloc(s->cap, sizeof *s->tab);
    if (!s->tab) {
        free(s);
        return -ENOMEM;
    }
    /* A report is read where it was made, or next to the binaries: asking a debuginfod
     * server would make rendering slow and dependent on the network. */
    if (symbolize)
        unsetenv("DEBUGINFOD_URLS");
    *out = s;
    return 0;
}

void om_sym_close(struct om_symbolizer *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->cap; i++)
        free(s->tab[i].frames);
    for (size_t i = 0; i < s->nmods; i++) {
        if (s->mods[i].dwfl)
            dwfl_end(s->mods[i].dwfl);
        free(s->mods[i].path);
    }
    for (size_t i = 0; i < s->nowned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s->mods);
    free(s->tab);
    free(s);
}

static uint64_t hash(const char *module, uint64_t offset, const struct om_rsite *site)
{
    uint64_t h = OM_FNV_OFFSET ^ offset ^ (uint64_t)(uintptr_t)site;
    return om_fnv1a_str(h, module ? module : "") * 0x9e3779b97f4a7c15ull;
}

static bool same(const struct entry *e, const char *module, uint64_t offset,
                 const struct om_rsite *site)
{
    if (e->site || site)
        return e->site == site;
    return e->offset == offset && strcmp(e->module ? e->module : "", module ? module : "") == 0;
}

static struct entry *slot(struct om_symbolizer *s, const char *module, uint64_t offset,
                          const struct om_rsite *site)
{
    size_t i = hash(module, offset, site) & (s->cap - 1);
    while (s->tab[i].frames && !same(&s->tab[i], module, offset, site))
        i = (i + 1) & (s->cap - 1);
    return &s->tab[i];
}

static int insert(struct om_symbolizer *s, struct entry e)
{
    if (2 * (s->used + 1) > s->cap) {
        struct entry *old = s->tab;
        size_t oldcap = s->cap;
        s->tab = calloc(2 * oldcap, sizeof *s->tab);
        if (!s->tab) {
            s->tab = old;
            return -ENOMEM;
        }
        s->cap = 2 * oldcap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].frames)
                *slot(s, old[i].module, old[i].offset, old[i].site) = old[i];
        free(old);
    }
    *slot(s, e.module, e.offset, e.site) = e;
    s->used++;
    return 0;
}

static struct module *module_of(struct om_symbolizer *s, const char *path)
{
    for (size_t i = 0; i < s->nmods; i++)
        if (strcmp(s->mods[i].path, path) == 0)
            return &s->mods[i];
    struct module *grown = realloc(s->mods, (s->nmods + 1) * sizeof *grown);
    if (!grown)
        return NULL;
    s->mods = grown;
    struct module *m = &s->mods[s->nmods];
    *m = (struct module){.path = strdup(path)};
    if (!m->path)
        return NULL;
    s->nmods++;
    /* One Dwfl per module: each is reported offline at its own link-time addresses. */
    m->dwfl = dwfl_begin(&callbacks);
    if (m->dwfl) {
        m->mod = dwfl_report_offline(m->dwfl, path, path, -1);
        dwfl_report_end(m->dwfl, NULL, NULL);
        if (!m->mod || !dwfl_module_getelf(m->mod, &m->bias)) {
            dwfl_end(m->dwfl);
            m->dwfl = NULL;
        }
    }
    return m;
}

/* libstdc++'s demangler: C++ frames (PyTorch) are unreadable mangled. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

static const char *demangle(struct om_symbolizer *s, const char *name)
{
    if (!name || strncmp(name, "_Z", 2) != 0)
        return name;
    int status = 0;
    char *plain = __cxa_demangle(name, NULL, NULL, &status);
    char **grown = plain ? realloc(s->owned, (s->nowned + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(plain);
        return name;
    }
    s->owned = grown;
    s->owned[s->nowned++] = plain;
    return plain;
}

static int push(struct om_symbolizer *s, struct entry *e, const char *function, const char *file,
                int line, bool inlined)
{
    function = demangle(s, function);
    struct om_dframe *grown = realloc(e->frames, (e->n + 1) * sizeof *grown);
    if (!grown)
        return -ENOMEM;
    e->frames = grown;
    e->frames[e->n++] = (struct om_dframe){.function = function,
                                           .file = file,
                                           .line = line > 0 ? (unsigned)line : 0,
                                           .inlined = inlined,
                                           .module = e->module,
                                           .offset = e->offset};
    return 0;
}

static const char *die_name(Dwarf_Die *die)
{
    Dwarf_Attribute attr;
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    return name ? name : dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
}

/* Walks the scopes at pc from the innermost inlined body out to its subprogram: each
 * inlined body is located by the call_file/call_line of the scope inside it. */
static int resolve_dwarf(struct om_symbolizer *s, struct entry *e, Dwfl_Module *mod, Dwarf_Addr pc,
                         const char *symbol)
{
    const char *file = NULL;
    int line = 0;
    Dwarf_Addr cubias;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, &cubias);
    /* Without a unit that covers pc, the nearest line row belongs to other code (_start). */
    Dwfl_Line *src = cu ? dwfl_module_getsrc(mod, pc) : NULL;
    if (src)
        file = dwfl_lineinfo(src, NULL, &line, NULL, NULL, NULL);
    Dwarf_Die *scopes = NULL;
    int n = cu ? dwarf_getscopes(cu, pc - cubias, &scopes) : 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (cu && dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
        files = NULL;
    int rc = 0;
    bool outer = false;
    for (int i = 0; i < n && rc == 0 && !outer; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
            continue;
        outer = tag == DW_TAG_subprogram;
        const char *name = die_name(&scopes[i]);
        rc = push(s, e, outer && !name ? symbol : name, file, line, !outer);
        Dwarf_Attribute attr;
        Dwarf_Word cf = 0, cl = 0;
        if (!outer) {
            dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &cf);
            dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &cl);
            file = files && cf < nfiles ? dwarf_filesrc(files, cf, NULL, NULL) : NULL;
            line = (int)cl;
        }
    }
    free(scopes);
    if (rc == 0 && !outer)
        rc = push(s, e, symbol, file, line, false);
    return rc;
}

static int resolve(struct om_symbolizer *s, const struct om_rframe *f, struct entry *e)
{
    *e = (struct entry){.module = f->module, .offset = f->offset};
    if (!f->module || f->offset == OM_NO_VALUE) {
        e->offset = f->address;
        e->module = NULL;
        return push(s, e, f->function, f->file, f->file ? (int)f->line : 0, false);
    }
    struct module *m = s->symbolize ? module_of(s, f->module) : NULL;
    if (!m || !m->dwfl)
        return push(s, e, f->function, NULL, 0, false);
    /* Frames are return addresses: the call is the byte before. */
    Dwarf_Addr pc = f->offset + m->bias - (f->offset > 0);
    const char *symbol = dwfl_module_addrname(m->mod, pc);
    return resolve_dwarf(s, e, m->mod, pc, symbol ? symbol : f->function);
}

static int frame_of(struct om_symbolizer *s, const struct om_rframe *f, const struct entry **out)
{
    /* Keyed as resolve() stores it: a frame without a module offset goes by address. */
    int by_module = f->module && f->offset != OM_NO_VALUE;
    const char *module = by_module ? f->module : NULL;
    uint64_t key = by_module ? f->offset : f->address;
    struct entry *e = slot(s, module, key, NULL);
    if (!e->frames) {
        struct entry fresh;
        int rc = resolve(s, f, &fresh);
        if (rc == 0)
            rc = insert(s, fresh);
        if (rc != 0) {
            free(fresh.frames);
            return rc;
        }
        e = slot(s, module, key, NULL);
    }
    *out = e;
    return 0;
}

int om_sym_site(struct om_symbolizer *s, const struct om_rsite *site, const struct om_dframe **out,
                size_t *n)
{
    struct entry *e = slot(s, NULL, 0, site);
    if (!e->frames) {
        struct entry fresh = {.site = site};
        int rc = 0;
        for (size_t i = 0; i < site->nframes && rc == 0; i++) {
            const struct entry *fe;
            rc = frame_of(s, &site->frames[i], &fe);
            struct om_dframe *grown =
                rc ? NULL : realloc(fresh.frames, (fresh.n + fe->n + 1) * sizeof *grown);
            if (!grown) {
                rc = rc ? rc : -ENOMEM;
                break;
            }
            fresh.frames = grown;
            memcpy(fresh.frames + fresh.n, fe->frames, fe->n * sizeof *grown);
            fresh.n += fe->n;
        }
        if (rc == 0 && !fresh.frames)
            fresh.frames = calloc(1, sizeof *fresh.frames); /* a site without frames */
        if (rc == 0 && !fresh.frames)
            rc = -ENOMEM;
        if (rc == 0)
            rc = insert(s, fresh);
        if (rc != 0) {
            free(fresh.frames);
            return rc;
        }
        e = slot(s, NULL, 0, site);
    }
    *out = e->frames;
    *n = e->n;
    return 0;
}

const char *om_dframe_label(const struct om_dframe *f, char *buf, size_t len)
{
    if (f->function)
        return f->function;
    if (!f->module) {
        snprintf(buf, len, "0x%llx", (unsigned long long)f->offset);
        return buf;
    }
    const char *base = strrchr(f->module, '/');
    snprintf(buf, len, "%s+0x%llx", base ? base + 1 : f->module, (unsigned long long)f->offset);
    return buf;
}
