// source_hf.c — HuggingFace model directories: config.json, model.safetensors (or shards listed
// in model.safetensors.index.json), tokenizer.json and tokenizer_config.json.
//
// HF Llama/Qwen3 checkpoints keep q/k rows in the rotate-half order their RoPE uses, so they
// are copied as they are and the file says EMX_ROPE_HALF.
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/convert/msg_esc.h"
#include "base/errmsg.h"
#include "base/read_file.h"
#include "tools/convert/source.h"
#include "tools/convert/source_hf_arch.h"
#include "tools/convert/tokenizer_build.h"

static cJSON *read_json(const char *path, int required, char *err, size_t errlen) {
    char *text = emx_read_file(path, NULL);
    if (!text) {
        if (required) emx_seterr(err, errlen, "%s: cannot read", path);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) emx_seterr(err, errlen, "%s: not valid JSON", path);
    return j;
}

// An integer field of config.json; `def` < 0 means required.
static int json_u32(const cJSON *cfg, const char *key, int64_t def, uint32_t *out, const char *path, char *err,
                    size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) {
            emx_seterr(err, errlen, "%s: %s is missing", path, key);
            return -1;
        }
        *out = (uint32_t)def;
        return 0;
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || d <= 0 || d > 4294967295.0) {
        emx_seterr(err, errlen, "%s: %s is not a positive integer", path, key);
        return -1;
    }
    *out = (uint32_t)d;
    return 0;
}

static int json_num(const cJSON *cfg, const char *key, double def, double *out, const char *path, char *err,
                    size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
        emx_seterr(err, errlen, "%s: %s is not a positive number", path, key);
        return -1;
    }
    // Stored as a float32: checked as the loader checks it (1e39 is a finite double, an infinite float).
    if (!isfinite((float)v->valuedouble) || (float)v->valuedouble == 0) {
        emx_seterr(err, errlen, "%s: %s = %g does not fit a float32", path, key, v->valuedouble);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int json_true(const cJSON *cfg, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, key));
}

// Per-frequency divisors of Llama 3.x "llama3" RoPE scaling, as HF transformers'
// _compute_llama3_parameters changes inv_freq: factor_i = inv_freq_i / new_inv_freq_i.
// High frequencies (wavelength < old_ctx / high_freq_factor) stay, low ones (wavelength >
// old_ctx / low_freq_factor) are divided by `factor`, and the band between interpolates.
static void llama3_freq_factors(uint32_t head_dim, double theta, double factor, double low_ff, double high_ff,
                                double old_ctx, float *out) {
    double low_wavelen = old_ctx / low_ff, high_wavelen = old_ctx / high_ff;
    for (uint32_t i = 0; i < head_dim / 2; i++) {
        double inv_freq = 1.0 / pow(theta, (double)(2 * i) / head_dim);
        double wavelen = 2 * M_PI / inv_freq, new_freq;
        if (wavelen < high_wavelen) {
            new_freq = inv_freq;
        } else if (wavelen > low_wavelen) {
            new_freq = inv_freq / factor;
        } else {
            double smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff);
            new_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
        }
        out[i] = (float)(inv_freq / new_freq);
    }
}

