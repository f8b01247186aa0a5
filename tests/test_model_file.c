// test_model_file.c — emx_model_open on good and bad model files. Each bad file is crafted in a
// temporary directory from a good converted file (build/models/stories260K.f32.bin, made by
// `make test-models`) by changing one field; opening it must fail with -1 and a one-line
// message naming the file and the offending field, and must not crash.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dtype.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "test_util.h"

#define GOOD_MODEL "models/stories260K.f32.bin"

typedef struct {
    char *buf;       // the good file's bytes, modified by each test
    size_t len;
    EmxFileHeader h; // its header, as read
    char dir[64];    // temporary directory for the crafted file
    char path[128];
} Fixture;

static void fixture_load(Fixture *f) {
    char p[512];
    test_build_path(p, sizeof p, GOOD_MODEL);
    f->buf = test_read_file(p, &f->len);
    cr_assert_not_null(f->buf, "cannot read %s (run `make test-models` first)", p);
    cr_assert_geq(f->len, sizeof f->h);
    memcpy(&f->h, f->buf, sizeof f->h);
    snprintf(f->dir, sizeof f->dir, "/tmp/emx-test-model-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/m.bin", f->dir);
}

static void fixture_free(Fixture *f) {
    unlink(f->path);
    rmdir(f->dir);
    free(f->buf);
}

static void put_header(Fixture *f) { memcpy(f->buf, &f->h, sizeof f->h); }

// Directory entry `i` of the crafted file (read and write back through memcpy).
static EmxTensorEntry get_entry(const Fixture *f, uint32_t i) {
    EmxTensorEntry e;
    memcpy(&e, f->buf + f->h.tensor_dir_offset + i * sizeof e, sizeof e);
    return e;
}

static void put_entry(Fixture *f, uint32_t i, const EmxTensorEntry *e) {
    memcpy(f->buf + f->h.tensor_dir_offset + i * sizeof *e, e, sizeof *e);
}

static uint32_t find_entry(const Fixture *f, const char *name) {
    for (uint32_t i = 0; i < f->h.n_tensors; i++) {
        EmxTensorEntry e = get_entry(f, i);
        if (strncmp(e.name, name, EMX_NAME_BYTES) == 0) return i;
    }
    cr_assert_fail("no tensor %s in the good file", name);
    return 0;
}

// Writes the first `len` bytes of the crafted buffer, opens it, expects failure with a message
// containing every one of `needles` (NULL-terminated) and the file name, on one line.
static void expect_failure_n(Fixture *f, size_t len, const char *const *needles) {
    FILE *out = fopen(f->path, "wb");
    cr_assert_not_null(out);
    cr_assert_eq(fwrite(f->buf, 1, len, out), len);
    fclose(out);
    EmxModel m;
    char err[512] = "";
    int rc = emx_model_open(&m, f->path, err, sizeof err);
    if (rc == 0) emx_model_close(&m);
    cr_assert_eq(rc, -1, "a crafted bad file opened (expected an error containing \"%s\")", needles[0]);
    cr_assert_not_null(strstr(err, f->path), "message does not name the file: %s", err);
    cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
    for (int i = 0; needles[i]; i++)
        cr_assert_not_null(strstr(err, needles[i]), "message lacks \"%s\": %s", needles[i], err);
    // copied into memory first (what large files get), validated as copied: the same refusal
    char err_copy[512] = "";
    rc = emx_model_open_load(&m, f->path, EMX_LOAD_COPY, err_copy, sizeof err_copy);
    if (rc == 0) emx_model_close(&m);
    cr_assert_eq(rc, -1, "a crafted bad file opened when copied");
    cr_assert_str_eq(err_copy, err);
}

#define EXPECT_FAILURE(f, ...) expect_failure_n((f), (f)->len, (const char *const[]){__VA_ARGS__, NULL})

