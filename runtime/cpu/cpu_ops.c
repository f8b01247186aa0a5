// cpu_ops.c — RMSNorm, RoPE, softmax, SwiGLU on the CPU (attention: cpu_attention.c).
#include "runtime/cpu/cpu_ops.h"

#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "base/model_format.h"
#include "runtime/cpu/cpu_attention.h"

void emx_kv_store(void *dst, EmxKvType type, const float *src, size_t n) {
    if (type == EMX_KV_F16) emx_f32_to_f16_row(dst, src, n);
    else memcpy(dst, src, n * sizeof(float));
}

void emx_kv_load(float *dst, const void *src, EmxKvType type, size_t n) {
    emx_dequantize_row(type == EMX_KV_F16 ? EMX_F16 : EMX_F32, src, 1, n, 0, dst);
}

void emx_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    // The squares summed in double (exact enough for a few thousand), in eight partial sums
    // (element i into sum i % 8, added pairwise at the end), so that the additions overlap: one
    // chain of n dependent additions waits 4 cycles on each, and Qwen3's norms (the row's twice,
    // then every q and k head's) made it 2-3% of a prefill.
    double p[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) p[k] += (double)x[i + k] * x[i + k];
    for (; i < n; i++) p[i % 8] += (double)x[i] * x[i];
    const double ss = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

void emx_rope_inv_freq(double *inv_freq, int head_dim, double theta, const float *factors) {
    for (int i = 0; i < head_dim / 2; i++) {
        inv_freq[i] = pow(theta, -2.0 * i / head_dim);
        if (factors) inv_freq[i] /= factors[i];
    }
}

void emx_rope_angles(float *cos_out, float *sin_out, const double *inv_freq, int half, int pos) {
    for (int i = 0; i < half; i++) {
        double a = pos * inv_freq[i];
        cos_out[i] = (float)cos(a);
        sin_out[i] = (float)sin(a);
    }
}

void emx_rope(float *v, int n_heads, int head_dim, int style, const float *cos_a, const float *sin_a) {
    const int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *hv = v + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            // the two members of pair i
            float *a = style == EMX_ROPE_INTERLEAVED ? &hv[2 * i] : &hv[i];
            float *b = style == EMX_ROPE_INTERLEAVED ? &hv[2 * i + 1] : &hv[i + half];
            float x0 = *a, x1 = *b;
            *a = x0 * cos_a[i] - x1 * sin_a[i];
            *b = x0 * sin_a[i] + x1 * cos_a[i];
        }
    }
}

void emx_softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void emx_swiglu(float *gate, const float *up, int n) {
    // e^-g by the attention's vector exp (within 2 ulp of expf; expf itself without SIMD), 256
    // at a time: expf one by one was 5% of a SmolLM2 prefill.
    float e[256];
    for (int i0 = 0; i0 < n; i0 += 256) {
        const int m = n - i0 < 256 ? n - i0 : 256;
        for (int i = 0; i < m; i++) e[i] = -gate[i0 + i];
        emx_exp_f32(e, e, m);
        for (int i = 0; i < m; i++) gate[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
    }
}

void emx_geglu(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float z = gate[i];
        gate[i] = 0.5f * z * (1.0f + tanhf(0.7978845608028654f * (z + 0.044715f * z * z * z))) * up[i];
    }
}