static int parse_rope_scaling(ConvSource *s, const cJSON *cfg, const char *path, char *err, size_t errlen) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    const int v5 = !rs || cJSON_IsNull(rs);
    if (v5) rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");  // transformers 5: theta and type
    if (!cJSON_IsObject(rs)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(type)) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : v5 ? "default" : "(none)";
    if (strcmp(t, "default") == 0) return 0;
    if (strcmp(t, "llama3") != 0) {
        emx_seterr(err, errlen, "%s: rope_scaling type \"%s\" is not supported (only \"llama3\")", path, ESC(t));
        return -1;
    }
    double factor, low_ff, high_ff, old_ctx;
    if (json_num(rs, "factor", -1, &factor, path, err, errlen) ||
        json_num(rs, "low_freq_factor", -1, &low_ff, path, err, errlen) ||
        json_num(rs, "high_freq_factor", -1, &high_ff, path, err, errlen) ||
        json_num(rs, "original_max_position_embeddings", -1, &old_ctx, path, err, errlen))
        return -1;
    if (factor <= 0 || low_ff <= 0 || high_ff <= low_ff || old_ctx <= 0) {
        emx_seterr(err, errlen, "%s: rope_scaling: factor %g, low_freq_factor %g, high_freq_factor %g, "
                 "original_max_position_embeddings %g are missing or inconsistent", path, factor, low_ff, high_ff, old_ctx);
        return -1;
    }
    float *f = malloc(s->cfg.head_dim / 2 * sizeof *f);
    if (!f) {
        emx_seterr(err, errlen, "out of memory");
        return -1;
    }
    s->owned[s->n_owned++] = f;
    llama3_freq_factors(s->cfg.head_dim, s->cfg.rope_theta, factor, low_ff, high_ff, old_ctx, f);
    s->cfg.rope_freq_factors = 1;
    return src_add(s, "rope_freq_factors", "rope_scaling (llama3)", GGML_F32, 1, s->cfg.head_dim / 2, 1, f, err, errlen);
}

