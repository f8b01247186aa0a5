#!/usr/bin/env python3
"""make_tiny_hf.py — small random-weight Qwen2.5 and Gemma 3 HuggingFace model directories.

    python3 tools/make_tiny_hf.py --shape gemma3-tiny -o build/models/hf/gemma3-tiny \
        [--qwen-tokenizer-dir ../shared/testdata/tokenizers/qwen3]

writes config.json, model.safetensors (BF16), tokenizer.json and tokenizer_config.json:

  qwen2.5-tiny        Qwen2ForCausalLM, the real vocabulary (151,936 rows), hidden 64, 3 layers,
                      4 heads / 2 KV heads of 16, q/k/v biases; Qwen3's tokenizer with Qwen2.5's
                      added tokens (Qwen3 adds 151665..151668) and Qwen2.5's chat template.
  gemma3-tiny         Gemma3ForCausalLM, vocabulary 262,144, hidden 64, head_dim 32 (q width 128),
                      4 heads / 2 KV heads, query_pre_attn_scalar 48 (not head_dim), 6 layers:
                      5 sliding (window 8) + 1 full, rope_theta 1e6 / rope_local_base_freq 1e4,
                      tied embeddings, q/k norms; the Gemma-3-format tokenizer of
                      tests/data/hf/gemma3-tokenizer padded to 262,144 entries.
  gemma3-270m-shape   Gemma 3 270M's and 1B's widths (hidden 640 / 1152, 4 heads, 1 KV head,
  gemma3-1b-shape     head_dim 256, intermediate 2048 / 6912, window 512) with 2 layers:
                      one sliding, one full.

tests/models.mk passes --check tests/data/hf/<shape>/reference.json: the files must be the bytes
the HF references were computed from. A change here that alters them needs the references
remade: run this script into build/models/hf/<shape>, then tools/make_hf_reference.py.

Python's standard library only, bit-stable: every value comes from SHAKE-256 of the seed and
the tensor's name, turned into BF16 by integer table look-ups (no library distribution, no
float maths that could round differently elsewhere). A 2-D tensor's values are symmetric, with
a magnitude drawn by octave from a half-normal of the tensor's std (std_2d below):
  embeddings        qwen2.5-tiny 0.5 (a peaked next-token distribution through the tied head,
                    as the shared tiny models have); Gemma about 0.16 / sqrt(hidden): 0.0625,
                    0.006, 0.0045 (tiny, 270m, 1b shapes). Gemma multiplies the embedding by
                    sqrt(hidden); through the tied head a token's own logit grows as
                    std * hidden against the others' spread, and a larger std makes greedy
                    repeat the prompt's last token
  projections       1.6 / sqrt(fan_in): 0.2 at width 64, 0.063 / 0.047 at 640 / 1152
  q/k/v biases      uniform in [-0.25, 0.25]
  norms             Qwen: 1 + uniform [-0.25, 0.25]; Gemma (which multiplies by 1 + w):
                    uniform [-0.5, 0.5], the final norm 5 + uniform [-0.5, 0.5] (logits about
                    six times wider with the small embedding)
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GEMMA_TOK = os.path.join(ROOT, "tests", "data", "hf", "gemma3-tokenizer", "tokenizer.json")
TEMPLATES = os.path.join(ROOT, "tests", "data", "chat_templates")

QWEN25 = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 192, "max_position_embeddings": 32768,
    "max_window_layers": 3, "num_attention_heads": 4, "num_hidden_layers": 3,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}


def gemma3(hidden, inter, layers, heads, kv, head_dim, scalar, window, types):
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "attention_bias": False, "attention_dropout": 0.0, "attn_logit_softcapping": None,
        "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
        "final_logit_softcapping": None, "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": inter, "layer_types": types, "max_position_embeddings": 32768,
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv,
        "pad_token_id": 0, "query_pre_attn_scalar": scalar, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0, "rope_scaling": None, "rope_theta": 1000000.0,
        "sliding_window": window, "sliding_window_pattern": 6, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True,
        "use_bidirectional_attention": False, "vocab_size": 262144,
    }


SL, FULL = "sliding_attention", "full_attention"
SHAPES = {
    "qwen2.5-tiny": (QWEN25, 0.5),
    "gemma3-tiny": (gemma3(64, 192, 6, 4, 2, 32, 48, 8, [SL] * 5 + [FULL]), 0.0625),
    "gemma3-270m-shape": (gemma3(640, 2048, 2, 4, 1, 256, 256, 512, [SL, FULL]), 0.006),
    "gemma3-1b-shape": (gemma3(1152, 6912, 2, 4, 1, 256, 256, 512, [SL, FULL]), 0.0045),
}


# ---------------------------------------------------------------------------------------------
# Values: SHAKE-256 bytes -> BF16 through integer tables.

def bf16_bits(x):
    """BF16 bits of the double x: rounded to float32, then to BF16 by round to nearest even."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def stream(seed, name, n):
    return hashlib.shake_256(f"{seed}/{name}".encode()).digest(n)