Test(model_file, good_file_opens_with_the_llama2c_config) {
    char p[512];
    test_build_path(p, sizeof p, GOOD_MODEL);
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, p, err, sizeof err), 0, "%s", err);
    // stories260K's llama2.c header: dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512, seq 512.
    cr_assert_eq(m.cfg.arch, EMX_ARCH_LLAMA);
    cr_assert_eq(m.cfg.dim, 64);
    cr_assert_eq(m.cfg.hidden_dim, 172);
    cr_assert_eq(m.cfg.n_layers, 5);
    cr_assert_eq(m.cfg.n_heads, 8);
    cr_assert_eq(m.cfg.n_kv_heads, 4);
    cr_assert_eq(m.cfg.head_dim, 8);
    cr_assert_eq(m.cfg.vocab_size, 512);
    cr_assert_eq(m.cfg.max_seq_len, 512);
    cr_assert_eq(m.cfg.rope_style, EMX_ROPE_INTERLEAVED);
    cr_assert_eq(m.cfg.tied_output, 1);
    cr_assert_float_eq(m.cfg.norm_eps, 1e-5f, 1e-12);
    cr_assert_eq(m.tok.n_vocab, 512);
    cr_assert_eq(m.output.data, m.tok_embeddings.data, "tied: output must be the embedding");
    cr_assert_null(m.layers[0].q_norm.data);
    cr_assert_null(m.rope_freq_factors.data);
    cr_assert_eq(m.layers[4].wk.rows, 32);
    cr_assert_eq(m.layers[4].wk.cols, 64);
    cr_assert_eq(m.layers[4].w_down.cols, 172);
    // Every matrix and norm once (f32), the tied classifier once, plus one embedding row.
    uint64_t per_layer = 64 + 64 * 64 + 32 * 64 * 2 + 64 * 64 + 64 + 172 * 64 * 3;
    uint64_t want = 4 * (5 * per_layer + 64 + 512 * 64 + 64);
    cr_assert_eq(emx_model_weight_bytes_per_token(&m), want, "%llu vs %llu",
                 (unsigned long long)emx_model_weight_bytes_per_token(&m), (unsigned long long)want);
    // Two models at once: nothing is shared between opens.
    EmxModel m2;
    cr_assert_eq(emx_model_open(&m2, p, err, sizeof err), 0, "%s", err);
    cr_assert_neq(m2.map, m.map);
    emx_model_close(&m2);
    emx_model_close(&m);
    cr_assert_null(m.map);
}

