#!/usr/bin/env python3
"""make_shaped_hf.py — a HuggingFace model directory with a real model's shapes and random weights.

The real Qwen3 and Llama 3.2 weights cannot be downloaded on this project's machines; their speed
depends only on the shapes, so a model with the same config.json, the real tokenizer and random
F16 weights reads and computes exactly as many bytes per token. The text it generates is noise.

    python3 tools/make_shaped_hf.py --shape qwen3-0.6b --tokenizer-dir DIR -o OUT_DIR
    build/tools/convert OUT_DIR qwen3-0.6b.q8.bin --dtype q8

DIR holds tokenizer.json and tokenizer_config.json (shared/testdata/tokenizers/qwen3 or llama3;
for Qwen2.5 and Gemma 3 the directories tools/make_tiny_hf.py writes, build/models/hf/qwen2.5-tiny
and build/models/hf/gemma3-tiny, which `make test-models` makes).
Python's standard library only. The weights are one seeded block of N(0, 0.02) values repeated
over every tensor (drawing 1.2 billion independent values would take longer than the benchmark);
norms are 1 (Gemma's, which multiply by 1 + w: 0), biases 0.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

# Each shape: the fields of the model's own config.json that set its tensor shapes and maths.
SHAPES = {
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": True,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
        "attention_bias": False, "torch_dtype": "float16",
    },
    "llama3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": True,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "float16",
    },
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2,
        "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_scaling": None, "tie_word_embeddings": True,
        "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "torch_dtype": "float16",
    },
    "gemma3-270m": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "query_pre_attn_scalar": 256, "vocab_size": 262144, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
        "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "torch_dtype": "float16",
    },
    "gemma3-1b": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "query_pre_attn_scalar": 256, "vocab_size": 262144, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "sliding_window": 512, "sliding_window_pattern": 6,
        "layer_types": [("full_attention" if (i + 1) % 6 == 0 else "sliding_attention") for i in range(26)],
        "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "torch_dtype": "float16",
    },
}


def tensor_shapes(c):
    """(name, shape) of every tensor, in the HF layout: a projection is [out, in]."""
    d, f = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim") or d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (c["vocab_size"], d)), ("model.norm.weight", (d,))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,)), (p + "post_attention_layernorm.weight", (d,)),
                (p + "self_attn.q_proj.weight", (q, d)), (p + "self_attn.k_proj.weight", (kv, d)),
                (p + "self_attn.v_proj.weight", (kv, d)), (p + "self_attn.o_proj.weight", (d, q)),
                (p + "mlp.gate_proj.weight", (f, d)), (p + "mlp.up_proj.weight", (f, d)),
                (p + "mlp.down_proj.weight", (d, f))]
        if c["model_type"] in ("qwen3", "gemma3_text"):
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        if c["model_type"] == "qwen2":
            out += [(p + "self_attn.q_proj.bias", (q,)), (p + "self_attn.k_proj.bias", (kv,)),
                    (p + "self_attn.v_proj.bias", (kv,))]
        if c["model_type"] == "gemma3_text":
            out += [(p + "pre_feedforward_layernorm.weight", (d,)),
                    (p + "post_feedforward_layernorm.weight", (d,))]
    return out


def write_safetensors(path, shapes, seed, gemma=False):
    rng = random.Random(seed)
    block_n = 1 << 20
    block = struct.pack(f"<{block_n}e", *(rng.gauss(0.0, 0.02) for _ in range(block_n)))
    one = struct.pack("<e", 1.0)
    zero = struct.pack("<e", 0.0)
    header, offset = {}, 0
    for name, shape in shapes:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as fp:
        fp.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in shapes:
            n = math.prod(shape)
            if len(shape) == 1:  # a bias is 0; a norm 1, or 0 where the norm multiplies by 1 + w
                fp.write((zero if gemma or name.endswith(".bias") else one) * n)
                continue
            for start in range(0, n, block_n):
                fp.write(block[: 2 * min(block_n, n - start)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--tokenizer-dir", required=True, help="holds tokenizer.json, tokenizer_config.json")
    ap.add_argument("-o", "--out", required=True, help="the model directory to write")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.isfile(os.path.join(a.tokenizer_dir, name)):
            sys.exit(f"make_shaped_hf: {a.tokenizer_dir}: no {name}")
    os.makedirs(a.out, exist_ok=True)
    cfg = SHAPES[a.shape]
    with open(os.path.join(a.out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(a.tokenizer_dir, name), os.path.join(a.out, name))
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensor_shapes(cfg), a.seed,
                      gemma=cfg["model_type"] == "gemma3_text")
    print(f"{a.out}: {a.shape}, {sum(math.prod(s) for _, s in tensor_shapes(cfg)) / 1e9:.2f}B parameters")


if __name__ == "__main__":
    main()
