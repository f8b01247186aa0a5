#!/usr/bin/env python3
"""check_run.py — ./run --json-schema-file and --grammar end to end, checked independently: every
text a generation finishes (a stop token before its -n budget) must parse as JSON (Python's json
module) and validate against its schema with the PyPI `jsonschema` package, under each sampler
(entropix, the default; combined at temperature 1.2; greedy) and several seeds.

    check_run.py RUN MODEL.bin SCHEMA.json [SCHEMA.json ...]

At least 3 in 4 generations must finish (one cut by its budget, mid-string, is a truncation, not
an error). Prints 'N passed, N failed'; exit 1 on any failure.
"""
import json
import re
import subprocess
import sys

import jsonschema

SAMPLERS = [[], ["--sampler", "combined", "--temp", "1.2"], ["--sampler", "greedy"]]
SEEDS = [1, 2]
N = 160


def generate(run, model, schema, sampler, seed):
    out = subprocess.run([run, model, "-p", "Answer with one JSON object.", "--json-schema-file", schema, "-n", str(N),
                          "-s", str(seed), "-t", "1", *sampler], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()}")
    n = int(re.search(r"generated: (\d+) tokens", out.stderr).group(1))
    return out.stdout.rstrip("\n"), n < N  # fewer than N: it ended on a stop token


def main():
    run, model, schemas = sys.argv[1], sys.argv[2], sys.argv[3:]
    passed = failed = finished = total = 0
    for path in schemas:
        schema = json.load(open(path))
        for sampler in SAMPLERS:
            for seed in SEEDS:
                name = f"{path} {' '.join(sampler) or 'entropix'} -s {seed}"
                try:
                    text, done = generate(run, model, path, sampler, seed)
                    total += 1
                    if done:
                        finished += 1
                        jsonschema.validate(json.loads(text), schema)
                    passed += 1
                    print(f"ok   {name}{'' if done else ' (cut by -n)'}: {text[:80]!r}")
                except Exception as e:  # report and go on
                    failed += 1
                    print(f"FAIL {name}: {type(e).__name__}: {e}")
    if finished * 4 < total * 3:
        failed += 1
        print(f"FAIL only {finished} of {total} generations finished within {N} tokens")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