def octave_table(std):
    """256 high bytes of a BF16 value (sign, the exponent's 7 upper bits) for a random byte.

    The 7 low bits of the byte choose a pair of octaves [2^2k, 2^(2k+2)) with the probability a
    half-normal of this std puts there (128 slots, largest remainders); the value's low byte,
    another random byte, then chooses the octave within the pair and the mantissa uniformly.
    The slot counts come from math.erf rounded to 1/128: a last-bit difference of erf between
    platforms could move a slot only on an exact tie of remainders, which these stds do not have."""
    shares = []
    for h in range(40, 64):  # pair [2^(2h-127), 2^(2h-125))
        lo = 0.0 if h == 40 else 2.0 ** (2 * h - 127)
        hi = 2.0 ** (2 * h - 125)
        shares.append((h, math.erf(hi / (std * math.sqrt(2))) - math.erf(lo / (std * math.sqrt(2)))))
    total = sum(p for _, p in shares)
    exact = [(h, 128 * p / total) for h, p in shares]
    slots = {h: int(x) for h, x in exact}
    rest = sorted(exact, key=lambda hx: (-(hx[1] - int(hx[1])), hx[0]))
    for h, x in rest[: 128 - sum(slots.values())]:
        slots[h] += 1
    table = []
    for h in sorted(slots, reverse=True):
        table += [h] * slots[h]
    assert len(table) == 128
    return bytes(table) + bytes(0x80 | h for h in table)  # byte b: sign = b >> 7, slot = b & 127


def table_std(table):
    """The exact standard deviation of the values octave_table(std) gives."""
    m2 = 0.0
    for h in table[:128]:
        a = 2.0 ** (2 * h - 127)  # E[x^2] over the pair: (a^2 + 4a^2) / 2 * E[(1+u)^2] = 7/3
        m2 += a * a * 35.0 / 6.0 / 128
    return math.sqrt(m2)


def table_for(std):
    """The octave table whose values have this std (the octave pairs are coarse: the half-normal's
    own std gives about 1.4 times more; a few fixed-point steps correct it)."""
    s = std
    for _ in range(6):
        s *= std / table_std(octave_table(s))
    return octave_table(s)


CHUNK = 1 << 23  # values per SHAKE stream: memory stays small for the 600 MB embeddings


def write_bf16_normal(fp, seed, name, n, std):
    """n BF16 values (2n bytes, little-endian) of a 2-D tensor, written to fp."""
    table = table_for(std)
    for k, start in enumerate(range(0, n, CHUNK)):
        m = min(CHUNK, n - start)
        raw = stream(seed, f"{name}/{k}", 2 * m)
        out = bytearray(2 * m)
        out[0::2] = raw[0::2]                   # the exponent's last bit, the mantissa
        out[1::2] = raw[1::2].translate(table)  # the sign, the exponent's 7 upper bits
        fp.write(out)


