/* The tracer's internal interfaces: memory, interning, period detection, JSON, report. */
#ifndef OPTMEM_TRACER_INTERNAL_H
#define OPTMEM_TRACER_INTERNAL_H

#include "om_common.h"
#include "tracer.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* uthash allocates its tables through the tracer's own memory, and survives running out. */
#define uthash_malloc(sz) om_sys_alloc(sz)
#define uthash_free(ptr, sz) om_sys_free(ptr, sz)
#define HASH_NONFATAL_OOM 1

/* uthash's default (Jenkins, a byte at a time) was most of interning a call site, a hash of
 * 8-byte return addresses per request: this one takes a word at a time. */
static inline unsigned om_hash_bytes(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len, w;
    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    if (len) {
        w = 0;
        memcpy(&w, p, len);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    h ^= h >> 29;
    h *= 0xc4ceb9fe1a85ec53ull;
    return (unsigned)(h ^ (h >> 32));
}
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = om_hash_bytes((keyptr), (size_t)(keylen)))
#include <uthash.h>

/* ---- sysmem.c: memory that never comes from malloc (the interposed path) ---- */

/* Small objects come from size-class free lists carved out of mmap'd chunks; larger ones
 * are mmap'd directly. Thread safe; contents are zeroed. */
void *om_sys_alloc(size_t size);
void om_sys_free(void *ptr, size_t size);
void om_sys_lock(void);
void om_sys_unlock(void);
void om_sys_reset_lock(void);
/* Open-addressing tables that readers probe without a lock (caches of what the stack walks
 * learnt): a table starts small and is replaced, under its owner's lock, by one of twice the
 * slots, published whole with its mask, so a short program maps what it uses. A replaced
 * table is never unmapped, since a reader may still be probing it: together the old ones are
 * smaller than the current one. A slot is empty while its first word is 0; the entries
 * follow the header, 8-byte aligned. */
struct om_table {
    uint32_t mask; /* slots - 1 */
    uint32_t used; /* entries kept, maintained by the owner */
};
#define OM_TABLE_SLOTS(type, table) ((type *)(void *)((struct om_table *)(table) + 1))
/* A table of slots (a power of two) entries of entry bytes, a multiple of 8; NULL when out
 * of memory. */
struct om_table *om_table_new(uint32_t slots, size_t entry);
/* A table of twice t's slots holding t's entries, each at the first free slot of the probes
 * from home(entry) (masked): NULL when out of memory. An entry that finds no free slot among
 * its probes is left out (a cache can always learn it again); used counts those kept. The
 * entries are read a word at a time with relaxed atomic loads, so that a word another
 * thread changes without the owner's lock is read whole (the caller then publishes the
 * table and reconciles such changes). */
struct om_table *om_table_grow(const struct om_table *t, size_t entry, unsigned probes,
                               uint32_t (*home)(const void *entry));
/* An index of ids by a 32-bit hash of what each names, for tables looked up under their
 * owner's lock: open addressing over 64-bit slots, (hash << 32) | (id + 1), 0 for an empty
 * slot, from 1024 slots doubled whenever half used. A lookup compares hashes in that one
 * array and reads only the entries whose hash matches, where uthash's chains read every
 * entry of a bucket, each in a cache line of its own. Zeroed: empty. */
struct om_id_index {
    uint64_t *slots;
    uint32_t nslots, used;
};
/* Records id under hash: 0, or -ENOMEM. */
int om_id_index_add(struct om_id_index *ix, uint32_t hash, uint32_t id);
/* The ids recorded under hash, one a call, *pos starting at 0: id + 1, 0 when no more. */
static inline uint32_t om_id_index_next(const struct om_id_index *ix, uint32_t hash, uint32_t *pos)
{
    for (; ix->slots; (*pos)++) {
        uint64_t v = ix->slots[(hash + *pos) & (ix->nslots - 1)];
        if (v == 0)
            return 0;
        if ((uint32_t)(v >> 32) == hash) {
            (*pos)++;
            return (uint32_t)v;
        }
    }
    return 0;
}
/* open(2), close-on-exec, the descriptor moved near the top of the process's range so that
 * it never takes a number the program is about to get. The descriptor or -errno. */
