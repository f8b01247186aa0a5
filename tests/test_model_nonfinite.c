// test_model_nonfinite.c — a model whose weights hold a NaN or an Inf (a corrupted file, a bad
// conversion). The run must say the logits are not finite and where the values first stopped
// being finite, not that "the sampler found no token". The files are the converted
// stories260K with one weight patched.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/model_format.h"
#include "run_util.h"
#include "test_util.h"

// Writes stories260K.f32.bin with weight `index` of tensor `name` set to v into dir/m.bin.
static void write_patched(const char *path, const char *name, uint64_t index, float v) {
    char p[512];
    size_t len;
    char *buf = test_read_file(test_build_path(p, sizeof p, "models/stories260K.f32.bin"), &len);
    cr_assert_not_null(buf, "cannot read %s (run `make test-models` first)", p);
    EmxFileHeader h;
    memcpy(&h, buf, sizeof h);
    int found = 0;
    for (uint32_t i = 0; i < h.n_tensors && !found; i++) {
        EmxTensorEntry e;
        memcpy(&e, buf + h.tensor_dir_offset + i * sizeof e, sizeof e);
        if (strncmp(e.name, name, EMX_NAME_BYTES) != 0) continue;
        cr_assert_eq(e.dtype, EMX_F32);
        cr_assert_lt(index * 4, e.nbytes);
        memcpy(buf + e.offset + index * 4, &v, 4);
        found = 1;
    }
    cr_assert(found, "no tensor %s", name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

static void expect_nonfinite(const char *tensor, float v, const char *where, const char *sampler) {
    char dir[] = "/tmp/emx-test-nan-XXXXXX", path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.bin", dir);
    write_patched(path, tensor, 5, v);
    const char *args[] = {path, "-p", "Once upon a time", "--sampler", sampler, "-n", "8", "-t", "1", "-s", "1", NULL};
    RunResult r = run(args);
    cr_expect_neq(r.code, 0, "%s = %g ran: %s", tensor, (double)v, r.err);
    cr_expect_eq(count_lines(r.err), 1, "one line: %s", r.err);
    cr_expect_not_null(strstr(r.err, "the logits are NaN or Inf at position "), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "(step 0)"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, where), "expected \"%s\": %s", where, r.err);
    cr_expect_null(strstr(r.err, "found no token"), "%s", r.err);
    run_free(&r);
    unlink(path);
    rmdir(dir);
}

Test(model_nonfinite, nan_weight_names_the_first_nonfinite_layer) {
    expect_nonfinite("layers.2.w_up", NAN, "layer 2's output is the first non-finite value", "greedy");
    expect_nonfinite("layers.3.wq", NAN, "layer 3's output", "temp");
    expect_nonfinite("layers.0.attn_norm", INFINITY, "layer 0's output", "entropix");
}
