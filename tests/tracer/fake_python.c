/* Looks like CPython 3.11, 3.12 or 3.13 (FAKE_MINOR), with hand-made frames broken one way
 * per request. */

/* It exports the symbols the tracer looks up, builds a thread state, frames and code
 * objects by hand with the version's layout and allocates one size per case;
 * tests/tracer/python_frames.py checks the report. Usage: fake_python cases|bad-layout. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef FAKE_MINOR
#define FAKE_MINOR 11
#endif

/* What the tracer finds by name. The type objects are only compared by address. */
const unsigned long Py_Version = 0x03000000ul | (unsigned long)FAKE_MINOR << 16 | 0x07f0;
char PyCode_Type[512], PyUnicode_Type[512], PyBytes_Type[512];
static __thread unsigned char *tstate;

void *PyGILState_GetThisThreadState(void);
void *PyGILState_GetThisThreadState(void)
{
    return tstate;
}

/* Each version's layout: Include/cpython/pystate.h (the thread state and, up to 3.12, the
 * _PyCFrame), Include/internal/pycore_frame.h (_PyInterpreterFrame), Include/cpython/code.h
 * (PyCodeObject), Include/cpython/unicodeobject.h (the str headers), on x86-64. */
#if FAKE_MINOR == 11
enum {
    TS_CFRAME = 56, /* -1: the current frame is the thread state's own field */
    TS_CURRENT = -1,
    CF_CURRENT = 8,
    TS_CHUNK = 296,
    TS_TOP = 304,
    FR_CODE = 32,
    FR_PREVIOUS = 48,
    FR_INSTR = 56,
    FR_ENTRY = 68, /* is_entry; -1: entry frames are owned by the C stack instead */
    FR_OWNER = 69,
    FR_SIZE = 80,
    CO_FIRSTLINENO = 72,
    CO_FILENAME = 112,
    CO_NAME = 120,
    CO_LINETABLE = 136,
    CO_FIRSTTRACEABLE = 168,
    CO_CODE = 184,
    STR_ASCII = 48
};
#elif FAKE_MINOR == 12
enum {
    TS_CFRAME = 56,
    TS_CURRENT = -1,
    CF_CURRENT = 0,
    TS_CHUNK = 232,
    TS_TOP = 240,
    FR_CODE = 0,
    FR_PREVIOUS = 8,
    FR_INSTR = 56,
    FR_ENTRY = -1,
    FR_OWNER = 70,
    FR_SIZE = 80,
    CO_FIRSTLINENO = 68,
    CO_FILENAME = 112,
    CO_NAME = 120,
    CO_LINETABLE = 136,
    CO_FIRSTTRACEABLE = 176,
    CO_CODE = 192,
    STR_ASCII = 40
};
#elif FAKE_MINOR == 13
enum {
    TS_CFRAME = -1,
    TS_CURRENT = 72,
    CF_CURRENT = 0,
    TS_CHUNK = 232,
    TS_TOP = 240,
    FR_CODE = 0,
    FR_PREVIOUS = 8,
    FR_INSTR = 56,
    FR_ENTRY = -1,
    FR_OWNER = 70,
    FR_SIZE = 80,
    CO_FIRSTLINENO = 68,
    CO_FILENAME = 112,
    CO_NAME = 120,
    CO_LINETABLE = 136,
    CO_FIRSTTRACEABLE = 184,
    CO_CODE = 200,
    STR_ASCII = 40
};
#else
#error "FAKE_MINOR: 11, 12 or 13"
#endif
enum { CHUNK_DATA = 24, OWNED_BY_CSTACK = 3 };

static unsigned char *arena;
static size_t used;

static unsigned char *take(size_t n)
{
    unsigned char *p = arena + used;
    used += (n + 15) & ~(size_t)15;
    return p;
}

static void put(unsigned char *at, uintptr_t v)
{
    memcpy(at, &v, sizeof v);
}

static unsigned char *str(const char *s)
{
    size_t n = strlen(s);
    unsigned char *o = take(STR_ASCII + n + 1);
    put(o + 8, (uintptr_t)PyUnicode_Type);
    put(o + 16, n);
    uint32_t state = 1u << 2 | 1u << 5 | 1u << 6; /* kind 1, compact, ascii */
    memcpy(o + 32, &state, sizeof state);
    memcpy(o + STR_ASCII, s, n + 1);
    return o;
}

static unsigned char *bytes(const unsigned char *d, size_t n)
{
    unsigned char *o = take(32 + n + 1);
    put(o + 8, (uintptr_t)PyBytes_Type);
    put(o + 16, n);
    memcpy(o + 32, d, n);
    return o;
}

/* Units 0-1 on firstlineno, 2-3 two lines below: two "no column" entries (code 13). */
static const unsigned char table[] = {0x80 | 13 << 3 | 1, 0x00, 0x80 | 13 << 3 | 1, 0x04};
static const unsigned char garbage[] = {0x05, 0x17};

