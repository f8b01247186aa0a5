// source_hf_arch.h — the architecture fields of a HuggingFace config.json beyond the Llama
// layout (model file version 2: EmxConfigExt), and Gemma's norm weights.
#ifndef ENTROPIX_CONVERT_SOURCE_HF_ARCH_H
#define ENTROPIX_CONVERT_SOURCE_HF_ARCH_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "tools/convert/source.h"

// The RoPE base of one layer type ("full_attention", "sliding_attention") into *theta: the
// transformers 5 rope_parameters, else rope_theta / rope_local_base_freq, else def.
int hf_rope_theta(const cJSON *cfg, const char *layer_type, double def, double *theta, const char *path, char *err,
                  size_t errlen);

// Fills s->ext from cfg (s->cfg already holds the arch and sizes): q/k/v biases (Qwen2), the
// sliding window and local layers, and for Gemma 3 the sandwich norms, GeGLU, embedding and
// attention scales, the local RoPE base and linear scaling of the global layers. Refuses in one
// line what the runtime does not compute (logit soft-capping, other RoPE scalings).
int hf_arch_config(ConvSource *s, const cJSON *cfg, const char *path, char *err, size_t errlen);

// Gemma: every norm weight w becomes the f32 1 + w its RMSNorm multiplies by (HF computes
// 1.0 + weight.float() in float32), so the runtime's norm stays x / rms(x) * w for every model.
int hf_gemma_norms(ConvSource *s, char *err, size_t errlen);

#endif
