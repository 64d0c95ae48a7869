/* Replays a recorded device allocation trace (a replay file, see replay_snapshot.py) for a
 * number of iterations through cudaMalloc/cudaFree, cudaMallocAsync/cudaFreeAsync on the
 * recorded streams, or optmem's pluggable-allocator entry points; every buffer gets a few
 * bytes written at both ends, checked before it is freed, and must not overlap a live one.
 * In stream order (async, pluggable) the writes and checks are queued on the buffer's stream
 * and run only when the fake device gets to them (at the end of each iteration, or when a
 * queue is full), as kernels run behind the CPU on a GPU.
 * Prints the requests made and the most bytes live at once on stdout, and on stderr the most
 * device memory the fake driver held: in each iteration, over the whole run, and from
 * iteration STEADY (counted from 0) on.
 *
 * A replay file: a first line "optmem-replay 1", then lines "p SIZE STREAM" (a buffer live
 * through every iteration: allocated before the first, freed after the last), "a ID SIZE
 * STREAM" (allocated in each iteration) and "f ID" (freed), in the order they happen; '#'
 * starts a comment line.
 *
 * With `handoff`, the second half of each iteration's events runs on a second thread while
 * the first waits, as PyTorch's backward pass runs on the autograd engine's thread for the
 * device. From iteration STEADY on, stderr also counts the fake driver's VMM calls
 * (cuMemCreate, cuMemMap, cuMemUnmap): a steady iteration should need none.
 *
 * usage: replay FILE [ITERATIONS [sync|async|pluggable [STEADY [handoff]]]] */
#include "cuda_test.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define MAX_STREAMS 64
#define MAX_EVENTS (1u << 22)
#define MAX_SIZE ((uint64_t)1 << 40)
#define MARK 64 /* bytes written at each end of a buffer */

enum api { API_SYNC, API_ASYNC, API_PLUGGABLE };

struct event {
    char kind; /* 'p', 'a' or 'f' */
    uint32_t id, stream;
    uint64_t size;
};

struct buffer {
    void *p;
    uint64_t size;
    uint32_t stream;
    unsigned char byte;
};

static struct event *events;
static size_t nevents;
static uint32_t nids;
static int64_t stream_ids[MAX_STREAMS];
static cudaStream_t streams[MAX_STREAMS];
static uint32_t nstreams;
static struct buffer *bufs;   /* by id; the persistent buffers after the ids */
static uint32_t *live, nlive; /* indexes into bufs, unordered */
static uint32_t *live_at;     /* bufs index -> position in live */
static enum api api;
static uint64_t live_bytes, max_live, requests, corrupt;
static void *(*plug_malloc)(ssize_t size, int device, cudaStream_t stream);
static void (*plug_free)(void *ptr, ssize_t size, int device, cudaStream_t stream);

static uint32_t stream_index(int64_t id, const char *path, size_t line)
{
    for (uint32_t i = 0; i < nstreams; i++)
        if (stream_ids[i] == id)
            return i;
    if (nstreams == MAX_STREAMS)
        ct_die("%s:%zu: more than %d streams", path, line, MAX_STREAMS);
    stream_ids[nstreams] = id;
    return nstreams++;
}

