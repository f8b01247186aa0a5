// model_writer.c — lay out and write a model file, tensor by tensor, through a temporary file
// beside it (".<out>.XXXXXX.tmp"), checked and then renamed over <out>.
#include "runtime/convert/model_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "base/out_file.h"
#include "runtime/convert/ggml_dequant.h"
#include "runtime/convert/tensor_encode.h"
#include "runtime/model.h"
#include "runtime/model_verify.h"

// Rows decoded at a time: bounds memory to about this many f32 values per chunk.
#define CHUNK_FLOATS (4u << 20)

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void mw_init(ModelWriter *w) { memset(w, 0, sizeof *w); }

void mw_free(ModelWriter *w) {
    free(w->t);
    memset(w, 0, sizeof *w);
}

int mw_add(ModelWriter *w, const char *name, uint32_t dtype, uint32_t ndim, uint64_t rows, uint64_t cols,
           uint32_t src_type, const void *src, char *err, size_t errlen) {
    if (strlen(name) >= EMX_NAME_BYTES) return emx_seterr(err, errlen, "tensor %s: name longer than %u bytes", name, EMX_NAME_BYTES - 1);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return emx_seterr(err, errlen, "tensor %s: added twice", name);
    if (!ggml_dequant_supported(src_type))
        return emx_seterr(err, errlen, "tensor %s: source type %s cannot be decoded", name, ggml_type_name(src_type));
    // Vectors (ndim 1) are decoded as one row of `rows` elements; matrices row by row.
    if (ggml_row_bytes(src_type, ndim == 1 ? rows : cols) == 0)
        return emx_seterr(err, errlen, "tensor %s: %llu columns do not fit source type %s", name, (unsigned long long)cols,
                    ggml_type_name(src_type));
    if (rows == 0 || cols == 0 || emx_tensor_bytes(dtype, rows, cols) == 0)
        return emx_seterr(err, errlen, "tensor %s: %s cannot hold [%llu, %llu]", name, emx_dtype_name(dtype),
                    (unsigned long long)rows, (unsigned long long)cols);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        MwTensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return emx_seterr(err, errlen, "out of memory");
        w->t = t;
        w->cap = cap;
    }
    MwTensor *t = &w->t[w->n++];
    *t = (MwTensor){.dtype = dtype, .ndim = ndim, .rows = rows, .cols = cols, .src_type = src_type, .src = src};
    memcpy(t->name, name, strlen(name) + 1);
    return 0;
}

