// test_tokenizer_dropped.c — prompt bytes the vocabulary has no token for. They are left out of
// the ids (as HF tokenizers does), and ./run says so once on stderr, naming the byte and its
// offset. The model is stories260K with its <0x16> byte piece made an ordinary piece and no
// <unk> (as a vocabulary without that byte would be): crafted from the converted test model.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/model_format.h"
#include "run_util.h"
#include "test_util.h"
#include "tokenizer/tokenizer_data.h"

static uint64_t align8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

// Writes the crafted model to path (a mkdtemp directory's file).
static void write_model_without_byte_16(const char *path) {
    char p[512];
    size_t len;
    char *buf = test_read_file(test_build_path(p, sizeof p, "models/stories260K.f32.bin"), &len);
    cr_assert_not_null(buf, "cannot read %s (run `make test-models` first)", p);
    EmxFileHeader h;
    memcpy(&h, buf, sizeof h);
    uint8_t *tok = (uint8_t *)buf + h.tokenizer_offset;
    uint32_t n_vocab;
    memcpy(&n_vocab, tok + 8 + 3 * 4, 4);
    const int32_t no_unk = -1;
    memcpy(tok + 8 + 8 * 4 + 3 * 4, &no_unk, 4);  // unk_id: the 4th id after the 8 u32 fields
    // Layout of tokenizer_data.h: header (88 bytes), offsets, piece bytes, scores, types.
    const uint64_t offsets = 88, bytes = align8(offsets + ((uint64_t)n_vocab + 1) * 4);
    uint32_t *off = malloc(((size_t)n_vocab + 1) * 4);
    memcpy(off, tok + offsets, ((size_t)n_vocab + 1) * 4);
    const uint64_t types = align8(align8(bytes + off[n_vocab]) + (uint64_t)n_vocab * 4);
    int found = 0;
    for (uint32_t i = 0; i < n_vocab; i++)
        if (off[i + 1] - off[i] == 6 && memcmp(tok + bytes + off[i], "<0x16>", 6) == 0) {
            cr_assert_eq(tok[types + i], EMX_TOKT_BYTE);
            tok[types + i] = EMX_TOKT_NORMAL;
            found = 1;
        }
    cr_assert(found, "stories260K has no <0x16> piece");
    free(off);
    // An edited file: its integrity record (which every load checks) no longer holds, so it goes,
    // as from a file written before convert recorded one.
    memset(h.config.reserved, 0, EMX_CHECK_WORDS * sizeof h.config.reserved[0]);
    memcpy(buf, &h, sizeof h);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

Test(tokenizer_dropped, run_warns_once_with_byte_and_offset) {
    char dir[] = "/tmp/emx-test-drop-XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.bin", dir);
    write_model_without_byte_16(path);
    const char *args[] = {path, "-p", "Once\x16 upon a time\x16", "--temp", "0", "-n", "4", "-t", "1", NULL};
    RunResult r = run(args);
    cr_expect_eq(r.code, 0, "stderr: %s", r.err);
    cr_expect_eq(count(r.err, "no token for byte"), 1, "one warning: %s", r.err);
    cr_expect_not_null(strstr(r.err, "run: warning: the vocabulary has no token for byte 0x16 at offset 4 of the "
                                     "prompt; it is left out (2 such bytes in all)\n"), "stderr: %s", r.err);
    run_free(&r);
    // A prompt without the byte: no warning, and the same text as the prompt without it above.
    const char *plain[] = {path, "-p", "Once upon a time", "--temp", "0", "-n", "4", "-t", "1", NULL};
    r = run(plain);
    cr_expect_eq(r.code, 0);
    cr_expect_null(strstr(r.err, "warning"), "stderr: %s", r.err);
    run_free(&r);
    unlink(path);
    rmdir(dir);
}