static void load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        ct_die("%s: %s", path, strerror(errno));
    char line[256];
    size_t ln = 0, cap = 0;
    uint32_t max_id = 0;
    int seen_a = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        if (ln == 1) {
            if (strcmp(line, "optmem-replay 1\n") != 0)
                ct_die("%s: not a replay file (no first line 'optmem-replay 1')", path);
            continue;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        struct event e = {0};
        unsigned long long id = 0, size = 0;
        long long stream = 0;
        char end;
        int ok = 0;
        if (line[0] == 'p')
            ok = sscanf(line, "p %llu %lld %c", &size, &stream, &end) == 2;
        else if (line[0] == 'a')
            ok = sscanf(line, "a %llu %llu %lld %c", &id, &size, &stream, &end) == 3;
        else if (line[0] == 'f')
            ok = sscanf(line, "f %llu %c", &id, &end) == 1;
        if (!ok || id >= MAX_EVENTS || (line[0] != 'f' && (size == 0 || size > MAX_SIZE)))
            ct_die("%s:%zu: bad line (want 'p SIZE STREAM', 'a ID SIZE STREAM' or 'f ID')", path,
                   ln);
        if (line[0] == 'p' && seen_a)
            ct_die("%s:%zu: a persistent buffer after the iteration's events", path, ln);
        seen_a |= line[0] != 'p';
        e.kind = line[0];
        e.id = (uint32_t)id;
        e.size = size;
        e.stream = line[0] == 'f' ? 0 : stream_index(stream, path, ln);
        if (nevents == MAX_EVENTS)
            ct_die("%s: more than %u events", path, MAX_EVENTS);
        if (nevents == cap) {
            cap = cap ? 2 * cap : 4096;
            events = realloc(events, cap * sizeof *events);
            if (!events)
                ct_die("out of memory");
        }
        events[nevents++] = e;
        if (e.kind != 'p' && e.id + 1 > max_id)
            max_id = e.id + 1;
    }
    if (ferror(f))
        ct_die("%s: read error", path);
    fclose(f);
    nids = max_id;
    /* Every id is allocated once, then freed at most once, in each iteration. */
    char *state = calloc(nids ? nids : 1, 1);
    if (!state)
        ct_die("out of memory");
    for (size_t i = 0; i < nevents; i++) {
        const struct event *e = &events[i];
        if (e->kind == 'a' && state[e->id] != 0)
            ct_die("%s: id %" PRIu32 " allocated twice", path, e->id);
        if (e->kind == 'f' && state[e->id] != 1)
            ct_die("%s: id %" PRIu32 " freed while not live", path, e->id);
        if (e->kind != 'p')
            state[e->id]++;
    }
    free(state);
}

static void *device_alloc(uint64_t size, uint32_t s)
{
    void *p = NULL;
    if (api == API_SYNC)
        CT_CHECK(cudaMalloc(&p, size));
    else if (plug_malloc)
        CT_EXPECT((p = plug_malloc((ssize_t)size, 0, streams[s])) != NULL,
                  "optmem_cuda_malloc(%" PRIu64 ") failed", size);
    else
        CT_CHECK(cudaMallocAsync(&p, size, streams[s]));
    return p;
}

static void device_free(void *p, uint64_t size, uint32_t s)
{
    if (api == API_SYNC)
        CT_CHECK(cudaFree(p));
    else if (plug_free)
        plug_free(p, (ssize_t)size, 0, streams[s]);
    else
        CT_CHECK(cudaFreeAsync(p, streams[s]));
}

/* Writes byte over both ends of the buffer, in its stream's order where the API has one. */
static void mark(const struct buffer *b)
{
    size_t n = b->size < MARK ? b->size : MARK;
    unsigned char *tail = (unsigned char *)b->p + b->size - n;
    if (api == API_SYNC) {
        CT_CHECK(cudaMemset(b->p, b->byte, n));
        CT_CHECK(cudaMemset(tail, b->byte, n));
    } else {
        CT_CHECK(cudaMemsetAsync(b->p, b->byte, n, streams[b->stream]));
        CT_CHECK(cudaMemsetAsync(tail, b->byte, n, streams[b->stream]));
    }
}

static unsigned long differing(const void *dev, size_t n, unsigned char byte)
{
    unsigned char host[MARK];
    CT_CHECK(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost));
    unsigned long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != byte;
    return bad;
}

static void take(uint32_t k, uint64_t size, uint32_t stream, unsigned char byte)
{
    struct buffer *b = &bufs[k];
    if (b->p)
        ct_die("replay: buffer %" PRIu32 " is live already", k);
    *b = (struct buffer){device_alloc(size, stream), size, stream, byte};
    uintptr_t lo = (uintptr_t)b->p;
    for (uint32_t i = 0; i < nlive; i++) {
        const struct buffer *o = &bufs[live[i]];
        CT_EXPECT(!ct_overlap(b->p, size, o->p, o->size),
                  "a %" PRIu64 "-byte buffer at %#" PRIxPTR " overlaps a live one at %p (%" PRIu64
                  " bytes)",
                  size, lo, o->p, o->size);
    }
    live_at[k] = nlive;
    live[nlive++] = k;
    mark(b);
    requests++;
    live_bytes += size;
    if (live_bytes > max_live)
        max_live = live_bytes;
}

