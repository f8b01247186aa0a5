#!/usr/bin/env python3
"""build/tools/server under load: many clients at once, every answer checked.

    python test_load.py SERVER MODELS_DIR [--clients 16] [--requests 50 (at most 12 under ASan)] [--parallel 4]

Starts the server over qwen3-tiny (chat) with --parallel slots, runs each of a set of distinct
requests ALONE first (one at a time: the reference answers), then lets --clients threads send
--requests requests each, drawn from that set (chat and completions, streamed and not, several
seeds and samplers), all at once. Checks:
  - no request fails (every status 200, every stream ends with [DONE]);
  - every answer is complete and equal to the same request's answer run alone (same seed): a
    slot's answer may not depend on what the other slots run;
  - the slots' decode steps ran batched (/metrics: more rows than steps);
  - the server's resident memory after the load is within 8 MiB of what it was after a warm-up
    round of the same requests (nothing grows per request), with glibc's mmap threshold fixed;
    not under AddressSanitizer, whose quarantine holds freed memory (the output says so).
Nothing here measures time: each wait has a generous cap that can only fail the test.
Prints 'N passed, N failed' as tests/server/test_openai_client.py does; exit 1 on any failure.
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("server")
ap.add_argument("models")
ap.add_argument("--clients", type=int, default=16)
ap.add_argument("--requests", type=int, default=50)
ap.add_argument("--parallel", type=int, default=4)
args = ap.parse_args()
TIMEOUT = 300  # seconds a single request may take on a loaded machine before the test fails


def start_server(model):
    err = tempfile.TemporaryFile()
    # glibc raises its mmap threshold each time a block above it is freed (up to 32 MiB), so
    # blocks it mapped and unmapped come from the threads' heaps afterwards, and those heaps grow
    # by steps over the first thousand or so requests (+6.6 MiB near 1,200 requests, then flat).
    # The threshold fixed at its default (128 KiB) keeps that growth within a few MiB of the
    # first requests; a leak still grows the heaps or keeps its mappings.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    # the queue holds every client that does not have a slot: no 503 is expected here
    p = subprocess.Popen([args.server, f"{args.models}/{model}.bin", "--port", "0", "-t", "1",
                          "--parallel", str(args.parallel), "--queue", str(args.clients), "-c", "512"],
                         stdout=subprocess.DEVNULL, stderr=err, env=env)
    text = b""
    while b"listening on" not in text:
        if p.poll() is not None:
            err.seek(0)
            sys.exit(f"server exited: {err.read().decode()}")
        err.seek(0)
        text = err.read()
    return p, int(re.search(rb"http://127\.0\.0\.1:(\d+)", text).group(1))


def requests_set():
    """The distinct requests: (path, body). Streamed and whole, chat and raw, several samplers."""
    out = []
    prompts = ["Name a colour.", "Count to five.", "Write one word.", "Say hello.", "What is two plus two?"]
    samplers = [None, {"sampler": "combined"}, {"sampler": "greedy"}]
    for i, p in enumerate(prompts):
        for j, smp in enumerate(samplers):
            body = {"messages": [{"role": "user", "content": p}], "seed": 100 * i + j, "max_tokens": 12 + 3 * j,
                    "stream": (i + j) % 2 == 1}
            if smp:
                body["entropix"] = smp
            if j == 1:
                body["temperature"] = 0.8
            out.append(("/v1/chat/completions", body))
        out.append(("/v1/completions", {"prompt": p, "seed": 7 + i, "max_tokens": 10, "stream": i % 2 == 0}))
    return out


def send(port, path, body):
    """The answer's text, its finish_reason and its completion token count; raises on any fault."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read().decode()
        if resp.status != 200:
            raise RuntimeError(f"status {resp.status}: {data[:200]}")
    finally:
        conn.close()
    chat = path.endswith("chat/completions")
    if not body.get("stream"):
        o = json.loads(data)
        ch = o["choices"][0]
        return (ch["message"]["content"] if chat else ch["text"]), ch["finish_reason"], o["usage"]["completion_tokens"]
    events = data.split("\n\n")
    if events[-1] != "" or events[-2] != "data: [DONE]":
        raise RuntimeError(f"stream did not end with [DONE]: {events[-3:]}")
    text, finish = "", None
    for e in events[:-2]:
        if not e.startswith("data: "):
            raise RuntimeError(f"not an SSE data line: {e[:80]!r}")
        ch = json.loads(e[6:])["choices"][0]
        text += (ch["delta"].get("content") or "") if chat else ch["text"]
        finish = ch["finish_reason"] or finish
    return text, finish, None


