// cpu_matmul.c — the threaded, tiled matmul over every weight dtype (the quantised kernels it
// calls: cpu_qdot.c, cpu_qtile*.c, cpu_amx.c; the float ones and the activations' quantisation:
// cpu_dot.c).
#include "runtime/cpu/cpu_matmul.h"

#include <stdlib.h>

#include "base/dtype.h"

#include "runtime/cpu/cpu_simd.h"

const char *emx_cpu_simd_name(void) {
#if EMX_AVX512_VNNI
    return emx_amx_available() ? "avx2" EMX_VNNI "+avx512vnni+amx" : "avx2" EMX_VNNI "+avx512vnni";
#elif defined(EMX_AVX2)
    return "avx2" EMX_VNNI;
#else
    return "scalar";
#endif
}

// ---------------------------------------------------------------------------------------------
// Matmul

// Below this many multiply-adds a parallel region costs more than it saves.
#define EMX_PARALLEL_MIN_WORK 32768

// Where a weight matrix's parts are (quants [rows][...], then the scales [rows][cols/32], then
// q4_1's and q4_1f's mins [rows][cols/32]; scales and mins f16, f32 for q4_1f).
typedef struct {
    const uint8_t *quants;  // row r at quants + r * row_bytes
    size_t row_bytes;
    const uint8_t *scales, *mins;  // row r's at + r * table_bytes
    size_t table_bytes;            // one row's scales (or mins): cols/32 of 2 or 4 bytes
} QuantRows;

static QuantRows quant_rows(const EmxTensor *w) {
    const size_t rows = w->rows, cols = w->cols;
    QuantRows q = {(const uint8_t *)w->data, w->dtype == EMX_Q8 ? cols : cols / 2, NULL, NULL,
                   cols / 32 * (w->dtype == EMX_Q4_1F ? sizeof(float) : sizeof(uint16_t))};
    q.scales = q.quants + rows * q.row_bytes;
    q.mins = q.scales + rows * q.table_bytes;
    return q;
}

// out[i * stride + r] for activation rows i in [0, n) and weight row r, one dot per pair.
static void matmul_row(float *out, size_t stride, const EmxTensor *w, int r, const EmxActs *a) {
    const int cols = (int)w->cols, ng = cols / 32;
    const uint8_t *base = (const uint8_t *)w->data;
    const QuantRows q = quant_rows(w);  // (meaningful for the quantised dtypes only)
    const uint8_t *wr = q.quants + (size_t)r * q.row_bytes;
    const void *wd = q.scales + (size_t)r * q.table_bytes, *wm = q.mins + (size_t)r * q.table_bytes;
    for (int i = 0; i < a->n; i++) {
        const float *x = a->x + (size_t)i * cols;
        float s = 0;
        if (emx_dtype_wants_q8_acts(w->dtype)) {
            const int8_t *xq = a->xq + (size_t)i * cols;
            const float *xd = a->xd + (size_t)i * ng, *xs = a->xs + (size_t)i * ng;
            s = w->dtype == EMX_Q8     ? emx_dot_q8((const int8_t *)wr, wd, xq, xd, cols)
                : w->dtype == EMX_Q4   ? emx_dot_q4(wr, wd, xq, xd, xs, cols)
                : w->dtype == EMX_Q4_1 ? emx_dot_q4_1(wr, wd, wm, xq, xd, xs, cols)
                                       : emx_dot_q4_1f(wr, wd, wm, xq, xd, xs, cols);
        } else if (w->dtype == EMX_F32) {
            s = emx_dot_f32((const float *)base + (size_t)r * cols, x, cols);
        } else if (w->dtype == EMX_BF16) {
            s = emx_dot_bf16((const uint16_t *)base + (size_t)r * cols, x, cols);
        } else {
            s = emx_dot_f16((const uint16_t *)base + (size_t)r * cols, x, cols);
        }
        out[(size_t)i * stride + r] = s;
    }
}