static void give(uint32_t k)
{
    struct buffer *b = &bufs[k];
    if (!b->p)
        ct_die("replay: buffer %" PRIu32 " is not live", k);
    size_t n = b->size < MARK ? b->size : MARK;
    unsigned char *tail = (unsigned char *)b->p + b->size - n;
    if (api == API_SYNC) {
        corrupt += differing(b->p, n, b->byte);
        corrupt += differing(tail, n, b->byte);
    } else {
        /* Read late, in the stream's order, as a kernel would: a reuse of these bytes before
         * the stream got here is found when the checks run (fakeCudaMismatches). */
        CT_CHECK(fakeLaunchCheck(b->p, n, b->byte, streams[b->stream]));
        CT_CHECK(fakeLaunchCheck(tail, n, b->byte, streams[b->stream]));
    }
    device_free(b->p, b->size, b->stream);
    uint32_t at = live_at[k], last = live[--nlive];
    live[at] = last;
    live_at[last] = at;
    live_bytes -= b->size;
    b->p = NULL;
}

static void play(int it, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        const struct event *e = &events[i];
        if (e->kind == 'a')
            take(e->id, e->size, e->stream, (unsigned char)(e->id * 31u + (unsigned)it * 7u + 1u));
        else if (e->kind == 'f')
            give(e->id);
    }
}

/* The second thread of `handoff`: plays the events it is handed, one range at a time. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int it, pending; /* pending: a range handed over and not yet played */
    size_t from, to;
} hand = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
static int handoff;

static void *second_thread(void *arg)
{
    (void)arg;
    CT_CHECK(cudaFree(NULL)); /* the device's context on this thread, as a framework's does */
    pthread_mutex_lock(&hand.lock);
    for (;;) {
        while (!hand.pending)
            pthread_cond_wait(&hand.cond, &hand.lock);
        if (hand.it < 0)
            break;
        play(hand.it, hand.from, hand.to);
        hand.pending = 0;
        pthread_cond_broadcast(&hand.cond);
    }
    pthread_mutex_unlock(&hand.lock);
    return NULL;
}

/* Hands [from, to) of iteration it (< 0: stop) to the second thread and waits for it. */
static void hand_over(int it, size_t from, size_t to)
{
    pthread_mutex_lock(&hand.lock);
    hand.it = it;
    hand.from = from;
    hand.to = to;
    hand.pending = 1;
    pthread_cond_broadcast(&hand.cond);
    while (hand.pending && it >= 0)
        pthread_cond_wait(&hand.cond, &hand.lock);
    pthread_mutex_unlock(&hand.lock);
}

static void iterate(int it)
{
    if (handoff) {
        play(it, 0, nevents / 2);
        hand_over(it, nevents / 2, nevents);
    } else {
        play(it, 0, nevents);
    }
    /* Buffers live when the recording ended die with the iteration. */
    for (uint32_t k = 0; k < nids; k++)
        if (bufs[k].p)
            give(k);
}