static unsigned char *code(const char *name, int firstlineno, const unsigned char *lt, size_t n)
{
    unsigned char *o = take(CO_CODE + 8);
    put(o + 8, (uintptr_t)PyCode_Type);
    memcpy(o + CO_FIRSTLINENO, &firstlineno, sizeof firstlineno);
    put(o + CO_FILENAME, (uintptr_t)str("/fake/model.py"));
    put(o + CO_NAME, (uintptr_t)str(name));
    put(o + CO_LINETABLE, (uintptr_t)bytes(lt, n));
    return o;
}

/* 3.12 on: the eval loop's entry frame, on the C stack, below the outermost frame. */
static unsigned char *chunk, *cframe, *inner, *outer, *entry, *inner_code, *outer_code;

/* Where the thread's current frame is kept. */
static unsigned char *current(void)
{
    return TS_CFRAME >= 0 ? cframe + CF_CURRENT : tstate + TS_CURRENT;
}

static void frame(unsigned char *f, unsigned char *co, int instr, unsigned char *previous)
{
    memset(f, 0, FR_SIZE);
    put(f + FR_CODE, (uintptr_t)co);
    put(f + FR_PREVIOUS, (uintptr_t)previous);
    put(f + FR_INSTR, (uintptr_t)(co + CO_CODE + 2 * instr));
}

/* inner (model.py:12 inner) called by outer (model.py:20 outer), in one chunk. */
static void build(void)
{
    memset(tstate, 0, 512);
    put(chunk + 8, 1 << 16);
    frame(inner, inner_code, 3, outer);
    if (FR_ENTRY >= 0) {
        frame(outer, outer_code, 1, NULL);
        outer[FR_ENTRY] = 1;
    } else {
        frame(outer, outer_code, 1, entry);
        memset(entry, 0, FR_SIZE);
        entry[FR_OWNER] = OWNED_BY_CSTACK;
    }
    if (TS_CFRAME >= 0)
        put(tstate + TS_CFRAME, (uintptr_t)cframe);
    put(current(), (uintptr_t)inner);
    put(tstate + TS_CHUNK, (uintptr_t)chunk);
    put(tstate + TS_TOP, (uintptr_t)(chunk + CHUNK_DATA + 2 * FR_SIZE));
}

/* Called through a volatile pointer so the compiler keeps every request. */
static void *(*volatile alloc)(size_t) = malloc;

static void request(size_t mib)
{
    free(alloc((mib << 20) + 4096));
}

static void *no_python(void *arg)
{
    (void)arg;
    request(12); /* this thread has no thread state */
    return NULL;
}

int main(int argc, char **argv)
{
    arena = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED || argc != 2)
        return 2;
    tstate = take(512);
    cframe = take(16);
    entry = take(FR_SIZE);
    chunk = take(CHUNK_DATA + 4 * FR_SIZE);
    inner = chunk + CHUNK_DATA;
    outer = inner + FR_SIZE;
    inner_code = code("inner", 10, table, sizeof table);
    outer_code = code("outer", 19, table, sizeof table);
    unsigned char *wrong_type = take(CO_CODE + 8);
    put(wrong_type + 8, (uintptr_t)PyBytes_Type);
    void *unmapped = mmap(NULL, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    build();
    if (strcmp(argv[1], "bad-layout") == 0) {
        /* The first walk finds no code object where the layout says: frames are off. */
        put(inner + FR_CODE, (uintptr_t)wrong_type);
        put(inner + FR_INSTR, (uintptr_t)(wrong_type + CO_CODE));
        request(1);
        build();
        request(2);
        return 0;
    }
    if (strcmp(argv[1], "cases") != 0)
        return 2;
    for (int i = 0; i < 100; i++) /* past the checked walks: frames are read in place */
        request(1);
    put(inner + FR_PREVIOUS, (uintptr_t)unmapped); /* outside the chunk, unreadable */
    request(2);
    build();
    put(inner + FR_CODE, 0x7); /* misaligned */
    request(3);
    build();
    put(inner + FR_CODE, (uintptr_t)unmapped); /* unreadable */
    request(4);
    build();
    put(outer + FR_CODE, (uintptr_t)wrong_type);
    request(5);
    build();
    put(inner + FR_PREVIOUS, (uintptr_t)inner); /* a cycle */
    request(6);
    build();
    frame(inner, code("garbled", 30, garbage, sizeof garbage), 0, outer);
    request(7);
    build();
    put(tstate + TS_TOP, (uintptr_t)chunk); /* a data stack whose top is below its frames */
    request(8);
    build();
    put(current(), (uintptr_t)unmapped);
    request(9);
    build();
    put(inner + FR_INSTR, (uintptr_t)(inner_code + CO_CODE - 2)); /* not started */
    request(10);
    build();
    tstate = NULL;
    request(11);
    pthread_t t;
    if (pthread_create(&t, NULL, no_python, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    tstate = take(512);
    build();
    request(13); /* whole again */
    return 0;
}