// The weights copied into memory (huge pages where granted) and the file mapped: the same bytes
// and the same views into them; a copy is read-only, as the mapping is.
Test(model_file, copy_and_mapping_hold_the_same_model) {
    char p[512];
    test_build_path(p, sizeof p, GOOD_MODEL);
    EmxModel mapped, copy;
    char err[512];
    cr_assert_eq(emx_model_open_load(&mapped, p, EMX_LOAD_MMAP, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_model_open_load(&copy, p, EMX_LOAD_COPY, err, sizeof err), 0, "%s", err);
    cr_assert(!mapped.copied && copy.copied);
    cr_assert_neq(copy.map, mapped.map);
    cr_assert_eq(copy.map_size, mapped.map_size);
    cr_assert_geq(copy.map_len, copy.map_size);
    cr_assert_eq(memcmp(copy.map, mapped.map, mapped.map_size), 0);
    const char *cb = copy.map, *mb = mapped.map;
    for (uint32_t l = 0; l < copy.cfg.n_layers; l++) {
        cr_assert_eq((const char *)copy.layers[l].wq.data - cb, (const char *)mapped.layers[l].wq.data - mb);
        cr_assert_eq((const char *)copy.layers[l].w_down.data - cb, (const char *)mapped.layers[l].w_down.data - mb);
    }
    cr_assert_eq((const char *)copy.output.data - cb, (const char *)mapped.output.data - mb);
    cr_assert_eq(copy.tok.n_vocab, mapped.tok.n_vocab);
    // the small file under EMX_LOAD_AUTO: mapped (below the size worth copying)
    EmxModel small;
    cr_assert_eq(emx_model_open(&small, p, err, sizeof err), 0, "%s", err);
    cr_assert(!small.copied);
    emx_model_close(&small);
    emx_model_close(&copy);
    emx_model_close(&mapped);
}

// A file of 64 MiB or more (SmolLM2 q8, made by `make test-models`) is copied under
// EMX_LOAD_AUTO where the memory available is over twice its size, and mapped where it is not
// (EMX_MEMAVAILABLE_MB: mem_available.h's test hook for the figure). Whether the kernel grants huge pages
// at all (transparent_hugepage "never") is this machine's setting: then both are mapped.
Test(model_file, auto_copies_only_with_room_to_spare) {
    char p[512];
    test_build_path(p, sizeof p, "models/smollm2.q8.bin");
    FILE *f = fopen(p, "rb");
    if (!f) cr_skip_test("%s not made (make test-models)", p);
    fclose(f);
    EmxModel m;
    char err[512];
    setenv("EMX_MEMAVAILABLE_MB", "100000", 1);
    cr_assert_eq(emx_model_open(&m, p, err, sizeof err), 0, "%s", err);
    const int copied = m.copied;
    cr_assert_geq(m.map_size, (size_t)64 << 20);
    emx_model_close(&m);
    setenv("EMX_MEMAVAILABLE_MB", "200", 1);  // the file is 143 MB: more than half of that
    cr_assert_eq(emx_model_open(&m, p, err, sizeof err), 0, "%s", err);
    cr_assert(!m.copied, "copied with 200 MB available");
    emx_model_close(&m);
    unsetenv("EMX_MEMAVAILABLE_MB");
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "";
    if (thp) {
        if (!fgets(line, sizeof line, thp)) line[0] = 0;
        fclose(thp);
    }
    if (thp && !strstr(line, "[never]")) cr_assert(copied, "not copied with 100 GB available");
    else cr_assert(!copied, "copied where the kernel grants no huge pages");
}

// Which load a device gets: the CPU's default (EMX_LOAD_AUTO) unless --mmap, and always the mapping
// for a GPU, whose weights are uploaded ("auto" is the CPU in a build or machine without one).
Test(model_file, load_follows_the_device) {
    cr_assert_eq(emx_load_for_device("cpu", 0), EMX_LOAD_AUTO);
    cr_assert_eq(emx_load_for_device(NULL, 0), EMX_LOAD_AUTO);
    cr_assert_eq(emx_load_for_device("", 0), EMX_LOAD_AUTO);
    cr_assert_eq(emx_load_for_device("cpu", 1), EMX_LOAD_MMAP);
    cr_assert_eq(emx_load_for_device("cuda:0", 0), EMX_LOAD_MMAP);
    cr_assert_eq(emx_load_for_device("cuda:3", 0), EMX_LOAD_MMAP);
    cr_assert_eq(emx_load_for_device("auto", 0), emx_cuda_available() ? EMX_LOAD_MMAP : EMX_LOAD_AUTO);
    cr_assert(emx_device_is_cpu("cpu") && emx_device_is_cpu(NULL) && !emx_device_is_cpu("cuda:1"));
}

Test(model_file, missing_file) {
    EmxModel m;
    char err[512];
    cr_assert_eq(emx_model_open(&m, "/nonexistent/m.bin", err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "/nonexistent/m.bin"), "%s", err);
}

Test(model_file, truncated) {
    Fixture f;
    fixture_load(&f);
    expect_failure_n(&f, f.len - 100, (const char *const[]){"truncated", "file_bytes", NULL});
    expect_failure_n(&f, 100, (const char *const[]){"truncated", NULL});  // shorter than the header
    fixture_free(&f);
}

Test(model_file, wrong_magic) {
    Fixture f;
    fixture_load(&f);
    memcpy(f.h.magic, "EMXMODEX", 8);
    put_header(&f);
    EXPECT_FAILURE(&f, "magic");
    fixture_free(&f);
}

Test(model_file, wrong_version) {
    Fixture f;
    fixture_load(&f);
    f.h.version = 3;
    put_header(&f);
    EXPECT_FAILURE(&f, "version = 3 (this build reads versions 1 and 2)");
    fixture_free(&f);
}

Test(model_file, wrong_header_bytes) {
    Fixture f;
    fixture_load(&f);
    f.h.header_bytes = 100;
    put_header(&f);
    EXPECT_FAILURE(&f, "header_bytes = 100");
    fixture_free(&f);
}

Test(model_file, tensor_offset_past_end) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.2.wv");
    EmxTensorEntry e = get_entry(&f, i);
    e.offset = (f.len + EMX_ALIGN) / EMX_ALIGN * EMX_ALIGN;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.2.wv", "past the end");
    // Also when offset + nbytes wraps around.
    e.offset = UINT64_MAX - 63;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.2.wv", "past the end");
    fixture_free(&f);
}