// The architecture named by config.json: *is_vlm when the text model sits in text_config
// (Gemma3ForConditionalGeneration). 0 when not supported.
static uint32_t detect_arch(const char *arch, const char *model_type, int *is_vlm) {
    static const struct { const char *arch, *model_type; uint32_t id; int vlm; } known[] = {
        {"LlamaForCausalLM", "llama", EMX_ARCH_LLAMA, 0},   {"MistralForCausalLM", "mistral", EMX_ARCH_LLAMA, 0},
        {"Qwen3ForCausalLM", "qwen3", EMX_ARCH_QWEN3, 0},   {"Qwen2ForCausalLM", "qwen2", EMX_ARCH_QWEN2, 0},
        {"Gemma3ForCausalLM", "gemma3_text", EMX_ARCH_GEMMA3, 0},
        {"Gemma3ForConditionalGeneration", "gemma3", EMX_ARCH_GEMMA3, 1},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (*arch ? strcmp(arch, known[i].arch) == 0 : strcmp(model_type, known[i].model_type) == 0)
            return *is_vlm = known[i].vlm, known[i].id;
    return 0;
}

// The sizes and the Llama-layout fields; `gemma`: Gemma3TextConfig's defaults where keys are absent.
static int parse_sizes(EmxConfig *c, const cJSON *cfg, int gemma, const char *path, char *err, size_t errlen) {
    double eps, theta;
    if (json_u32(cfg, "hidden_size", -1, &c->dim, path, err, errlen) ||
        json_u32(cfg, "intermediate_size", -1, &c->hidden_dim, path, err, errlen) ||
        json_u32(cfg, "num_hidden_layers", -1, &c->n_layers, path, err, errlen) ||
        json_u32(cfg, "num_attention_heads", -1, &c->n_heads, path, err, errlen) ||
        json_u32(cfg, "num_key_value_heads", c->n_heads, &c->n_kv_heads, path, err, errlen) ||
        json_u32(cfg, "head_dim", gemma ? 256 : c->dim / c->n_heads, &c->head_dim, path, err, errlen) ||
        json_u32(cfg, "vocab_size", gemma ? 262208 : -1, &c->vocab_size, path, err, errlen) ||
        json_u32(cfg, "max_position_embeddings", gemma ? 131072 : 4096, &c->max_seq_len, path, err, errlen) ||
        json_num(cfg, "rms_norm_eps", 1e-6, &eps, path, err, errlen) ||
        hf_rope_theta(cfg, "full_attention", gemma ? 1e6 : 10000.0, &theta, path, err, errlen))
        return -1;
    if (c->n_heads % c->n_kv_heads || c->head_dim % 2 || c->n_layers > EMX_MAX_LAYERS)
        return emx_seterr(err, errlen, "%s: num_attention_heads %u, num_key_value_heads %u, head_dim %u, "
                          "num_hidden_layers %u are inconsistent", path, c->n_heads, c->n_kv_heads, c->head_dim,
                          c->n_layers);
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(cfg, "partial_rotary_factor");
    if (cJSON_IsNumber(pr) && pr->valuedouble != 1.0)
        return emx_seterr(err, errlen, "%s: partial_rotary_factor = %g is not supported", path, pr->valuedouble);
    c->norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->rope_style = EMX_ROPE_HALF;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    c->tied_output = gemma && !tie ? 1 : cJSON_IsTrue(tie);  // Gemma3TextConfig ties by default
    c->group_size = EMX_GROUP_SIZE;
    return 0;
}

static int parse_config(ConvSource *s, const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = read_json(path, 1, err, errlen);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        emx_seterr(err, errlen, "%s: not a JSON object", path);
        cJSON_Delete(root);
        return -1;
    }
    int rc = -1, is_vlm = 0;
    EmxConfig *c = &s->cfg;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : "", *model_type = cJSON_IsString(mt) ? mt->valuestring : "";
    c->arch = detect_arch(arch, model_type, &is_vlm);
    if (!c->arch) {
        emx_seterr(err, errlen, "%s: architectures = [\"%s\"] (model_type \"%s\") is not supported "
                 "(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, "
                 "Gemma3ForConditionalGeneration)", path, ESC(arch), ESC(model_type));
        goto out;
    }
    const int gemma = c->arch == EMX_ARCH_GEMMA3;
    c->qk_norm = c->arch == EMX_ARCH_QWEN3 || gemma;
    snprintf(s->kind, sizeof s->kind, "HuggingFace %s", *arch ? arch : model_type);
    // Gemma3ForConditionalGeneration: the text model's keys are in text_config (the rest is vision)
    const cJSON *cfg = is_vlm ? cJSON_GetObjectItemCaseSensitive(root, "text_config") : root;
    if (!cJSON_IsObject(cfg)) {
        emx_seterr(err, errlen, "%s: text_config is missing", path);
        goto out;
    }
    if ((c->arch != EMX_ARCH_QWEN2 && json_true(cfg, "attention_bias")) || json_true(cfg, "mlp_bias")) {
        emx_seterr(err, errlen, "%s: attention_bias / mlp_bias = true is not supported", path);
        goto out;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, gemma ? "hidden_activation" : "hidden_act");
    if (gemma && !cJSON_IsString(act)) act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    const char *want_act = gemma ? "gelu_pytorch_tanh" : "silu";
    if (cJSON_IsString(act) && strcmp(act->valuestring, want_act) != 0 &&
        !(gemma && strcmp(act->valuestring, "gelu_new") == 0)) {  // gelu_new: the same tanh formula
        emx_seterr(err, errlen, "%s: hidden_act = \"%s\" is not supported (%s)", path, ESC(act->valuestring), want_act);
        goto out;
    }
    if (parse_sizes(c, cfg, gemma, path, err, errlen) || hf_arch_config(s, cfg, path, err, errlen)) goto out;
    rc = gemma ? 0 : parse_rope_scaling(s, cfg, path, err, errlen);
out:
    cJSON_Delete(root);
    return rc;
}

