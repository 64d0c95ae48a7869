/* Frame keys that do not depend on where modules were loaded: (module path, offset)
 * hashes, equal in every run of a program despite address-space randomisation, so that
 * the tokens of a saved plan match the next run's requests. */
#ifndef OPTMEM_PRELOAD_MODMAP_H
#define OPTMEM_PRELOAD_MODMAP_H

#include <stdint.h>

/* The key of a code address. Takes no lock (the loader's lock is taken only while no
 * lock of optmem's is held), so call it before taking the pool's. */
uint64_t om_modmap_key(const void *addr);

/* The table keys come from now: keys found in one stay what that table gives until
 * another replaces it (a module loaded since). */
const void *om_modmap_table(void);

#endif
