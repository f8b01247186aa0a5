// source_hf_arch.c — what config.json says beyond the Llama layout: Qwen2's q/k/v biases, Gemma
// 3's sandwich norms, GeGLU, embedding and attention scales, local (sliding-window) layers and
// their RoPE base, linear RoPE scaling of the global layers; and Gemma's norm weights, stored
// as 1 + w (source_hf_arch.h).
//
// Both transformers 4's keys (rope_theta, rope_local_base_freq, rope_scaling,
// sliding_window_pattern) and transformers 5's (rope_parameters per layer type, layer_types) are
// read; where both are present, the newer wins.
#include "tools/convert/source_hf_arch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

// A positive finite number at o[key], or `def` when absent or null; -1 when present and not one.
static int number_or(const cJSON *o, const char *key, double def, double *out) {
    const cJSON *v = item(o, key);
    if (!v || cJSON_IsNull(v)) return *out = def, 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) return -1;
    return *out = v->valuedouble, 0;
}

// The rope parameters of one layer type: transformers 5's rope_parameters[type] (or the flat
// rope_parameters of a model with one kind of layer), else NULL.
static const cJSON *rope_params(const cJSON *cfg, const char *layer_type) {
    const cJSON *rp = item(cfg, "rope_parameters");
    if (!cJSON_IsObject(rp)) return NULL;
    const cJSON *per = item(rp, layer_type);
    return cJSON_IsObject(per) ? per : item(rp, "rope_theta") ? rp : NULL;
}

int hf_rope_theta(const cJSON *cfg, const char *layer_type, double def, double *theta, const char *path, char *err,
                  size_t errlen) {
    const cJSON *rp = rope_params(cfg, layer_type);
    const char *key = strcmp(layer_type, "sliding_attention") == 0 ? "rope_local_base_freq" : "rope_theta";
    const char *name = rp && item(rp, "rope_theta") ? "rope_parameters.rope_theta" : key;
    int bad = number_or(cfg, key, def, theta);
    if (!bad && rp) bad = number_or(rp, "rope_theta", *theta, theta);
    if (bad) return emx_seterr(err, errlen, "%s: %s (%s layers) is not a positive number", path, name, layer_type);
    if (!isfinite((float)*theta) || (float)*theta == 0)  // stored as a float32, checked as the loader checks it
        return emx_seterr(err, errlen, "%s: %s = %g does not fit a float32", path, name, *theta);
    return 0;
}

// Gemma 3's global layers: rope_type default, or linear (positions divided by factor).
static int global_rope_scaling(ConvSource *s, const cJSON *cfg, const char *path, char *err, size_t errlen) {
    const cJSON *rs = rope_params(cfg, "full_attention");
    if (!rs || !item(rs, "rope_type")) rs = item(cfg, "rope_scaling");
    if (!cJSON_IsObject(rs)) return 0;
    const cJSON *type = item(rs, "rope_type");
    if (!cJSON_IsString(type)) type = item(rs, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "default";
    if (strcmp(t, "default") == 0) return 0;
    double factor;
    if (strcmp(t, "linear") != 0)
        return emx_seterr(err, errlen, "%s: rope_scaling type \"%s\" of the global layers is not supported "
                          "(default, linear)", path, ESC(t));
    if (number_or(rs, "factor", -1, &factor) || factor < 1 || !isfinite((float)factor))
        return emx_seterr(err, errlen, "%s: rope_scaling.factor is missing or not a number >= 1", path);
    s->ext.rope_linear_global = (float)factor;
    return 0;
}

// Qwen2 and Qwen3 configs: a window only with use_sliding_window, on the layers from max_window_layers.
static int is_qwen(const ConvSource *s) { return s->cfg.arch == EMX_ARCH_QWEN2 || s->cfg.arch == EMX_ARCH_QWEN3; }

// Which layers are local: layer_types (transformers 5), else Gemma's sliding_window_pattern
// (every pattern-th layer global), else Qwen's max_window_layers (layers from it on local, default
// 28, as transformers' Qwen2Config / Qwen3Config derive layer_types), else every layer (Mistral).
static int local_layers(ConvSource *s, const cJSON *cfg, int is_gemma, const char *path, char *err, size_t errlen) {
    const cJSON *lt = item(cfg, "layer_types");
    const uint32_t n = s->cfg.n_layers;
    if (cJSON_IsArray(lt)) {
        if ((uint32_t)cJSON_GetArraySize(lt) != n)
            return emx_seterr(err, errlen, "%s: layer_types has %d entries for %u layers", path,
                              cJSON_GetArraySize(lt), n);
        uint32_t l = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt) {
            const char *v = cJSON_IsString(e) ? e->valuestring : "";
            if (strcmp(v, "sliding_attention") == 0) s->ext.local_layers[l / 32] |= 1u << (l % 32);
            else if (strcmp(v, "full_attention") != 0)
                return emx_seterr(err, errlen, "%s: layer_types[%u] = \"%s\" is not supported (full_attention, "
                                  "sliding_attention)", path, l, ESC(v));
            l++;
        }
        return 0;
    }
    double pattern = 6, first_local = 0;
    if (is_gemma && number_or(cfg, "sliding_window_pattern", 6, &pattern))
        return emx_seterr(err, errlen, "%s: sliding_window_pattern is not a positive integer", path);
    const cJSON *mwl = item(cfg, "max_window_layers");
    if (is_qwen(s)) {
        first_local = mwl && !cJSON_IsNull(mwl) ? (cJSON_IsNumber(mwl) ? mwl->valuedouble : -1) : 28;
        if (!(first_local >= 0) || first_local != floor(first_local))
            return emx_seterr(err, errlen, "%s: max_window_layers is not an integer >= 0", path);
    }
    for (uint32_t l = 0; l < n; l++)
        if ((!is_gemma || (l + 1) % (uint32_t)pattern != 0) && l >= first_local)
            s->ext.local_layers[l / 32] |= 1u << (l % 32);
    return 0;
}

