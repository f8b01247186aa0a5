// run_io.c — ./run's checks before it writes or allocates (run_io.h).
#include "runtime/run_io.h"
#include "base/errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

int emx_run_check_stdio(void) {
    for (int fd = 0; fd <= 2; fd += 2)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n >= 0 && n != fd) close(n);  // not the lowest free fd: fd is open after all
        }
    if (fcntl(1, F_GETFD) < 0 && errno == EBADF) return EBADF;
    return 0;
}

// Who a path is: the file's (dev, ino) when it exists; else its directory's, and its name.
typedef struct {
    int exists, regular;
    dev_t dev;
    ino_t ino;
    char name[256];
} FileId;

static int file_id(const char *path, FileId *id) {
    memset(id, 0, sizeof *id);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        id->exists = 1;
        id->regular = S_ISREG(sb.st_mode);
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        return 0;
    }
    char *d = strdup(path), *b = strdup(path);
    int ok = d && b && stat(dirname(d), &sb) == 0;
    if (ok) {
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        snprintf(id->name, sizeof id->name, "%s", basename(b));
    }
    free(d);
    free(b);
    return ok ? 0 : -1;
}

int emx_run_check_outputs(const EmxRunPath *inputs, int n_in, const EmxRunPath *outputs, int n_out,
                          char *err, size_t errlen) {
    for (int o = 0; o < n_out; o++) {
        if (!outputs[o].path) continue;
        FileId out;
        if (file_id(outputs[o].path, &out) != 0) continue;  // its directory is missing: fopen says so
        for (int i = 0; i < n_in && out.exists && out.regular; i++) {
            FileId in;
            if (!inputs[i].path || file_id(inputs[i].path, &in) != 0 || !in.exists) continue;
            if (in.dev == out.dev && in.ino == out.ino) {
                emx_seterr(err, errlen, "%s %s is %s (%s): an output may not overwrite an input", outputs[o].flag,
                         outputs[o].path, inputs[i].flag, inputs[i].path);
                return -1;
            }
        }
        for (int p = 0; p < o; p++) {
            FileId prev;
            if (!outputs[p].path || file_id(outputs[p].path, &prev) != 0) continue;
            int same = prev.exists == out.exists && prev.dev == out.dev && prev.ino == out.ino &&
                       strcmp(prev.name, out.name) == 0 && (out.regular || !out.exists);
            if (same) {
                emx_seterr(err, errlen, "%s %s and %s %s are the same file: give each output its own",
                         outputs[p].flag, outputs[p].path, outputs[o].flag, outputs[o].path);
                return -1;
            }
        }
    }
    return 0;
}

int emx_run_check_output_kinds(const EmxRunPath *outputs, const EmxOutKind *kinds, int n_out, char *err,
                               size_t errlen) {
    char why[512];
    for (int o = 0; o < n_out; o++)
        if (outputs[o].path && emx_out_check(outputs[o].path, kinds[o], why, sizeof why) != 0)
            return emx_seterr(err, errlen, "%s %s", outputs[o].flag, why);
    return 0;
}

size_t emx_prompt_byte_bound(int ctx, size_t max_piece) {
    if (max_piece < 4) max_piece = 4;  // a UTF-8 character, whatever the vocabulary
    if (ctx < 1) ctx = 1;
    uint64_t b = (uint64_t)ctx * max_piece * 4 + (64u << 10);
    return b > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)b;
}

// As forward_cpu.c allocates (EMX_MAX_BATCH 256 rows per pass, PASS 8 softmax rows per thread).
uint64_t emx_cpu_state_bytes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, uint64_t *kv_bytes) {
    const uint64_t L = c->n_layers, q_dim = (uint64_t)c->n_heads * c->head_dim;
    const uint64_t kv_dim = (uint64_t)c->n_kv_heads * c->head_dim, T = ctx > 0 ? (uint64_t)ctx : 1;
    const uint64_t B = T < 256 ? T : 256, th = n_threads > 0 ? (uint64_t)n_threads : 1;
    uint64_t widest = c->dim > q_dim ? c->dim : q_dim;
    if (c->hidden_dim > widest) widest = c->hidden_dim;
    const uint64_t kv = 2 * L * T * kv_dim * (cache == EMX_KV_F16 ? 2 : sizeof(float));
    uint64_t act = B * (2 * (uint64_t)c->dim + 2 * q_dim + 2 * (uint64_t)c->hidden_dim) * sizeof(float);
    act += B * widest * 2;                                  // quantised rows and their scales
    act += L * c->n_heads * T * sizeof(float);              // the last position's scores
    act += th * 8 * T * sizeof(float);                      // softmax scratch
    act += (uint64_t)c->vocab_size * sizeof(float);         // logits
    if (kv_bytes) *kv_bytes = kv;
    return kv + act;
}

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

int emx_mem_check(uint64_t need, uint64_t kv, uint64_t avail, int ctx, const char *what, char *err,
                  size_t errlen) {
    if (avail == 0 || need <= avail) return 0;
    emx_seterr(err, errlen,
             "cpu: the KV cache does not fit: it needs %.1f MiB (KV cache %.1f, activations %.1f at ctx %d, %s), "
             "the machine has %.1f MiB available (a smaller --ctx-size may)",
             need / 1048576.0, kv / 1048576.0, (need - kv) / 1048576.0, ctx, what, avail / 1048576.0);
    return -1;
}