static int pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (uint64_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

// Error statistics of one tensor: sums over all weights.
typedef struct {
    double sum_sq_w, sum_sq_err, max_abs_err;
} ErrStats;

// Converts rows [r0, r0+n) (`x`: their f32 values) to t->dtype (tensor_encode.h: an exact copy
// of the source's blocks where our dtype holds them) and writes them at their place in the
// tensor starting at file offset `off`. `tmp` has room for the converted chunk and `back` for its
// f32 decoding (to measure the error).
static int write_chunk(int fd, const MwTensor *t, uint64_t off, uint64_t r0, uint64_t n, const float *x, void *tmp,
                       float *back, ErrStats *st) {
    uint64_t cols = t->cols, count = n * cols, qrow = 0, prow = 0;
    te_encode_rows(t->dtype, t->src_type, t->src, cols, r0, n, x, tmp);
    const int n_param = te_parts(t->dtype, cols, &qrow, &prow);
    if (n_param == 0) {  // f32, f16, bf16: rows as they are
        const uint64_t es = t->dtype == EMX_F32 ? 4 : 2;
        if (pwrite_all(fd, tmp, count * es, off + r0 * cols * es)) return -1;
        if (t->dtype == EMX_F32) return 0;
    } else {
        // A chunk is an [n, cols] tensor: its quants, then its scales (then the mins). In the
        // file the quants of all rows come first, then the scales of all rows, then the mins, so
        // the parts go to different places.
        const uint8_t *q = tmp;
        if (pwrite_all(fd, q, n * qrow, off + r0 * qrow)) return -1;
        for (int k = 0; k < n_param; k++)
            if (pwrite_all(fd, q + n * qrow + k * n * prow, n * prow, off + t->rows * qrow + k * t->rows * prow + r0 * prow))
                return -1;
    }
    for (uint64_t r = 0; r < n; r++) emx_dequantize_row(t->dtype, tmp, n, cols, r, back + r * cols);
    for (uint64_t i = 0; i < count; i++) {
        double e = fabs((double)back[i] - (double)x[i]);
        st->sum_sq_w += (double)x[i] * x[i];
        st->sum_sq_err += e * e;
        if (e > st->max_abs_err) st->max_abs_err = e;
    }
    return 0;
}

static int write_tensor(int fd, const MwTensor *tensor, uint64_t off, FILE *log, char *err, size_t errlen) {
    // A vector [n] is one row of n elements for decoding (its source may be a block type whose
    // blocks span the whole vector); its layout in the file is the same either way.
    MwTensor row = *tensor;
    if (row.ndim == 1) {
        row.cols = row.rows;
        row.rows = 1;
    }
    const MwTensor *t = &row;
    uint64_t chunk_rows = CHUNK_FLOATS / t->cols;
    if (chunk_rows == 0) chunk_rows = 1;
    if (chunk_rows > t->rows) chunk_rows = t->rows;
    size_t nf = (size_t)(chunk_rows * t->cols);
    float *x = malloc(nf * sizeof *x), *back = malloc(nf * sizeof *back);
    void *tmp = malloc(nf * 4 + 64);  // the largest converted chunk: f32
    int rc = 0;
    ErrStats st = {0, 0, 0};
    if (!x || !back || !tmp) {
        rc = emx_seterr(err, errlen, "tensor %s: out of memory for a chunk of %llu rows", t->name, (unsigned long long)chunk_rows);
        goto done;
    }
    for (uint64_t r0 = 0; r0 < t->rows; r0 += chunk_rows) {
        uint64_t n = t->rows - r0 < chunk_rows ? t->rows - r0 : chunk_rows;
        if (ggml_dequantize_rows(t->src_type, t->src, t->cols, r0, n, x)) {
            rc = emx_seterr(err, errlen, "tensor %s: cannot decode source type %s", t->name, ggml_type_name(t->src_type));
            goto done;
        }
        for (uint64_t i = 0; i < n * t->cols; i++)
            if (!isfinite(x[i])) {
                rc = emx_seterr(err, errlen, "tensor %s: element [%llu, %llu] = %g is not finite", t->name,
                          (unsigned long long)(r0 + i / t->cols), (unsigned long long)(i % t->cols), (double)x[i]);
                goto done;
            }
        if (write_chunk(fd, t, off, r0, n, x, tmp, back, &st)) {
            rc = emx_seterr(err, errlen, "tensor %s: write failed: %s", t->name, strerror(errno));
            goto done;
        }
    }
    if (log) {
        char shape[64];
        if (t->ndim == 1) snprintf(shape, sizeof shape, "[%llu]", (unsigned long long)t->cols);
        else snprintf(shape, sizeof shape, "[%llu, %llu]", (unsigned long long)t->rows, (unsigned long long)t->cols);
        fprintf(log, "  %-24s %-5s -> %-4s %-14s", t->name, ggml_type_name(t->src_type), emx_dtype_name(t->dtype), shape);
        if (te_exact_copy(t->dtype, t->src_type))
            fprintf(log, "  %s\n", st.sum_sq_err == 0 ? "exact (blocks copied)" : "COPY MISMATCH");
        else if (t->dtype == EMX_F32 || st.sum_sq_err == 0) fprintf(log, "  exact\n");
        else
            // Measured against the source's own values (a K-quant's as its blocks decode): the
            // error this conversion adds, on top of any the source's quantisation already had.
            fprintf(log, "  %s rel_rms_err %.3e  max_abs_err %.3e\n",
                    ggml_block_elems(t->src_type) > 1 ? "added by our requantisation:" : "quantisation:",
                    st.sum_sq_w > 0 ? sqrt(st.sum_sq_err / st.sum_sq_w) : 0.0, st.max_abs_err);
    }
done:
    free(x);
    free(back);
    free(tmp);
    return rc;
}

// The temporary file of a write in progress: removed by a SIGINT/SIGTERM/SIGHUP arriving
// meanwhile (a kill -9 leaves it: its name, ".<out>.XXXXXX.tmp", is hidden and says what it is).
static char active_tmp[4096];
static volatile sig_atomic_t tmp_active;

static void on_signal(int sig) {
    if (tmp_active) unlink(active_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

// Header, tokenizer section, directory and tensors into fd, then the length and the
// integrity record (the hashes of what is now in the file, read back through a mapping).
static int write_all(int fd, const char *tmp_path, const ModelWriter *w, EmxFileHeader *h, const char *tok_buf,
                     const EmxTensorEntry *dir, FILE *log, char *err, size_t errlen) {
    if (pwrite_all(fd, h, sizeof *h, 0) || pwrite_all(fd, tok_buf, h->tokenizer_bytes, h->tokenizer_offset) ||
        pwrite_all(fd, dir, w->n * sizeof *dir, h->tensor_dir_offset))
        return emx_seterr(err, errlen, "%s: write failed: %s", tmp_path, strerror(errno));
    for (size_t i = 0; i < w->n; i++)
        if (write_tensor(fd, &w->t[i], dir[i].offset, log, err, errlen)) return -1;
    // Gaps between tensors read back as zeros; the length must still be exactly file_bytes.
    if (ftruncate(fd, (off_t)h->file_bytes) != 0)
        return emx_seterr(err, errlen, "%s: cannot set length: %s", tmp_path, strerror(errno));
    void *map = mmap(NULL, h->file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return emx_seterr(err, errlen, "%s: mmap failed: %s", tmp_path, strerror(errno));
    int bad = emx_check_record(map, h->file_bytes, h);
    munmap(map, h->file_bytes);
    if (bad) return emx_seterr(err, errlen, "%s: sections outside the file", tmp_path);
    if (pwrite_all(fd, h, sizeof *h, 0)) return emx_seterr(err, errlen, "%s: write failed: %s", tmp_path, strerror(errno));
    if (fsync(fd) != 0) return emx_seterr(err, errlen, "%s: fsync failed: %s", tmp_path, strerror(errno));
    return 0;
}

// The finished temporary file is opened as the runtime will open it, then renamed over out
// (emx_out_close: fsync, rename, the folder fsynced): a file the loader rejects never replaces
// out (the old one stays).
static int install(EmxOut *o, char *err, size_t errlen) {
    EmxModel check;
    char why[512];
    if (emx_model_open_load(&check, o->tmp, EMX_LOAD_MMAP, why, sizeof why)) {
        size_t k = strlen(o->tmp);  // the loader names the temporary file: drop it
        const char *msg = strncmp(why, o->tmp, k) == 0 && why[k] == ':' ? why + k + 2 : why;
        return emx_seterr(err, errlen, "the converted model fails the loader's check (%s); %s was not written", msg, o->path);
    }
    emx_model_close(&check);
    return emx_out_close(o, err, errlen);
}

int mw_write(const ModelWriter *w, const char *out_path, const EmxConfig *cfg, const EmxConfigExt *ext,
             const TokenizerData *tok, FILE *log, char *err, size_t errlen) {
    // The tokenizer section is serialised in memory first: its size places the directory.
    char *tok_buf = NULL;
    size_t tok_len = 0;
    FILE *mem = open_memstream(&tok_buf, &tok_len);
    if (!mem) return emx_seterr(err, errlen, "out of memory for the tokenizer section");
    uint64_t tok_bytes = tokdata_write(tok, mem);
    if (fclose(mem) != 0 || tok_bytes == 0 || tok_bytes != tok_len) {
        free(tok_buf);
        return emx_seterr(err, errlen, "%s: cannot serialise the tokenizer section", out_path);
    }

    EmxFileHeader h;
    memset(&h, 0, sizeof h);  // padding bytes too: the file is reproducible
    memcpy(h.magic, EMX_MAGIC, 8);
    // version 1 when the model needs nothing of version 2: older builds keep reading it
    const EmxConfigExt plain = emx_config_ext_default();
    const int v2 = ext && memcmp(ext, &plain, sizeof plain) != 0;
    h.version = v2 ? EMX_VERSION : EMX_VERSION_1;
    h.header_bytes = v2 ? EMX_HEADER_V2_BYTES : EMX_HEADER_V1_BYTES;
    h.config = *cfg;
    h.tokenizer_offset = align_up(h.header_bytes, 8);
    h.tokenizer_bytes = tok_bytes;
    h.tensor_dir_offset = align_up(h.tokenizer_offset + tok_bytes, 8);
    h.n_tensors = (uint32_t)w->n;

    EmxTensorEntry *dir = calloc(w->n + 1, sizeof *dir);
    if (!dir) {
        free(tok_buf);
        return emx_seterr(err, errlen, "out of memory");
    }
    uint64_t pos = h.tensor_dir_offset + w->n * sizeof *dir;
    for (size_t i = 0; i < w->n; i++) {
        const MwTensor *t = &w->t[i];
        memcpy(dir[i].name, t->name, sizeof t->name);
        dir[i].dtype = t->dtype;
        dir[i].ndim = t->ndim;
        dir[i].shape[0] = t->rows;
        dir[i].shape[1] = t->cols;
        dir[i].offset = pos = align_up(pos, EMX_ALIGN);
        dir[i].nbytes = emx_tensor_bytes(t->dtype, t->rows, t->cols);
        pos += dir[i].nbytes;
    }
    h.file_bytes = pos;

    int rc = -1;
    struct sigaction sa, old[3];
    static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    // Signals are held while the file is created, so none can leave it behind unnoticed.
    sigset_t block, prev;
    sigemptyset(&block);
    for (int i = 0; i < 3; i++) sigaddset(&block, sigs[i]), sigaction(sigs[i], &sa, &old[i]);
    sigprocmask(SIG_BLOCK, &block, &prev);
    // ".<name of out>.XXXXXX.tmp" beside out, unique per call: two converts to one output never
    // share it (base/out_file.h; "-" is refused: a model is written with pwrite and mapped back)
    EmxOut o = {0};
    int fd = -1;
    if (!strcmp(out_path, "-")) emx_seterr(err, errlen, "-: a model is written to a file, not to stdout");
    else if (emx_out_open(&o, out_path, EMX_OUT_REPLACE, err, errlen) == 0) fd = fileno(o.f);
    if (fd >= 0) snprintf(active_tmp, sizeof active_tmp, "%s", o.tmp);
    tmp_active = fd >= 0;
    sigprocmask(SIG_SETMASK, &prev, NULL);
    if (fd >= 0) {
        rc = v2 && pwrite_all(fd, ext, sizeof *ext, sizeof h)
                 ? emx_seterr(err, errlen, "%s: write failed: %s", o.tmp, strerror(errno))
                 : write_all(fd, o.tmp, w, &h, tok_buf, dir, log, err, errlen);
        if (rc == 0) rc = install(&o, err, errlen);
        sigprocmask(SIG_BLOCK, &block, &prev);
        emx_out_discard(&o);  // after a failure: closed, the temporary file removed (a no-op after install)
        tmp_active = 0;
        sigprocmask(SIG_SETMASK, &prev, NULL);
    }
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
    free(dir);
    free(tok_buf);
    return rc;
}