// The sliding window: `sliding_window` (null or absent: none; Qwen2 and Qwen3 only with
// use_sliding_window true, which their configs default to false).
static int sliding_window(ConvSource *s, const cJSON *cfg, int is_gemma, const char *path, char *err, size_t errlen) {
    const cJSON *w = item(cfg, "sliding_window"), *use = item(cfg, "use_sliding_window");
    if (!w || cJSON_IsNull(w) || cJSON_IsFalse(use) || (is_qwen(s) && !cJSON_IsTrue(use))) return 0;
    if (!cJSON_IsNumber(w) || w->valuedouble < 1 || w->valuedouble != floor(w->valuedouble) ||
        w->valuedouble > 4294967295.0)
        return emx_seterr(err, errlen, "%s: sliding_window is not a positive integer", path);
    if (cJSON_IsTrue(item(cfg, "use_bidirectional_attention")))
        return emx_seterr(err, errlen, "%s: use_bidirectional_attention = true is not supported", path);
    // a window as long as the context changes nothing: no local layers (keeps older builds reading it)
    if (w->valuedouble >= s->cfg.max_seq_len) return 0;
    s->ext.sliding_window = (uint32_t)w->valuedouble;
    if (local_layers(s, cfg, is_gemma, path, err, errlen)) return -1;
    uint32_t any = 0;
    for (size_t i = 0; i < sizeof s->ext.local_layers / sizeof s->ext.local_layers[0]; i++) any |= s->ext.local_layers[i];
    if (!any) s->ext.sliding_window = 0;
    return 0;
}

int hf_arch_config(ConvSource *s, const cJSON *cfg, const char *path, char *err, size_t errlen) {
    const int is_gemma = s->cfg.arch == EMX_ARCH_GEMMA3;
    static const char *const softcaps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = item(cfg, softcaps[i]);
        if (v && !cJSON_IsNull(v))
            return emx_seterr(err, errlen, "%s: %s is set (%g): logit soft-capping is not supported", path, softcaps[i],
                              cJSON_IsNumber(v) ? v->valuedouble : 0.0);
    }
    if (s->cfg.arch == EMX_ARCH_QWEN2) s->ext.qkv_bias = 1;  // Qwen2 has them whatever attention_bias says
    if (sliding_window(s, cfg, is_gemma, path, err, errlen)) return -1;
    if (s->ext.sliding_window) {
        double local;
        if (hf_rope_theta(cfg, "sliding_attention", is_gemma ? 10000.0 : s->cfg.rope_theta, &local, path, err, errlen))
            return -1;
        s->ext.rope_theta_local = (float)local;
    }
    if (!is_gemma) return 0;
    s->ext.sandwich_norms = 1;
    s->ext.ffn_act = EMX_ACT_GELU_TANH;
    // HF: embed_scale = torch.tensor(hidden_size ** 0.5), a float32, cast to the weights' dtype (f32
    // here: what a float32 forward multiplies by; a bf16 forward would round it to bf16)
    s->ext.embed_scale = (float)sqrt((double)s->cfg.dim);
    double qpas;
    if (number_or(cfg, "query_pre_attn_scalar", 256, &qpas))
        return emx_seterr(err, errlen, "%s: query_pre_attn_scalar is not a positive number", path);
    s->ext.attn_scale = (float)pow(qpas, -0.5);  // HF: config.query_pre_attn_scalar ** -0.5, in double
    return global_rope_scaling(s, cfg, path, err, errlen);
}

// The norm tensors of a Gemma model: every name ending in "norm" (attn_norm, ffn_norm,
// post_attn_norm, post_ffn_norm, q_norm, k_norm, norm).
static int is_norm(const char *name) {
    size_t n = strlen(name);
    return n >= 4 && strcmp(name + n - 4, "norm") == 0;
}

int hf_gemma_norms(ConvSource *s, char *err, size_t errlen) {
    size_t total = 0;
    for (size_t i = 0; i < s->n; i++)
        if (is_norm(s->t[i].name)) total += s->t[i].rows * s->t[i].cols;
    if (s->n_owned == (int)(sizeof s->owned / sizeof s->owned[0])) return emx_seterr(err, errlen, "too many buffers");
    float *buf = malloc((total ? total : 1) * sizeof *buf);
    if (!buf) return emx_seterr(err, errlen, "out of memory for the norm weights");
    s->owned[s->n_owned++] = buf;
    for (size_t i = 0; i < s->n; i++) {
        SrcTensor *t = &s->t[i];
        if (!is_norm(t->name)) continue;
        const size_t n = t->rows * t->cols;
        for (size_t j = 0; j < n; j++) {
            float w;
            if (t->type == GGML_F32) memcpy(&w, (const uint8_t *)t->data + 4 * j, 4);
            else {
                uint16_t h;
                memcpy(&h, (const uint8_t *)t->data + 2 * j, 2);
                w = t->type == GGML_BF16 ? emx_bf16_to_f32(h) : emx_f16_to_f32(h);
            }
            // Gemma3RMSNorm: x_normed * (1.0 + weight.float()), the sum in float32
            buf[j] = 1.0f + w;
        }
        t->type = GGML_F32;
        t->data = buf;
        buf += n;
    }
    return 0;
}