// HF tensor name -> ours. Returns 1 if mapped, 0 for tensors we do not need (buffers such as
// rotary_emb.inv_freq; lm_head when tied; a multimodal checkpoint's vision tower), -1 for
// anything we do not know. A Gemma3ForConditionalGeneration's text model is under
// "language_model.model." (as published) or "model.language_model." (transformers 5).
static int map_name(const char *hf, uint32_t arch, int tied, char *ours, size_t cap) {
    static const char *const vision[] = {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                                         "model.multi_modal_projector."};
    char buf[256];
    for (size_t i = 0; i < sizeof vision / sizeof vision[0]; i++)
        if (strncmp(hf, vision[i], strlen(vision[i])) == 0) return 0;
    if (strncmp(hf, "language_model.", 15) == 0) hf += 15;  // language_model.model.X, language_model.lm_head
    else if (strncmp(hf, "model.language_model.", 21) == 0 && strlen(hf) < sizeof buf - 8)
        snprintf(buf, sizeof buf, "model.%s", hf + 21), hf = buf;
    if (strcmp(hf, "model.embed_tokens.weight") == 0) return snprintf(ours, cap, "tok_embeddings"), 1;
    if (strcmp(hf, "model.norm.weight") == 0) return snprintf(ours, cap, "norm"), 1;
    if (strcmp(hf, "lm_head.weight") == 0) return tied ? 0 : (snprintf(ours, cap, "output"), 1);
    unsigned layer;
    int used = 0;
    if (sscanf(hf, "model.layers.%u.%n", &layer, &used) != 1 || used == 0) return -1;
    const char *rest = hf + used;
    if (strstr(rest, "rotary_emb.inv_freq")) return 0;
    const int gemma = arch == EMX_ARCH_GEMMA3;
    static const char *const table[][2] = {
        {"input_layernorm.weight", "attn_norm"},          {"self_attn.q_proj.weight", "wq"},
        {"self_attn.k_proj.weight", "wk"},                {"self_attn.v_proj.weight", "wv"},
        {"self_attn.o_proj.weight", "wo"},                {"self_attn.q_norm.weight", "q_norm"},
        {"self_attn.k_norm.weight", "k_norm"},            {"mlp.gate_proj.weight", "w_gate"},
        {"mlp.up_proj.weight", "w_up"},                   {"mlp.down_proj.weight", "w_down"},
        {"self_attn.q_proj.bias", "bq"},                  {"self_attn.k_proj.bias", "bk"},
        {"self_attn.v_proj.bias", "bv"},                  {"pre_feedforward_layernorm.weight", "ffn_norm"},
        {"post_feedforward_layernorm.weight", "post_ffn_norm"},
        // Llama's norm before the FFN; Gemma's after the attention (its pre-FFN one is above)
        {"post_attention_layernorm.weight", "ffn_norm"},
    };
    const size_t n = sizeof table / sizeof table[0];
    for (size_t i = 0; i < n; i++)
        if (strcmp(rest, table[i][0]) == 0)
            return snprintf(ours, cap, "layers.%u.%s", layer, gemma && i == n - 1 ? "post_attn_norm" : table[i][1]), 1;
    return -1;
}

// One header entry, checked whatever its name: {"dtype": string, "shape": [non-negative
// integers], "data_offsets": [begin, end]} with begin <= end inside the data. `esize` is 0 for
// a dtype we cannot read (an error only if the tensor is used).
typedef struct {
    const char *dtype;
    uint32_t esize, type;
    int nd;
    uint64_t dims[2];
    uint64_t b0, b1;
} StEntry;

// A JSON number that is an integer in [0, 2^53] (exact in a double).
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != floor(v->valuedouble))
        return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

