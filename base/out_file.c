// out_file.c — one way to write an output file (out_file.h).
#define _GNU_SOURCE  // mkostemps
#include "base/out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errmsg.h"

const char *emx_out_kind_name(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
    }
}

// The folder path lies in ("." for a bare name, "/" for "/x"), into dir[cap]. -1: too long.
static int folder_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    const int n = slash ? (int)(slash - path) + (slash == path) : 1;
    return (size_t)snprintf(dir, cap, "%.*s", n, slash ? path : ".") >= cap ? -1 : 0;
}

// A new file at path: its folder must exist, be a folder, and take a new entry.
static int check_new(const char *path, char *err, size_t errlen) {
    char dir[4096];
    struct stat sb;
    if (folder_of(path, dir, sizeof dir) != 0) return emx_seterr(err, errlen, "%s: the path is too long", path);
    if (stat(dir, &sb) != 0)
        return errno == ENOENT ? emx_seterr(err, errlen, "%s: the folder %s does not exist", path, dir)
                               : emx_seterr(err, errlen, "%s: the folder %s: %s", path, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return emx_seterr(err, errlen, "%s: %s is not a folder", path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return emx_seterr(err, errlen, "%s: cannot create a file in %s: %s", path, dir, strerror(errno));
    return 0;
}

int emx_out_check(const char *path, EmxOutKind kind, char *err, size_t errlen) {
    if (!path || !*path) return emx_seterr(err, errlen, "an output path is empty");
    if (!strcmp(path, "-")) {
        if (kind == EMX_OUT_APPEND)
            return emx_seterr(err, errlen, "-: this output is read back to resume a run: name a file, not stdout");
        return 0;
    }
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) return emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
        return check_new(path, err, errlen);
    }
    if (kind == EMX_OUT_REPLACE) {  // the rename replaces what the path itself is
        if (!S_ISREG(sb.st_mode))
            return emx_seterr(err, errlen, "%s is %s, not a regular file: refusing to replace it%s", path,
                              emx_out_kind_name(sb.st_mode), S_ISLNK(sb.st_mode) ? " (name the file it points to)" : "");
        return check_new(path, err, errlen);  // the rename needs a writable folder too
    }
    if (stat(path, &sb) != 0)  // a stream opens what a link points to; a dangling link is a new file
        return errno == ENOENT ? 0 : emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
    const int named_stream = kind == EMX_OUT_STREAM && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode));
    if (!S_ISREG(sb.st_mode) && !named_stream)
        return emx_seterr(err, errlen, "%s is %s: %s", path, emx_out_kind_name(sb.st_mode),
                          kind == EMX_OUT_APPEND ? "this output is appended to and read back, so it must be a regular file"
                                                 : "a stream goes to a regular file, a character device or a FIFO");
    if (access(path, kind == EMX_OUT_APPEND ? R_OK | W_OK : W_OK) != 0)
        return emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
    return 0;
}

int emx_out_check_folder(const char *dir, char *err, size_t errlen) {
    if (!dir || !*dir) return emx_seterr(err, errlen, "an output folder's path is empty");
    char path[4096];  // dir less its trailing slashes: "pages/" is the folder pages, to be made in "."
    size_t n = strlen(dir);
    if (n >= sizeof path) return emx_seterr(err, errlen, "%s: the path is too long", dir);
    memcpy(path, dir, n + 1);
    while (n > 1 && path[n - 1] == '/') path[--n] = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno != ENOENT) return emx_seterr(err, errlen, "%s: %s", dir, strerror(errno));
        return check_new(path, err, errlen);  // a new folder: its parent must take a new entry
    }
    if (!S_ISDIR(sb.st_mode))
        return emx_seterr(err, errlen, "%s is %s, not a folder", dir, emx_out_kind_name(sb.st_mode));
    if (access(path, W_OK | X_OK) != 0)
        return emx_seterr(err, errlen, "%s: cannot create a file in it: %s", dir, strerror(errno));
    return 0;
}

// The process's umask, read without changing it (umask(2) can only set it, and that races
// with other threads creating files): /proc/self/status's "Umask:" line; 022 when it is missing.
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned m = 022;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Umask:", 6) && sscanf(line + 6, "%o", &m) == 1) break;
    if (f) fclose(f);
    return (mode_t)(m & 0777);
}

