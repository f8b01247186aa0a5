// file_lock.h — an advisory lock on an open file, so that two runs of one program do not write
// the same output together (eval's -o: each would redo the other's work and interleave lines).
//
// The lock is flock(2)'s: it belongs to the open file (not to the process), so it holds until
// that descriptor is closed, whatever else the process opens and closes, and a second open of
// the same file, in this process or another, cannot take it. Advisory: only programs that ask
// for it are kept out. On a filesystem without flock (some network mounts) taking it fails and
// the caller says so.
#ifndef ENTROPIX_FILE_LOCK_H
#define ENTROPIX_FILE_LOCK_H

// Takes an exclusive lock on fd without waiting. Returns 0 (taken), 1 (another open of the file
// holds it; *holder is that process's id when /proc/locks names it, else 0), or -1 (flock
// failed: errno says why).
int emx_file_lock(int fd, long *holder);

#endif
