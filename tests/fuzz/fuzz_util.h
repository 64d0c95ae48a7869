/* Shared by the fuzz targets: hands the fuzz input to a parser that wants a file path. */
#ifndef OPTMEM_FUZZ_UTIL_H
#define OPTMEM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Replaces the contents of one in-memory file (memfd) with data and returns a path that
 * opens it afresh, offset 0; aborts if no memfd can be made, since then nothing is tested. */
const char *fuzz_file(const uint8_t *data, size_t size);

/* Stops the run so that libFuzzer records the input: an invariant broke. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

#endif
