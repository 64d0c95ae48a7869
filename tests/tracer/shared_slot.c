/* Two call sites whose stacks start alike (the same return address into malloc, at the same
 * stack pointer, no Python) and differ above, for tests/tracer/run_traced.py shared-slot:
 * the fast walk keeps both in one slot, and each request is still its own site's. */
#include <stdlib.h>

void leaf(size_t size);
void first(size_t size);
void second(size_t size);

/* Called through a volatile pointer so the compiler keeps every request. */
static void *(*volatile alloc)(size_t) = malloc;
static volatile int which;

__attribute__((noinline)) void leaf(size_t size)
{
    free(alloc(size));
}

/* The same frame in both (no tail call: the caller stays on the stack). */
__attribute__((noinline)) void first(size_t size)
{
    leaf(size);
    which = 1;
}

__attribute__((noinline)) void second(size_t size)
{
    leaf(size);
    which = 2;
}

int main(void)
{
    for (int i = 0; i < 16; i++) {
        first(65536);
        second(2 * 65536);
    }
    return 0;
}
