// test_weights.cpp — kernels/weights.cu: the device layout's size, the repack and the upload.
// The layout is checked through what the kernels read: the embedding kernel dequantises every
// element of the uploaded matrix, and that must equal the CPU's emx_dequantize_row of the file's
// bytes (exactly, but q4_1's and q4_1f's nib * d + m, which a GPU may fuse into one FMA: see
// test_embedding).
#include "dense_test_util.h"

#include "kernels/embedding.h"

Test(weights, sizes_match_the_file_format) {
    for (uint32_t dt : kAllDtypes)
        for (uint64_t cols : {32u, 96u, 4096u})
            cr_assert_eq(emx_cuda_weight_bytes(dt, 37, cols), emx_tensor_bytes(dt, 37, cols), "%s", emx_dtype_name(dt));
    cr_assert_eq(emx_cuda_weight_bytes(EMX_Q4, 2, 48), 0u);  // quantised: cols % 32
    cr_assert_eq(emx_cuda_weight_bytes(77, 2, 64), 0u);
}

Test(weights, q4_1_interleaves_scale_and_min) {
    TestWeight tw(EMX_Q4_1, 3, 64, 9);
    std::vector<uint8_t> packed(tw.file.size());
    cr_assert_eq(emx_cuda_repack_weight(EMX_Q4_1, tw.file.data(), 3, 64, packed.data()), 0);
    cr_assert_eq(memcmp(packed.data(), tw.file.data(), 3 * 32), 0, "nibbles unchanged");
    const uint16_t *dm = (const uint16_t *)(packed.data() + 3 * 32);
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 2; g++) {
            cr_assert_eq(dm[(r * 2 + g) * 2], tw.scales(r)[g]);
            cr_assert_eq(dm[(r * 2 + g) * 2 + 1], tw.mins(r)[g]);
        }
    cr_assert_eq(emx_cuda_repack_weight(EMX_Q4_1, tw.file.data(), 3, 40, packed.data()), -1);
}

Test(weights, q4_1f_interleaves_f32_scale_and_min) {
    TestWeight tw(EMX_Q4_1F, 3, 64, 10);
    std::vector<uint8_t> packed(tw.file.size());
    cr_assert_eq(emx_cuda_repack_weight(EMX_Q4_1F, tw.file.data(), 3, 64, packed.data()), 0);
    cr_assert_eq(memcmp(packed.data(), tw.file.data(), 3 * 32), 0, "nibbles unchanged");
    const float *dm = (const float *)(const void *)(packed.data() + 3 * 32);
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 2; g++) {
            cr_assert(!memcmp(&dm[(r * 2 + g) * 2], &tw.scales32(r)[g], 4));
            cr_assert(!memcmp(&dm[(r * 2 + g) * 2 + 1], &tw.mins32(r)[g], 4));
        }
}

Test(weights, upload_gives_what_the_kernels_read) {
    const int rows = 9, cols = 96;
    for (uint32_t dt : kAllDtypes) {
        TestWeight tw(dt, rows, cols, 60 + dt);
        EmxCudaWeight w;
        CUDA_OK(emx_cuda_upload_weight(dt, tw.file.data(), rows, cols, &w));
        cr_assert(w.dtype == dt && w.rows == rows && w.cols == cols && w.data);
        std::vector<int> ids(rows);
        for (int r = 0; r < rows; r++) ids[r] = r;
        DevBuf<int> tok(ids);
        DevBuf<float> out((size_t)rows * cols);
        CUDA_OK(emx_cuda_embedding(&w, tok.p, rows, out.p, nullptr));
        std::vector<float> got = out.download();
        for (int r = 0; r < rows; r++) {
            std::vector<float> want = tw.row(r);
            for (int c = 0; c < cols; c++) {
                const float g = got[(size_t)r * cols + c];
                cr_assert(g == want[c] || (has_min(dt) && fabsf(g - want[c]) <= 1e-6f * (fabsf(want[c]) + 16.0f)),
                          "%s [%d][%d]: %.9g, CPU %.9g", emx_dtype_name(dt), r, c, g, want[c]);
            }
        }
        CUDA_OK(cudaFree((void *)w.data));
    }
    EmxCudaWeight w;
    cr_assert_eq(emx_cuda_upload_weight(EMX_Q8, nullptr, 2, 64, &w), cudaErrorInvalidValue);
    cr_assert_eq(emx_cuda_upload_weight(EMX_Q8, &w, 2, 40, &w), cudaErrorInvalidValue);
}
