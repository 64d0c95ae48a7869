/* optmem report: the loaded form of lifetime reports and the renderers that read it. */
#ifndef OPTMEM_TOOLS_REPORT_H
#define OPTMEM_TOOLS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OM_REPORT_VERSION 3    /* the newest; every version from 1 is read */
#define OM_NO_VALUE UINT64_MAX /* a null in the report */

enum { OM_CAT_TEMPORARY, OM_CAT_PER_ITERATION, OM_CAT_PERSISTENT, OM_NCAT };
extern const char *const om_cat_names[OM_NCAT];

struct om_rframe {
    uint64_t address;
    char *module;    /* NULL when the tracer could not map the address */
    uint64_t offset; /* ELF virtual address in module; OM_NO_VALUE without a module */
    char *function;  /* dladdr's name, or NULL */
    char *file;      /* a source frame (Python, from a PyTorch snapshot): its file, else NULL */
    unsigned line;
};

struct om_rsite {
    uint64_t id;     /* in the report: sites[] holds them ascending (dense before version 3) */
    uint64_t folded; /* a fold (version 3): the call sites folded into it; 0 for a site */
    struct om_rframe *frames; /* innermost first */
    size_t nframes;
    uint64_t count, total_bytes;
    uint64_t cat_bytes[OM_NCAT];
    const char *category; /* one of om_cat_names, or NULL */
};

/* The site of a peak entry, sample record or resident block is its index in om_report.sites
 * (not its id in the report). */
struct om_rpeak {
    uint64_t site, bytes, blocks;
};

/* One sample record; site == OM_NO_VALUE marks a request the tracer could not record. */
struct om_rlife {
    uint64_t site, size, birth, death, birth_ns, death_ns, offset;
};

/* A block live at the sample's first request and born before it ("resident"). */
struct om_rresident {
    uint64_t site, size, birth, death; /* death OM_NO_VALUE: live at the report */
};

struct om_rserving {
    bool present;
    uint64_t serving_requests; /* OM_NO_VALUE in reports that predate it */
    uint64_t hits, misses, served_from_plan, fallbacks, guard_rejections, plans, replans;
    uint64_t reused_plans; /* 0 in reports that predate it */
    uint64_t plan_slots, plan_peak_bytes, plan_lower_bound_bytes, arena_top_bytes;
    uint64_t released_bytes, verify_violations, invalid_frees;
    /* 0 in reports that predate them, and for a saved plan */
    uint64_t plan_greedy_bytes, plan_proven_bound_bytes, plan_time_us, plan_on_thread;
};

struct om_report {
    char *path;
    int64_t pid, ppid, rank;
    /* The ancestors that ran optmem, nearest first (none in reports that predate them). */
    int64_t ancestors[16];
    size_t nancestors;
    char *exe;
    char **argv;
    size_t argc;
    char *mode;
    uint64_t duration_ns, managed_requests, lower_bound, peak_live;
    uint64_t peak_request;
    struct om_rpeak *peak;
    size_t npeak;
    char *method;
    bool found;
    uint64_t period, first_steady; /* OM_NO_VALUE when null */
    bool have_categories;
    uint64_t cat_iter[2], cat_lower_bound, cat_bytes[OM_NCAT], cat_blocks[OM_NCAT];
    struct om_rserving serving;
    struct om_rsite *sites;
    size_t nsites;
    uint64_t sample_first, sample_end;
    bool sample_has_offsets; /* the record layout has an "offset" field */
    struct om_rlife *life;   /* sample_end - sample_first records */
    uint64_t *live_after;
    size_t nlife;
    uint64_t *starts; /* iteration starts inside the sample */
    size_t nstarts;
    uint64_t timeline_first, timeline_width;
    uint64_t *timeline;
    size_t ntimeline;
    /* Reports that predate the section have none (have_resident false). */
    bool have_resident, resident_complete;
    struct om_rresident *resident;
    size_t nresident;
    uint64_t resident_omitted_bytes;
};

/* Loads and validates one report; on failure writes one line naming the file into err. */
int om_report_load(const char *path, struct om_report *r, char *err, size_t errlen);
void om_report_free(struct om_report *r);

/* Expands %p (pid), %r (rank) and %% of an OPTMEM_REPORT template. */
int om_report_path_expand(const char *tmpl, long pid, long rank, char *out, size_t outlen);

/* One displayed frame: a symbolized function (possibly inlined) or module+offset. */
struct om_dframe {
    const char *function; /* NULL: unknown */
    const char *file;     /* NULL: no line information */
    unsigned line;
    bool inlined; /* inlined into the next (outer) frame */
    const char *module;
    uint64_t offset;
};