Test(model_file, misaligned_offset) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.1.wq");
    EmxTensorEntry e = get_entry(&f, i);
    e.offset += 4;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.1.wq", "offset");
    fixture_free(&f);
}

Test(model_file, nbytes_mismatch) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "tok_embeddings");
    EmxTensorEntry e = get_entry(&f, i);
    e.nbytes -= 4;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "tok_embeddings", "nbytes");
    fixture_free(&f);
}

Test(model_file, shape_does_not_match_config) {
    Fixture f;
    fixture_load(&f);
    f.h.config.n_kv_heads = 8;  // still divides n_heads, but wk/wv are [32, 64]
    put_header(&f);
    EXPECT_FAILURE(&f, "layers.0.wk", "shape [32, 64] but config implies [64, 64]");
    fixture_free(&f);
}

Test(model_file, entry_shape_changed) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.3.w_up");
    EmxTensorEntry e = get_entry(&f, i);
    e.shape[0] = 64;
    e.shape[1] = 172;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.3.w_up", "shape");
    fixture_free(&f);
}

Test(model_file, unknown_dtype) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.0.wo");
    EmxTensorEntry e = get_entry(&f, i);
    e.dtype = 9;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.0.wo", "dtype = 9");
    fixture_free(&f);
}

// A q4_1 entry must have q4_1's size (nibbles, d and m: 20 bytes per 32 weights), not another's.
Test(model_file, q4_1_size_checked) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.0.wo");
    EmxTensorEntry e = get_entry(&f, i);
    e.dtype = EMX_Q4_1;
    e.nbytes = e.shape[0] * e.shape[1] / 32 * 18;  // q4's size
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.0.wo", "q4_1");
    fixture_free(&f);
}

Test(model_file, norm_must_be_f32) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.0.attn_norm");
    EmxTensorEntry e = get_entry(&f, i);
    e.dtype = EMX_BF16;
    e.nbytes = 64 * 2;
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.0.attn_norm", "f32");
    fixture_free(&f);
}

Test(model_file, missing_tensor) {
    Fixture f;
    fixture_load(&f);
    // The last entry is "norm": drop it from the directory.
    EmxTensorEntry last = get_entry(&f, f.h.n_tensors - 1);
    cr_assert_str_eq(last.name, "norm");
    f.h.n_tensors--;
    put_header(&f);
    EXPECT_FAILURE(&f, "tensor norm", "missing");
    fixture_free(&f);
}

Test(model_file, unknown_and_duplicate_names) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.2.wv");
    EmxTensorEntry e = get_entry(&f, i);
    snprintf(e.name, sizeof e.name, "layers.2.wx");
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.2.wx", "not expected");
    snprintf(e.name, sizeof e.name, "layers.7.wv");  // layer past n_layers
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.7.wv", "not expected");
    snprintf(e.name, sizeof e.name, "layers.2.wk");
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "layers.2.wk", "twice");
    memset(e.name, 'a', sizeof e.name);  // no terminator
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "name");
    fixture_free(&f);
}

Test(model_file, output_present_while_tied) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "tok_embeddings");
    EmxTensorEntry e = get_entry(&f, i);
    snprintf(e.name, sizeof e.name, "output");
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "output");
    fixture_free(&f);
}