int om_sys_open(const char *path, int flags, mode_t mode);
/* Reads up to cap bytes of a small file (/proc); returns the length, 0 on failure. */
size_t om_sys_read_file(const char *path, char *buf, size_t cap);

/* ---- unwind_pages.c ---- */

/* Walking a stack reads the .eh_frame_hdr and .eh_frame of the modules its frames lie in,
 * and the kernel maps 64 KiB around each page read: megabytes of resident file pages that
 * the call-site cache makes useless afterwards (walks are rare). This drops those modules'
 * from the process (the page cache keeps them), in read-only segments only, so a later
 * read just maps them again. Called after each walk. */
void om_unwind_pages_drop(const struct om_stack *stack);

/* ---- stacks.c: call sites ---- */

/* Per-lifetime-category tallies; the category of a lifetime is decided by how many
 * iteration boundaries it crosses. */
enum om_category { OM_CAT_TEMPORARY = 0, OM_CAT_PER_ITERATION = 1, OM_CAT_PERSISTENT = 2 };
#define OM_CAT_COUNT 3
const char *om_category_name(int category);

/* Strings kept for the process's life, one copy of each: a table's head starts NULL. */
struct om_text {
    UT_hash_handle hh;
    char text[];
};
/* s's copy in *table, added when new (under the caller's lock); NULL when out of memory. */
const char *om_text_intern(struct om_text **table, const char *s);

struct om_frame_info {
    const char *module;   /* interned path, NULL when unknown */
    uintptr_t offset;     /* from the module's load base */
    const char *function; /* NULL when dladdr does not know it */
};

/* What a birth writes first, then what a death adds, then the key (read at interning only):
 * a birth touches two lines (docs/serving.md, "Lines a request touches"). */
struct om_site {
    uint32_t id;
    uint32_t depth;
    uint64_t count, total_bytes;
    uint64_t min_size, max_size;
    uint64_t live_blocks, live_bytes;
    uint64_t last_seq; /* the request number of its latest request */
    /* The live bytes at the peak, kept lazily: see om_site_touch. */
    uint64_t mod_event, snap_for, snap_bytes, snap_blocks;
    uint64_t freed; /* completed lifetimes behind the sums below */
    uint64_t life_req_min, life_req_max, life_req_sum;
    uint64_t life_ns_min, life_ns_max, life_ns_sum;
    uint64_t cat_bytes[OM_CAT_COUNT]; /* completed lifetimes by category */
    void **frames;     /* depth native frames, then the Python stack's id: the interning key */
    uint32_t py_stack; /* the calling thread's Python stack (om_py_stack), 0: none */
    /* A fold (om_sites_fold): the sites folded into it (since a fork, in a child), and its
     * innermost Python frame's id + 1 (0: none); its frames are their innermost ones. */
    uint32_t fold, nfolded, py_top;
};

struct om_site_block; /* stacks.c */

struct om_sites {
    struct om_id_index index; /* by the hash of the frames */
    struct om_id_index folds; /* the folds, by the hash of their innermost frames */
    /* Append-only: a folded site's id names its fold from then on (by_id[id]->id != id),
     * so that the records and the ids handed out (om_alloc_info.site) that name it stay
     * valid. */
    struct om_site **by_id;
    /* By id, a 64-bit hash of the site's stack: the iteration detector's token, which its
     * folding leaves as it was (and the site's stack seen again after it was folded, as a
     * new site, has again). */
    uint64_t *hashes;
    uint32_t count, capacity;
    /* The records of the sites and folds (with their keys), in blocks of their own: folded
     * sites leave dead bytes there, and once they outweigh the live ones the records still
     * named are moved into one new block and the old ones unmapped (moves counts that). */
    struct om_site_block *blocks;
    uint64_t live_bytes, dead_bytes;
    uint32_t moves;
};

/* Finds or adds the call site of stack. NULL when out of memory. */
struct om_site *om_sites_intern(struct om_sites *sites, const struct om_stack *stack);
/* Folds each call site that foldable(site, ctx) accepts (never a fold, never one already
 * folded) into the fold of its innermost frames (the native frames up to the innermost
 * Python frame's eval loop, at most OM_FOLD_FRAMES, and that Python frame), made when
 * new: the fold takes its counters (they add up exactly), its id comes to name the fold,
 * and its record and frames are given up. foldable must accept only sites without live
 * blocks. Where the records still named get moved (see om_sites.blocks), relink(ctx) is
 * called before the old ones are unmapped: whatever holds a record p must take
 * by_id[p->id] instead. The sites folded, or -ENOMEM (those folded until then stay
 * folded). */
