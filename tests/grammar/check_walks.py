#!/usr/bin/env python3
"""check_walks.py — an independent check of the JSON Schema grammars: random walks through the
mask (build/tools/grammar --walk) validated by the PyPI `jsonschema` package.

    check_walks.py GRAMMAR_TOOL SCHEMA_DIR MODEL.bin [MODEL.bin ...] [--walks N]

For every schema SCHEMA_DIR/*.json and every model, N walks (seed 11): each walk that ends on a
stop token must parse as JSON (Python's json module, not cJSON) and validate against its schema
(the --json-object grammar's: be a JSON object), and at least 3 in 4 must end so (a walk cut by
its token budget, deep in a recursive schema, is a truncation, not an error). Prints 'N passed, N failed'; exit 1 on any
failure. Formats are checked: date, email, ipv4 and uuid by jsonschema's own checkers, time and
date-time (whose jsonschema checker needs a package the venv does not have) by
string_cases.py's RFC 3339 checks.
"""
import glob
import json
import os
import subprocess
import sys

import jsonschema

from string_cases import rfc3339_date_time, rfc3339_time


def format_checker():
    checker = jsonschema.FormatChecker()
    checker.checks("time")(lambda s: not isinstance(s, str) or rfc3339_time(s))
    checker.checks("date-time")(lambda s: not isinstance(s, str) or rfc3339_date_time(s))
    return checker


def walks(tool, model, args, n):
    out = subprocess.run([tool, *args, "--model", model, "--walk", str(n), "--seed", "11"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def main():
    argv = sys.argv[1:]
    n = 20
    if "--walks" in argv:
        i = argv.index("--walks")
        n = int(argv[i + 1])
        del argv[i:i + 2]
    tool, schema_dir, models = argv[0], argv[1], argv[2:]
    passed = failed = 0
    cases = [(p, ["--json-schema", p]) for p in sorted(glob.glob(os.path.join(schema_dir, "*.json")))]
    cases.append(("json_object", ["--json-object"]))
    for model in models:
        for name, args in cases:
            schema = json.load(open(name, encoding="utf-8")) if name != "json_object" else {"type": "object"}
            validator = jsonschema.Draft202012Validator(schema, format_checker=format_checker())
            try:
                lines = walks(tool, model, args, n)
            except Exception as e:  # noqa: BLE001 - reported as a failure
                print(f"FAIL {os.path.basename(model)} {name}: {e}")
                failed += 1
                continue
            bad = []
            unfinished = sum(not w["done"] for w in lines)
            if 4 * unfinished > len(lines):
                bad.append(f"{unfinished} of {len(lines)} walks did not finish in their budget")
            for w in lines:
                if not w["done"]:
                    continue
                try:
                    validator.validate(json.loads(w["text"]))
                except (ValueError, jsonschema.ValidationError) as e:
                    bad.append(f"walk {w['walk']}: {str(e).splitlines()[0]}: {w['text'][:200]!r}")
            if bad or len(lines) != n:
                failed += 1
                print(f"FAIL {os.path.basename(model)} {os.path.basename(name)}: {len(bad)} of {len(lines)} walks")
                for b in bad[:5]:
                    print("   ", b)
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
