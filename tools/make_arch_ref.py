#!/usr/bin/env python3
"""Reference data for the Qwen2 / Gemma 3 tests (tests/test_arch.c): HF transformers' float32 forward
of the tiny models tools/make_tiny_hf.py makes (build/models/hf/{qwen2.5,gemma3}-tiny).

For each model: a 12-token prompt (ids drawn from a fixed seed), then 32 greedy steps, each step's
top-20 [id, logit] from a full forward of the whole sequence so far (no KV cache: the mask HF builds
for the whole sequence, sliding window included). gemma3-tiny's window is 8, so the 44 positions
cross it. Needs torch and transformers (tested with 5.23): not a test dependency, its output is
committed (tests/data/arch/<model>.json).

    python3 tools/make_arch_ref.py build/models/hf tests/data/arch
"""
import json
import random
import sys

import torch
import transformers

MODELS = ["qwen2.5-tiny", "gemma3-tiny"]
PROMPT, STEPS, TOP = 12, 32, 20


def main():
    src, out = sys.argv[1], sys.argv[2]
    torch.set_grad_enabled(False)
    for name in MODELS:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            f"{src}/{name}", dtype=torch.float32, attn_implementation="eager")
        model.eval()
        rng = random.Random(7)
        ids = [rng.randrange(3, 150000) for _ in range(PROMPT)]
        seq, steps = list(ids), []
        for _ in range(STEPS):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(logits, TOP)
            steps.append([[int(i), float(v)] for v, i in zip(top.values, top.indices)])
            seq.append(int(torch.argmax(logits)))
        doc = {"model": name, "tool": f"transformers {transformers.__version__}, torch {torch.__version__}, "
               "float32, eager attention, full forward per step",
               "ids": ids, "greedy": seq[PROMPT:], "top20": steps}
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(name, "greedy", seq[PROMPT:PROMPT + 8], "...")


if __name__ == "__main__":
    main()
