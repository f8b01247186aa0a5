#!/usr/bin/env python3
"""soak.py — drives build/tools/server for a given time with a mix of clients, and records how it
holds up: its resident memory, threads and open descriptors, the latency of each kind of request,
the errors, and its own /metrics (docs/server.md "Soak test"). A command, not a test; standard
library only (the plot: matplotlib, from build/soak-venv when this python lacks it).

    python3 tools/soak/soak.py MODEL [--minutes 60] [--concurrency 4] [--parallel 2] [-t 1] [--out DIR]
    python3 tools/soak/soak.py --url http://127.0.0.1:8080 --pid PID [--minutes 60] ...

With MODEL it starts `build/tools/server MODEL --port 0` on loopback (and stops it at the end with
SIGTERM, recording how it exits); with --url it drives a server already running, whose /proc
entry --pid names. Clients: --concurrency request workers, each sending one request after another,
its kind drawn by --mix from plain and streamed chat/completions requests, small agent-pool
requests (n 2, a few tokens), and streams it cancels by closing the connection after the first
event; plus --slow clients that send a request's headers one byte every few seconds, and --idle
ones that connect and send nothing (the server must close both at its header deadline). Every
--interval seconds it samples /proc/PID and /metrics and the latency percentiles of the requests
finished in that interval. Writes into --out: samples.jsonl and samples.csv (one row per sample),
requests.jsonl (one line per request), summary.json, server.log (when it started the server) and
soak.png.
"""
import argparse
import csv
import http.client
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_lib  # noqa: E402

PROMPTS = ["Once upon a time", "Tell me a short story about a lighthouse.", "Explain why the sky is blue.",
           "Write a haiku about autumn leaves.", "List three uses of a paperclip.", "The little dog"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description="soak test of build/tools/server (docs/server.md)")
    ap.add_argument("model", nargs="?", help="start build/tools/server with this model")
    ap.add_argument("--url", help="drive a running server instead (http://127.0.0.1:PORT)")
    ap.add_argument("--pid", type=int, help="with --url: the server's process id (for /proc)")
    ap.add_argument("--server", default="build/tools/server")
    ap.add_argument("-t", "--threads", type=int, default=1, help="the started server's -t")
    ap.add_argument("--parallel", type=int, default=2, help="the started server's --parallel")
    ap.add_argument("--server-flag", action="append", default=[], help="one more flag for the started server")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds left out of the growth fit")
    ap.add_argument("--concurrency", type=int, default=4, help="request workers")
    ap.add_argument("--slow", type=int, default=1, help="slow clients (a header byte every --slow-every s)")
    ap.add_argument("--idle", type=int, default=1, help="idle connections")
    ap.add_argument("--slow-every", type=float, default=3.0)
    ap.add_argument("--conn-cap", type=float, default=120.0, help="a slow or idle connection still open after "
                    "this many seconds is an error (the server's --header-timeout is 10 s by default)")
    ap.add_argument("--mix", default="plain=3,stream=3,pool=1,cancel=1")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="default: build/soak/YYYYMMDD-HHMMSS")
    a = ap.parse_args(argv)
    if bool(a.model) == bool(a.url):
        ap.error("give MODEL or --url")
    if a.url and not a.pid:
        ap.error("--url needs --pid (the server's /proc entry)")
    a.weights = {}
    for part in a.mix.split(","):
        k, _, v = part.partition("=")
        if k not in soak_lib.REQUEST_KINDS or not v.isdigit():
            ap.error(f"--mix: '{part}' is not KIND=N with KIND one of {', '.join(soak_lib.REQUEST_KINDS)}")
        a.weights[k] = int(v)
    if not sum(a.weights.values()):
        ap.error("--mix: every weight is 0")
    a.out = a.out or time.strftime("build/soak/%Y%m%d-%H%M%S")
    return a