#define OM_FOLD_FRAMES 8
int om_sites_fold(struct om_sites *sites, int (*foldable)(const struct om_site *s, void *ctx),
                  void (*relink)(void *ctx), void *ctx);
/* The same in steps, each under the caller's lock, which may be let go between them (a
 * report checkpoint holds it for a slice at a time): a fold pass in slices that each
 * examine at most OM_FOLD_EXAMINE ids and fold at most OM_FOLD_SLICE sites, then, where the
 * dead records outweigh the live ones, a move of the live ones (om_sites_move_*). */
#define OM_FOLD_EXAMINE 2048u
#define OM_FOLD_SLICE 128u
#define OM_MOVE_SLICE 256u
struct om_fold_pass {
    uint32_t next, end; /* the next id to examine; the count when the pass began */
    uint32_t folded;    /* sites the last slice folded */
};
void om_fold_pass_begin(const struct om_sites *sites, struct om_fold_pass *pass);
/* 1 when the pass is done, 0 when ids remain, -ENOMEM (the sites folded stay folded). A site
 * that the slice that examined it did not fold is left to the next pass. */
int om_sites_fold_slice(struct om_sites *sites, struct om_fold_pass *pass,
                        int (*foldable)(const struct om_site *s, void *ctx), void *ctx);
struct om_sites_move {
    struct om_site_block *old, *fresh; /* the blocks given up; the one the copies go to */
    size_t want;                       /* the live bytes of old: fresh's size */
    uint64_t dead;
    uint32_t next, end; /* the next id to copy; the count at begin (ids above are not moved) */
    uint32_t copied;    /* records the last slice (or finish) copied */
};
/* Under the lock: 1 where a move is due, the blocks then taken from the sites (new records
 * go into new blocks); 0 where none is. */
int om_sites_move_begin(struct om_sites *sites, struct om_sites_move *m);
/* Outside the lock: maps the block for the copies. 0 or -ENOMEM (finish then gives up). */
int om_sites_move_map(struct om_sites_move *m);
/* Under the lock: copies at most OM_MOVE_SLICE records; 1 once all are copied, else 0. */
int om_sites_move_slice(struct om_sites *sites, struct om_sites_move *m);
/* Under the lock, once the slices are done: copies again the records changed since their copy
 * (their mod_event differs), makes by_id name the copies and calls relink(ctx), as
 * om_sites_fold does; or, with no copies, gives the old blocks back (-ENOMEM). 0 or -ENOMEM. */
int om_sites_move_finish(struct om_sites *sites, struct om_sites_move *m, void (*relink)(void *ctx),
                         void *ctx);
/* Outside the lock, after finish: unmaps the blocks given up. */
void om_sites_move_end(struct om_sites_move *m);
/* The top (highest address, exclusive) of the calling thread's stack, 0 when unknown. */
uintptr_t om_stack_top(void);
/* Drops the frames that lie in this library (the tracer and whatever links it). */
void om_stack_trim_self(struct om_stack *stack);
/* Records which address range is "this library" (the module containing self) and makes
 * libunwind's first unwind. */
void om_stack_init(const void *self);
/* Resolves the module and offset of n return addresses where info[i].module is NULL (one scan
 * of the loaded modules) and, with names, their functions where info[i].function is NULL:
 * dladdr takes the loader's lock and reads the modules' symbol tables (pages the program
 * then has resident), so never call it under the tracer's lock. Checkpoints go without
 * names: `optmem report` finds functions from module and offset. */
void om_frames_symbolize(const uintptr_t *addresses, struct om_frame_info *info, uint32_t n,
                         int with_names);

/* ---- pyframes.c: Python frames of call sites ---- */

#define OM_PY_NONE UINT32_MAX       /* not a frame: the walk ends */
#define OM_PY_SKIP (UINT32_MAX - 1) /* a frame that has not started: left out */

/* Finds a supported CPython in the process (its symbols, by name: nothing is loaded) and
 * the layout of its frames; without one, om_py_capture returns 0 at once. */
