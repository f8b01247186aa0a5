#!/usr/bin/env python3
"""Reference values for tests/test_metrics.c: the entropix metrics (docs/entropix.md, "Metrics")
of seeded random inputs, computed independently of our C code with mpmath at 40 significant
digits, straight from the definitions (no log-sum-exp tricks, no running statistics).

Writes tests/data/metrics/reference.json (committed). Inputs are float32 values (what the
forward pass produces) written with repr() of their exact double value, so the C side reads
back the identical floats; -inf is written as the string "-inf".

    python3 tools/gen_metrics_reference.py [OUT]      # needs numpy, mpmath
"""
import json
import os
import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40
LN2 = mp.log(2)


def softmax(row):
    """Probabilities (mpf) of a row of floats; -inf gets exactly 0."""
    e = [mp.mpf(0) if x == -np.inf else mp.exp(mp.mpf(float(x))) for x in row]
    z = mp.fsum(e)
    return [x / z for x in e]


def entropy_varentropy_bits(row):
    """H = -sum p log2 p, V = sum p (-log2 p - H)^2, over tokens with p > 0."""
    p = softmax(row)
    h = -mp.fsum(q * mp.log(q) for q in p if q > 0) / LN2
    v = mp.fsum(q * (-mp.log(q) / LN2 - h) ** 2 for q in p if q > 0)
    return h, v


def f32_list(a):
    return [("-inf" if x == -np.inf else float(x)) for x in np.asarray(a, np.float32)]


def logits_case(name, logits):
    logits = np.asarray(logits, np.float32)  # the values the C side reads, not the float64 ones
    h, v = entropy_varentropy_bits(logits)
    return {"name": name, "logits": f32_list(logits), "entropy_bits": float(h),
            "varentropy_bits2": float(v)}


def attention_layer(scores):
    """scores [n_heads][valid_len] -> the layer's metrics, by definition."""
    n_heads, n = scores.shape
    probs = [softmax(r) for r in scores]
    hv = [entropy_varentropy_bits(r) for r in scores]
    hs = [x[0] for x in hv]
    mean_h = mp.fsum(hs) / n_heads
    mean_row = [mp.fsum(probs[h][k] for h in range(n_heads)) / n_heads for k in range(n)]
    agreement = mp.fsum(abs(probs[h][k] - mean_row[k])
                        for h in range(n_heads) for k in range(n)) / (n_heads * n)
    return {
        "head_entropy_bits": [float(x) for x in hs],
        "head_varentropy_bits2": [float(x[1]) for x in hv],
        "entropy_bits": float(mean_h),
        # entropix: variance across heads of the per-head entropies, ddof 0
        "varentropy_heads_bits2": float(mp.fsum((x - mean_h) ** 2 for x in hs) / n_heads),
        # entropix-local: the true per-head varentropy, averaged over heads
        "varentropy_true_bits2": float(mp.fsum(x[1] for x in hv) / n_heads),
        "agreement": float(agreement),
        "interaction_strength": float(mp.fsum(abs(mp.mpf(float(x))) for x in scores.flat)
                                      / (n_heads * n)),
    }


def attention_case(name, rng, n_layers, n_heads, valid_len, scale):
    scores = (rng.standard_normal((n_layers, n_heads, valid_len)) * scale).astype(np.float32)
    scores[:, :, 0] += np.float32(3 * scale)  # an attention sink, as real models have
    layers = [attention_layer(scores[l]) for l in range(n_layers)]
    keys = ["entropy_bits", "varentropy_heads_bits2", "varentropy_true_bits2", "agreement",
            "interaction_strength"]
    all_layers = {k: float(mp.fsum(mp.mpf(l[k]) for l in layers) / n_layers) for k in keys}
    return {"name": name, "n_layers": n_layers, "n_heads": n_heads, "valid_len": valid_len,
            "scores": [[f32_list(scores[l, h]) for h in range(n_heads)] for l in range(n_layers)],
            "layers": layers, "all_layers": all_layers}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "metrics", "reference.json")
    rng = np.random.default_rng(20241010)
    logits = [
        logits_case("normal_1000", rng.standard_normal(1000) * 2.0),
        logits_case("peaky_257", rng.standard_normal(257) * 20.0),
        logits_case("tiny_3", np.array([0.5, -1.25, 2.0])),
    ]
    masked = rng.standard_normal(4000) * 5.0
    masked[rng.random(4000) < 0.1] = -np.inf
    logits.append(logits_case("masked_4000", masked))
    # a vocabulary-like row: a few strong candidates over a long low tail
    vocab = rng.standard_normal(3000) * 1.5 - 8.0
    vocab[:5] = [6.0, 5.5, 5.4, 3.0, 1.0]
    logits.append(logits_case("vocab_like_3000", rng.permutation(vocab)))
    attention = [
        attention_case("one_key", rng, 1, 1, 1, 1.0),
        attention_case("gqa_small", rng, 2, 4, 7, 1.5),
        attention_case("three_layers", rng, 3, 9, 64, 2.0),
        attention_case("long", rng, 1, 16, 300, 3.0),
    ]
    doc = {"generator": "tools/gen_metrics_reference.py (mpmath %s, 40 digits; numpy %s)"
           % (mp.__version__, np.__version__), "logits": logits, "attention": attention}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