static int open_replace(EmxOut *o, const char *path, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/');
    const int dlen = slash ? (int)(slash - path + 1) : 0;
    if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%.*s.%s.XXXXXX.tmp", dlen, path, slash ? slash + 1 : path) >=
        sizeof o->tmp)
        return o->tmp[0] = 0, emx_seterr(err, errlen, "%s: the path is too long", path);
    struct stat sb;
    const mode_t mode = lstat(path, &sb) == 0 ? (sb.st_mode & 07777) : (0666 & ~current_umask());
    const int fd = mkostemps(o->tmp, 4, O_CLOEXEC);  // a unique name: two writers never share it
    if (fd < 0) {
        const int e = errno;
        o->tmp[0] = 0;
        return emx_seterr(err, errlen, "%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    if (fchmod(fd, mode) != 0 || !(o->f = fdopen(fd, "w"))) {
        const int e = errno;
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = 0;
        return emx_seterr(err, errlen, "%s: %s", path, strerror(e));
    }
    return 0;
}

// STREAM or APPEND: the path opened in place. O_NONBLOCK for the open only: a FIFO without a
// reader fails at once (ENXIO) instead of hanging; what was opened is checked on the descriptor
// (the path may have changed since emx_out_check).
static int open_stream(EmxOut *o, const char *path, EmxOutKind kind, char *err, size_t errlen) {
    const int append = kind == EMX_OUT_APPEND;
    const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (append ? O_APPEND : 0), 0666);
    if (fd < 0)
        return errno == ENXIO ? emx_seterr(err, errlen, "%s is a FIFO that nobody reads", path)
                              : emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
    struct stat sb;
    int e = 0;
    if (fstat(fd, &sb) != 0) e = errno;
    else if (!S_ISREG(sb.st_mode) && (append || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)))) {
        close(fd);
        return emx_seterr(err, errlen, "%s is %s: not a file this output can be written to", path,
                          emx_out_kind_name(sb.st_mode));
    } else if (!append && S_ISREG(sb.st_mode) && ftruncate(fd, 0) != 0) e = errno;
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) e = errno;
    else if (!(o->f = fdopen(fd, append ? "a" : "w"))) e = errno;
    if (!e) return 0;
    close(fd);
    return emx_seterr(err, errlen, "%s: %s", path, strerror(e));
}

int emx_out_open(EmxOut *o, const char *path, EmxOutKind kind, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->path = path;
    if (emx_out_check(path, kind, err, errlen) != 0) return -1;
    if (!strcmp(path, "-")) {
        o->f = stdout;
        o->is_stdout = 1;
        return 0;
    }
    return kind == EMX_OUT_REPLACE ? open_replace(o, path, err, errlen) : open_stream(o, path, kind, err, errlen);
}

// The folder holding path fsynced: a rename is durable once its folder is on disk (best effort:
// some filesystems refuse fsync on a folder).
static void sync_folder(const char *path) {
    char dir[4096];
    if (folder_of(path, dir, sizeof dir) != 0) return;
    const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    (void)fsync(dfd);
    close(dfd);
}

int emx_out_close(EmxOut *o, char *err, size_t errlen) {
    if (!o->f) return 0;
    FILE *f = o->f;
    o->f = NULL;
    errno = 0;
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (o->is_stdout) return bad ? emx_seterr(err, errlen, "stdout: %s", e ? strerror(e) : "write failed") : 0;
    if (!bad && o->kind == EMX_OUT_REPLACE && fsync(fileno(f)) != 0) bad = 1, e = errno;
    if (fclose(f) != 0 && !bad) bad = 1, e = errno;
    if (o->kind != EMX_OUT_REPLACE)
        return bad ? emx_seterr(err, errlen, "%s: %s", o->path, e ? strerror(e) : "write failed") : 0;
    struct stat sb;  // checked again: the path may have become something a rename must not replace
    if (!bad && lstat(o->path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        unlink(o->tmp);
        o->tmp[0] = 0;
        return emx_seterr(err, errlen, "%s is %s, not a regular file: refusing to replace it", o->path,
                          emx_out_kind_name(sb.st_mode));
    }
    if (!bad && rename(o->tmp, o->path) != 0) bad = 1, e = errno;
    if (bad) unlink(o->tmp);
    else sync_folder(o->path);
    o->tmp[0] = 0;
    return bad ? emx_seterr(err, errlen, "%s: %s", o->path, e ? strerror(e) : "write failed") : 0;
}

void emx_out_discard(EmxOut *o) {
    if (o->f && !o->is_stdout) fclose(o->f);
    else if (o->f) fflush(o->f);
    o->f = NULL;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
}