def sanitized(pid):
    """1 when the server process has AddressSanitizer's runtime mapped (the test-asan build)."""
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


passed, failed = 0, 0


def check(name, ok, detail=""):
    global passed, failed
    passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}")


proc, port = start_server("qwen3-tiny.f32")
reqs = requests_set()
alone = [send(port, path, body) for path, body in reqs]  # one at a time: the reference answers
check("every reference answer finished", all(a[1] in ("stop", "length") for a in alone))


def load_round(n_clients, n_requests):
    """Every client's (request index, answer or exception) list."""
    results = [[] for _ in range(n_clients)]

    def client(c):
        for k in range(n_requests):
            i = (c * 7 + k * 3) % len(reqs)  # a fixed, well-mixed order: every client differs
            try:
                results[c].append((i, send(port, *reqs[i])))
            except Exception as e:  # recorded, counted below
                results[c].append((i, e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for rs in results for r in rs]


# Warm-up: every slot has run, every buffer it will touch touched. With the mmap threshold fixed
# (start_server) the resident size grew by at most 2.8 MiB after a warm-up of 640 requests over
# the next 3,200, in two runs (16 clients on 4 slots, 2026-12-02); under ASan, where memory is
# not checked, two requests a client.
warm = load_round(args.clients, 2 if sanitized(proc.pid) else 40)
rss_warm = rss_kib(proc.pid)
# Under ASan 12 requests a client: all clients at once still, fewer rounds of the same requests
# through the same code (the plain build's run sends them all).
got = load_round(args.clients, min(args.requests, 12) if sanitized(proc.pid) else args.requests)
rss_after = rss_kib(proc.pid)
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=TIMEOUT) as r:
    m = {k: float(v) for k, v in (l.split(" ") for l in r.read().decode().splitlines() if l and not l.startswith("#"))}
errors = [(i, r) for i, r in warm + got if isinstance(r, Exception)]
check(f"{len(warm) + len(got)} requests from {args.clients} clients, no error", not errors,
      f"{len(errors)} failed, first: request {errors[0][0]}: {errors[0][1]}" if errors else "")
diff = [(i, r) for i, r in warm + got if not isinstance(r, Exception) and r[:2] != alone[i][:2]]
check("every answer equals the same request run alone", not diff,
      f"{len(diff)} differ, first: request {diff[0][0]}: {diff[0][1]!r} vs {alone[diff[0][0]]!r}" if diff else "")
counts = [(i, r) for i, r in got if not isinstance(r, Exception) and r[2] is not None and r[2] != alone[i][2]]
check("every answer's usage equals the one run alone", not counts)
# Every slot busy all along (more clients than slots): on the CPU the slots' decode steps batch
check("the busy slots decoded together (more rows than steps)",
      m["entropix_batch_rows_total"] > m["entropix_batch_steps_total"] > 0, str(m))
print(f"batching: {m['entropix_batch_rows_total']:.0f} rows in {m['entropix_batch_steps_total']:.0f} steps")
print(f"memory: {rss_warm} KiB after warm-up, {rss_after} KiB after {len(got)} requests")
if sanitized(proc.pid):
    # ASan's allocator keeps freed blocks in its quarantine (256 MiB by default) before reusing
    # them, so resident memory grows with every request whether or not anything leaks: the
    # check means nothing there (LeakSanitizer looks for leaks in that build instead). Said, not
    # counted as passed; the plain build's run checks it.
    print("note: resident memory not checked: the server runs under AddressSanitizer (its quarantine grows RSS)")
else:
    check("resident memory flat after warm-up", rss_after <= rss_warm + 8 * 1024,
          f"{rss_warm} KiB after warm-up, {rss_after} KiB after the load")
proc.send_signal(signal.SIGTERM)
check("SIGTERM after the load exits 0", proc.wait(timeout=TIMEOUT) == 0)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
