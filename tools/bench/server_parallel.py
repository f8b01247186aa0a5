#!/usr/bin/env python3
"""server_parallel.py — aggregate throughput of build/tools/server with --parallel P (a benchmark,
not a test). Standard library only.

    python3 tools/bench/server_parallel.py MODEL [--parallel 1,4,1,4[,4:NAME=VALUE]] [--clients 4] [--requests 3]
                                           [--max-tokens 128] [--threads 0] [--server build/tools/server]
                                           [--device cpu|cuda:N] [--completions] [--check-texts]

For each P in --parallel (in that order: alternate them, so that a change in the machine's load
hits both), starts the server with --parallel P, lets C clients each send R streaming
completions one after the other (fixed seeds, a mix of prompts, max_tokens each), and prints
the aggregate completion tokens per second (all tokens / wall time of the run) and the median
time to the first token. An entry P:NAME=VALUE starts that run's server with NAME=VALUE in its
environment (8:EMX_CUDA_FUSED=1: eight slots with the CUDA backend's several-states step on the
separate kernels), a configuration of its own beside plain P. Then the ratio of the best run of
the largest plain P to the best run of the smallest, and of each configuration with a setting
to that smallest. With --check-texts, every request's text (the same seed in
every run) must be the same in every run, whatever P: a slot decoding beside others gives what it
gives alone; a difference names the request and exits 1.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

PROMPTS = [
    "Tell me a short story about a lighthouse.",
    "Explain why the sky is blue to a child.",
    "Write a haiku about autumn leaves.",
    "List three uses of a paperclip.",
    "What makes a good cup of tea?",
    "Describe a busy market in the morning.",
]


def parse_entry(entry):
    """(P, {NAME: VALUE}) of a --parallel entry "P" or "P:NAME=VALUE"."""
    par, _, setting = entry.partition(":")
    name, eq, value = setting.partition("=")
    if not par.isdigit() or int(par) < 1 or (setting and (not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name))):
        sys.exit(f"server_parallel: --parallel entry {entry!r}: not P or P:NAME=VALUE (P a number of slots)")
    return int(par), ({name: value} if setting else {})


def start_server(args, parallel, env):
    cmd = [args.server, args.model, "--port", "0", "-t", str(args.threads), "--parallel", str(parallel),
           "--queue", str(args.clients * 2)] + (["--device", args.device] if args.device else [])
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **env})
    line = b""
    while b"listening on" not in line:
        line = p.stderr.readline()
        if not line and p.poll() is not None:
            sys.exit(f"server_parallel: the server exited ({p.returncode})")
    port = int(re.search(rb"http://127\.0\.0\.1:(\d+)", line).group(1))
    threading.Thread(target=p.stderr.read, daemon=True).start()  # keep its stderr drained
    return p, port


def one_request(port, prompt, seed, max_tokens, chat):
    """(completion tokens, seconds to the first token, text) of one streaming chat completion, or
    text completion (chat False: a model without a chat template)."""
    body = {"seed": seed, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"server_parallel: HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft, tokens, text = None, 0, []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        choice = ev["choices"][0] if ev.get("choices") else {}
        piece = choice["delta"].get("content") if chat and choice else choice.get("text")
        if piece:
            text.append(piece)
            if ttft is None:
                ttft = time.monotonic() - t0
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
    conn.close()
    return tokens, ttft if ttft is not None else time.monotonic() - t0, "".join(text)


def run(args, parallel, env):
    p, port = start_server(args, parallel, env)
    results, lock = {}, threading.Lock()  # request number -> (tokens, ttft, text)

    failures = []

    def client(c):
        for r in range(args.requests):
            k = c * args.requests + r
            try:
                out = one_request(port, PROMPTS[k % len(PROMPTS)], 1000 + k, args.max_tokens, not args.completions)
            except (OSError, ValueError, KeyError, SystemExit) as e:  # said once the run has ended
                failures.append(f"request {k}: {e}")
                return
            with lock:
                results[k] = out

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    p.terminate()
    p.wait(timeout=60)
    if failures:
        sys.exit(f"server_parallel: parallel {parallel}: {len(failures)} request(s) failed, the first: {failures[0]}")
    tokens = sum(t for t, _, _ in results.values())
    texts = {k: text for k, (_, _, text) in results.items()}
    return tokens / wall, statistics.median(f for _, f, _ in results.values()), tokens, wall, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--parallel", default="1,4,1,4")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=3, help="requests per client, one after the other")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="-t of the server (0: all cores)")
    ap.add_argument("--server", default="build/tools/server")
    ap.add_argument("--device", default="", help="the server's --device (default: the server's own)")
    ap.add_argument("--completions", action="store_true",
                    help="text completions (/v1/completions), for a model without a chat template")
    ap.add_argument("--check-texts", action="store_true",
                    help="every request's text must be the same in every run, whatever --parallel")
    args = ap.parse_args()
    best, first_texts, differ = {}, None, []  # best: label -> its best tok/s
    for entry in args.parallel.split(","):
        par, env = parse_entry(entry)
        label = f"{par}" + "".join(f" {k}={v}" for k, v in env.items())
        tps, ttft, tokens, wall, texts = run(args, par, env)
        print(f"parallel {label}: {tokens} tokens in {wall:.1f} s: {tps:.1f} tok/s aggregate, "
              f"median time to first token {ttft * 1000:.0f} ms", flush=True)
        best[label] = max(best.get(label, 0.0), tps)
        if args.check_texts:
            first_texts = first_texts or (label, texts)
            differ += [(label, k) for k in sorted(texts) if texts[k] != first_texts[1].get(k)]
    plain = sorted((int(x) for x in best if x.isdigit()))
    if plain:  # the largest plain P first, then each configuration with a setting, to the smallest P
        lo = str(plain[0])
        for label in [str(plain[-1])] + [x for x in best if not x.isdigit()]:
            if label != lo:
                print(f"best: parallel {label} {best[label]:.1f} tok/s / parallel {lo} {best[lo]:.1f} tok/s "
                      f"= {best[label] / best[lo]:.2f}x")
    if args.check_texts:
        if differ:
            par, k = differ[0]
            sys.exit(f"server_parallel: {len(differ)} text(s) differ from the first run's (parallel {first_texts[0]}); "
                     f"the first: request {k} at parallel {par}")
        print(f"texts: every request's text the same in every run ({len(first_texts[1])} requests)")


if __name__ == "__main__":
    main()