static int st_entry(const cJSON *e, const char *path, uint64_t data_size, StEntry *x, char *err, size_t errlen) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    const char *bad = !cJSON_IsObject(e)                                  ? "is not an object"
                      : !cJSON_IsString(dt)                               ? "dtype is not a string"
                      : !cJSON_IsArray(shape)                             ? "shape is not an array"
                      : !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ? "data_offsets is not a pair"
                                                                          : NULL;
    if (bad) {
        emx_seterr(err, errlen, "%s: malformed safetensors header: tensor %s: %s", path, ESC(e->string), bad);
        return -1;
    }
    memset(x, 0, sizeof *x);
    x->dtype = dt->valuestring;
    if (strcmp(x->dtype, "F32") == 0) x->type = GGML_F32, x->esize = 4;
    else if (strcmp(x->dtype, "F16") == 0) x->type = GGML_F16, x->esize = 2;
    else if (strcmp(x->dtype, "BF16") == 0) x->type = GGML_BF16, x->esize = 2;
    x->nd = cJSON_GetArraySize(shape);
    uint64_t count = 1;
    const cJSON *v;
    int d = 0;
    cJSON_ArrayForEach(v, shape) {
        uint64_t n;
        if (json_uint(v, &n) || (n && count > UINT64_MAX / 8 / n)) {
            emx_seterr(err, errlen, "%s: malformed safetensors header: tensor %s: shape[%d] is not a non-negative "
                     "integer of a sane size", path, ESC(e->string), d);
            return -1;
        }
        count *= n;
        if (d < 2) x->dims[d] = n;
        d++;
    }
    if (json_uint(cJSON_GetArrayItem(offs, 0), &x->b0) || json_uint(cJSON_GetArrayItem(offs, 1), &x->b1) ||
        x->b0 > x->b1 || x->b1 > data_size) {
        emx_seterr(err, errlen, "%s: tensor %s: data_offsets are not integers 0 <= begin <= end <= %llu (the data "
                 "bytes; truncated?)", path, ESC(e->string), (unsigned long long)data_size);
        return -1;
    }
    if (x->esize && x->b1 - x->b0 != count * x->esize) {
        emx_seterr(err, errlen, "%s: tensor %s: data_offsets [%llu, %llu) do not hold the %llu bytes its shape needs "
                 "(truncated?)", path, ESC(e->string), (unsigned long long)x->b0, (unsigned long long)x->b1,
                 (unsigned long long)(count * x->esize));
        return -1;
    }
    return 0;
}

// Every entry of a parsed header: an object whose values are tensor entries, besides an
// optional "__metadata__" object.
static int st_check_header(const cJSON *h, const char *path, uint64_t data_size, char *err, size_t errlen) {
    if (!cJSON_IsObject(h)) {
        emx_seterr(err, errlen, "%s: malformed safetensors header: not a JSON object", path);
        return -1;
    }
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        StEntry x;
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) {
                emx_seterr(err, errlen, "%s: malformed safetensors header: __metadata__ is not an object", path);
                return -1;
            }
            continue;
        }
        if (st_entry(e, path, data_size, &x, err, errlen)) return -1;
        n++;
    }
    if (n == 0) {
        emx_seterr(err, errlen, "%s: malformed safetensors header: it lists no tensors", path);
        return -1;
    }
    return 0;
}

// Indexes one .safetensors file: 8-byte header length, JSON header, then the data.
static int read_safetensors(ConvSource *s, const char *path, char *err, size_t errlen) {
    size_t size;
    const uint8_t *base = src_map_file(s, path, &size, err, errlen);
    if (!base) return -1;
    uint64_t hlen;
    if (size < 8 || (memcpy(&hlen, base, 8), hlen > size - 8)) {
        emx_seterr(err, errlen, "%s: header length does not fit the file (%zu bytes; truncated?)", path, size);
        return -1;
    }
    cJSON *h = cJSON_ParseWithLength((const char *)base + 8, hlen);
    if (!h) {
        emx_seterr(err, errlen, "%s: safetensors header is not valid JSON", path);
        return -1;
    }
    int rc = -1;
    const uint8_t *data = base + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    if (st_check_header(h, path, data_size, err, errlen)) goto out;
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        char ours[EMX_NAME_BYTES];
        int m = map_name(e->string, s->cfg.arch, (int)s->cfg.tied_output, ours, sizeof ours);
        if (m == 0) continue;
        if (m < 0) {
            emx_seterr(err, errlen, "%s: tensor %s is not part of a supported model", path, ESC(e->string));
            goto out;
        }
        StEntry x;
        if (st_entry(e, path, data_size, &x, err, errlen)) goto out;
        if (!x.esize) {
            emx_seterr(err, errlen, "%s: tensor %s: dtype %s is not supported (F32, F16, BF16)", path, ESC(e->string),
                     ESC(x.dtype));
            goto out;
        }
        if (x.nd < 1 || x.nd > 2 || x.dims[0] == 0 || (x.nd == 2 && x.dims[1] == 0)) {
            emx_seterr(err, errlen, "%s: tensor %s: %d dimensions or an empty one (want 1 or 2, each >= 1)", path,
                     ESC(e->string), x.nd);
            goto out;
        }
        if (x.nd == 1) x.dims[1] = 1;
        if (src_add(s, ours, e->string, x.type, (uint32_t)x.nd, x.dims[0], x.dims[1], data + x.b0, err, errlen))
            goto out;
    }
    rc = 0;
