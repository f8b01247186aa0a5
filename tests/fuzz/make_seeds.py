#!/usr/bin/env python3
"""make_seeds.py — writes the committed seed corpora of tests/fuzz/corpus/ (stdlib only).

    python3 tests/fuzz/make_seeds.py [--shared ../shared] [--convert build/tools/convert]

Seeds are small (a few KB) but real: tiny GGUF files (llama + SPM vocabulary, qwen3 + byte-level
BPE vocabulary) and a tiny HuggingFace directory written here field by field as the formats
define them; tokenizer.json files trimmed from ../shared's Qwen3 and Llama 3 ones (all their
sections, the first 300 vocabulary entries and the merges among them, added tokens renumbered
after them); model files made from the tiny sources by our own converter (when --convert is
given); profile files, CLI lines and chat conversations. Re-running it rewrites the same files.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def f16(x):
    return struct.pack("<e", x)


def weights(n, scale=0.05, seed=1):
    # Deterministic small values without numpy: a linear congruential sequence in [-scale, scale).
    out, s = [], seed
    for _ in range(n):
        s = (s * 1103515245 + 12345) & 0x7FFFFFFF
        out.append((s / 0x7FFFFFFF * 2 - 1) * scale)
    return out


# ---- GGUF (version 3): header, key/values, tensor infos, aligned data ----
GG_U32, GG_I32, GG_F32, GG_BOOL, GG_STR, GG_ARR = 4, 5, 6, 7, 8, 9


def gg_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gg_value(t, v):
    if t == GG_U32:
        return struct.pack("<I", v)
    if t == GG_I32:
        return struct.pack("<i", v)
    if t == GG_F32:
        return struct.pack("<f", v)
    if t == GG_BOOL:
        return struct.pack("<B", v)
    if t == GG_STR:
        return gg_str(v)
    et, items = v
    return struct.pack("<IQ", et, len(items)) + b"".join(gg_value(et, x) for x in items)


def gguf(kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, [ne0, ne1...], ggml type, bytes)]"""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gg_str(k) + struct.pack("<I", t) + gg_value(t, v)
    off = 0
    for name, ne, typ, data in tensors:
        out += gg_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", typ, off)
        off += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % 32)
    return out


def layer_tensors(dim, hidden, n_heads, n_kv, head_dim, qk_norm):
    def mat(rows, cols, seed):  # F16 (ggml type 1)
        return b"".join(f16(x) for x in weights(rows * cols, seed=seed)), 1
    t = []
    q, kv = n_heads * head_dim, n_kv * head_dim
    t.append(("blk.0.attn_norm.weight", [dim], 0, struct.pack(f"<{dim}f", *([1.0] * dim))))
    for i, (nm, rows, cols) in enumerate([("attn_q", q, dim), ("attn_k", kv, dim), ("attn_v", kv, dim),
                                          ("attn_output", dim, q), ("ffn_gate", hidden, dim),
                                          ("ffn_up", hidden, dim), ("ffn_down", dim, hidden)]):
        data, typ = mat(rows, cols, i + 2)
        t.append((f"blk.0.{nm}.weight", [cols, rows], typ, data))
    if qk_norm:
        for nm in ("attn_q_norm", "attn_k_norm"):
            t.append((f"blk.0.{nm}.weight", [head_dim], 0, struct.pack(f"<{head_dim}f", *([1.0] * head_dim))))
    t.append(("blk.0.ffn_norm.weight", [dim], 0, struct.pack(f"<{dim}f", *([1.0] * dim))))
    return t


