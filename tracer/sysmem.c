/* The tracer's own memory, straight from mmap (malloc is the interposed path it records), and
 * its own file descriptors. */
#include "tracer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define SMALL_MAX_SHIFT 12 /* larger objects are mappings of their own */
/* Multiples of 16 up to 128 bytes, then four classes per power of two (as mimalloc's bins):
 * a call site's record and its frames waste at most a fifth of their bytes, not half. */
#define SMALL_LINEAR 8
#define SMALL_CLASSES (SMALL_LINEAR + 4 * (SMALL_MAX_SHIFT - 7))
#define CHUNK_BYTES (256u * 1024)

struct free_obj {
    struct free_obj *next;
};

static pthread_mutex_t sys_lock = PTHREAD_MUTEX_INITIALIZER;
static struct free_obj *free_lists[SMALL_CLASSES];
static char *chunk_cur, *chunk_end;

/* A size of 0 still maps a page, so that an empty table is a valid pointer. */
static size_t map_bytes(size_t size)
{
    return ((size ? size : 1) + 4095) & ~(size_t)4095;
}

void *om_sys_map(size_t size)
{
    size = map_bytes(size);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void om_sys_unmap(void *ptr, size_t size)
{
    if (ptr)
        munmap(ptr, map_bytes(size));
}

/* The class of a size of 1 to 4096 bytes, and the size of its objects in *obj. */
static unsigned size_class(size_t size, size_t *obj)
{
    if (size <= 16 * SMALL_LINEAR) {
        unsigned c = (unsigned)((size + 15) / 16) - 1;
        *obj = 16 * (size_t)(c + 1);
        return c;
    }
    unsigned b = 63 - (unsigned)__builtin_clzll(size - 1); /* 7 to 11 */
    size_t quarter = (size - 1) >> (b - 2);                /* 4 to 7 */
    *obj = (quarter + 1) << (b - 2);
    return SMALL_LINEAR + 4 * (b - 7) + (unsigned)(quarter - 4);
}

void om_sys_lock(void)
{
    pthread_mutex_lock(&sys_lock);
}

void om_sys_unlock(void)
{
    pthread_mutex_unlock(&sys_lock);
}

/* The child of fork is single-threaded: whoever held the lock in the parent is gone. */
void om_sys_reset_lock(void)
{
    pthread_mutex_init(&sys_lock, NULL);
}

void *om_sys_alloc(size_t size)
{
    if (size == 0)
        size = 1;
    if (size > ((size_t)1 << SMALL_MAX_SHIFT))
        return om_sys_map(size);
    size_t obj;
    unsigned c = size_class(size, &obj);
    void *p = NULL;
    pthread_mutex_lock(&sys_lock);
    if (free_lists[c]) {
        p = free_lists[c];
        free_lists[c] = free_lists[c]->next;
        memset(p, 0, obj);
    } else {
        if (chunk_cur == NULL || (size_t)(chunk_end - chunk_cur) < obj) {
            /* The tail of the old chunk is abandoned: at most 4 KiB per 256 KiB. */
            char *chunk = om_sys_map(CHUNK_BYTES);
            if (chunk) {
                chunk_cur = chunk;
                chunk_end = chunk + CHUNK_BYTES;
            }
        }
        if (chunk_cur && (size_t)(chunk_end - chunk_cur) >= obj) {
            p = chunk_cur; /* every size is a multiple of 16: 16-byte aligned */
            chunk_cur += obj;
        }
    }
    pthread_mutex_unlock(&sys_lock);
    return p;
}

void om_sys_free(void *ptr, size_t size)
{
    if (!ptr)
        return;
    if (size == 0)
        size = 1;
    if (size > ((size_t)1 << SMALL_MAX_SHIFT)) {
        om_sys_unmap(ptr, size);
        return;
    }
    size_t obj;
    unsigned c = size_class(size, &obj);
    pthread_mutex_lock(&sys_lock);
    struct free_obj *o = ptr;
    o->next = free_lists[c];
    free_lists[c] = o;
    pthread_mutex_unlock(&sys_lock);
}

struct om_table *om_table_new(uint32_t slots, size_t entry)
{
    struct om_table *t = om_sys_alloc(sizeof *t + (size_t)slots * entry);
    if (t)
        t->mask = slots - 1;
    return t;
}

struct om_table *om_table_grow(const struct om_table *t, size_t entry, unsigned probes,
                               uint32_t (*home)(const void *entry))
{
    uint64_t word[8];
    size_t words = entry / sizeof *word;
    if (words == 0 || words > sizeof word / sizeof *word || entry % sizeof *word)
        return NULL; /* the tables' entries are 8 to 64 bytes */
    struct om_table *fresh = om_table_new((t->mask + 1) * 2, entry);
    if (!fresh)
        return NULL;
    const char *from = (const char *)(t + 1);
    char *to = (char *)(fresh + 1);
    for (uint32_t i = 0; i <= t->mask; i++) {
        const uint64_t *src = (const uint64_t *)(const void *)(from + (size_t)i * entry);
        for (size_t w = 0; w < words; w++)
            word[w] = __atomic_load_n(&src[w], __ATOMIC_RELAXED);
        if (word[0] == 0)
            continue;
        uint32_t h = home(word);
        for (unsigned k = 0; k < probes; k++) {
            char *slot = to + (size_t)((h + k) & fresh->mask) * entry;
            if (*(const uint64_t *)(const void *)slot)
                continue;
            memcpy(slot, word, entry);
            fresh->used++;
            break;
        }
    }
    return fresh;
}

#define ID_INDEX_FIRST 1024u

static void id_index_put(uint64_t *slots, uint32_t nslots, uint64_t entry)
{
    uint32_t i = (uint32_t)(entry >> 32) & (nslots - 1);
    while (slots[i])
        i = (i + 1) & (nslots - 1);
    slots[i] = entry;
}

int om_id_index_add(struct om_id_index *ix, uint32_t hash, uint32_t id)
{
    if (!ix->slots || (ix->used + 1) * 2 > ix->nslots) {
        uint32_t n = ix->slots ? ix->nslots * 2 : ID_INDEX_FIRST;
        uint64_t *fresh = om_sys_alloc(n * sizeof *fresh);
        if (!fresh)
            return -ENOMEM;
        for (uint32_t i = 0; ix->slots && i < ix->nslots; i++)
            if (ix->slots[i])
                id_index_put(fresh, n, ix->slots[i]);
        om_sys_free(ix->slots, ix->nslots * sizeof *ix->slots);
        ix->slots = fresh;
        ix->nslots = n;
    }
    id_index_put(ix->slots, ix->nslots, (uint64_t)hash << 32 | (id + 1));
    ix->used++;
    return 0;
}

int om_sys_open(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    /* The program may have closed a low descriptor to have open() give that number to its
     * next file: optmem's file moves to the top of the range at once. */
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur > 64 && lim.rlim_cur != RLIM_INFINITY) {
        int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)(lim.rlim_cur - 16));
        if (high >= 0) {
            close(fd);
            fd = high;
        }
    }
    return fd;
}

size_t om_sys_read_file(const char *path, char *buf, size_t cap)
{
    int fd = om_sys_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    size_t len = 0;
    while (len < cap) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    return len;
}

int om_sys_others_exited(void)
{
    char buf[512];
    size_t len = om_sys_read_file("/proc/self/stat", buf, sizeof buf - 1);
    if (len == 0)
        return 0;
    buf[len] = '\0';
    /* Fields start after the last ')': the command name may hold both. */
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    char state = p[2];
    long threads = 0;
    p += 2;
    for (int field = 3; field < 20 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (p)
        threads = strtol(p, NULL, 10);
    /* The zombie main thread still counts in num_threads. */
    return state == 'Z' && threads >= 1 && threads <= 2;
}