out:
    cJSON_Delete(h);
    return rc;
}

// The safetensors files of a directory: model.safetensors, or every shard that
// model.safetensors.index.json's weight_map names.
static int read_weights(ConvSource *s, const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *idx = read_json(path, 0, err, errlen);
    src_note_input(s, path);
    if (!idx) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return read_safetensors(s, path, err, errlen);
    }
    int rc = -1;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(wm)) {
        emx_seterr(err, errlen, "%s: weight_map is missing", path);
        goto out;
    }
    // Each shard once, in the order it is first named.
    const char *seen[SRC_MAX_MAPS];
    int n_seen = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            emx_seterr(err, errlen, "%s: weight_map[%s] is not a file name in the directory", path, ESC(e->string));
            goto out;
        }
        int dup = 0;
        for (int i = 0; i < n_seen; i++) dup |= strcmp(seen[i], e->valuestring) == 0;
        if (dup) continue;
        if (n_seen == SRC_MAX_MAPS) {
            emx_seterr(err, errlen, "%s: more than %d shards", path, SRC_MAX_MAPS);
            goto out;
        }
        seen[n_seen++] = e->valuestring;
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, e->valuestring);
        if (read_safetensors(s, shard, err, errlen)) goto out;
    }
    rc = 0;
out:
    cJSON_Delete(idx);
    return rc;
}

// Path of dir/name to read. A git checkout without symlink support stores a link as a small
// text file holding the link's target ("../../../tokenizers/qwen3/tokenizer.json"); such a
// stub (tokdata_link_stub: a relative path to a file of the same name) is followed, relative
// to dir, when the target exists.
static void resolve_file(const char *dir, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", dir, name);
    struct stat st;
    if (lstat(out, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || st.st_size > TOKDATA_STUB_MAX + 2) return;
    size_t n = 0;
    char *text = emx_read_file(out, &n);
    if (!text) return;
    char rel[TOKDATA_STUB_MAX + 1], target[PATH_MAX + 8], real[PATH_MAX];
    if (tokdata_link_stub(text, n, name, rel, sizeof rel)) {
        snprintf(target, sizeof target, "%s/%s", dir, rel);
        if (stat(target, &st) == 0 && S_ISREG(st.st_mode) && realpath(target, real)) snprintf(out, cap, "%s", real);
    }
    free(text);
}

// The tokenizer builder reads tokenizer.json, tokenizer_config.json and config.json from one
// directory. When a file is a link stub (see resolve_file), it gets a temporary directory of
// real symlinks to the resolved files instead; *tmp_made says whether to remove it.
static int tokenizer_dir(const char *dir, char *out, size_t cap, int *tmp_made, char *err, size_t errlen) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    char resolved[3][PATH_MAX + 64], plain[PATH_MAX + 64];
    int stubs = 0;
    *tmp_made = 0;
    for (int i = 0; i < 3; i++) {
        resolve_file(dir, names[i], resolved[i], sizeof resolved[i]);
        snprintf(plain, sizeof plain, "%s/%s", dir, names[i]);
        stubs |= strcmp(plain, resolved[i]) != 0;
    }
    snprintf(out, cap, "%s", dir);
    if (!stubs) return 0;
    char tmpl[] = "/tmp/emx-convert-tok-XXXXXX";
    if (!mkdtemp(tmpl)) {
        emx_seterr(err, errlen, "%s: cannot make a temporary directory for the tokenizer files", dir);
        return -1;
    }
    snprintf(out, cap, "%s", tmpl);
    *tmp_made = 1;
    for (int i = 0; i < 3; i++) {
        char real[PATH_MAX], link[PATH_MAX + 64];
        struct stat st;
        if (stat(resolved[i], &st) != 0 || !realpath(resolved[i], real)) continue;  // optional files
        snprintf(link, sizeof link, "%s/%s", tmpl, names[i]);
        if (symlink(real, link) != 0) {
            emx_seterr(err, errlen, "%s: cannot link %s", tmpl, names[i]);
            return -1;
        }
    }
    return 0;
}

