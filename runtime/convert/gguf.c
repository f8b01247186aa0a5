// gguf.c — GGUF reader: mmap, index keys and tensors, validate every size against the file.
#include "runtime/convert/gguf.h"

#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const uint8_t *base;
    uint64_t size, pos;
    char *err; size_t errlen;
    const char *path;
} Cursor;

static int fail(Cursor *c, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s: offset %llu: %s", c->path, (unsigned long long)c->pos, msg);
    return -1;
}

static int need(Cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos) return fail(c, "%s: needs %llu bytes, file has %llu left (truncated?)",
                                          what, (unsigned long long)n, (unsigned long long)(c->size - c->pos));
    return 0;
}

static int rd_u32(Cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(Cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(Cursor *c, const uint8_t **s, uint64_t *len, const char *what) {
    if (rd_u64(c, len, what)) return -1;
    if (need(c, *len, what)) return -1;
    *s = c->base + c->pos;
    c->pos += *len;
    return 0;
}

static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

static int read_kv(Cursor *c, GGUFKV *kv) {
    const uint8_t *k;
    uint64_t klen;
    if (rd_str(c, &k, &klen, "key")) return -1;
    kv->key = (const char *)k;
    kv->key_len = klen;
    if (rd_u32(c, &kv->type, "value type")) return -1;
    if (kv->type == GGUF_STRING) {
        return rd_str(c, &kv->value, &kv->str_len, "string value");
    } else if (kv->type == GGUF_ARRAY) {
        if (rd_u32(c, &kv->arr_type, "array type") || rd_u64(c, &kv->arr_n, "array length")) return -1;
        kv->value = c->base + c->pos;
        if (kv->arr_type == GGUF_STRING) {
            // Each element needs at least its 8-byte length: bound n before allocating.
            if (kv->arr_n > (c->size - c->pos) / 8) return fail(c, "key %s: string array of %llu elements cannot fit",
                                                               ESCN(k, klen), (unsigned long long)kv->arr_n);
            kv->arr_strings = malloc(kv->arr_n * sizeof *kv->arr_strings + 1);
            kv->arr_str_lens = malloc(kv->arr_n * sizeof *kv->arr_str_lens + 1);
            if (!kv->arr_strings || !kv->arr_str_lens) return fail(c, "out of memory");
            for (uint64_t i = 0; i < kv->arr_n; i++)
                if (rd_str(c, (const uint8_t **)&kv->arr_strings[i], (uint64_t *)&kv->arr_str_lens[i], "array string")) return -1;
            return 0;
        }
        uint64_t es = scalar_size(kv->arr_type);
        if (es == 0) return fail(c, "key %s: unsupported array element type %u", ESCN(k, klen), kv->arr_type);
        if (kv->arr_n > (c->size - c->pos) / es) return fail(c, "key %s: array of %llu elements past end of file",
                                                            ESCN(k, klen), (unsigned long long)kv->arr_n);
        c->pos += kv->arr_n * es;
        return 0;
    }
    uint64_t s = scalar_size(kv->type);
    if (s == 0) return fail(c, "key %s: unknown value type %u", ESCN(k, klen), kv->type);
    if (need(c, s, "scalar value")) return -1;
    kv->value = c->base + c->pos;
    c->pos += s;
    return 0;
}

uint64_t ggml_block_elems(uint32_t type) {
    switch (type) {
    case GGML_F32: case GGML_F16: case GGML_BF16: return 1;
    case GGML_Q4_0: case GGML_Q4_1: case GGML_Q5_0: case GGML_Q5_1: case GGML_Q8_0: case GGML_Q8_1: return 32;
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K: case GGML_Q8_K: return 256;
    default: return 0;
    }
}

uint64_t ggml_block_bytes(uint32_t type) {
    switch (type) {
    case GGML_F32: return 4;
    case GGML_F16: case GGML_BF16: return 2;
    case GGML_Q4_0: return 18;
    case GGML_Q4_1: return 20;
    case GGML_Q5_0: return 22;
    case GGML_Q5_1: return 24;
    case GGML_Q8_0: return 34;
    case GGML_Q8_1: return 36;
    case GGML_Q2_K: return 84;
    case GGML_Q3_K: return 110;
    case GGML_Q4_K: return 144;
    case GGML_Q5_K: return 176;
    case GGML_Q6_K: return 210;
    case GGML_Q8_K: return 292;
    default: return 0;
    }
}

const char *ggml_type_name(uint32_t type) {
    switch (type) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    case GGML_Q4_0: return "Q4_0";
    case GGML_Q4_1: return "Q4_1";
    case GGML_Q5_0: return "Q5_0";
    case GGML_Q5_1: return "Q5_1";
    case GGML_Q8_0: return "Q8_0";
    case GGML_Q8_1: return "Q8_1";
    case GGML_Q2_K: return "Q2_K";
    case GGML_Q3_K: return "Q3_K";
    case GGML_Q4_K: return "Q4_K";
    case GGML_Q5_K: return "Q5_K";
    case GGML_Q6_K: return "Q6_K";
    case GGML_Q8_K: return "Q8_K";
    default: return "unknown";
    }
}

// Maps the whole file read-only into f->map / f->map_size (nothing to undo on failure).
static int map_file(GGUFFile *f, const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        emx_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 24) {
        emx_seterr(err, errlen, "%s: too small to be a GGUF file (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    f->map_size = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        emx_seterr(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

// Magic, version, counts and the key/value section; allocates f->kv and f->tensors and
// sets f->alignment. The cursor ends at the first tensor info.
static int read_header(Cursor *c, GGUFFile *f) {
    if (memcmp(c->base, "GGUF", 4) != 0) return fail(c, "bad magic (not a GGUF file)");
    c->pos = 4;
    if (rd_u32(c, &f->version, "version")) return -1;
    if (f->version != 2 && f->version != 3) return fail(c, "unsupported GGUF version %u (want 2 or 3)", f->version);
    if (rd_u64(c, &f->n_tensors, "tensor count") || rd_u64(c, &f->n_kv, "kv count")) return -1;
    // Every kv needs >= 12 bytes and every tensor info >= 24: bound counts before allocating.
    if (f->n_kv > f->map_size / 12 || f->n_tensors > f->map_size / 24)
        return fail(c, "implausible counts: %llu keys, %llu tensors for a %zu-byte file",
                    (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors, f->map_size);
    f->kv = calloc(f->n_kv + 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors + 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) return fail(c, "out of memory");
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (read_kv(c, &f->kv[i])) return -1;
    f->alignment = 32;
    int64_t a;
    if (gguf_get_i64(f, "general.alignment", &a) == 0) {
        if (a <= 0 || (a & (a - 1)) || a > 1 << 20)
            return fail(c, "general.alignment = %lld is not a power of two", (long long)a);
        f->alignment = (uint64_t)a;
    }
    return 0;
}

// One tensor info: name, dims (ne[] padded with 1s), type, byte size; its data offset
// (relative to the data section) goes to *offset.
static int read_tensor_info(Cursor *c, GGUFTensor *t, uint64_t *offset) {
    const uint8_t *name;
    uint64_t nlen;
    if (rd_str(c, &name, &nlen, "tensor name") || rd_u32(c, &t->n_dims, "tensor n_dims")) return -1;
    t->name = (const char *)name;
    t->name_len = nlen;
    if (t->n_dims < 1 || t->n_dims > 4) return fail(c, "tensor %s: n_dims %u not in 1..4", ESCN(name, nlen), t->n_dims);
    uint64_t n = 1;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (rd_u64(c, &t->ne[d], "tensor dim")) return -1;
        if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || n > (1ull << 40) / t->ne[d])
            return fail(c, "tensor %s: dimension %u = %llu out of range", ESCN(name, nlen), d, (unsigned long long)t->ne[d]);
        n *= t->ne[d];
    }
    if (rd_u32(c, &t->type, "tensor type") || rd_u64(c, offset, "tensor offset")) return -1;
    uint64_t be = ggml_block_elems(t->type), bb = ggml_block_bytes(t->type);
    if (be == 0) return fail(c, "tensor %s: unsupported ggml type %u", ESCN(name, nlen), t->type);
    if (t->ne[0] % be)
        return fail(c, "tensor %s: row length %llu not a multiple of the %s block (%llu)", ESCN(name, nlen),
                    (unsigned long long)t->ne[0], ggml_type_name(t->type), (unsigned long long)be);
    t->nbytes = n / be * bb;
    return 0;
}

// Points each tensor's data into the map: the data section starts at the cursor rounded up to
// the alignment, and every [offset, +nbytes) must lie inside the file.
static int place_tensors(Cursor *c, GGUFFile *f, const uint64_t *offsets) {
    uint64_t data_start = (c->pos + f->alignment - 1) / f->alignment * f->alignment;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        GGUFTensor *t = &f->tensors[i];
        if (offsets[i] % f->alignment || offsets[i] > f->map_size || data_start > f->map_size - offsets[i] ||
            t->nbytes > f->map_size - data_start - offsets[i]) {
            c->pos = data_start;
            return fail(c, "tensor %s: data [%llu, +%llu) past end of file (%zu bytes)", ESCN(t->name, t->name_len),
                        (unsigned long long)(data_start + offsets[i]), (unsigned long long)t->nbytes, f->map_size);
        }
        t->data = (const uint8_t *)f->map + data_start + offsets[i];
    }
    return 0;
}

int gguf_open(GGUFFile *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->path = path;
    if (map_file(f, path, err, errlen)) return -1;
    Cursor c = {f->map, f->map_size, 0, err, errlen, path};
    if (read_header(&c, f)) goto bad;
    uint64_t *offsets = calloc(f->n_tensors + 1, sizeof *offsets);
    if (!offsets) {
        fail(&c, "out of memory");
        goto bad;
    }
    int rc = 0;
    for (uint64_t i = 0; i < f->n_tensors && rc == 0; i++) rc = read_tensor_info(&c, &f->tensors[i], &offsets[i]);
    if (rc == 0) rc = place_tensors(&c, f, offsets);
    free(offsets);
    if (rc == 0) return 0;
bad:
    gguf_close(f);
    return -1;
}

void gguf_close(GGUFFile *f) {
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free((void *)f->kv[i].arr_strings);
            free((void *)f->kv[i].arr_str_lens);
        }
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_size);
    memset(f, 0, sizeof *f);
}