Test(model_file, tokenizer_section_corrupted) {
    Fixture f;
    fixture_load(&f);
    memcpy(f.buf + f.h.tokenizer_offset, "XXXXXXXX", 8);  // its magic
    EXPECT_FAILURE(&f, "tokenizer");
    fixture_free(&f);
}

Test(model_file, tokenizer_section_outside_file) {
    Fixture f;
    fixture_load(&f);
    f.h.tokenizer_bytes = f.len;
    put_header(&f);
    EXPECT_FAILURE(&f, "tokenizer");
    fixture_free(&f);
}

Test(model_file, tokenizer_vocab_differs_from_config) {
    Fixture f;
    fixture_load(&f);
    f.h.config.vocab_size = 511;
    put_header(&f);
    EXPECT_FAILURE(&f, "n_vocab = 512", "vocab_size = 511");
    fixture_free(&f);
}

Test(model_file, directory_outside_file) {
    Fixture f;
    fixture_load(&f);
    f.h.n_tensors = 1u << 30;
    put_header(&f);
    EXPECT_FAILURE(&f, "tensor directory");
    fixture_free(&f);
}

Test(model_file, config_sanity) {
    Fixture f;
    fixture_load(&f);
    const EmxFileHeader good = f.h;
#define CASE(stmt, needle)                  \
    do {                                    \
        f.h = good;                         \
        EmxConfig *c = &f.h.config;         \
        stmt;                               \
        put_header(&f);                     \
        EXPECT_FAILURE(&f, needle);         \
    } while (0)
    CASE(c->dim = 0, "config.dim = 0");
    CASE(c->n_kv_heads = 3, "n_kv_heads");
    CASE(c->head_dim = 7, "head_dim = 7");
    CASE(c->n_layers = 2000, "n_layers = 2000");
    CASE(c->arch = 9, "arch = 9");
    CASE(c->rope_style = 5, "rope_style = 5");
    CASE(c->norm_eps = -1, "norm_eps");
    CASE(c->rope_theta = 0, "rope_theta");
    CASE(c->group_size = 64, "group_size = 64");
    CASE(c->chat_template = 77, "chat_template = 77");
    CASE(c->qk_norm = 2, "qk_norm = 2");
    CASE(c->qk_norm = 1, "q_norm");  // now required: missing
#undef CASE
    fixture_free(&f);
}

// Random corruption of the header, tokenizer section and directory (fixed seed): every open
// either succeeds (a harmless byte) or fails with a one-line message; never a crash (ASan runs
// this too).
Test(model_file, random_corruption_never_crashes) {
    Fixture f;
    fixture_load(&f);
    char *good = malloc(f.len);
    memcpy(good, f.buf, f.len);
    uint64_t meta_end = f.h.tensor_dir_offset + (uint64_t)f.h.n_tensors * sizeof(EmxTensorEntry);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    int failed = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(f.buf, good, f.len);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t pos = (state >> 33) % meta_end;
            f.buf[pos] ^= (char)(1 + (state >> 20) % 255);
        }
        FILE *out = fopen(f.path, "wb");
        cr_assert_not_null(out);
        cr_assert_eq(fwrite(f.buf, 1, f.len, out), f.len);
        fclose(out);
        EmxModel m;
        char err[512] = "";
        if (emx_model_open(&m, f.path, err, sizeof err) == 0) {
            emx_model_close(&m);
            continue;
        }
        failed++;
        cr_assert(err[0] && !strchr(err, '\n'), "iteration %d: bad message \"%s\"", it, err);
    }
    cr_assert_gt(failed, 100, "only %d of 300 corrupted files were rejected", failed);
    free(good);
    fixture_free(&f);
}

// max_piece_len sizes the tokenizer's buffers: it must be the longest piece, not any bound.
Test(model_file, tokenizer_max_piece_len_must_be_the_longest_piece) {
    Fixture f;
    fixture_load(&f);
    const size_t at = f.h.tokenizer_offset + 8 + 6 * 4;  // after the magic: u32 kind ... max_piece_len
    uint32_t good;
    memcpy(&good, f.buf + at, 4);
    char want[64];
    snprintf(want, sizeof want, "longest piece (id ");
    const uint32_t bad[] = {UINT32_MAX, good + 1, good - 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(f.buf + at, &bad[i], 4);
        char field[64], len[64];
        snprintf(field, sizeof field, "max_piece_len = %u", bad[i]);
        snprintf(len, sizeof len, "is %u bytes", good);
        EXPECT_FAILURE(&f, field, want, len);
    }
    fixture_free(&f);
}

