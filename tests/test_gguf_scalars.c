// test_gguf_scalars.c — gguf_get_i64 of a float-typed GGUF key: a value outside int64's range
// (or NaN) is "not convertible" (-1), never an undefined float-to-integer conversion (found by
// tests/fuzz's gguf target: a block_count of -3.7e19 stored as F32).
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/convert/gguf.h"

// A GGUF v3 file with no tensors and one F32 and one F64 key; returns its path (caller unlinks).
static void write_gguf(char *path, float f32, double f64) {
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    uint32_t version = 3, t32 = 6, t64 = 12;
    uint64_t n_tensors = 0, n_kv = 2, klen = 1;
    fwrite("GGUF", 1, 4, f), fwrite(&version, 4, 1, f), fwrite(&n_tensors, 8, 1, f), fwrite(&n_kv, 8, 1, f);
    fwrite(&klen, 8, 1, f), fwrite("a", 1, 1, f), fwrite(&t32, 4, 1, f), fwrite(&f32, 4, 1, f);
    fwrite(&klen, 8, 1, f), fwrite("b", 1, 1, f), fwrite(&t64, 4, 1, f), fwrite(&f64, 8, 1, f);
    fclose(f);
}

static void expect_i64(float f32, double f64, int want_rc, int64_t want) {
    char path[] = "/tmp/emx-test-gguf-XXXXXX", err[256] = "";
    write_gguf(path, f32, f64);
    GGUFFile g;
    cr_assert_eq(gguf_open(&g, path, err, sizeof err), 0, "%s", err);
    int64_t a = 7, b = 7;
    double d = 0;
    cr_expect_eq(gguf_get_i64(&g, "a", &a), want_rc, "F32 %g", (double)f32);
    cr_expect_eq(gguf_get_i64(&g, "b", &b), want_rc, "F64 %g", f64);
    if (want_rc == 0) cr_expect(a == want && b == want, "%lld %lld", (long long)a, (long long)b);
    cr_expect_eq(gguf_get_f64(&g, "b", &d), 0, "a float key is always a double");
    gguf_close(&g);
    unlink(path);
}

Test(gguf, float_keys_convert_to_integers_only_in_range) {
    expect_i64(12.0f, 12.0, 0, 12);
    expect_i64(-3.7e19f, -3.7e19, -1, 0);
    expect_i64(3e30f, 1e300, -1, 0);
    expect_i64(NAN, NAN, -1, 0);
    expect_i64(INFINITY, -INFINITY, -1, 0);
}