static unsigned long vmm_calls(void)
{
    return fakeCudaCalls("cuMemCreate") + fakeCudaCalls("cuMemMap") + fakeCudaCalls("cuMemUnmap");
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 6)
        ct_die("usage: replay FILE [ITERATIONS [sync|async|pluggable [STEADY [handoff]]]]");
    int iterations = argc > 2 ? atoi(argv[2]) : 6;
    const char *mode = argc > 3 ? argv[3] : "sync";
    int steady = argc > 4 ? atoi(argv[4]) : 2;
    if (iterations < 1 || steady < 0 || steady >= iterations)
        ct_die("replay: want ITERATIONS >= 1 and 0 <= STEADY < ITERATIONS");
    if (argc > 5 && strcmp(argv[5], "handoff") != 0)
        ct_die("replay: unknown threading %s (handoff)", argv[5]);
    handoff = argc > 5;
    if (strcmp(mode, "sync") == 0) {
        api = API_SYNC;
    } else if (strcmp(mode, "async") == 0) {
        api = API_ASYNC;
    } else if (strcmp(mode, "pluggable") == 0) {
        api = API_PLUGGABLE;
        *(void **)&plug_malloc = dlsym(RTLD_DEFAULT, "optmem_cuda_malloc");
        *(void **)&plug_free = dlsym(RTLD_DEFAULT, "optmem_cuda_free");
        CT_EXPECT(!ct_expect_optmem() || (plug_malloc && plug_free),
                  "optmem_cuda_malloc/optmem_cuda_free not found");
        CT_EXPECT(!plug_malloc == !plug_free, "only one of the pluggable entry points found");
    } else {
        ct_die("replay: unknown mode %s (sync, async, pluggable)", mode);
    }
    load(argv[1]);
    uint32_t npersistent = 0;
    for (size_t i = 0; i < nevents; i++)
        npersistent += events[i].kind == 'p';
    uint32_t nbufs = nids + npersistent;
    bufs = calloc(nbufs ? nbufs : 1, sizeof *bufs);
    live = calloc(nbufs ? nbufs : 1, sizeof *live);
    live_at = calloc(nbufs ? nbufs : 1, sizeof *live_at);
    if (!bufs || !live || !live_at)
        ct_die("out of memory");
    CT_CHECK(cudaFree(NULL));
    /* Stream 0 is the legacy default stream, as PyTorch records it; others are created. */
    for (uint32_t s = 0; s < nstreams; s++)
        if (stream_ids[s] != 0 && api != API_SYNC)
            CT_CHECK(cudaStreamCreate(&streams[s]));
    uint32_t k = nids;
    for (size_t i = 0; i < nevents; i++)
        if (events[i].kind == 'p') {
            take(k, events[i].size, events[i].stream, (unsigned char)(k * 13u + 5u));
            k++;
        }
    /* The peak of each iteration; the one before the first covers the persistent buffers. */
    size_t *peaks = calloc((size_t)iterations + 1, sizeof *peaks), steady_peak = 0, run_peak;
    if (!peaks)
        ct_die("out of memory");
    pthread_t second;
    if (handoff && pthread_create(&second, NULL, second_thread, NULL) != 0)
        ct_die("replay: no second thread");
    unsigned long steady_vmm = 0;
    for (int it = 0; it < iterations; it++) {
        peaks[it] = fakeCudaPeakBytes(0, 1);
        if (it == steady + 1)
            steady_vmm = vmm_calls();
        iterate(it);
        if (api != API_SYNC)
            CT_CHECK(cudaDeviceSynchronize());
    }
    peaks[iterations] = fakeCudaPeakBytes(0, 1);
    steady_vmm = vmm_calls() - steady_vmm;
    if (handoff) {
        hand_over(-1, 0, 0);
        pthread_join(second, NULL);
    }
    run_peak = peaks[0];
    for (int it = 1; it <= iterations; it++) {
        if (peaks[it] > run_peak)
            run_peak = peaks[it];
        if (it > steady && peaks[it] > steady_peak)
            steady_peak = peaks[it];
    }
    for (k = nids; k < nbufs; k++)
        give(k);
    if (api != API_SYNC)
        CT_CHECK(cudaDeviceSynchronize());
    for (uint32_t s = 0; s < nstreams; s++)
        if (streams[s])
            CT_CHECK(cudaStreamDestroy(streams[s]));
    corrupt += fakeCudaMismatches();
    CT_EXPECT(corrupt == 0, "%" PRIu64 " marked bytes of device buffers changed while live",
              corrupt);
    printf("mode %s\niterations %d\nstreams %" PRIu32 "\npersistent %" PRIu32 "\nrequests %" PRIu64
           "\nmax_live_bytes %" PRIu64 "\n",
           mode, iterations, nstreams, npersistent, requests, max_live);
    /* What the device held differs with and without optmem: stderr, not the compared
     * output. */
    for (int it = 0; it < iterations; it++)
        fprintf(stderr, "iteration %d peak_bytes %zu\n", it, peaks[it + 1]);
    fprintf(stderr, "device_peak_bytes %zu\nsteady_peak_bytes %zu\nsteady_vmm_calls %lu\n",
            run_peak, steady_peak, steady_vmm);
    free(peaks);
    free(events);
    free(bufs);
    free(live);
    free(live_at);
    return 0;
}