// Every size field is range-checked on its own, with its name and value, before anything
// derived from it (an int context of -2147483648) can contradict it.
Test(model_file, config_fields_out_of_range) {
    Fixture f;
    fixture_load(&f);
    const EmxFileHeader good = f.h;
    f.h.config.max_seq_len = 1u << 31;
    put_header(&f);
    EXPECT_FAILURE(&f, "config.max_seq_len = 2147483648 is out of range");
    f.h = good;
    f.h.config.dim = UINT32_MAX;
    put_header(&f);
    EXPECT_FAILURE(&f, "config.dim = 4294967295 is out of range");
    f.h = good;
    f.h.config.n_heads = f.h.config.n_kv_heads = 1u << 16;
    f.h.config.head_dim = 1u << 16;
    put_header(&f);
    EXPECT_FAILURE(&f, "n_heads = 65536 times head_dim = 65536");
    fixture_free(&f);
}

static uint64_t align_up(uint64_t x) { return (x + EMX_ALIGN - 1) / EMX_ALIGN * EMX_ALIGN; }

// Two tensors, or a tensor and the tokenizer section or the directory, sharing bytes.
Test(model_file, sections_overlap) {
    Fixture f;
    fixture_load(&f);
    char *good = malloc(f.len);
    memcpy(good, f.buf, f.len);
    uint32_t iq = find_entry(&f, "layers.0.wq"), ik = find_entry(&f, "layers.0.wk");
    EmxTensorEntry q = get_entry(&f, iq), k = get_entry(&f, ik);
    k.offset = q.offset + EMX_ALIGN;  // wk's data starts inside wq's
    put_entry(&f, ik, &k);
    EXPECT_FAILURE(&f, "tensor layers.0.wk", "overlaps tensor layers.0.wq");
    memcpy(f.buf, good, f.len);
    k = get_entry(&f, ik);
    k.offset = align_up(f.h.tokenizer_offset);
    cr_assert_lt(k.offset + 64, f.h.tokenizer_offset + f.h.tokenizer_bytes);
    put_entry(&f, ik, &k);
    EXPECT_FAILURE(&f, "tensor layers.0.wk", "tokenizer section", "overlaps");
    memcpy(f.buf, good, f.len);
    k = get_entry(&f, ik);
    k.offset = align_up(f.h.tensor_dir_offset);
    put_entry(&f, ik, &k);
    EXPECT_FAILURE(&f, "tensor layers.0.wk", "tensor directory", "overlaps");
    memcpy(f.buf, good, f.len);
    f.h.tokenizer_offset = f.h.tensor_dir_offset;  // the directory read as a tokenizer section
    f.h.tokenizer_bytes = 64;
    put_header(&f);
    EXPECT_FAILURE(&f, "tokenizer");
    free(good);
    fixture_free(&f);
}

// Names come from the file: a CR/LF or other control byte is escaped, the message stays one line.
Test(model_file, control_bytes_in_a_name_are_escaped) {
    Fixture f;
    fixture_load(&f);
    uint32_t i = find_entry(&f, "layers.2.wv");
    EmxTensorEntry e = get_entry(&f, i);
    memset(e.name, 0, sizeof e.name);
    memcpy(e.name, "layers.2.w\r\nv\x1b[2J\\", 19);
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "tensor layers.2.w\\r\\nv\\x1b[2J\\\\", "not expected");
    memset(e.name, '\n', sizeof e.name);  // no terminator
    put_entry(&f, i, &e);
    EXPECT_FAILURE(&f, "entry", "\\n\\n", "not NUL-terminated");
    fixture_free(&f);
}
