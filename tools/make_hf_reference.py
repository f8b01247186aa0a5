#!/usr/bin/env python3
"""make_hf_reference.py — reference outputs of HF transformers for the tiny HF models.

Needs torch and transformers (a venv, e.g. /work/hf-venv; CI never runs this). For each model
directory made by tools/make_tiny_hf.py it loads the model with transformers
(attn_implementation="eager") in float64 and in float32, and writes tests/data/hf/<name>/reference.json:

  prompts        text, ids (HF tokenizer: AutoTokenizer(text); Gemma prepends <bos>, Qwen adds
                 nothing), the chat prompts rendered by the model's own chat template
  greedy_f64     32 greedy ids (argmax, lowest id on ties, no stop on EOS), float64 run; each
                 step recomputes the whole sequence (no KV cache: nothing of HF's cache classes
                 is in the numbers)
  greedy_f32     the same in float32
  steps          per step (0 = last prompt position, s = after s greedy ids of the f64 run):
                 top20_f64 [[id, logit]...], margin_top1_top2, entropy_nats, and
                 max |f32 - f64| over the whole vocabulary
  step0          statistics of the f64 step-0 logit vector (mean, std, min, max, logsumexp)
                 and the logits at ids 0, 997, 1994, ... (a sample of the whole vector; the
                 vectors themselves, 0.6-1 MB each, are not committed)
  tolerance      the largest |f32 - f64| of any logit at any step: what a float32
                 implementation of the same maths can expect

    /work/hf-venv/bin/python tools/make_hf_reference.py --models build/models/hf \
        [--names qwen2.5-tiny gemma3-tiny ...] [--shared ../shared]

--crosscheck also recomputes the shared qwen3-tiny / llama3-tiny references
(../shared/testdata/tiny/*/reference.json, numpy float64 and llama.cpp) with transformers and
prints the agreement.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "hf")
N_GREEDY = 32          # greedy tokens per prompt (the -shape models: N_GREEDY_SHAPE)
N_GREEDY_SHAPE = 8
SAMPLE_STRIDE = 997

STORY = (
    "Once upon a time, in a small village by the sea, there lived an old lighthouse keeper named "
    "Tomas. Every evening he climbed the ninety-nine steps of the tower, trimmed the wick and lit "
    "the great lamp, so that the fishing boats could find their way home through the fog. The "
    "children of the village often asked him whether he was ever lonely up there. He would laugh "
    "and say that the gulls, the wind and the stars were company enough. One winter night a storm "
    "broke the glass of the lantern room, and the flame began to flicker. Tomas wrapped his coat "
    "around the lamp and held it steady until dawn. When the boats came in safely, the whole "
    "village gathered at the foot of the lighthouse to thank him.\n\n"
    "```python\ndef keep_light(hours):\n    for h in range(hours):\n        trim_wick()\n"
    "        if storm():\n            shield_flame(coat=True)\n    return 'dawn'\n```\n"
)


def prompts_for(tok, name):
    """(label, text) of the prompts; chat prompts rendered by the model's own template."""
    chat = [{"role": "system", "content": "You answer in one sentence."},
            {"role": "user", "content": "What is 9.11 - 9.9?"}]
    out = [("short", "Hi"),
           ("dog", "Hello, my dog is cute"),
           ("france", "The capital of France is"),
           ("chat", tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)),
           ("code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
           ("unicode", "你好，世界！🙂 Привет, café  naïve\ttabs\n\nnew lines"),
           ("story", STORY)]
    if name.endswith("-shape"):  # window 512: one prompt past it, the short ones for speed
        out = [o for o in out if o[0] in ("dog", "chat")] + [("story3", STORY * 3)]
    return out


def hf_ids(tok, text):
    """What AutoTokenizer gives for a prompt (add_special_tokens as the tokenizer defines: BOS for
    Gemma; a chat text from the template already starts with <bos>, so none is added twice)."""
    ids = tok(text)["input_ids"]
    if tok.bos_token_id is not None and len(ids) > 1 and ids[0] == ids[1] == tok.bos_token_id:
        ids = ids[1:]
    return ids


@torch.no_grad()
def last_logits(model, ids):
    out = model(torch.tensor([ids]), use_cache=False, logits_to_keep=1)
    return out.logits[0, -1]


def top_k(v, k=20):
    vals, idx = torch.sort(v, descending=True, stable=True)  # stable: ties by lower id first
    return [[int(i), float("%.9g" % float(x))] for i, x in zip(idx[:k], vals[:k])]


def argmax_low(v):
    m = v.max()
    return int(torch.nonzero(v == m)[0, 0])


def entropy(v):
    p = torch.softmax(v.double(), dim=-1)
    return float(-(p * torch.log(p.clamp_min(1e-300))).sum())


