// file_lock.c — flock and who holds it (file_lock.h).
#include "base/file_lock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

// The process that holds a flock on the file fd names, as /proc/locks lists it:
// "1: FLOCK  ADVISORY  WRITE 1234 fe:00:10953532 0 EOF" (pid, then the device's major:minor in
// hex and the inode). 0 when no line names it (no /proc, another kind of filesystem).
static long lock_holder(int fd) {
    struct stat sb;
    FILE *f = fstat(fd, &sb) == 0 ? fopen("/proc/locks", "re") : NULL;
    if (!f) return 0;
    char line[256];
    long holder = 0;
    while (!holder && fgets(line, sizeof line, f)) {
        char kind[16];
        long pid;
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*[^:]: %15s %*s %*s %ld %x:%x:%llu", kind, &pid, &maj, &min, &ino) == 5 &&
            strcmp(kind, "FLOCK") == 0 && maj == major(sb.st_dev) && min == minor(sb.st_dev) &&
            ino == (unsigned long long)sb.st_ino)
            holder = pid;
    }
    fclose(f);
    return holder;
}

int emx_file_lock(int fd, long *holder) {
    *holder = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK) return -1;
    *holder = lock_holder(fd);
    return 1;
}
