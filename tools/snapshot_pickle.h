/* A pickle reader for PyTorch memory snapshots: plain containers only, no class is built. */
#ifndef OPTMEM_TOOLS_SNAPSHOT_PICKLE_H
#define OPTMEM_TOOLS_SNAPSHOT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum om_pv_type {
    OM_PV_NONE,
    OM_PV_BOOL,
    OM_PV_INT,
    OM_PV_FLOAT,
    OM_PV_STR,
    OM_PV_LIST,
    OM_PV_TUPLE,
    OM_PV_DICT,
};

/* One value. Lists and tuples hold n items in v; a dict holds n pairs, key then value, in v.
 * A value may be reachable from several places (the pickle memo), and a hostile file can
 * make a list contain itself: readers follow a fixed schema and never walk the graph. */
struct om_pv {
    enum om_pv_type type;
    union {
        int64_t i; /* INT, BOOL */
        double f;
        struct {
            const char *s; /* valid UTF-8, NUL-terminated */
            size_t len;
        } str;
        struct {
            struct om_pv **v;
            size_t n, cap;
        } seq;
    } u;
};

struct om_pickle_chunk;
/* A parsed file: every value lives in an arena released by om_pickle_free. */
struct om_pickle {
    struct om_pv *root;
    struct om_pickle_chunk *chunks;
    size_t arena_bytes, arena_limit;
};

/* Whether a regular file starts with the PROTO opcode (0x80) of pickle protocols 2 and up. */
bool om_pickle_sniff(const char *path);

/* Parses a pickle from memory / from a file. Opcodes other than the ones that build numbers,
 * strings, lists, tuples and dicts are refused with one line naming the opcode and offset.
 * Memory is bounded by a multiple of the input size. 0, -EINVAL (err set), -ENOMEM, -errno. */
int om_pickle_parse(const uint8_t *buf, size_t len, struct om_pickle *p, char *err, size_t errlen);
int om_pickle_load(const char *path, struct om_pickle *p, char *err, size_t errlen);
void om_pickle_free(struct om_pickle *p);

/* A dict's value for a string key (the last one if repeated), or NULL. */
const struct om_pv *om_pv_get(const struct om_pv *dict, const char *key);
/* The item of a list or tuple, or NULL out of range or for another type. */
const struct om_pv *om_pv_item(const struct om_pv *seq, size_t i);
/* Lengths of a list or tuple, else 0. */
size_t om_pv_len(const struct om_pv *seq);
bool om_pv_is(const struct om_pv *v, enum om_pv_type type);
/* The type with its article ("a list", "an int"), for messages. */
const char *om_pv_type_name(const struct om_pv *v);

#endif