// Weight rows r..r+3 of a quantised matrix against every activation row. A batch of rows
// (prefill) repacks the four rows once into `pack` and runs the tile over all of them; a few rows
// (the server's slots) run the tile over the rows as they are; a single row (decode) the decode
// kernel (emx_dot4x1_*). All three give the same bits (cpu_qdot.c): a speed choice only.
static void matmul_quad(float *out, size_t stride, const EmxTensor *w, int r, const EmxActs *a, const int32_t *xl,
                        const uint8_t *blocks, uint8_t *pack) {
    const int cols = (int)w->cols;
    const QuantRows q = quant_rows(w);
    const uint8_t *wr = q.quants + (size_t)r * q.row_bytes;
    const void *wd = q.scales + (size_t)r * q.table_bytes, *wm = q.mins + (size_t)r * q.table_bytes;
    if (pack) {
        emx_quad_pack(pack, w->dtype, wr, wd, cols);
        emx_quad_tile(pack, w->dtype, wm, a, xl, blocks, cols, 0, a->n, out + r, stride);
    } else if (a->n > 1) {
        emx_quad_direct(w->dtype, wr, wd, wm, a, xl, cols, 0, a->n, out + r, stride);
    } else {
        float o[4];
        const float *xd = a->xd, *xs = a->xs;
        if (w->dtype == EMX_Q8) emx_dot4x1_q8((const int8_t *)wr, wd, a->xq, xl, xd, cols, o);
        else if (w->dtype == EMX_Q4) emx_dot4x1_q4(wr, wd, a->xq, xl, xd, xs, cols, o);
        else if (w->dtype == EMX_Q4_1) emx_dot4x1_q4_1(wr, wd, wm, a->xq, xl, xd, xs, cols, o);
        else emx_dot4x1_q4_1f(wr, wd, wm, a->xq, xl, xd, xs, cols, o);
        for (int k = 0; k < 4; k++) out[r + k] = o[k];
    }
}

// Weight rows r..r+7 of a quantised matrix, two quads, against a batch of activation rows: both
// repacked, then the tile that reads each activation group once for the two (emx_quad_tile2).
static void matmul_quad_pair(float *out, size_t stride, const EmxTensor *w, int r, const EmxActs *a,
                             const int32_t *xl, const uint8_t *blocks, uint8_t *pack0, uint8_t *pack1) {
    const int cols = (int)w->cols;
    const QuantRows q = quant_rows(w);
    const uint8_t *wr = q.quants + (size_t)r * q.row_bytes;
    const uint8_t *wd = q.scales + (size_t)r * q.table_bytes, *wm = q.mins + (size_t)r * q.table_bytes;
    emx_quad_pack(pack0, w->dtype, wr, wd, cols);
    emx_quad_pack(pack1, w->dtype, wr + 4 * q.row_bytes, wd + 4 * q.table_bytes, cols);
    emx_quad_tile2(pack0, pack1, w->dtype, wm, wm + 4 * q.table_bytes, a, xl, blocks, cols, 0, a->n, out + r,
                   out + r + 4, stride);
}

// Weight rows r..r+15 of a quantised matrix against every activation row on AMX: packed once,
// then the tile (cpu_amx.c). The same bits as the other kernels.
static void matmul_amx(float *out, size_t stride, const EmxTensor *w, int r, const EmxActs *a, const uint8_t *acts,
                       uint8_t *pack) {
    const int cols = (int)w->cols;
    const QuantRows q = quant_rows(w);
    emx_amx_pack(pack, w->dtype, q.quants + (size_t)r * q.row_bytes, q.row_bytes, q.scales + (size_t)r * q.table_bytes,
                 cols);
    emx_amx_tile(pack, w->dtype, q.mins + (size_t)r * q.table_bytes, a, acts, cols, out + r, stride);
}

// From this many activation rows on, a quad of weight rows is repacked for the tile (the
// repacking costs about one pass over the four rows and serves every activation row); below,
// the tile reads the rows as they are. SmolLM2-135M q8, emx_forward_multi, 2 threads, AVX-512
// VNNI: 4 rows 11.3 ms a step direct vs 11.7 repacked, 8 rows 15.0 vs 15.9, 16 rows even (26 ms).
#define EMX_PACK_MIN_ROWS 16

// Threads take whole tiles of ROW_TILE weight rows (static: thread t gets the same rows every
// call), four rows at a time where the rows are quantised and the build has the 4-row kernels.
#define ROW_TILE 16
_Static_assert(ROW_TILE % EMX_AMX_ROWS == 0, "a thread's tile of rows holds whole AMX tiles");

