// tools/lab/embedding.cu — token embedding lookup with dequantisation (kernels/embedding.cu)
// against the CPU's emx_dequantize_row: one kernel, a thread per output element. `make lab
// K=embedding`.
#include "tools/lab/lab_weight.h"

#include "kernels/embedding.h"

int main(int argc, char **argv) {
    Lab L;
    lab_init(&L, "embedding", argc, argv, "--vocab --dim --tokens --dtype", "out[i][c] = emb[tokens[i]][c] as f32");
    // SmolLM2-135M's width 576, a 4096-token table (the lookup's cost does not depend on its height)
    const int vocab = lab_int(&L, "--vocab", 4096, 1, 1 << 20), dim = lab_int(&L, "--dim", 576, 1, 1 << 16);
    const int n = lab_int(&L, "--tokens", 64, 1, 1 << 16);
    const uint32_t dtype = lab_dtype(&L, "q8");
    LabWeight emb(dtype, vocab, dim, 41);
    std::vector<int> tokens(n);
    std::vector<float> want((size_t)n * dim);
    for (int i = 0; i < n; i++) {
        tokens[i] = (int)(((uint64_t)i * 2654435761u) % (uint64_t)vocab);
        const std::vector<float> row = emb.row(tokens[i]);
        memcpy(&want[(size_t)i * dim], row.data(), (size_t)dim * 4);
    }
    LabBuf<int> dt(tokens);
    LabBuf<float> dout(want.size());
    char shape[96];
    snprintf(shape, sizeof shape, "%d tokens of a %s %d x %d table (--tokens --dtype --vocab --dim)", n,
             emx_dtype_name(dtype), vocab, dim);
    // q4_1's w = nib * d + m may contract into an FMA on one side only (tests/kernels/test_embedding.cpp)
    lab_header(&L, shape, "|gpu - cpu| <= 1e-6 * |cpu| + 1e-6 (exact but for q4_1's possible FMA)");
    const double bytes = (double)emb.file.size() / vocab * n + n * 4.0 + (double)n * dim * 4;
    lab_version(&L, "thread/element (runtime)", bytes, [&] { return emx_cuda_embedding(&emb.w, dt.p, n, dout.p, L.stream); },
                [&] { return lab_compare(dout.get(), want, 1e-6, 1e-6); });
    return lab_finish(&L);
}
