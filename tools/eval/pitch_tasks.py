#!/usr/bin/env python3
"""pitch_tasks.py — a pitching aid for the task sets: greedy accuracy and generated tokens of a
model on a random sample of each family, to tune the difficulty and max_tokens of make_tasks.py.

    python3 tools/eval/pitch_tasks.py weights/smollm2-135m-instruct.q8.bin tools/eval/tasks/*.jsonl
        [--n 30] [--seed 1] [--run ./run] [--threads 2] [--jobs 1] [--show]

For each file it runs ./run MODEL --chat --temp 0 -n MAX_TOKENS -p USER [--system SYSTEM] on
--n items drawn with random.Random(seed) (the whole file when it has fewer), scores the text
with a re-implementation of the extraction rules of the task format (docs/eval-tasks.md) and
prints per family: accuracy, mean generated and prompt tokens (./run's stderr counts), and how
many generations hit max_tokens. This is NOT the scorer of record: tools/eval (build/tools/eval)
is; this script only has to be close enough to choose ranges and limits.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys

NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
ANSWER_RE = re.compile(r"answer:\s*\(?\s*([A-Za-z])", re.I)
CHOICE_RE = re.compile(r"\(([A-E])\)|\b([A-E])\)|\b([A-E])\b")


def extract(task, text):
    """The extracted answer of `text` under the task's check (None: nothing to extract)."""
    check = task["check"]
    if check == "number":
        found = NUMBER_RE.findall(text)
        return float(found[-1].replace(",", "")) if found else None
    if check == "exact":
        t = text.strip()
        return t[:-1] if t.endswith(".") else t
    if check == "choice":
        hits = list(ANSWER_RE.finditer(text))
        if hits:
            return hits[-1].group(1).upper()
        m = CHOICE_RE.search(text)
        return next(g for g in m.groups() if g) if m else None
    if check == "regex":
        m = re.search(task["pattern"], text)
        if not m:
            return None
        return m.group(1) if m.re.groups else m.group(0)
    if check == "contains":
        return task["answer"] if task["answer"].lower() in text.lower() else None
    if check == "word":  # the first whole-word entry of answer_alphabet (the longest at a start)
        best = None
        for entry in task["answer_alphabet"]:
            m = re.search(r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9])" % re.escape(entry), text, re.I)
            if m and (best is None or (m.start(), -len(entry)) < best[0]):
                best = ((m.start(), -len(entry)), entry)
        return best[1] if best else None
    if check == "open":
        return None
    raise ValueError("unknown check %r" % check)


def correct(task, got):
    if got is None:
        return False
    check = task["check"]
    if check == "number":
        return abs(got - float(task["answer"])) <= float(task.get("tolerance", 0)) + 1e-9
    if check in ("exact", "choice", "word"):
        return got.lower() == str(task["answer"]).lower()
    return got == task["answer"]


def run_one(args, task):
    msgs = task["messages"]
    system = [m["content"] for m in msgs if m["role"] == "system"]
    users = [m["content"] for m in msgs if m["role"] == "user"]
    if len(users) != 1:
        raise SystemExit("pitch: %s: ./run takes one user message, this item has %d" % (task["id"], len(users)))
    cmd = [args.run, args.model, "--chat", "--temp", "0", "-t", str(args.threads),
           "-n", str(task.get("max_tokens", 64)), "-p", users[0]]
    if system:
        cmd += ["--system", system[0]]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit("pitch: %s: ./run exit %d: %s" % (task["id"], p.returncode, p.stderr.strip()))
    gen = re.search(r"^generated: (\d+) tokens", p.stderr, re.M)
    prompt = re.search(r"^prompt: (\d+) tokens", p.stderr, re.M)
    return p.stdout, int(gen.group(1)) if gen else 0, int(prompt.group(1)) if prompt else 0


def pitch_file(args, path):
    tasks = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    rng = random.Random(args.seed)
    sample = rng.sample(tasks, min(args.n, len(tasks)))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        results = list(ex.map(lambda t: run_one(args, t), sample))
    ok = gen_sum = prompt_sum = capped = 0
    for task, (text, n_gen, n_prompt) in zip(sample, results):
        got = extract(task, text)
        good = correct(task, got)
        ok += good
        gen_sum += n_gen
        prompt_sum += n_prompt
        capped += n_gen >= task.get("max_tokens", 64)
        if args.show:
            print("  %s %-14s want %-9s got %-9s %r" % ("+" if good else "-", task["id"], task["answer"],
                                                       got, text))
    n = len(sample)
    fam = sample[0].get("family", os.path.basename(path)[:-len(".jsonl")])
    print("%-10s n %3d  greedy accuracy %5.1f%%  mean generated %5.2f  mean prompt %5.1f  at max_tokens %d"
          % (fam, n, 100.0 * ok / n, gen_sum / n, prompt_sum / n, capped), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--n", type=int, default=30, help="items per family (default 30)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the item sample (default 1)")
    ap.add_argument("--run", default="./run", help="the ./run binary (default ./run)")
    ap.add_argument("--threads", type=int, default=2, help="-t of each ./run (default 2)")
    ap.add_argument("--jobs", type=int, default=1, help="./run processes at a time (default 1)")
    ap.add_argument("--show", action="store_true", help="print every item's text and score")
    args = ap.parse_args()
    for path in args.files:
        pitch_file(args, path)


if __name__ == "__main__":
    sys.exit(main())
