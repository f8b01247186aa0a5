// test_model_integrity.c — the integrity record of a model file checked where the file is used:
// a changed byte of the header, the tensor directory or the tokenizer section is refused by every
// load (the loader's check costs 0.4 ms on SmolLM2-135M), and a changed weight by ./run --verify
// and by the server at startup unless --no-verify (what each costs: docs/model-format.md); a
// damaged record is refused, not taken for a missing one. The model is a copy of
// $EMX_BUILD/models/stories260K.q8.bin, its bytes changed by hand.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/model_format.h"
#include "runtime/model.h"
#include "run_util.h"
#include "test_util.h"

typedef struct {
    char dir[64], path[128];
    char *buf;      // the original file's bytes
    size_t n;
    EmxFileHeader h;
} Copy;

static void copy_setup(Copy *c) {
    char src[512];
    test_build_path(src, sizeof src, "models/stories260K.q8.bin");
    c->buf = test_read_file(src, &c->n);
    cr_assert_not_null(c->buf, "%s missing: make test-models", src);
    memcpy(&c->h, c->buf, sizeof c->h);
    cr_assert_eq(c->h.config.reserved[0], EMX_CHECK_MAGIC, "convert recorded no checksum");
    snprintf(c->dir, sizeof c->dir, "/tmp/emx_integrity_XXXXXX");
    cr_assert_not_null(mkdtemp(c->dir));
    snprintf(c->path, sizeof c->path, "%s/m.bin", c->dir);
}

// The file with byte `at` xor'ed with `bits` (at: an offset into the original).
static void write_changed(const Copy *c, size_t at, unsigned char bits) {
    cr_assert(at < c->n);
    FILE *f = fopen(c->path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(c->buf, 1, at, f), at);
    fputc((unsigned char)c->buf[at] ^ bits, f);
    cr_assert_eq(fwrite(c->buf + at + 1, 1, c->n - at - 1, f), c->n - at - 1);
    cr_assert_eq(fclose(f), 0);
}

static void copy_cleanup(Copy *c) {
    unlink(c->path);
    rmdir(c->dir);
    free(c->buf);
}

static void expect_load_refused(const Copy *c, const char *section) {
    EmxModel m;
    char err[512] = "";
    cr_assert_eq(emx_model_open(&m, c->path, err, sizeof err), -1, "a changed %s loaded", section);
    char want[128];
    snprintf(want, sizeof want, "checksum mismatch in the %s", section);
    cr_expect(strstr(err, want) && strstr(err, c->path) && !strchr(err, '\n'), "%s", err);
    const char *args[] = {c->path, "-n", "1", "-t", "1", "--temp", "0", "-p", "a", NULL};
    expect_error(args, 1, want);
}

// Bytes no structural check reads, so only the record can tell: the header's last reserved
// word, a tensor name's padding after its NUL, a letter of a vocabulary piece.
Test(model_integrity, every_load_checks_header_directory_and_tokenizer, .timeout = 120) {
    Copy c;
    copy_setup(&c);
    write_changed(&c, offsetof(EmxFileHeader, config) + offsetof(EmxConfig, reserved) + 7 * sizeof(uint32_t), 1);
    expect_load_refused(&c, "header and tensor directory");
    EmxTensorEntry e;
    memcpy(&e, c.buf + c.h.tensor_dir_offset, sizeof e);
    write_changed(&c, c.h.tensor_dir_offset + strlen(e.name) + 2, 0x41);  // "name\0\0A\0..."
    expect_load_refused(&c, "header and tensor directory");
    size_t at = c.h.tokenizer_offset + c.h.tokenizer_bytes / 2;
    while (!((c.buf[at] >= 'a' && c.buf[at] <= 'z') || (c.buf[at] >= 'A' && c.buf[at] <= 'Z'))) at++;
    write_changed(&c, at, 0x20);  // its case
    expect_load_refused(&c, "tokenizer section");
    copy_cleanup(&c);
}

// A weight changed: ./run runs it (the data's hash is as long as the load: on request), --verify
// and the server refuse it, the server's --no-verify serves it.
Test(model_integrity, a_changed_weight, .timeout = 120) {
    Copy c;
    copy_setup(&c);
    write_changed(&c, c.n - 100, 0x10);  // a weight of the last tensor
    const char *plain[] = {c.path, "-n", "1", "-t", "1", "--temp", "0", "-p", "a", NULL};
    RunResult r = run(plain);
    cr_expect_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    const char *verify[] = {c.path, "--verify", "-n", "1", "-t", "1", "--temp", "0", "-p", "a", NULL};
    expect_error(verify, 1, "checksum mismatch in the tensor data");
    char server[512];
    test_build_path(server, sizeof server, "cpu/tools/server");
    const char *serve[] = {c.path, "--port", "0", "-t", "1", NULL};
    expect_error_prog(server, serve, 1, "checksum mismatch in the tensor data");
    copy_cleanup(&c);
}

// The record's magic changed: the record must not be taken for absent (that would switch every
// check off); a file whose record words are all zero (written before the record) still loads.
Test(model_integrity, a_damaged_magic_is_refused, .timeout = 120) {
    Copy c;
    copy_setup(&c);
    const size_t magic = offsetof(EmxFileHeader, config) + offsetof(EmxConfig, reserved);
    write_changed(&c, magic, 0x01);
    EmxModel m;
    char err[512] = "";
    cr_assert_eq(emx_model_open(&m, c.path, err, sizeof err), -1, "a damaged record loaded");
    cr_expect(strstr(err, "the integrity record is damaged") && strstr(err, c.path) && !strchr(err, '\n'), "%s", err);
    const char *verify[] = {c.path, "--verify", "-n", "1", "-t", "1", "--temp", "0", "-p", "a", NULL};
    expect_error(verify, 1, "the integrity record is damaged");
    // No record at all: reserved[0..6] zero.
    memset(c.buf + magic, 0, EMX_CHECK_WORDS * sizeof(uint32_t));
    write_changed(&c, 0, 0);
    cr_assert_eq(emx_model_open(&m, c.path, err, sizeof err), 0, "%s", err);
    emx_model_close(&m);
    const char *none[] = {c.path, "--verify", "-n", "1", "-t", "1", "--temp", "0", "-p", "a", NULL};
    RunResult r = run(none);
    cr_expect(r.code == 0 && strstr(r.err, "no checksum recorded"), "exit %d: %s", r.code, r.err);
    run_free(&r);
    copy_cleanup(&c);
}
