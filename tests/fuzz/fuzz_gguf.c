// fuzz_gguf.c — the GGUF reader and the whole converter behind it (runtime/convert/gguf.c,
// source_gguf.c, the GGUF tokenizer builder, the dequantisers, the writer and the read-back
// validation of tools/convert.c's main, linked in as emx_convert_main). Input: a GGUF file; its
// last byte picks --dtype (changing it rarely changes what the reader sees: trailing padding).
// The converter must exit 0 or 1 (never crash), and a conversion that reports success must
// leave a file the model loader accepts.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "runtime/model.h"

int emx_convert_main(int argc, char **argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet_stdout();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const dtypes[] = {"f32", "q8", "q4", "q4_1", "bf16", "f16"};
    char in[160], out[160], dt[8];
    fuzz_write("in.bin", data, size, in, sizeof in);
    snprintf(out, sizeof out, "%s/out.bin", fuzz_dir());
    snprintf(dt, sizeof dt, "%s", dtypes[size ? data[size - 1] % 6 : 0]);
    char a0[] = "convert", a3[] = "--dtype";
    char *argv[] = {a0, in, out, a3, dt, NULL};
    int rc = emx_convert_main(5, argv);
    if (rc == 0) {
        EmxModel m;
        char err[512];
        if (emx_model_open(&m, out, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_gguf: convert succeeded but the loader says: %s\n", err);
            abort();
        }
        emx_model_close(&m);
    } else if (rc != 1) {
        fprintf(stderr, "fuzz_gguf: convert exited %d (0 or 1 expected)\n", rc);
        abort();
    }
    fuzz_unlink("out.bin");
    return 0;
}