const GGUFKV *gguf_find(const GGUFFile *f, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key_len == n && memcmp(f->kv[i].key, key, n) == 0) return &f->kv[i];
    return NULL;
}

const GGUFTensor *gguf_find_tensor(const GGUFFile *f, const char *name) {
    size_t n = strlen(name);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name_len == n && memcmp(f->tensors[i].name, name, n) == 0) return &f->tensors[i];
    return NULL;
}

static int scalar_to_f64(uint32_t type, const uint8_t *p, double *out, int64_t *iout) {
    int64_t iv = 0;
    double dv = 0;
    switch (type) {
    case GGUF_U8: case GGUF_BOOL: iv = *p; dv = iv; break;
    case GGUF_I8: iv = (int8_t)*p; dv = iv; break;
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); iv = v; dv = v; break; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); iv = v; dv = v; break; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); iv = v; dv = v; break; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); iv = v; dv = v; break; }
    case GGUF_U64: { uint64_t v; memcpy(&v, p, 8); if (v > INT64_MAX) return -1; iv = (int64_t)v; dv = (double)v; break; }
    case GGUF_I64: { int64_t v; memcpy(&v, p, 8); iv = v; dv = (double)v; break; }
    case GGUF_F32: { float v; memcpy(&v, p, 4); dv = v; break; }
    case GGUF_F64: { double v; memcpy(&v, p, 8); dv = v; break; }
    default: return -1;
    }
    if (type == GGUF_F32 || type == GGUF_F64) {
        // A float outside int64's range (or NaN) is not convertible: the cast would be undefined.
        if (iout && !(dv >= -0x1p63 && dv < 0x1p63)) return -1;
        iv = iout ? (int64_t)dv : 0;
    }
    if (out) *out = dv;
    if (iout) *iout = iv;
    return 0;
}

int gguf_get_i64(const GGUFFile *f, const char *key, int64_t *out) {
    const GGUFKV *kv = gguf_find(f, key);
    return kv ? scalar_to_f64(kv->type, kv->value, NULL, out) : -1;
}

int gguf_get_f64(const GGUFFile *f, const char *key, double *out) {
    const GGUFKV *kv = gguf_find(f, key);
    return kv ? scalar_to_f64(kv->type, kv->value, out, NULL) : -1;
}

const char *gguf_get_str(const GGUFFile *f, const char *key, size_t *len) {
    const GGUFKV *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_STRING) return NULL;
    if (len) *len = kv->str_len;
    return (const char *)kv->value;
}

int gguf_arr_i64(const GGUFKV *kv, uint64_t i, int64_t *out) {
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type == GGUF_STRING) return -1;
    return scalar_to_f64(kv->arr_type, kv->value + i * scalar_size(kv->arr_type), NULL, out);
}

int gguf_arr_f64(const GGUFKV *kv, uint64_t i, double *out) {
    if (kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type == GGUF_STRING) return -1;
    return scalar_to_f64(kv->arr_type, kv->value + i * scalar_size(kv->arr_type), out, NULL);
}
