"""Entropy and varentropy of each generated token, plotted (a PNG).

    python plot_entropy.py MODEL.bin [OUT.png] [PROMPT]

The metrics are the runtime's own (the entropix sampler's inputs, docs/entropix.md): the
entropy and varentropy of the next-token distribution in bits, and the last layer's attention
entropy; each token's entropix case colours its point. A generation that ends inside a UTF-8
character has one more record, id -1, with the bytes held back (as U+FFFD) and no metrics: its
text goes into the title, and it has no point.
"""
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt

import entropix

model_path = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else "entropy.png"
prompt = sys.argv[3] if len(sys.argv) > 3 else "Once upon a time"

with entropix.Model(model_path, threads=2) as model:
    records = list(model.generate(prompt, sampler="entropix", seed=7, max_tokens=64))
tokens = [t for t in records if t.id >= 0]  # not the record of held-back bytes (id -1)

steps = range(len(tokens))
ent = [t.metrics.logits_entropy for t in tokens]
vent = [t.metrics.logits_varentropy for t in tokens]
attn = [t.metrics.attn_entropy for t in tokens]
cases = sorted({t.case for t in tokens})
colour = {c: plt.cm.tab10(i) for i, c in enumerate(cases)}

fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
top.plot(steps, ent, color="0.6", lw=1)
top.scatter(steps, ent, c=[colour[t.case] for t in tokens], s=18, zorder=3)
top.set_ylabel("entropy (bits)")
top.legend(handles=[plt.Line2D([], [], ls="", marker="o", color=colour[c], label=c) for c in cases],
           fontsize=8, loc="upper right")
bottom.plot(steps, vent, label="varentropy (bits²)")
bottom.plot(steps, attn, label="attention entropy, last layer (bits)")
bottom.set_xlabel("generated token")
bottom.legend(fontsize=8)
top.set_title(f"{prompt!r} -> {''.join(t.text for t in records)[:60]!r}...", fontsize=9)
fig.tight_layout()
fig.savefig(out, dpi=100)
print(f"{len(tokens)} tokens, cases {', '.join(cases)}: {out}")