void om_py_init(void);
/* The calling thread's Python stack, up to cap frames, as an id of the table of stacks (0:
 * no Python frames). Takes no lock on the common path (a code object's first sight at an
 * instruction, or a stack not seen before, takes the table's), never allocates through
 * malloc, and reads memory it has not seen before through process_vm_readv, so that a
 * broken frame ends the walk, not the process. */
uint32_t om_py_capture(unsigned cap);
/* A stack's frames, innermost first: frame ids shifted left by one, bit 0 set where the
 * frame was entered from C (the outermost of a run of the eval loop). 0 or -ENOENT. */
int om_py_stack(uint32_t stack, const uint32_t **frames, unsigned *n);
/* What frame id names; 0 or -ENOENT. */
int om_py_frame(uint32_t id, const char **file, const char **function, uint32_t *line);
/* Where the calling thread's Python code is, in a word: its current frame and that frame's
 * instruction, read in place (a few loads); *key 0 for a thread that runs no Python. -1
 * where it cannot be read cheaply (the layout not checked yet, or a current frame that the
 * thread's last walk did not read in place): the caller walks. */
int om_py_cheap_key(uint64_t *key);
/* Whether a return address lies in CPython's eval loop (one run of Python frames). */
int om_py_is_eval(uintptr_t address);
void om_py_atfork_prepare(void);
void om_py_atfork_parent(void);
void om_py_atfork_child(void);

/* ---- period.c: iteration detection over a token stream ---- */

#define OM_PERIOD_HISTORY (1u << 16) /* tokens kept; periods up to half of it are found */
#define OM_PERIOD_KGRAM 4
#define OM_PERIOD_KGRAM_SLOTS (1u << 14)
#define OM_PERIOD_CANDIDATES 8
#define OM_PERIOD_MIN_EVIDENCE 32 /* tokens a repeat must cover before it is believed */

struct om_period_candidate {
    uint64_t p;
    uint64_t created;    /* stream index of the first comparison */
    uint64_t mismatch;   /* mismatches among the last p comparisons */
    uint64_t unbalanced; /* comparisons among the last p where live bytes moved */
};

/* One token of the history. A push writes all four and a comparison reads the token with
 * the live and born bytes beside it, so they share a line (four arrays took four lines a
 * request: docs/serving.md, "Lines a request touches"). */
struct om_period_entry {
    uint64_t token;
    uint64_t tag;  /* a caller value per token (the global sequence number) */
    uint64_t live; /* the stream's live bytes once the token's request was made */
    uint64_t born; /* bytes requested by the stream up to and including the token */
};

/* Read and written by every push first, then the candidates, which only a few are. */
struct om_period {
    uint64_t n; /* tokens seen */
    uint64_t born_total;
    unsigned ncand;
    /* The locked period: iterations start at s0 + k p in stream indices. */
    uint64_t p, s0, next_start;
    struct om_period_entry *hist; /* by stream index modulo OM_PERIOD_HISTORY */
    uint64_t *kgram_last;         /* stream index + 1 of the last k-gram with this hash */
    uint64_t locks;               /* how many times a period was locked */
    struct om_period_candidate cand[OM_PERIOD_CANDIDATES];
};

/* How an iteration start was found: the first steady iteration of a newly locked period
 * (earlier starts at or after it are void), a later one found after the fact, or one
 * seen as it happens. */
enum om_start_kind { OM_START_LOCK, OM_START_RETRO, OM_START_LIVE };

/* Called for each iteration start, in order, with the tag of the token that begins it. */
typedef void (*om_period_start_fn)(void *ctx, uint64_t tag, int kind);

/* Storage from om_sys_map; returns 0 or -ENOMEM. */
int om_period_init(struct om_period *d);
void om_period_reset(struct om_period *d);
void om_period_unmap(struct om_period *d);
/* Adds one token: its request of size bytes left the stream's blocks holding live bytes
 * (what the stream's requests hold, whoever frees them). Calls on_start for each
 * iteration start it establishes. */
void om_period_push(struct om_period *d, uint64_t token, uint64_t tag, uint64_t live, uint64_t size,
                    om_period_start_fn on_start, void *ctx);
/* Tokens up to the last one pushed that repeat with the locked period, the first steady
 * iteration's included; 0 while no period is locked. */
uint64_t om_period_covered(const struct om_period *d);

