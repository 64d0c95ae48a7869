/* A call site under a frame whose size varies (a variable-length array), for
 * tests/tracer/run_traced.py varying: once a walk saw the frame with its second size, no later
 * request follows the first one. */
#include <execinfo.h>
#include <stdint.h>
#include <stdlib.h>

void leaf(size_t size);
void other_leaf(size_t size);
void vary(void (*call)(size_t), size_t pad, size_t size, uintptr_t fill);

/* Called through a volatile pointer so the compiler keeps every request. */
static void *(*volatile alloc)(size_t) = malloc;

__attribute__((noinline)) void leaf(size_t size)
{
    free(alloc(size));
}

__attribute__((noinline)) void other_leaf(size_t size)
{
    free(alloc(size));
}

/* Fills its frame's variable part with fill: what a walk that took this frame for one of
 * another size would read as the caller's return address. */
__attribute__((noinline)) void vary(void (*call)(size_t), size_t pad, size_t size, uintptr_t fill)
{
    volatile uintptr_t buf[pad / sizeof(uintptr_t)];
    for (size_t i = 0; i < pad / sizeof *buf; i++)
        buf[i] = fill;
    call(size);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

int main(void)
{
    /* The outermost frame's return address: a walk that reads it stops there. */
    void *frames[64];
    int n = backtrace(frames, 64);
    if (n < 2)
        return 2;
    uintptr_t outermost = (uintptr_t)frames[n - 1];
    for (int i = 0; i < 2; i++) /* a full walk learns the small frame, then fast walks use it */
        vary(leaf, 16, 65536, outermost);
    /* The first size would lead to a return address of 0: no distance, the full walk,
     * which sees the frame's second size. */
    vary(leaf, 4096, 5 * 65536, 0);
    /* A call site not seen yet: a full walk. */
    vary(other_leaf, 4096, 2 * 65536, outermost);
    /* The first size would lead to the outermost frame's return address. */
    vary(leaf, 4096, 3 * 65536, outermost);
    vary(leaf, 16, 4 * 65536, outermost);
    return 0;
}