struct om_symbolizer;
/* With symbolize false, frames show the report's own dladdr names only. */
int om_sym_open(bool symbolize, struct om_symbolizer **out);
void om_sym_close(struct om_symbolizer *s);
/* Frames of a site, innermost first, inlined frames expanded; owned by the symbolizer. */
int om_sym_site(struct om_symbolizer *s, const struct om_rsite *site, const struct om_dframe **out,
                size_t *n);
/* A short label for a frame: function, else basename(module)+0xoffset; into buf. */
const char *om_dframe_label(const struct om_dframe *f, char *buf, size_t len);

/* Names (report_names.c): a C++ name without arguments, templates or return type; whether a
 * shortened name is allocator plumbing; a frame's label, shortened unless full; a site's
 * short name, "where [<- entry]" (docs/report-formats.md, "Names"). */
char *om_cxx_short(const char *in, char *buf, size_t len);
bool om_name_is_plumbing(const char *shortened);
const char *om_frame_name(const struct om_dframe *f, bool full, char *buf, size_t len);
const char *om_site_name(struct om_symbolizer *sym, const struct om_rsite *site, bool full,
                         char *buf, size_t len);
/* The index, in om_sym_site's frames, of the frame a site is named by. */
size_t om_site_where(struct om_symbolizer *sym, const struct om_rsite *site);

/* The inferred breakdown (report_breakdown.c; the rules are docs/report-formats.md's
 * "Breakdown"): one steady iteration's blocks sorted by what they likely are. */
enum {
    OM_BD_PARAMETERS,
    OM_BD_GRADIENTS,
    OM_BD_OPTIMIZER,
    OM_BD_ACTIVATIONS,
    OM_BD_TEMPORARIES,
    OM_BD_OTHER,
    OM_NBD
};
extern const char *const om_bd_keys[OM_NBD];   /* JSON keys: "parameters", ... */
extern const char *const om_bd_labels[OM_NBD]; /* for people: "optimizer state", ... */

struct om_breakdown {
    bool found;
    const char *why;       /* when not found: why, one phrase */
    uint64_t first, end;   /* the iteration: births [first, end), from a low point */
    uint64_t peak_request; /* its highest point: live bytes just after this request */
    uint64_t peak_bytes;   /* live then */
    uint64_t turn_request; /* forward to backward: the first gradient's birth, else the peak */
    uint64_t at_peak[OM_NBD], blocks_at_peak[OM_NBD];
    uint64_t max_live[OM_NBD]; /* each class's own maximum over the iteration */
    uint64_t born[OM_NBD];     /* bytes requested during the iteration */
    bool complete;             /* false: some resident blocks were not in the report */
    bool kept_gradients;       /* gradients live across iterations (set_to_none=False) */
};
extern const char om_bd_letters[OM_NBD]; /* the text bar's: "PGOAT." */
/* Fills b from r; b->found false (and b->why) when r cannot tell. Returns 0 or -ENOMEM. */
int om_breakdown(const struct om_report *r, struct om_breakdown *b);

/* Call sites merged over several reports by their module+offset stack. */
struct om_msite {
    const struct om_rsite *site; /* a representative */
    uint64_t bytes, blocks;      /* live at each process's peak, summed */
    unsigned processes;
};
struct om_merged {
    struct om_report *reports;
    size_t nreports;
    struct om_msite *sites; /* largest first */
    size_t nsites;
    uint64_t peak_live, lower_bound, cat_bytes[OM_NCAT];
};
int om_merge(struct om_report *reports, size_t n, struct om_merged *m);
void om_merged_free(struct om_merged *m);

/* A fraction, or a negative number when the denominator is missing or zero. */
double om_plan_efficiency(const struct om_report *r);
double om_served_fraction(const struct om_report *r);
const char *om_human_bytes(uint64_t bytes, char *buf, size_t len);

struct om_render {
    FILE *out;
    unsigned top;
    size_t max_slices;
    struct om_symbolizer *sym;
    bool full_names; /* frames and site names with argument lists and templates */
};
int om_render_text(const struct om_merged *m, const struct om_render *o);
int om_render_json(const struct om_merged *m, const struct om_render *o);
int om_render_chrome(const struct om_merged *m, const struct om_render *o);
int om_render_folded(const struct om_merged *m, const struct om_render *o);
int om_render_svg(const struct om_merged *m, const struct om_render *o);
int om_render_html(const struct om_merged *m, const struct om_render *o);
/* One process's picture as an <svg> element (shared by svg and html). */
int om_svg_panel(FILE *out, const struct om_report *r, const struct om_render *o, bool standalone);
/* XML/HTML escaping; JSON strings are written through jansson. */
void om_xml_escape(FILE *out, const char *s);

#endif