static void remove_tokenizer_dir(const char *tmp) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    char link[PATH_MAX + 64];
    for (int i = 0; i < 3; i++) {
        if (snprintf(link, sizeof link, "%s/%s", tmp, names[i]) < (int)sizeof link) unlink(link);
    }
    rmdir(tmp);
}

// tokenizer_config.json "chat_template": a string, or a list of {name, template} (the
// "default" one is taken).
static void read_chat_template(ConvSource *s, const char *tok_dir) {
    char path[PATH_MAX + 64], err[PATH_MAX + 128];
    resolve_file(tok_dir, "tokenizer_config.json", path, sizeof path);
    cJSON *tc = read_json(path, 0, err, sizeof err);
    if (!tc) return;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    const char *text = NULL;
    if (cJSON_IsString(ct)) {
        text = ct->valuestring;
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name"), *t = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(n) && cJSON_IsString(t) && strcmp(n->valuestring, "default") == 0) text = t->valuestring;
        }
    }
    if (text) s->chat_template = strdup(text);
    cJSON_Delete(tc);
}

int src_open_hf(ConvSource *s, const char *dir, const char *tokenizer, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->ext = emx_config_ext_default();
    s->path = dir;
    if (parse_config(s, dir, err, errlen) || read_weights(s, dir, err, errlen)) return -1;
    if (s->cfg.arch == EMX_ARCH_GEMMA3 && hf_gemma_norms(s, err, errlen)) return -1;
    // The tokenizer is sized by vocab_size: check it against the embedding before building one
    // (a wrong vocab_size must not allocate a huge tokenizer first).
    const SrcTensor *emb = src_find(s, "tok_embeddings");
    if (!emb) {
        emx_seterr(err, errlen, "%s: tensor model.embed_tokens.weight (tok_embeddings) is missing", dir);
        return -1;
    }
    if (emb->rows != s->cfg.vocab_size) {
        emx_seterr(err, errlen, "%s/config.json: vocab_size = %u but tensor %s has %llu rows", dir, s->cfg.vocab_size,
                 emb->src_name, (unsigned long long)emb->rows);
        return -1;
    }
    const char *tok_dir = tokenizer ? tokenizer : dir;
    static const char *const read[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++) {
        char p[PATH_MAX + 64];
        resolve_file(i ? tok_dir : dir, read[i], p, sizeof p);
        src_note_input(s, p);
        if (i == 0 && tokenizer) resolve_file(tok_dir, read[i], p, sizeof p), src_note_input(s, p);
    }
    read_chat_template(s, tok_dir);
    char use[PATH_MAX + 64];
    int tmp_made;
    int rc = tokenizer_dir(tok_dir, use, sizeof use, &tmp_made, err, errlen);
    if (rc == 0) rc = tokdata_from_hf_dir(use, s->cfg.vocab_size, &s->tok, err, errlen);
    if (tmp_made) remove_tokenizer_dir(use);
    return rc;
}