def gguf_llama_spm():
    # llama + SentencePiece vocabulary: <unk> <s> </s>, 4 byte pieces, a few words and merges.
    toks = ["<unk>", "<s>", "</s>", "<0x0A>", "<0x41>", "<0xC3>", "<0xA9>", "\u2581", "a", "b", "\u2581a", "ab",
            "\u2581ab", "c", "\u2581b", "\u2581c"]
    types = [2, 3, 3, 6, 6, 6, 6] + [1] * (len(toks) - 7)
    scores = [0.0] * 7 + [-float(i) for i in range(len(toks) - 7)]
    dim, hidden, nh, nkv, hd = 8, 16, 2, 1, 4
    kvs = [("general.architecture", GG_STR, "llama"), ("general.alignment", GG_U32, 32),
           ("llama.block_count", GG_U32, 1), ("llama.context_length", GG_U32, 64),
           ("llama.embedding_length", GG_U32, dim), ("llama.feed_forward_length", GG_U32, hidden),
           ("llama.attention.head_count", GG_U32, nh), ("llama.attention.head_count_kv", GG_U32, nkv),
           ("llama.rope.freq_base", GG_F32, 10000.0), ("llama.attention.layer_norm_rms_epsilon", GG_F32, 1e-5),
           ("tokenizer.ggml.model", GG_STR, "llama"), ("tokenizer.ggml.tokens", GG_ARR, (GG_STR, toks)),
           ("tokenizer.ggml.scores", GG_ARR, (GG_F32, scores)), ("tokenizer.ggml.token_type", GG_ARR, (GG_I32, types)),
           ("tokenizer.ggml.bos_token_id", GG_U32, 1), ("tokenizer.ggml.eos_token_id", GG_U32, 2),
           ("tokenizer.ggml.unknown_token_id", GG_U32, 0), ("tokenizer.ggml.add_bos_token", GG_BOOL, 1)]
    tensors = [("token_embd.weight", [dim, len(toks)], 1, b"".join(f16(x) for x in weights(dim * len(toks))))]
    tensors += layer_tensors(dim, hidden, nh, nkv, hd, False)
    tensors.append(("output_norm.weight", [dim], 0, struct.pack(f"<{dim}f", *([1.0] * dim))))
    return gguf(kvs, tensors)


def gpt2_byte(b):
    # GPT-2's byte -> printable code point map.
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def bpe_vocab():
    """256 byte tokens in GPT-2's alphabet, a few merges, then ChatML added tokens."""
    vocab = [gpt2_byte(b) for b in range(256)]
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
    for a, b in merges:
        vocab.append(a + b)
    added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    return vocab, merges, added


QWEN_TEMPLATE = ("{%- for message in messages %}{%- if message.role == \"user\" %}{{- '<|im_start|>' + "
                 "message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is "
                 "defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")


def gguf_qwen3_bpe():
    vocab, merges, added = bpe_vocab()
    toks = vocab + added
    types = [1] * len(vocab) + [3, 3, 3, 4, 4]
    dim, hidden, nh, nkv, hd = 8, 16, 2, 1, 4
    kvs = [("general.architecture", GG_STR, "qwen3"), ("qwen3.block_count", GG_U32, 1),
           ("qwen3.context_length", GG_U32, 64), ("qwen3.embedding_length", GG_U32, dim),
           ("qwen3.feed_forward_length", GG_U32, hidden), ("qwen3.attention.head_count", GG_U32, nh),
           ("qwen3.attention.head_count_kv", GG_U32, nkv), ("qwen3.attention.key_length", GG_U32, hd),
           ("qwen3.attention.value_length", GG_U32, hd), ("qwen3.rope.freq_base", GG_F32, 1000000.0),
           ("qwen3.attention.layer_norm_rms_epsilon", GG_F32, 1e-6),
           ("tokenizer.ggml.model", GG_STR, "gpt2"), ("tokenizer.ggml.pre", GG_STR, "qwen2"),
           ("tokenizer.ggml.tokens", GG_ARR, (GG_STR, toks)), ("tokenizer.ggml.token_type", GG_ARR, (GG_I32, types)),
           ("tokenizer.ggml.merges", GG_ARR, (GG_STR, [a + " " + b for a, b in merges])),
           ("tokenizer.ggml.eos_token_id", GG_U32, len(vocab) + 2),
           ("tokenizer.ggml.padding_token_id", GG_U32, len(vocab)),
           ("tokenizer.ggml.bos_token_id", GG_U32, len(vocab)), ("tokenizer.ggml.add_bos_token", GG_BOOL, 0),
           ("tokenizer.chat_template", GG_STR, QWEN_TEMPLATE)]
    tensors = [("token_embd.weight", [dim, len(toks)], 1, b"".join(f16(x) for x in weights(dim * len(toks))))]
    tensors += layer_tensors(dim, hidden, nh, nkv, hd, True)
    tensors.append(("output_norm.weight", [dim], 0, struct.pack(f"<{dim}f", *([1.0] * dim))))
    return gguf(kvs, tensors)


# ---- HuggingFace directory: config.json, model.safetensors, tokenizer.json ----
def tiny_tokenizer_json():
    vocab, merges, added = bpe_vocab()
    return {
        "version": "1.0",
        "added_tokens": [{"id": len(vocab) + i, "content": a, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": i < 3} for i, a in enumerate(added)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                   "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab)}, "merges": [[a, b] for a, b in merges]},
    }