def run_prompt(m64, m32, ids, n_greedy):
    seq64, seq32, steps, maxdiff, step0 = list(ids), list(ids), [], 0.0, None
    for s in range(n_greedy):
        l64 = last_logits(m64, seq64)
        l32 = last_logits(m32, seq64).double()  # same sequence: differences are arithmetic only
        d = float((l32 - l64).abs().max())
        maxdiff = max(maxdiff, d)
        top2 = torch.topk(l64, 2).values
        steps.append({"top20_f64": top_k(l64), "margin_top1_top2": float("%.6g" % float(top2[0] - top2[1])),
                      "entropy_nats": float("%.6g" % entropy(l64)), "max_abs_f32_minus_f64": float("%.3g" % d)})
        if s == 0:
            step0 = {"mean": float(l64.mean()), "std": float(l64.std()), "min": float(l64.min()),
                     "max": float(l64.max()), "logsumexp": float(torch.logsumexp(l64, 0)),
                     "sample_stride": SAMPLE_STRIDE,
                     "sample": [float("%.9g" % float(x)) for x in l64[::SAMPLE_STRIDE]]}
        seq64.append(argmax_low(l64))
    # The float32 run's own greedy sequence.
    for s in range(n_greedy):
        seq32.append(argmax_low(last_logits(m32, seq32)))
    return seq64[len(ids):], seq32[len(ids):], steps, maxdiff, step0


def window_semantics(model_dir, tok):
    """Which keys a query at position p sees in a sliding layer, measured: a one-layer copy of
    the model whose only layer is sliding gives, at the last position, the same logits for the
    last W tokens alone as for the whole prompt (RoPE is relative), and different ones for
    W - 1 tokens. So the query at p sees keys p - W + 1 .. p: W keys, itself included."""
    cfg = AutoConfig.from_pretrained(model_dir)
    if getattr(cfg, "layer_types", None) is None or "sliding_attention" not in cfg.layer_types:
        return None
    w = cfg.sliding_window
    cfg.num_hidden_layers, cfg.layer_types = 1, ["sliding_attention"]
    m = AutoModelForCausalLM.from_pretrained(model_dir, config=cfg, dtype=torch.float64,
                                             attn_implementation="eager").eval()
    ids = hf_ids(tok, STORY * 4)[: w + 12]
    assert len(ids) == w + 12
    full = last_logits(m, ids)
    diff_w = float((last_logits(m, ids[-w:]) - full).abs().max())
    diff_w1 = float((last_logits(m, ids[-(w - 1):]) - full).abs().max())
    diff_w2 = float((last_logits(m, ids[-(w + 1):]) - full).abs().max())
    # Not exactly 0: transformers computes the RoPE angles in float32 (p * inv_freq), so the same
    # relative position rounds differently at different p.
    assert diff_w < 1e-4 and diff_w2 < 1e-4 and diff_w1 > 1e-2, (diff_w, diff_w2, diff_w1)
    return {"window": w,
            "rule": f"in a sliding layer the query at position p attends to the keys at positions "
                    f"max(0, p - {w} + 1) .. p ({w} keys, itself included; transformers' "
                    f"sliding_window_overlay: kv_idx > q_idx - sliding_window, and causal kv_idx <= q_idx)",
            "measured": {"max_abs_diff_last_W_tokens_vs_all": diff_w,
                         "max_abs_diff_last_W_plus_1_tokens_vs_all": diff_w2,
                         "max_abs_diff_last_W_minus_1_tokens_vs_all": diff_w1,
                         "how": "float64, a copy of the model cut to its first layer, made sliding; "
                                "logits at the last position of the first W + 12 ids of the story prompt repeated 4 times; "
                                "not exactly 0 because transformers computes RoPE angles in float32"}}