def uniform_1d(seed, name, n, center, half):
    """n BF16 values center + uniform[-half, half] (steps of half / 32768)."""
    raw = stream(seed, name, 2 * n)
    vals = []
    for i in range(n):
        u = raw[2 * i] | raw[2 * i + 1] << 8          # 0..65535
        vals.append(bf16_bits(center + (u - 32768) * half / 32768))
    return struct.pack(f"<{n}H", *vals)


# ---------------------------------------------------------------------------------------------
# Tensors.

def tensors(c, embed_std):
    """(name, shape, kind, arg) of every tensor, HF names, projections [out, in]."""
    d, f = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim") or d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    gemma = c["model_type"] == "gemma3_text"
    norm = ("u", (0.0, 0.5)) if gemma else ("u", (1.0, 0.25))
    proj = lambda fan_in: ("n", 1.6 / math.sqrt(fan_in))
    out = [("model.embed_tokens.weight", (c["vocab_size"], d), "n", embed_std)]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (d,)) + norm,
                (p + "self_attn.q_proj.weight", (q, d)) + proj(d),
                (p + "self_attn.k_proj.weight", (kv, d)) + proj(d),
                (p + "self_attn.v_proj.weight", (kv, d)) + proj(d)]
        if not gemma:
            out += [(p + "self_attn.q_proj.bias", (q,), "u", (0.0, 0.25)),
                    (p + "self_attn.k_proj.bias", (kv,), "u", (0.0, 0.25)),
                    (p + "self_attn.v_proj.bias", (kv,), "u", (0.0, 0.25))]
        out += [(p + "self_attn.o_proj.weight", (d, q)) + proj(q)]
        if gemma:
            out += [(p + "self_attn.q_norm.weight", (hd,)) + norm,
                    (p + "self_attn.k_norm.weight", (hd,)) + norm]
        out += [(p + "post_attention_layernorm.weight", (d,)) + norm]
        if gemma:
            out += [(p + "pre_feedforward_layernorm.weight", (d,)) + norm]
        out += [(p + "mlp.gate_proj.weight", (f, d)) + proj(d),
                (p + "mlp.up_proj.weight", (f, d)) + proj(d),
                (p + "mlp.down_proj.weight", (d, f)) + proj(f)]
        if gemma:
            out += [(p + "post_feedforward_layernorm.weight", (d,)) + norm]
    out += [("model.norm.weight", (d,)) + (("u", (5.0, 0.5)) if gemma else norm)]
    return out


def write_safetensors(path, specs, seed):
    header, offset = {}, 0
    for name, shape, _, _ in specs:
        n = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt", "generator": f"tools/make_tiny_hf.py seed {seed}"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fp:
        fp.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape, kind, arg in specs:
            n = math.prod(shape)
            if kind == "n":
                write_bf16_normal(fp, seed, name, n, arg)
            else:
                fp.write(uniform_1d(seed, name, n, *arg))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Tokenizers.

def read_json(path):
    with open(path, encoding="utf-8") as fp:
        return json.load(fp)


def read_text(path):
    with open(path, encoding="utf-8") as fp:
        return fp.read()


def qwen25_tokenizer(qwen3_dir):
    """Qwen3's tokenizer files less the four added tokens Qwen3 introduced, with Qwen2.5's
    tokenizer_config (its chat template)."""
    tj = read_json(os.path.join(qwen3_dir, "tokenizer.json"))
    tj["added_tokens"] = [t for t in tj["added_tokens"] if t["id"] <= 151664]
    tc = read_json(os.path.join(qwen3_dir, "tokenizer_config.json"))
    tc["added_tokens_decoder"] = {k: v for k, v in tc["added_tokens_decoder"].items() if int(k) <= 151664}
    tc["chat_template"] = read_text(os.path.join(TEMPLATES, "qwen2.5.jinja"))
    return tj, tc