/* Which thread's requests feed the detector: the one that makes most of them. */
#define OM_THREADS 64 /* threads whose requests are counted */
/* The one sequence of a device domain's requests, whichever thread makes them (no thread
 * has this id: Linux's thread ids stay below 2^22). */
#define OM_ALL_THREADS UINT32_MAX
/* The detector's thread may change at a request whose count is a multiple of this. */
#define OM_THREADS_CHECK 4096u
struct om_threads {
    uint32_t det_tid;
    uint64_t total, switches;
    struct {
        uint32_t tid;
        uint64_t count;
    } t[OM_THREADS];
};

/* Counts a request of thread tid; returns 1 when the detector thread changed (the caller
 * restarts detection on the new thread's stream). */
int om_threads_note(struct om_threads *t, uint32_t tid);

/* ---- iteration accounting: categories of one iteration, incrementally ---- */

struct om_iter_acct {
    uint64_t iter_no; /* boundaries seen */
    uint64_t live_bytes, live_blocks;
    /* The iteration in progress. */
    uint64_t start_seq, start_live_bytes, start_live_blocks;
    uint64_t born_bytes, born_blocks, temp_bytes, temp_blocks;
    uint64_t old_died_bytes, old_died_blocks, peak_live;
    int partial; /* the iteration in progress began mid-way (after a period locked) */
    /* The last complete iteration. */
    int have_last;
    uint64_t last_start, last_end, last_peak;
    uint64_t last_bytes[OM_CAT_COUNT], last_blocks[OM_CAT_COUNT];
};

void om_acct_birth(struct om_iter_acct *a, uint64_t size);
/* birth_iter: a->iter_no when the block was born. Returns the block's category. */
int om_acct_death(struct om_iter_acct *a, uint64_t size, uint64_t birth_iter);
void om_acct_boundary(struct om_iter_acct *a, uint64_t seq);
void om_acct_restart(struct om_iter_acct *a, uint64_t seq);

/* ---- json.c: a buffered JSON writer to a file descriptor, without malloc ---- */

struct om_json {
    int fd;
    int err; /* first -errno */
    size_t len, cap;
    char *buf;
    int need_comma;
};

void om_json_init(struct om_json *w, int fd, char *buf, size_t cap);
int om_json_flush(struct om_json *w);
void om_json_raw(struct om_json *w, const char *s, size_t n);
void om_json_begin(struct om_json *w, char bracket); /* '{' or '[' */
void om_json_end(struct om_json *w, char bracket);
void om_json_key(struct om_json *w, const char *key);
void om_json_str(struct om_json *w, const char *s); /* NULL writes null */
void om_json_strn(struct om_json *w, const char *s, size_t n);
void om_json_u64(struct om_json *w, uint64_t v);
void om_json_i64(struct om_json *w, int64_t v);
void om_json_null(struct om_json *w);
void om_json_bool(struct om_json *w, int v);
void om_json_hex(struct om_json *w, uint64_t v);                   /* "0x..." as a string */
void om_json_ratio(struct om_json *w, uint64_t num, uint64_t den); /* 3 decimals */

/* ---- tracer.c: the state behind the API ---- */

/* Lifetimes of the most recent requests: several whole iterations of a training step (the
 * bundled transformer's is 1885 requests), in 1 MiB that fills as requests come. */
#define OM_SAMPLE_RECORDS (1u << 14)
#define OM_STARTS 4096           /* most recent iteration starts */
#define OM_MARKS 4096            /* most recent optmem_step() marks */
#define OM_OLD_DEATHS (1u << 14) /* most recent deaths of blocks older than the sample ring */
#define OM_TIMELINE 512          /* points of the whole-run live-bytes curve */

/* A live managed block. */
struct om_live {
    uintptr_t ptr; /* 0: empty slot */
    uint64_t size, usable, alignment;
    uint64_t birth_seq, birth_ns, birth_iter;
    struct om_site *site;
    uint32_t tid; /* the sequence it joined: a thread's id, or OM_ALL_THREADS */
};

/* One request of the sample ring, by birth sequence number modulo OM_SAMPLE_RECORDS. */
struct om_record {
    uint64_t birth_seq, size, death_seq, birth_ns, death_ns, live_after;
    uintptr_t ptr;
    uint32_t site, tid;
};

