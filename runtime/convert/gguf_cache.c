// gguf_cache.c — a GGUF's converted model file in the cache folder: its name, its reuse, its
// conversion under a lock.
#include "runtime/convert/gguf_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "runtime/convert/conv_plan.h"
#include "runtime/model_verify.h"

int emx_is_gguf(const char *path) {
    char magic[4];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    return got == 4 && memcmp(magic, "GGUF", 4) == 0;
}

// The cache folder: dir, else $EMX_CACHE, else $XDG_CACHE_HOME/entropix, else ~/.cache/entropix.
static int cache_folder(const char *dir, char *out, size_t cap, char *err, size_t errlen) {
    const char *env = getenv(EMX_CACHE_ENV), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (dir && *dir) n = snprintf(out, cap, "%s", dir);
    else if (env && *env) n = snprintf(out, cap, "%s", env);
    else if (xdg && *xdg) n = snprintf(out, cap, "%s/entropix", xdg);
    else if (home && *home) n = snprintf(out, cap, "%s/.cache/entropix", home);
    else return emx_seterr(err, errlen, "no cache folder for the converted GGUF: set %s or HOME", EMX_CACHE_ENV);
    if (n < 0 || (size_t)n >= cap) return emx_seterr(err, errlen, "cache folder name too long");
    return 0;
}

// mkdir -p, each missing folder with 0777 less the umask.
static int make_folders(char *path, char *err, size_t errlen) {
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        int bad = mkdir(path, 0777) != 0 && errno != EEXIST;
        int e = errno;
        *p = c;
        if (bad) return emx_seterr(err, errlen, "cannot create the cache folder %s: %s", path, strerror(e));
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return emx_seterr(err, errlen, "cache folder %s is not a folder", path);
    return 0;
}

// "<stem>.<path key>-" into prefix: the GGUF's file name without ".gguf" (bytes other than
// letters, digits, '.', '-', '_' as '_'), then the hash of its real path.
static void cache_prefix(const char *path, const char *real, char *prefix, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) n -= 5;
    if (n > 96) n = 96;
    char stem[97];
    for (size_t i = 0; i < n; i++) {
        char c = base[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
        stem[i] = ok ? c : '_';
    }
    stem[n] = 0;
    uint64_t k = emx_hash64(real, strlen(real), EMX_HASH64_SEED);
    snprintf(prefix, cap, "%s.%012llx-", n ? stem : "model", (unsigned long long)(k & 0xffffffffffffull));
}

// The state key: what changes when the GGUF does, and the format this build writes.
static uint64_t state_key(const struct stat *st) {
    const uint64_t v[] = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                          (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec, EMX_VERSION, EMX_DTYPE_COUNT};
    return emx_hash64(v, sizeof v, EMX_HASH64_SEED);
}

// Removes the folder's other "<prefix>*.bin" files: this GGUF's conversions of earlier states.
static void remove_stale(const char *folder, const char *prefix, const char *keep) {
    DIR *d = opendir(folder);
    if (!d) return;
    size_t pl = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, prefix, pl) || n < 4 || strcmp(e->d_name + n - 4, ".bin") || !strcmp(e->d_name, keep))
            continue;
        char p[PATH_MAX + 256];
        snprintf(p, sizeof p, "%s/%s", folder, e->d_name);
        unlink(p);
    }
    closedir(d);
}

// The conversion itself: every matrix in its own type, the per-tensor log left out; the note
// once the GGUF has opened (a damaged one gives the reader's line alone), none when prog is NULL
// (the library, which never prints).
static int convert_gguf(const char *src, const char *out, const char *prog, char *err, size_t errlen) {
    ConvSource s;
    ModelWriter w;
    mw_init(&w);
    int rc = src_open_gguf(&s, src, err, errlen);
    if (rc == 0) {
        if (prog) fprintf(stderr, "%s: converting %s -> %s (once; reused while %s is unchanged)\n", prog, src, out, src);
        conv_set_chat_template(&s, -1);
        const ConvPlanOptions po = {.dtype = CONV_DTYPE_KEEP, .keep_emb_q8 = 1, .log = NULL};
        rc = conv_collect(&s, &po, &w, err, errlen);
    }
    if (rc == 0) {
        char why[512];
        rc = mw_write(&w, out, &s.cfg, &s.ext, &s.tok, NULL, why, sizeof why);
        if (rc) emx_seterr(err, errlen, "the converted model was not written to the cache (%s): %s", why, out);
    }
    mw_free(&w);
    src_free(&s);
    return rc;
}

// Under the lock: converts unless another process did meanwhile.
static int convert_locked(const char *path, const char *folder, const char *name, const char *prefix, const char *out,
                          const char *prog, char *err, size_t errlen) {
    char lock[PATH_MAX + 256];
    snprintf(lock, sizeof lock, "%s/.%s.lock", folder, name);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)  // the way to choose another: the programs' flag, or the library's field (prog NULL)
        return emx_seterr(err, errlen, "%s: cannot write in the cache folder %s: %s (choose another with %s or %s)", path,
                          folder, strerror(errno), prog ? "--gguf-cache" : "entropix_model_params.gguf_cache",
                          EMX_CACHE_ENV);
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}  // flock unsupported: converts unlocked (the rename is atomic)
    struct stat st;
    int rc = 0;
    if (stat(out, &st) != 0) {
        rc = convert_gguf(path, out, prog, err, errlen);
        if (rc == 0) remove_stale(folder, prefix, name);
    }
    // Unlinked while held: a process waiting on it finds the cache file when it gets the lock;
    // one arriving later finds the file and takes no lock (two converting at once after a
    // failure would still each rename a whole file into place).
    unlink(lock);
    close(fd);
    return rc;
}

int emx_gguf_model_path(const char *path, const char *cache_dir, const char *prog, char *out, size_t cap, char *err,
                        size_t errlen) {
    struct stat st;
    if (!emx_is_gguf(path) || stat(path, &st) != 0) {  // not a GGUF: the loader opens (or refuses) it
        if (snprintf(out, cap, "%s", path) >= (int)cap) return emx_seterr(err, errlen, "%s: path too long", path);
        return 0;
    }
    char real[PATH_MAX], folder[PATH_MAX], prefix[160], name[200];
    if (!realpath(path, real)) return emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
    if (cache_folder(cache_dir, folder, sizeof folder, err, errlen) || make_folders(folder, err, errlen)) return -1;
    cache_prefix(path, real, prefix, sizeof prefix);
    snprintf(name, sizeof name, "%s%012llx.bin", prefix, (unsigned long long)(state_key(&st) & 0xffffffffffffull));
    if (snprintf(out, cap, "%s/%s", folder, name) >= (int)cap) return emx_seterr(err, errlen, "%s: cache path too long", folder);
    struct stat cs;
    if (stat(out, &cs) == 0) return 0;  // converted before, from this state of the GGUF
    return convert_locked(path, folder, name, prefix, out, prog, err, errlen);
}
