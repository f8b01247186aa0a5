#!/usr/bin/env python3
"""make_shaped_gguf.py — a random-weight GGUF with the real shapes of a published model, for
speed benchmarks where the real weights cannot be downloaded (issue #8: "a Qwen3-0.6B-shaped
model").

    python3 tools/make_shaped_gguf.py --like qwen3-0.6b --type q8_0 -o build/bench/qwen3-0.6b.q8_0.gguf \
        --gguf-py /path/to/llama.cpp/gguf-py

The tokenizer and every non-shape key come from the Qwen3 GGUF in ../shared/testdata (the real
Qwen3 vocabulary), the shapes from the published config (Qwen3-0.6B: hidden 1024, 28 layers,
16 query / 8 KV heads of 128, FFN 3072, vocabulary 151936, tied embeddings). Weights are
N(0, 0.02²) (norm weights 1), quantised with gguf-py's reference quantisers (the same bytes
llama.cpp's quantize writes for Q8_0 / Q4_0 / Q4_1); norms stay F32 as llama.cpp keeps them.
Our converter reads this same file, so both runtimes run identical weights.

gguf-py (numpy only) ships inside llama.cpp, e.g. the llama-cpp-python sdist's
vendor/llama.cpp/gguf-py (docs/benchmarking.md).
"""
import argparse
import sys

SHAPES = {
    # name: (dim, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab, context)
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, 151936, 40960),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--like", default="qwen3-0.6b", choices=sorted(SHAPES))
    ap.add_argument("--type", default="q8_0", choices=["f16", "q8_0", "q4_0", "q4_1"])
    ap.add_argument("--tokenizer-from", default="../shared/testdata/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf")
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import numpy as np
    import gguf

    dim, n_layers, n_heads, n_kv, head_dim, ffn, vocab, ctx = SHAPES[a.like]
    src = gguf.GGUFReader(a.tokenizer_from)
    arch = src.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.out, arch)
    shape_keys = {
        f"{arch}.context_length": ctx, f"{arch}.embedding_length": dim,
        f"{arch}.block_count": n_layers, f"{arch}.feed_forward_length": ffn,
        f"{arch}.attention.head_count": n_heads, f"{arch}.attention.head_count_kv": n_kv,
        f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim,
    }
    for f in src.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.name in shape_keys:
            w.add_uint32(f.name, shape_keys[f.name])
        elif f.name == "general.name":
            w.add_string(f.name, f"{a.like}-shaped random weights")
        elif f.name == "general.file_type":
            continue
        else:
            sub = f.types[1] if len(f.types) > 1 else None
            w.add_key_value(f.name, f.contents(), f.types[0], sub)
    qtype = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
             "q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1}[a.type]

    rng = np.random.default_rng(a.seed)

    def matrix(name, rows, cols):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32) + rng.standard_normal(n, dtype=np.float32) * 0.01)

    matrix("token_embd.weight", vocab, dim)  # tied: also the classifier
    norm("output_norm.weight", dim)
    for l in range(n_layers):
        p = f"blk.{l}."
        norm(p + "attn_norm.weight", dim)
        matrix(p + "attn_q.weight", n_heads * head_dim, dim)
        matrix(p + "attn_k.weight", n_kv * head_dim, dim)
        matrix(p + "attn_v.weight", n_kv * head_dim, dim)
        matrix(p + "attn_output.weight", dim, n_heads * head_dim)
        norm(p + "attn_q_norm.weight", head_dim)
        norm(p + "attn_k_norm.weight", head_dim)
        norm(p + "ffn_norm.weight", dim)
        matrix(p + "ffn_gate.weight", ffn, dim)
        matrix(p + "ffn_up.weight", ffn, dim)
        matrix(p + "ffn_down.weight", dim, ffn)
        print(f"layer {l + 1}/{n_layers}", file=sys.stderr, end="\r")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"\nwrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