/* The death of a block whose record had left the sample ring: the report's "resident"
 * section needs the blocks live at the sample's start that died since (at exit, most). */
struct om_old_death {
    uint64_t birth_seq, death_seq, size;
    uint32_t site;
};

struct om_timeline {
    uint64_t width; /* requests per point, a power of two */
    uint32_t used;
    uint64_t max[OM_TIMELINE];
};

/* What every domain shares: the options and the start of the record. */
/* ---- lineage.c: whose a report is, and which path it takes ---- */

#define OM_LINEAGE_MAX 16

struct om_proc_ref {
    long pid;
    uint64_t start; /* clock ticks after boot: with the pid, names one process for ever */
};

/* A process and its ancestors that run optmem too, nearest first. */
struct om_lineage {
    struct om_proc_ref self;
    struct om_proc_ref up[OM_LINEAGE_MAX];
    unsigned n;
};

/* What a process decided about a shared report path (a template without %p). */
struct om_claim {
    int moved_aside; /* another process of the run holds the path: ours is PATH.PID.EXT */
};

/* Reads this process's lineage from /proc (at start), or derives a fork child's. */
void om_lineage_init(struct om_lineage *lin);
void om_lineage_fork(struct om_lineage *lin);

/* The path this process writes its report to when the template names one file for all
 * processes: path itself, unless another process of the same run wrote a report there that
 * made at least as many managed requests; then PATH.PID.EXT (said once) where this process
 * found iterations, else none (-ENODATA). A report there of fewer requests is first
 * renamed to its own PATH.PID.EXT where its process found iterations, else removed: the
 * same rule, applied in the other order. 0 or -errno. */
int om_report_claim(struct om_claim *claim, const struct om_lineage *me, uint64_t requests,
                    int iterations, const char *path, char *out, size_t outlen);

struct om_tracer_config {
    size_t min_bytes;
    unsigned stack_depth, warmup;
    uint64_t t0_ns; /* read by every request and free, as warmup: in the same line */
    char report_template[4096];
    const char *mode_name;
    struct om_lineage lineage;
    long rank; /* the report's: set under the dump lock as each report begins */
};

#define OM_DOMAIN_NAME 16 /* bytes of a domain's name, with its terminating NUL */

/* ---- the served path's log (tracer.c) ---- */

#define OM_LOG_ENTRIES 1024u /* a power of two */

/* A request (site, its call site's id + 1) or a free (site 0). shape: the size (bits 0-47),
 * usable - size (48-51), and 0 or log2(alignment) + 1 (52-57). */
struct om_log_entry {
    uintptr_t ptr;
    uint64_t ns;
    uint64_t shape;
    uint32_t site, tid;
};

struct om_log {
    /* The appender's line. word: the entries appended (high 32 bits) and, low 32 bits,
     * the births om_threads_note counted or will count once the log is recorded (it may
     * change the detector's thread on every OM_THREADS_CHECK-th, which must be seen at
     * once), changed together by one compare-and-swap so that a birth recorded at once
     * by another thread is counted in the log's order. */
    uint64_t word;
    uint32_t limit; /* appends allowed before head is read again */
    struct om_log_entry *entries;
    /* The recorder's, under the tracer's lock: the entries recorded, and what the last
     * request recorded from the log would have been told of the period. */
    uint32_t head __attribute__((aligned(64)));
    uint64_t last_period, last_periodic;
};

/* One memory domain's record: everything the report shows per domain. */
struct om_domain {
    /* What every request and free reads and writes comes first, in as few lines as it fits
     * (docs/serving.md, "Lines a request touches"). */
    char name[OM_DOMAIN_NAME];
    uint64_t fork_seq; /* requests made before this process forked from its parent */

    uint64_t seq, frees, events;
    uint64_t live_bytes, live_blocks, live_usable;
    uint64_t lower_bound, lower_bound_seq, peak_usable, peak_event;

    struct om_sites sites;
    struct om_live *live;
    uint64_t live_cap, live_used;
    struct om_record *records;
    /* Bytes of the live blocks the detector's thread requested: its balance over a period
     * tells a training step from a layer repeated inside one. Wraps around when the thread
     * changes; only differences are used. */
    uint64_t det_live;
    int start_now; /* the request being recorded begins an iteration */
    struct om_iter_acct acct __attribute__((aligned(64)));