def start_server(a, log):
    cmd = [a.server, a.model, "--port", "0", "-t", str(a.threads), "--parallel", str(a.parallel), *a.server_flag]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 120
    while True:
        with open(log.name, "rb") as f:
            m = re.search(rb"http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            sys.exit(f"soak: the server did not start (see {log.name})")
        time.sleep(0.05)


class Target:
    """The server: where it listens, its process, what it serves."""

    def __init__(self, host, port, pid, timeout):
        self.host, self.port, self.pid, self.timeout = host, port, pid, timeout
        self.chat = False

    def conn(self, timeout=None):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)

    def get(self, path):
        c = self.conn(30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def proc(self):
        """(rss_kib, threads, fds) of the server's process; None each when it is gone."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                rss, threads = soak_lib.parse_status(f.read())
            return rss, threads, len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return None, None, None


# ---- request kinds: each returns (outcome, tokens); "ok" or what went wrong ----

def request_body(t, kind, rng, a):
    chat = t.chat and rng.random() < 0.5  # chat and completions alike when the model has a template
    prompt = rng.choice(PROMPTS)
    body = {"max_tokens": a.max_tokens, "seed": rng.randrange(1 << 31)}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    if kind == "pool":
        body.update({"max_tokens": min(a.max_tokens, 6), "entropix": {"sampler": "agents", "n": 2}})
    if kind in ("stream", "cancel"):
        body["stream"] = True
    return ("/v1/chat/completions" if chat else "/v1/completions"), body


def run_request(t, kind, rng, a):
    path, body = request_body(t, kind, rng, a)
    c = t.conn()
    try:
        c.connect()
        sock = c.sock  # kept: http.client hands a closing connection's socket to the response
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            return f"http_{r.status}", 0
        if not body.get("stream"):
            doc = json.loads(r.read())
            return ("ok", doc["usage"]["completion_tokens"]) if doc.get("choices") else ("bad_answer", 0)
        events = 0
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if line == "data: [DONE]":
                return ("ok", events) if kind == "stream" else ("no_event", 0)
            if line.startswith("data: "):
                if '"error"' in line[:16]:
                    return "error_event", events
                events += 1
                if kind == "cancel":  # the client goes away mid-stream: the connection is closed under it
                    sock.shutdown(socket.SHUT_RDWR)
                    return "ok", events
        return "no_done", events
    except socket.timeout:
        return "timeout", 0
    except (OSError, http.client.HTTPException):
        return "conn_error", 0
    except (ValueError, KeyError, TypeError):
        return "bad_answer", 0
    finally:
        c.close()


def hold_connection(t, kind, a, stop):
    """A slow client (a header byte every --slow-every s, never the end of the headers) or an idle
    one (nothing sent): "ok" when the server closes it unanswered, else what happened; None when
    the run stopped first."""
    s = socket.create_connection((t.host, t.port), timeout=10)
    start = time.monotonic()
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {t.host}\r\nX-Pad: ".encode() + b"a" * 4096
    sent, next_byte = 0, start
    try:
        while not stop.is_set():
            now = time.monotonic()
            if now - start > a.conn_cap:
                return "not_closed"
            if kind == "slow" and now >= next_byte and sent < len(head):
                try:
                    s.send(head[sent:sent + 1])
                except OSError:
                    return "ok"  # closed under the send
                sent, next_byte = sent + 1, now + a.slow_every
            readable, _, _ = select.select([s], [], [], 0.25)
            if readable:
                try:
                    data = s.recv(64)
                except OSError:
                    return "ok"
                return "ok" if not data else "answered"
        return None
    finally:
        s.close()


class Load:
    """The workers and what they record."""

    def __init__(self, t, a, out_dir):
        self.t, self.a = t, a
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.finished = []  # this interval's requests
        self.all = soak_lib.Tally()  # the run's
        self.log = open(os.path.join(out_dir, "requests.jsonl"), "w")
        self.t0 = time.monotonic()
        self.threads = []

    def record(self, kind, start, outcome, tokens):
        rec = {"t_s": round(time.monotonic() - self.t0, 3), "kind": kind,
               "latency_s": round(time.monotonic() - start, 4), "outcome": outcome, "tokens": tokens}
        with self.lock:
            self.finished.append(rec)
            self.all.add(kind, rec["latency_s"], outcome)
            self.log.write(json.dumps(rec) + "\n")

    def take(self):
        with self.lock:
            got, self.finished = self.finished, []
        return got

    def request_worker(self, k):
        rng = random.Random(self.a.seed * 1000 + k)
        kinds = [kd for kd, w in self.a.weights.items() for _ in range(w)]
        while not self.stop.is_set():
            kind = rng.choice(kinds)
            start = time.monotonic()
            try:
                outcome, tokens = run_request(self.t, kind, rng, self.a)
            except Exception as e:  # recorded, not a silently dead worker
                outcome, tokens = f"client_{type(e).__name__}", 0
            self.record(kind, start, outcome, tokens)

    def conn_worker(self, kind):
        while not self.stop.is_set():
            start = time.monotonic()
            try:
                outcome = hold_connection(self.t, kind, self.a, self.stop)
            except OSError:
                outcome = "conn_error"
                self.stop.wait(1.0)
            if outcome is not None:
                self.record(kind, start, outcome, 0)

    def start(self):
        self.t0 = time.monotonic()
        jobs = [(self.request_worker, (k,)) for k in range(self.a.concurrency)]
        jobs += [(self.conn_worker, ("slow",))] * self.a.slow + [(self.conn_worker, ("idle",))] * self.a.idle
        for fn, args in jobs:
            th = threading.Thread(target=fn, args=args, daemon=True)
            th.start()
            self.threads.append(th)

    def finish(self):
        self.stop.set()
        deadline = time.monotonic() + self.a.request_timeout
        for th in self.threads:
            th.join(max(0.0, deadline - time.monotonic()))
        self.log.close()
        return sum(th.is_alive() for th in self.threads)


class Window:
    """The server's /proc figures polled about once a second between two samples: the lowest and
    highest resident memory (an agent pool's replicas come and go within a request: the floor is
    what a leak raises), the most threads and descriptors."""

    def __init__(self):
        self.since = time.monotonic()
        self.rss = []
        self.threads = self.fds = None

    def poll(self, t):
        rss, threads, fds = t.proc()
        if rss is not None:
            self.rss.append(rss)
            self.threads, self.fds = max(self.threads or 0, threads), max(self.fds or 0, fds)

    def fields(self):
        return {"rss_min_kib": min(self.rss) if self.rss else None, "rss_max_kib": max(self.rss) if self.rss else None,
                "threads_max": self.threads, "fds_max": self.fds}


def sample(t, t_s, requests, window=None):
    rss, threads, fds = t.proc()
    row = {"t_s": round(t_s, 2), "rss_kib": rss, "threads": threads, "fds": fds, "metrics": None}
    if window is not None:
        window.poll(t)
        row.update(window.fields())
    try:
        status, body = t.get("/metrics")
        if status == 200:
            row["metrics"] = soak_lib.parse_metrics(body.decode())
    except (OSError, http.client.HTTPException):
        pass
    if requests is not None:
        row["latency"] = soak_lib.latency_row(requests)
    return row


def at_rest(t, cap_s=60.0):
    """The server once no slot is busy and nothing is queued (or after cap_s: what it holds then)."""
    deadline = time.monotonic() + cap_s
    while True:
        row = sample(t, 0.0, None)
        m = row["metrics"] or {}
        if (m.get("entropix_slots_busy") == 0 and m.get("entropix_queue_length") == 0) or time.monotonic() > deadline:
            return row
        time.sleep(0.5)


METRIC_COLUMNS = [("slots_busy", "entropix_slots_busy"), ("slots_stalled", "entropix_slots_stalled"),
                  ("queue", "entropix_queue_length"), ("connections", "entropix_connections"),
                  ("requests_total", "entropix_requests_total"), ("request_errors_total", "entropix_request_errors_total"),
                  ("http_errors_total", "entropix_http_errors_total"),
                  ("timed_out_total", "entropix_connections_timed_out_total"),
                  ("completion_tokens_total", "entropix_completion_tokens_total"),
                  ("pool_memory_bytes", "entropix_pool_memory_bytes")]


def csv_row(s):
    row = {k: s.get(k) for k in ("t_s", "rss_kib", "rss_min_kib", "rss_max_kib", "threads", "threads_max", "fds",
                                 "fds_max")}
    m = s.get("metrics") or {}
    for col, name in METRIC_COLUMNS:
        row[col] = m.get(name)
    for kind, lat in (s.get("latency") or {}).items():
        row[f"{kind}_n"] = lat["n"]
        row[f"{kind}_errors"] = sum(lat["errors"].values())
        for p in soak_lib.PERCENTILES:
            row[f"{kind}_p{p}"] = lat[f"p{p}"]
    return row


def write_csv(path, samples):
    rows = [csv_row(s) for s in samples]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["t_s"])
        w.writeheader()
        w.writerows(rows)


def plot(out_dir):
    """soak.png by tools/soak/plot.py, with this python if it has matplotlib, else build/soak-venv's."""
    here = os.path.dirname(os.path.abspath(__file__))
    py = sys.executable
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        py = os.path.join("build", "soak-venv", "bin", "python")
        if not os.access(py, os.X_OK):
            print(f"soak: no matplotlib: `make soak-venv`, then build/soak-venv/bin/python {here}/plot.py {out_dir}")
            return
    subprocess.run([py, os.path.join(here, "plot.py"), out_dir], check=False)


def drive(a, t, server, out_dir):
    """The load, the samples and the summary (written as they come)."""
    baseline = at_rest(t)
    load = Load(t, a, out_dir)
    samples, stopped_early = [], None
    with open(os.path.join(out_dir, "samples.jsonl"), "w") as sf:
        load.start()
        end, next_at = load.t0 + a.minutes * 60.0, load.t0 + a.interval
        window = Window()
        while True:
            window.poll(t)
            now = time.monotonic()
            if server and server.poll() is not None:
                stopped_early = f"the server exited ({server.returncode}) at {now - load.t0:.0f} s"
                break
            if now >= next_at or now >= end:
                s = sample(t, now - load.t0, load.take(), window)
                s["from_s"] = round(window.since - load.t0, 2)
                window = Window()
                samples.append(s)
                sf.write(json.dumps(s) + "\n")
                sf.flush()
                print(f"soak: {s['t_s']:7.0f} s  rss {s['rss_min_kib']}..{s['rss_max_kib']} KiB  threads {s['threads']}  fds {s['fds']}  "
                      f"requests {sum(v['n'] for v in s['latency'].values())}", flush=True)
                next_at += a.interval
                if now >= end:
                    break
            time.sleep(min(1.0, max(0.0, min(next_at, end) - time.monotonic())))
    stuck = load.finish()
    final = at_rest(t) if not stopped_early else None
    summary = soak_lib.summarize(samples, load.all, baseline, final, a.warmup)
    summary["workers_stuck"] = stuck
    if stopped_early:
        summary["findings"].insert(0, stopped_early)
    return summary, samples


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    server, log, summary, samples, stop_s = None, None, None, [], 0.0
    if a.model:
        log = open(os.path.join(a.out, "server.log"), "wb")
        server, port = start_server(a, log)
        t = Target("127.0.0.1", port, server.pid, a.request_timeout)
    else:
        m = re.match(r"http://([^:/]+):(\d+)/?$", a.url)
        if not m:
            sys.exit(f"soak: --url {a.url}: expected http://HOST:PORT")
        t = Target(m.group(1), int(m.group(2)), a.pid, a.request_timeout)
    try:
        _, body = t.get("/v1/models")
        t.chat = json.loads(body)["data"][0].get("chat_template", True) is not False
        summary, samples = drive(a, t, server, a.out)
    finally:
        if server and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            t_stop = time.monotonic()
            try:
                server.wait(90)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            stop_s = time.monotonic() - t_stop
    if summary is None:
        return 1
    if server:
        summary["server_exit"] = {"code": server.returncode, "after_sigterm_s": round(stop_s, 2)}
        if server.returncode != 0:
            summary["findings"].append(f"the server exited {server.returncode} on SIGTERM")
        log.close()
    summary["args"] = {k: v for k, v in vars(a).items() if k != "weights"}
    write_csv(os.path.join(a.out, "samples.csv"), samples)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    plot(a.out)
    print_summary(summary, a.out)
    return 0


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_summary(s, out_dir):
    print(f"\nsoak: {s['duration_s']:.0f} s, {s['requests']} requests, {s['n_errors']} errors; written to {out_dir}")
    print(f"  resident memory: floor {fmt(s['rss_mib_per_hour'], '+.2f')} MiB/hour, as sampled "
          f"{fmt(s['rss_sampled_mib_per_hour'], '+.2f')} MiB/hour (least squares over {s['fit_points']} samples after "
          f"the warm-up); threads {fmt(s['threads_per_hour'], '+.1f')}/hour, "
          f"descriptors {fmt(s['fds_per_hour'], '+.1f')}/hour")
    for kind, row in s["latency"].items():
        if row["n"]:
            print(f"  {kind:7s} n {row['n']:6d}  p50 {fmt(row['p50'], '.3f')} s  p90 {fmt(row['p90'], '.3f')} s  "
                  f"p99 {fmt(row['p99'], '.3f')} s  errors {sum(row['errors'].values())}")
    rest = s.get("at_rest")
    if rest:
        print(f"  at rest: slots busy {fmt(rest['leaked_slots'], '.0f')}, queue {fmt(rest['queue'], '.0f')}, "
              f"threads {rest['threads_before']} -> {rest['threads_after']}, fds {rest['fds_before']} -> "
              f"{rest['fds_after']}, rss {rest['rss_kib_before']} -> {rest['rss_kib_after']} KiB")
    if "server_exit" in s:
        print(f"  server: exit {s['server_exit']['code']}, {s['server_exit']['after_sigterm_s']} s after SIGTERM")
    for line in s["findings"] or ["nothing found"]:
        print(f"  finding: {line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