void emx_matmul_multi(const EmxMatmulJob *jobs, int n_jobs, const EmxActs *a, int n_threads) {
    int total = 0, quantised = 0;
    int64_t work = 0;
    const int cols = (int)jobs[0].w->cols;
    for (int j = 0; j < n_jobs; j++) {
        total += (int)jobs[j].w->rows;
        work += (int64_t)jobs[j].w->rows * jobs[j].w->cols * a->n;
        quantised |= emx_dtype_has_quad_kernels(jobs[j].w->dtype);
    }
    int quads = quantised && emx_quad_kernels_available();
    // AMX takes whole tiles of 16 rows of a batch; where every matrix is such tiles (and ROW_TILE
    // tiles never straddle two), the 4-row kernels and their operands are not needed
    int amx = quads && a->n >= EMX_PACK_MIN_ROWS && emx_amx_available(), amx_all = amx, amx_any = 0;
    for (int j = 0; j < n_jobs; j++) {
        amx_all &= jobs[j].w->rows % ROW_TILE == 0;
        amx_any |= jobs[j].w->rows >= EMX_AMX_ROWS;
    }
    amx &= amx_any;  // no matrix holds a tile: no activation tiles to lay out
    uint8_t *amx_acts = amx ? aligned_alloc(64, emx_amx_acts_bytes(a->n, cols)) : NULL;
    const int amx_tiles = amx_acts != NULL;  // no memory for the activation tiles: no AMX, same bits
    // the activations' lane sums (the 4-row kernels' offsets), once for every matrix; without
    // memory for them the rows run one by one, which gives the same bits
    int32_t lanes_small[1024];
    const size_t n_lanes = quads && !(amx_tiles && amx_all) ? (size_t)a->n * (cols / 32) * 4 : 0;
    int32_t *xl = n_lanes <= 1024 ? lanes_small : malloc(n_lanes * sizeof(int32_t));
    if (!xl) quads = 0;
    for (int i = 0; n_lanes && quads && i < a->n; i++)
        emx_act_lane_sums(a->xq + (size_t)i * cols, cols, xl + (size_t)i * (cols / 8));
    const int lanes = quads && n_lanes;  // the 4-row kernels can run (else AMX or one row at a time)
    const int use_pack = quads && a->n >= EMX_PACK_MIN_ROWS;
    // the activations in blocks for the tile, made once for every matrix (NULL: no memory, the
    // tile reads the rows where they are, same bits)
    const int n_blocks = use_pack && n_lanes ? a->n / EMX_ACT_BLOCK_ROWS : 0;
    uint8_t *blocks = n_blocks ? malloc(emx_act_blocks_bytes(a->n, cols)) : NULL;
    const int n_tiles = (total + ROW_TILE - 1) / ROW_TILE;
#pragma omp parallel num_threads(n_threads) if (work > EMX_PARALLEL_MIN_WORK)
    {
        if (blocks) {
#pragma omp for schedule(static)
            for (int b = 0; b < n_blocks; b++) emx_act_block(blocks, a, xl, cols, b);
        }
        if (amx_acts) {
#pragma omp for schedule(static)
            for (int b = 0; b < (a->n + EMX_AMX_ROWS - 1) / EMX_AMX_ROWS; b++) emx_amx_acts(amx_acts, a, cols, b);
        }
        // the thread's two repacked quads; NULL (no memory) reads the rows as they are instead, same bits
        const size_t pack_bytes = use_pack ? emx_quad_pack_bytes(cols) : 0, amx_bytes = emx_amx_pack_bytes(cols);
        uint8_t *pack = use_pack ? aligned_alloc(64, 2 * pack_bytes > amx_bytes ? 2 * pack_bytes : amx_bytes) : NULL;
#pragma omp for schedule(static)
        for (int tile = 0; tile < n_tiles; tile++) {
            const int g0 = tile * ROW_TILE, g1 = g0 + ROW_TILE < total ? g0 + ROW_TILE : total;
            for (int gr = g0; gr < g1;) {
                int j = 0, r = gr;  // global row -> (matrix, row)
                while (r >= (int)jobs[j].w->rows) r -= (int)jobs[j++].w->rows;
                const EmxTensor *w = jobs[j].w;
                const size_t stride = jobs[j].out_stride ? jobs[j].out_stride : w->rows;
                if (amx_tiles && pack && emx_dtype_has_quad_kernels(w->dtype) && r + EMX_AMX_ROWS <= (int)w->rows &&
                    gr + EMX_AMX_ROWS <= g1) {
                    matmul_amx(jobs[j].out, stride, w, r, a, amx_acts, pack);
                    gr += EMX_AMX_ROWS;
                } else if (lanes && pack && emx_dtype_has_quad_kernels(w->dtype) && r + 8 <= (int)w->rows && gr + 8 <= g1) {
                    matmul_quad_pair(jobs[j].out, stride, w, r, a, xl, blocks, pack, pack + pack_bytes);
                    gr += 8;
                } else if (lanes && emx_dtype_has_quad_kernels(w->dtype) && r + 4 <= (int)w->rows && gr + 4 <= g1) {
                    matmul_quad(jobs[j].out, stride, w, r, a, xl, blocks, pack);
                    gr += 4;
                } else {
                    matmul_row(jobs[j].out, stride, w, r, a);
                    gr++;
                }
            }
        }
        free(pack);
    }
    if (xl && xl != lanes_small) free(xl);
    free(blocks);
    free(amx_acts);
}

void emx_matmul(float *out, const EmxTensor *w, const EmxActs *a, int n_threads) {
    EmxMatmulJob job = {out, w, 0};
    emx_matmul_multi(&job, 1, a, n_threads);
}