def safetensors(tensors):
    """tensors: [(name, dtype, shape, bytes)] -> (header JSON, data); the file is u64 header
    length, header, data (fuzz_hf writes it from the two)."""
    header, data = {"__metadata__": {"format": "pt"}}, b""  # as torch's save_file writes it
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return h, data


def st_file(hd):
    return struct.pack("<Q", len(hd[0])) + hd[0] + hd[1]


def hf_qwen3(vocab_n, qk_norm=True):
    dim, hidden, nh, nkv, hd = 8, 16, 2, 1, 4
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": dim,
           "intermediate_size": hidden, "num_hidden_layers": 1, "num_attention_heads": nh,
           "num_key_value_heads": nkv, "head_dim": hd, "vocab_size": vocab_n, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu",
           "bos_token_id": vocab_n - 5, "eos_token_id": vocab_n - 3}

    def f32s(n, seed):
        return struct.pack(f"<{n}f", *weights(n, seed=seed))

    def ones(n):
        return struct.pack(f"<{n}f", *([1.0] * n))
    q, kv = nh * hd, nkv * hd
    p = "model.layers.0."
    t = [("model.embed_tokens.weight", "F32", [vocab_n, dim], f32s(vocab_n * dim, 1)),
         (p + "input_layernorm.weight", "F32", [dim], ones(dim)),
         (p + "self_attn.q_proj.weight", "F32", [q, dim], f32s(q * dim, 2)),
         (p + "self_attn.k_proj.weight", "F32", [kv, dim], f32s(kv * dim, 3)),
         (p + "self_attn.v_proj.weight", "F32", [kv, dim], f32s(kv * dim, 4)),
         (p + "self_attn.o_proj.weight", "F32", [dim, q], f32s(q * dim, 5)),
         (p + "post_attention_layernorm.weight", "F32", [dim], ones(dim)),
         (p + "mlp.gate_proj.weight", "F32", [hidden, dim], f32s(hidden * dim, 6)),
         (p + "mlp.up_proj.weight", "F32", [hidden, dim], f32s(hidden * dim, 7)),
         (p + "mlp.down_proj.weight", "F32", [dim, hidden], f32s(hidden * dim, 8)),
         ("model.norm.weight", "F32", [dim], ones(dim))]
    if qk_norm:
        t += [(p + "self_attn.q_norm.weight", "F32", [hd], ones(hd)),
              (p + "self_attn.k_norm.weight", "F32", [hd], ones(hd))]
    return cfg, safetensors(t)