def gemma3_tokenizer(compact_path, n_vocab=262144):
    """The compact Gemma-3-format tokenizer padded to Gemma 3's layout of 262,144 entries:
    <start_of_image> 255999, <end_of_image> 256000, <unused99>..<unused6241> 256001..262143
    (special added tokens, as <unused0..98>), and between the trained pieces and 255999
    fillers no text can produce (no merge makes them)."""
    tj = read_json(compact_path)
    vocab = tj["model"]["vocab"]
    n = len(vocab)
    assert sorted(vocab.values()) == list(range(n))
    fixed = {255999: "<start_of_image>", 256000: "<end_of_image>"}
    fixed.update({256001 + k: f"<unused{99 + k}>" for k in range(n_vocab - 256001)})
    for i in range(n, n_vocab):
        vocab[fixed.get(i, f"<filler{i}>")] = i
    for i, text in sorted(fixed.items()):
        tj["added_tokens"].append({"id": i, "content": text, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
    decoder = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                 "single_word", "special")}
               for t in tj["added_tokens"]}
    tc = {
        "add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": decoder,
        "boi_token": "<start_of_image>", "bos_token": "<bos>",
        "chat_template": read_text(os.path.join(TEMPLATES, "gemma3.jinja")),
        "clean_up_tokenization_spaces": False, "eoi_token": "<end_of_image>", "eos_token": "<eos>",
        "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"},
        "model_max_length": 1000000000000000019884624838656, "pad_token": "<pad>",
        "padding_side": "left", "sp_model_kwargs": None, "spaces_between_special_tokens": False,
        "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
    }
    return tj, tc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("-o", "--out", required=True, help="the model directory to write")
    ap.add_argument("--qwen-tokenizer-dir", default=os.path.join(ROOT, "..", "shared", "testdata", "tokenizers", "qwen3"),
                    help="Qwen3's tokenizer.json and tokenizer_config.json (qwen2.5-tiny)")
    ap.add_argument("--seed", type=int, default=2511)
    ap.add_argument("--check", metavar="REFERENCE_JSON",
                    help="fail unless the files written have the sha256s this reference was made from")
    a = ap.parse_args()
    cfg, embed_std = SHAPES[a.shape]
    if cfg["model_type"] == "qwen2":
        if not os.path.isfile(os.path.join(a.qwen_tokenizer_dir, "tokenizer.json")):
            sys.exit(f"make_tiny_hf: {a.qwen_tokenizer_dir}: no tokenizer.json")
        tj, tc = qwen25_tokenizer(a.qwen_tokenizer_dir)
    else:
        tj, tc = gemma3_tokenizer(GEMMA_TOK)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as fp:
        json.dump(tj, fp, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as fp:
        json.dump(tc, fp, ensure_ascii=False, indent=2)
    specs = tensors(cfg, embed_std)
    write_safetensors(os.path.join(a.out, "model.safetensors"), specs, a.seed)
    n = sum(math.prod(s) for _, s, _, _ in specs)
    print(f"{a.out}: {a.shape}, {n / 1e6:.1f}M parameters, embedding std {table_std(table_for(embed_std)):.4g}")
    if a.check:
        check_files(a.out, a.check)


def check_files(out, reference_json):
    """The references in tests/data/hf were computed from exactly these bytes: a generator change
    that alters them makes the references stale, and this says so instead of letting tests
    compare against numbers of another model."""
    want = read_json(reference_json)["files"]
    for name, meta in sorted(want.items()):
        h = hashlib.sha256()
        with open(os.path.join(out, name), "rb") as fp:
            for chunk in iter(lambda: fp.read(1 << 24), b""):
                h.update(chunk)
        if h.hexdigest() != meta["sha256"]:
            sys.exit(f"make_tiny_hf: {out}/{name}: sha256 {h.hexdigest()[:16]}... is not the "
                     f"{meta['sha256'][:16]}... {reference_json} was made from (rerun tools/make_hf_reference.py)")
    print(f"{out}: the {len(want)} files {reference_json} was made from, byte for byte")


if __name__ == "__main__":
    main()