def sensitivity(model_dir, cfg, prompts):
    """How far the step-0 logits move (max over prompts and vocabulary, float64) under the
    mistakes an implementation could make: each must be far above the tolerance."""
    base = load(model_dir, torch.float64)
    ref = [last_logits(base, ids) for ids in prompts]
    cases = {}
    if cfg["model_type"] == "gemma3_text":
        c = AutoConfig.from_pretrained(model_dir)
        cases["sliding window ignored (every layer full)"] = dict(layer_types=["full_attention"] * c.num_hidden_layers)
        cases["window one key shorter (W - 1)"] = dict(sliding_window=c.sliding_window - 1)
        cases["query_pre_attn_scalar taken as head_dim"] = dict(query_pre_attn_scalar=c.head_dim)
        cases["one rope theta (1e6) for the sliding layers too"] = dict(rope_local_base_freq=c.rope_parameters["full_attention"]["rope_theta"])
    out = {}
    for label, change in cases.items():
        c = AutoConfig.from_pretrained(model_dir, **change)
        if "rope_local_base_freq" in change:
            c.rope_parameters["sliding_attention"]["rope_theta"] = change["rope_local_base_freq"]
        m = AutoModelForCausalLM.from_pretrained(model_dir, config=c, dtype=torch.float64,
                                                 attn_implementation="eager").eval()
        out[label] = float("%.3g" % max(float((last_logits(m, ids) - r).abs().max()) for ids, r in zip(prompts, ref)))
    if cfg["model_type"] == "qwen2":
        for part in ("q", "k", "v"):
            m = load(model_dir, torch.float64)
            for layer in m.model.layers:
                getattr(layer.self_attn, part + "_proj").bias.data.zero_()
            out[f"{part}_proj biases left out"] = float("%.3g" % max(
                float((last_logits(m, ids) - r).abs().max()) for ids, r in zip(prompts, ref)))
    if cfg["model_type"] == "gemma3_text":
        m = load(model_dir, torch.float64)
        m.model.embed_tokens.embed_scale.fill_(1.0)
        out["embedding not scaled by sqrt(hidden)"] = float("%.3g" % max(
            float((last_logits(m, ids) - r).abs().max()) for ids, r in zip(prompts, ref)))
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fp:
        for chunk in iter(lambda: fp.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def load(model_dir, dtype):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()


def reference(model_dir, name):
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(model_dir)
    m64, m32 = load(model_dir, torch.float64), load(model_dir, torch.float32)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    ref = {
        "model": name,
        "made_by": "tools/make_tiny_hf.py --shape %s (default seed)" % name,
        "files": {f: {"sha256": sha256(os.path.join(model_dir, f)), "bytes": os.path.getsize(os.path.join(model_dir, f))}
                  for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")},
        "config": cfg,
        "tools": {"transformers": transformers.__version__, "torch": torch.__version__,
                  "attn_implementation": "eager", "dtypes": ["float64", "float32"],
                  "threads": torch.get_num_threads()},
        "conventions": {
            "ids": "AutoTokenizer(text)['input_ids'] (add_special_tokens default: Gemma prepends <bos> 2, Qwen2.5 adds nothing); a chat text rendered by the template already starts with <bos>",
            "step": "step 0 = logits at the last prompt position; step s > 0 = after appending the f64 run's greedy ids 0..s-1",
            "greedy": "argmax, lowest id on ties; 32 tokens (8 for the -shape models); no stop on EOS; every step recomputes the whole sequence (use_cache=False)",
            "top20": "[id, logit] sorted by logit descending (ties by id), 9 significant digits, float64 run",
            "f32": "the float32 model on the f64 run's sequence: max |f32 - f64| over the vocabulary per step",
            "float64_is_not_all_float64": "transformers computes RoPE in float32 even in a float64 model (inv_freq, position * inv_freq, cos, sin; then cast), and Gemma's embedding scale is float32(sqrt(hidden)) cast to the weights' dtype (8 exactly at hidden 64; 25.2982216 at 640; a bfloat16 model would use bfloat16(sqrt(hidden))): an all-float64 implementation differs from the f64 numbers here by about 1e-5",
        },
        "prompts": [],
    }
    sw = window_semantics(model_dir, tok)
    if sw:
        ref["sliding_window_semantics"] = sw
    worst = 0.0
    for label, text in prompts_for(tok, name):
        ids = hf_ids(tok, text)
        g64, g32, steps, maxdiff, step0 = run_prompt(m64, m32, ids, N_GREEDY_SHAPE if name.endswith("-shape") else N_GREEDY)
        worst = max(worst, maxdiff)
        first_div = next((i for i, (a, b) in enumerate(zip(g64, g32)) if a != b), None)
        margins = [st["margin_top1_top2"] for st in steps]
        ref["prompts"].append({"label": label, "text": text, "ids": ids, "n_prompt_tokens": len(ids),
                               "greedy_f64": g64, "greedy_f32": g32, "first_divergence_f32": first_div,
                               "greedy_text_f64": tok.decode(g64, skip_special_tokens=False),
                               "max_abs_f32_minus_f64": float("%.3g" % maxdiff),
                               "greedy_steps_before_first_margin_below_0.05":
                                   next((i for i, x in enumerate(margins) if x < 0.05), len(margins)),
                               "step0": step0, "steps": steps})
        print(f"  {name} {label}: {len(ids)} ids, greedy f64 {g64[:6]}..., f32 agrees "
              f"{'all' if first_div is None else 'to step %d' % first_div}, max|f32-f64| {maxdiff:.2e}", flush=True)
    if not name.endswith("-shape"):  # the tiny models show it; the shapes would load 5 more copies
        ref["sensitivity_max_abs_step0_logit_change"] = sensitivity(model_dir, cfg, [p["ids"] for p in ref["prompts"]])
    ref["tolerance"] = {"max_abs_f32_minus_f64": float("%.3g" % worst),
                        "note": "the largest |f32 - f64| of any logit at any step of any prompt"}
    os.makedirs(os.path.join(OUT, name), exist_ok=True)
    with open(os.path.join(OUT, name, "reference.json"), "w", encoding="utf-8") as fp:
        json.dump(ref, fp, ensure_ascii=False, indent=1)
    print(f"{name}: {time.time() - t0:.0f} s, tolerance {worst:.2e}", flush=True)


def crosscheck(shared):
    """transformers (float64) against the shared references (numpy float64, llama.cpp f32)."""
    import struct
    for name in ("qwen3-tiny", "llama3-tiny"):
        d = os.path.join(shared, "testdata", "tiny", name)
        ref = json.load(open(os.path.join(d, "reference.json")))
        m = load(os.path.join(d, "hf"), torch.float64)
        vocab = ref["config"]["vocab_size"]
        raw = open(os.path.join(d, "logits_step0.numpy.f32"), "rb").read()
        worst_np, worst_top, greedy_ok = 0.0, 0.0, 0
        for p_i, p in enumerate(ref["prompts"]):
            ids = p["ids"]
            l = last_logits(m, ids)
            row = torch.tensor(struct.unpack_from(f"<{vocab}f", raw, p_i * vocab * 4), dtype=torch.float64)
            worst_np = max(worst_np, float((l - row).abs().max()))
            seq = list(ids)
            for s in range(len(p["greedy_numpy"])):
                ls = last_logits(m, seq)
                if s < len(p["steps"]):
                    for i, v in p["steps"][s]["top20_numpy"]:
                        worst_top = max(worst_top, abs(float(ls[i]) - v))
                seq.append(argmax_low(ls))
            greedy_ok += seq[len(ids):] == p["greedy_numpy"]
        print(f"crosscheck {name}: transformers f64 vs numpy step-0 logits (full vocabulary, "
              f"{len(ref['prompts'])} prompts) max |diff| {worst_np:.2e}; top-20 of every step {worst_top:.2e}; "
              f"greedy sequences equal {greedy_ok}/{len(ref['prompts'])}")


EXTRA_TEXTS = [  # Gemma's added tokens and byte fallback, beyond the shared corpus
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<bos>Hello<eos>",
    "a\n\n\nb\n", "  two leading spaces", "trailing spaces   ", "tab\tand \u2581literal \u2581\u2581 marks",
    "<table><tr><td>x</td></tr></table>", "<unused5> and <unused100> and <filler9000>",
    "\u0132 ligature, \U0001F642 emoji, \u65e5\u672c\u8a9e", "<start_of_image><end_of_image>",
    "x" * 300, " ".join(["word"] * 40), "",
]


def tokenizer_golden(models, shared):
    """tests/data/hf/<name>.encode.jsonl: each text of the shared golden corpus (and a few more)
    with the ids HF tokenizers gives (add_special_tokens=False; special-token text parsed) and
    the text its decode gives; AutoTokenizer (transformers) must give the same ids."""
    from tokenizers import Tokenizer
    src = os.path.join(shared, "testdata", "tokenizers", "golden", "qwen3.encode.jsonl")
    texts = [json.loads(line)["text"] for line in open(src, encoding="utf-8")] + EXTRA_TEXTS
    for name, model in (("gemma3-tokenizer", "gemma3-tiny"), ("qwen2.5-tokenizer", "qwen2.5-tiny")):
        d = os.path.join(models, model)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        auto = AutoTokenizer.from_pretrained(d)
        lines = []
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            assert auto(t, add_special_tokens=False)["input_ids"] == ids, t
            lines.append(json.dumps({"text": t, "ids": ids,
                                     "decoded": tok.decode(ids, skip_special_tokens=False)}, ensure_ascii=False))
        out = os.path.join(OUT, name + ".encode.jsonl")
        with open(out, "w", encoding="utf-8") as fp:
            fp.write("\n".join(lines) + "\n")
        print(f"{out}: {len(lines)} texts, {sum(len(json.loads(l)['ids']) for l in lines)} ids")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "build", "models", "hf"))
    ap.add_argument("--names", nargs="*", default=["qwen2.5-tiny", "gemma3-tiny"])
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--crosscheck", action="store_true")
    ap.add_argument("--tokenizers", action="store_true", help="only the tokenizer golden files")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # on a shared 2-core machine more threads were 20 times slower
    if a.tokenizers:
        return tokenizer_golden(a.models, a.shared)
    for name in a.names:
        reference(os.path.join(a.models, name), name)
    if a.crosscheck:
        crosscheck(a.shared)


if __name__ == "__main__":
    sys.exit(main())
