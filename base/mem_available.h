// mem_available.h — the memory a new allocation can count on: what the memory checks before a
// model's copy (runtime/model.c) and before a run's states (./run, the server) compare with.
#ifndef ENTROPIX_MEM_AVAILABLE_H
#define ENTROPIX_MEM_AVAILABLE_H

#include <stdint.h>

// Memory a new allocation can count on, in bytes: MemAvailable of /proc/meminfo (or free pages
// from sysconf when it is missing), capped by RLIMIT_AS's room when a limit is set. The
// environment variable EMX_MEMAVAILABLE_MB, when set, replaces the figure: a test hook, so a
// test of the check does not depend on the machine's memory. 0: unknown (no check).
uint64_t emx_mem_available(void);

#endif
