"""A batch of prompts through one model: one state each, all open at once, decoded in turn.

    python batch_prompts.py MODEL.bin

A model is opened once and shared; each State holds one sequence and its KV cache.
"""
import sys

import entropix

prompts = ["Once upon a time", "The little dog", "In the morning", "Lily wanted"]
with entropix.Model(sys.argv[1], threads=2) as model:
    states = [model.state(ctx=128) for _ in prompts]
    runs = [s.generate(p, sampler="combined", seed=i, max_tokens=24) for i, (s, p) in enumerate(zip(states, prompts))]
    texts = ["" for _ in prompts]
    live = list(range(len(prompts)))
    while live:  # round robin: one token of each live sequence per round
        for i in list(live):
            tok = next(runs[i], None)
            if tok is None:
                live.remove(i)
            else:
                texts[i] += tok.text
    for p, t in zip(prompts, texts):
        print(p + t)