def trimmed_tokenizer(path, keep=300):
    j = json.load(open(path, encoding="utf-8"))
    m = j["model"]
    vocab = {t: i for t, i in m["vocab"].items() if i < keep}
    merges = []
    for mg in m["merges"]:
        a, b = mg.split(" ") if isinstance(mg, str) else mg
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(mg)
    m["vocab"], m["merges"] = vocab, merges
    added = j["added_tokens"][:12]
    for i, a in enumerate(added):
        a["id"] = keep + i
    j["added_tokens"] = added
    return json.dumps(j, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=os.path.join(HERE, "../../../shared"))
    ap.add_argument("--convert", help="build/tools/convert: also write model-file seeds")
    a = ap.parse_args()

    g_llama, g_qwen = gguf_llama_spm(), gguf_qwen3_bpe()
    put("gguf", "llama-spm.gguf", g_llama)
    put("gguf", "qwen3-bpe.gguf", g_qwen)

    vocab_n = len(bpe_vocab()[0]) + len(bpe_vocab()[2])
    cfg, st = hf_qwen3(vocab_n)
    put("hf", "qwen3-tiny", json.dumps(cfg, indent=1).encode() + b"\0" + st[0] + b"\0" + st[1])
    cfg_l = dict(cfg, architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=True,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    cfg_l.pop("head_dim")
    st_l = hf_qwen3(vocab_n, qk_norm=False)[1]
    put("hf", "llama-rope-scaling", json.dumps(cfg_l).encode() + b"\0" + st_l[0] + b"\0" + st_l[1])

    tj = json.dumps(tiny_tokenizer_json(), ensure_ascii=False)
    put("tokjson", "tiny-bpe", tj.encode())
    put("tokjson", "tiny-bpe-with-config", tj.encode() + b"\0" + json.dumps(
        {"add_bos_token": False, "bos_token": "<|endoftext|>", "eos_token": {"content": "<|im_end|>"},
         "chat_template": QWEN_TEMPLATE}).encode() + b"\0" + json.dumps({"eos_token_id": [257, 263]}).encode())
    toks = os.path.join(a.shared, "testdata/tokenizers")
    for name in ("qwen3", "llama3"):
        p = os.path.join(toks, name, "tokenizer.json")
        if os.path.exists(p):
            put("tokjson", name + "-trimmed", trimmed_tokenizer(p).encode())

    if a.convert:
        with tempfile.TemporaryDirectory() as d:
            srcs = [("llama-spm.gguf", g_llama, "f32"), ("qwen3-bpe.gguf", g_qwen, "f32")]
            for name, data, dt in srcs:
                src = os.path.join(d, name)
                open(src, "wb").write(data)
                out = os.path.join(d, name + ".bin")
                subprocess.run([a.convert, src, out, "--dtype", dt], check=True, stdout=subprocess.DEVNULL)
                put("model", name.replace(".gguf", "") + "." + dt + ".bin", open(out, "rb").read())
            hf = os.path.join(d, "hf")
            os.makedirs(hf)
            open(os.path.join(hf, "config.json"), "w").write(json.dumps(cfg))
            open(os.path.join(hf, "model.safetensors"), "wb").write(st_file(st))
            open(os.path.join(hf, "tokenizer.json"), "w").write(tj)
            out = os.path.join(d, "hf.bin")
            subprocess.run([a.convert, hf, out, "--dtype", "bf16"], check=True, stdout=subprocess.DEVNULL)
            put("model", "qwen3-hf.bf16.bin", open(out, "rb").read())

    # Profiles: the shipped ones and a few edge forms.
    for p in sorted(os.listdir(os.path.join(HERE, "../../sampler/profiles"))):
        put("profile", p, open(os.path.join(HERE, "../../sampler/profiles", p), "rb").read())
    put("profile", "edge", "# comment\n\ntop_k = 0\nattn_layer = all\nattn_varentropy_def = true\n"
        "temperature=1e-3   # trailing\nattn_layer = 3\n")

    # CLI lines: argv split on NUL bytes (argv[0] is added by the harness).
    lines = [["m.bin", "-p", "hi", "--temp", "0"],
             ["m.bin", "--sampler=combined", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "-n", "-1"],
             ["m.bin", "--agents", "4", "--agent-configs", "0.7:40,1.0:0", "--lookahead", "2", "--workers", "2",
              "--devices", "cpu", "--check-every", "5", "--critic-margin", "0.5", "--log", "x.log"],
             ["m.bin", "--profile", "masked-bits", "--profile-set", "top_k=10", "--metric-layers", "all",
              "--metrics", "m.jsonl", "--color", "-s", "18446744073709551615"],
             ["m.bin", "-f", "p.txt", "--raw", "--system", "s", "--no-think", "-c", "128", "-t", "1",
              "-dev", "cuda:0", "--verbose"],
             ["--help"], ["--version"]]
    for i, l in enumerate(lines):
        put("cli", f"line{i}", "\0".join(l))

    # Chat: byte 0 = family, byte 1 = options, then messages "R<content>" separated by NUL,
    # R: 's' system, 'u' user, 'a' assistant, anything else a role of its own spelled up to ':'.
    convs = [(1, 1, ["ssys", "uHello", "a<think>r</think>Hi", "uAgain"]),
             (2, 1, ["u  trim me \u3000", "aok"]), (3, 0, ["uhi"]), (4, 3, ["stool:x", "xtool:out", "uq"]),
             (0, 1, ["ua", "ab"]), (1, 2, ["u<|im_end|>", "a<think>\n\n</think>\n\nx"])]
    for i, (fam, opt, msgs) in enumerate(convs):
        put("chat", f"conv{i}", bytes([fam, opt]) + "\0".join(msgs).encode())

    # Round trip: byte 0 picks the tokenizer and flags, the rest is the text.
    texts = ["Hello world", " leading  spaces\n\nand\ttabs", "caf\u00e9 na\u0308ive \u00c5", "12345 678",
             "<|im_start|>user\nhi<|im_end|>", "\u4f60\u597d\U0001F600", "it's they'll WE'RE"]
    for i, t in enumerate(texts):
        put("roundtrip", f"text{i}", bytes([i % 4]) + t.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