    /* Iterations: detected on one thread's stream, or marked. */
    struct om_period det;
    struct om_threads threads;
    struct om_timeline timeline;
    uint64_t starts[OM_STARTS], nstarts;
    uint64_t first_steady_seq, period_fixed;
    int have_steady;
    struct om_serving_stats serving;
    int have_serving;
    uintptr_t arena_base, arena_size; /* the pool's arena, for offsets in the sample */
    /* Auto: the lock that has covered the most requests is the one reported, so that a
     * stray lock late in the run (teardown) does not replace the steady one. */
    uint64_t lock_first, lock_starts, lock_period;
    uint64_t best_first, best_starts, best_period, best_covered;
    struct om_iter_acct best_acct; /* accounting as of the best lock's last boundary */
    uint64_t marks[OM_MARKS], nmarks;
    struct om_old_death *old_deaths; /* a ring of OM_OLD_DEATHS */
    /* In a report's copy of the domain only (report.c): its "resident" blocks, collected
     * under the lock from the live table, the ring and old_deaths, which it has not. */
    const struct om_resident *resident;
    uint64_t nold_deaths;
    struct om_log log __attribute__((aligned(64)));
};

/* The state of an open domain, NULL for one that is not open. Readers of its counters
 * hold the tracer's lock, or are single-threaded (the unit tests). */
const struct om_domain *om_tracer_domain(unsigned domain);
/* What the latest report (asked, checkpoint or at exit) did under the tracer's lock: how many
 * times it took it, and the most one hold did (ids examined and sites folded by a fold slice,
 * records copied by a slice of the sites' move, records copied again as the move ended, sites
 * copied ahead of the report's copy by a slice). */
struct om_dump_holds {
    uint32_t holds;
    uint32_t most_examined, most_folded, most_moved, most_recopied, most_precopied;
    uint64_t longest_ns;  /* wall clock, the holder's preemptions included */
    uint64_t most_cpu_ns; /* the holder's CPU time */
};
void om_tracer_dump_holds(struct om_dump_holds *out);

/* ---- report.c ---- */

/* What a report of the domains needs, copied (under the tracer's lock, so that the report
 * is of one moment and no allocating thread waits while it is written): out[i] is the copy
 * of domains[i], valid until the next snapshot. 0 or -ENOMEM. Reports are made one at a
 * time (the tracer's dump lock). */
int om_report_snapshot(struct om_domain *const *domains, unsigned n, struct om_domain **out,
                       int can_map);
/* Without can_map, a copy that needs more room than it has returns -EAGAIN, having noted how
 * much: om_report_reserve, called outside the tracer's lock, maps it, and the copy is made
 * again (with can_map: whatever grew meanwhile is mapped under the lock). */
void om_report_reserve(void);
/* Ahead of the copy, once the folds are done, under the lock: copies at most
 * OM_PRECOPY_SLICE of domain di's sites whose counters changed since the last copy, so that
 * the copy copies again only those changed since the first slice. pc starts zeroed. 1 when all
 * are copied, 0 when more remain, -EAGAIN where room must be made first (om_report_reserve,
 * outside the lock; the slice is taken again after). */
#define OM_PRECOPY_SLICE 512u
struct om_precopy {
    uint32_t next, end, k; /* the next id, the count at the first slice, the next place */
    uint32_t had;          /* places that hold a copy made before */
    uint64_t events, copied_at;
    uint32_t copied; /* sites the last slice copied */
};
int om_report_precopy(unsigned di, const struct om_domain *d, struct om_precopy *pc);
/* Maps the report's buffers (the writer's, the host's copy) and faults their pages in, where
 * not done yet. Under the dump lock. */
void om_report_prepare(void);
/* Writes the report of the domains (the host first; copies from om_report_snapshot) to
 * path (already expanded) atomically; their frames' modules are resolved, and with names their
 * functions (om_frames_symbolize: under the dump lock, never the tracer's). */
int om_report_write(const struct om_tracer_config *cfg, struct om_domain *const *domains,
                    unsigned ndomains, const char *path, int with_names);
/* Managed requests this process made (not those a fork parent made), all domains. */
uint64_t om_report_requests(struct om_domain *const *doms, unsigned n);
/* Whether iterations were found (or marked) in any domain. */
int om_report_iterations(struct om_domain *const *doms, unsigned n);

#endif
