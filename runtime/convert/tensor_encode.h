// tensor_encode.h — rows of a source tensor in one of our dtypes (base/dtype.h), in memory: the
// block types our dtypes hold exactly are copied (Q8_0 -> q8, Q4_0 -> q4, Q4_1 -> q4_1: the same
// fields; Q4_K -> q4_1f: its 32-weight sub-blocks' products d*sc and -dmin*m, exact in f32),
// every other pair quantised from the rows' f32 values. model_writer.c writes through it.
#ifndef ENTROPIX_TENSOR_ENCODE_H
#define ENTROPIX_TENSOR_ENCODE_H

#include <stdint.h>

// 1 if rows of ggml type src_type become dtype by copying their fields (values kept bit for bit).
int te_exact_copy(uint32_t dtype, uint32_t src_type);

// Where the parts of an [n, cols] quantised tensor lie: qrow bytes of quants per row, then prow
// bytes of per-group parameters per row, n_param parameter arrays (q8/q4: d; q4_1/q4_1f: d, m).
// Returns 0 for a dtype that is not quantised.
int te_parts(uint32_t dtype, uint64_t cols, uint64_t *qrow, uint64_t *prow);

// Rows [r0, r0 + n) of the row-major [rows, cols] source `src` (ggml type src_type) into `out` as
// an [n, cols] tensor of dtype (emx_tensor_bytes(dtype, n, cols) bytes). `x` holds the same rows
// decoded to f32 (ggml_dequant.h): what is quantised where the copy is not exact; unused for an
// exact copy.
void te_encode_rows(uint32_t dtype, uint32_t src_type, const void *src, uint64_t cols, uint64_t r0, uint64_t n,
                    const float *x, void *out);

#endif
