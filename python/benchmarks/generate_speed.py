"""Decode speed of generation from Python against ./run, alternated round by round.

    python python/benchmarks/generate_speed.py MODEL.bin [--run build/cpu/run] [--rounds 5]
        [--tokens 128] [--threads 2]

Each round runs ./run (its own "generated: ... tok/s" line), then the same generation through
the package with the built-in greedy sampler, then with a Python function doing the same argmax
(numpy over the logits view). Python's decode speed is timed from the first token's record to the
last (the prompt's prefill left out, as ./run's figure leaves it out). Prints the medians, the
ratios of the medians to ./run's, and the median of each round's own ratio (a round's runs are
seconds apart, so a change of the machine's load between rounds cancels out of that ratio); a
figure is a measurement of this machine at this moment.
"""
import argparse
import re
import statistics
import subprocess
import time

import numpy as np

import entropix

PROMPT = "Write a long story about a dragon."


def run_tok_s(run, model, tokens, threads):
    p = subprocess.run([run, model, "-p", PROMPT, "--chat", "-n", str(tokens), "--temp", "0", "-t", str(threads)],
                       capture_output=True, text=True, check=True)
    m = re.search(r"generated: (\d+) tokens, decode [\d.]+ ms \(([\d.]+) tok/s", p.stderr)
    return int(m.group(1)), float(m.group(2))


def python_tok_s(model, tokens, sampler):
    it = model.generate(PROMPT, chat=True, sampler=sampler, max_tokens=tokens)
    first = next(it)
    t0 = time.perf_counter()
    n = 1
    for _ in it:
        n += 1
    return n, (n - 1) / (time.perf_counter() - t0), first


def argmax(logits, metrics, rng):
    return int(np.argmax(logits))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--run", default="build/cpu/run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    figures = {"./run": [], "python, greedy": [], "python, a Python argmax": []}
    with entropix.Model(a.model, threads=a.threads) as model:
        for r in range(a.rounds + 1):  # round 0: warm-up, not counted
            got = [run_tok_s(a.run, a.model, a.tokens, a.threads),
                   python_tok_s(model, a.tokens, "greedy")[:2],
                   python_tok_s(model, a.tokens, argmax)[:2]]
            if r == 0:
                continue
            for (name, xs), (n, tps) in zip(figures.items(), got):
                xs.append(tps)
                if n != a.tokens:
                    print(f"  round {r}: {name} generated {n} tokens, not {a.tokens}")
    runs = figures["./run"]
    base = statistics.median(runs)
    print(f"{a.model}, {a.tokens} tokens, -t {a.threads}, {a.rounds} rounds alternated (medians):")
    for name, xs in figures.items():
        med = statistics.median(xs)
        pairs = [x / r for x, r in zip(xs, runs)]
        print(f"  {name:24s} {med:8.1f} tok/s  ({min(xs):.1f}-{max(xs):.1f})  {med / base:.3f} of ./run; "
              f"per round {statistics.median(pairs):.3f} ({min(pairs):.3f}-{max(pairs):.3f})")


if __name__ == "__main__":
    main()
