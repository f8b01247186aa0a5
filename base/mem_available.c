// mem_available.c — the memory a new allocation can count on (mem_available.h).
#include "base/mem_available.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

// A "Key:   12345678 kB" line of a /proc file (MemAvailable of /proc/meminfo, VmSize of
// /proc/self/status), in bytes; 0 when the file or the key is not there.
static uint64_t proc_kb_field(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t klen = strlen(key);
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':' && sscanf(line + klen + 1, "%llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb << 10;
}

static uint64_t meminfo_available(void) { return proc_kb_field("/proc/meminfo", "MemAvailable"); }

// The address space in use, in bytes; 0 when unknown.
static uint64_t vm_size(void) { return proc_kb_field("/proc/self/status", "VmSize"); }

uint64_t emx_mem_available(void) {
    const char *hook = getenv("EMX_MEMAVAILABLE_MB");
    if (hook && *hook) return (uint64_t)strtoull(hook, NULL, 10) << 20;
    uint64_t avail = meminfo_available();
    if (avail == 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) avail = (uint64_t)pages * (uint64_t)page;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t used = vm_size(), lim = (uint64_t)rl.rlim_cur;
        uint64_t room = lim > used ? lim - used : 1;  // 1, not 0: 0 would mean "unknown"
        if (avail == 0 || room < avail) avail = room;
    }
    return avail;
}
