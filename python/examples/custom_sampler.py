"""A sampler written in Python: the temperature follows the step's entropy.

    python custom_sampler.py MODEL.bin [PROMPT]

The runtime runs the forward pass and computes the metrics; the function below only chooses
the token from the logits (a numpy view of the runtime's row, no copy).
"""
import sys

import numpy as np

import entropix


def entropy_tempered(logits, metrics, rng):
    """Confident steps (entropy < 1 bit) stay greedy; uncertain ones sample hotter."""
    if metrics.logits_entropy < 1.0:
        return int(np.argmax(logits))
    temperature = min(1.2, 0.5 + 0.2 * metrics.logits_entropy)
    z = (logits - logits.max()) / temperature
    p = np.exp(z)
    return int(rng.choice(len(p), p=p / p.sum()))


model_path = sys.argv[1]
prompt = sys.argv[2] if len(sys.argv) > 2 else "Once upon a time"
with entropix.Model(model_path, threads=2) as model:
    run = model.generate(prompt, sampler=entropy_tempered, seed=3, max_tokens=48)
    print(prompt + run.text())
    print(f"({run.summary.n_generated} tokens, stopped by {run.summary.stop})")
