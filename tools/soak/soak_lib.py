"""soak_lib.py — the soak test's arithmetic and parsing, kept apart from its sockets and threads so
that tools/soak/test_soak_lib.py can check it alone (docs/server.md "Soak test"). Standard library
only.

- percentile(): the nearest-rank percentile of a list (p50/p90/p99 of request latencies);
- linear_fit(): least squares y = a + b·x, for memory growth per hour;
- parse_metrics(): the server's Prometheus text (GET /metrics) into {name: value};
- parse_status(): /proc/PID/status into resident memory (KiB) and threads;
- Tally, latency_row(): requests per kind: count, errors by outcome, p50/p90/p99;
- summarize(): the whole run from its samples and requests: growth by fit, leaks, errors.
"""
import math
from array import array

REQUEST_KINDS = ("plain", "stream", "pool", "cancel")  # requests answered by a generation
CONN_KINDS = ("slow", "idle")                            # connections the server must close itself
KINDS = REQUEST_KINDS + CONN_KINDS
PERCENTILES = (50, 90, 99)


def percentile(values, p):
    """The nearest-rank p-th percentile (0 < p <= 100) of values: the smallest value with at least
    p% of them at or below it. None for no values."""
    if not values:
        return None
    v = sorted(values)
    rank = max(1, math.ceil(p * len(v) / 100.0))  # p * n first: 99 * 200 / 100 is 198 exactly
    return v[rank - 1]


def linear_fit(xs, ys):
    """(intercept, slope) of the least-squares line through (xs, ys); slope None with fewer than two
    distinct xs."""
    n = len(xs)
    if n != len(ys) or n < 2:
        return (ys[0] if ys else None), None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def parse_metrics(text):
    """{name: float} of the sample lines of Prometheus text ("name value" or "name{labels} value");
    comments and lines that do not parse are skipped."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[0].split("{", 1)[0]
        try:
            out[name] = float(parts[1])
        except ValueError:
            continue
    return out


def parse_status(text):
    """(rss_kib, threads) from the text of /proc/PID/status (None for a field it lacks)."""
    rss = threads = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "VmRSS":
            rss = int(value.split()[0])
        elif key == "Threads":
            threads = int(value.split()[0])
    return rss, threads


class Tally:
    """Requests by kind, kept small for a run of hours: a count, the errors by outcome, and the
    latencies of the "ok" ones (8 bytes each)."""

    def __init__(self):
        self.n = {k: 0 for k in KINDS}
        self.errors = {k: {} for k in KINDS}
        self.ok = {k: array("d") for k in KINDS}

    def add(self, kind, latency_s, outcome):
        self.n[kind] += 1
        if outcome == "ok":
            self.ok[kind].append(latency_s)
        else:
            self.errors[kind][outcome] = self.errors[kind].get(outcome, 0) + 1

    def row(self):
        """Per kind: {"n", "errors": {outcome: n}, "p50", "p90", "p99"}, the percentiles over the "ok"
        requests (None: none)."""
        out = {}
        for kind in KINDS:
            out[kind] = {"n": self.n[kind], "errors": dict(self.errors[kind])}
            for p in PERCENTILES:
                out[kind][f"p{p}"] = percentile(self.ok[kind], p)
        return out


def latency_row(requests):
    """Tally.row() of requests [{"kind", "latency_s", "outcome"}, ...]."""
    t = Tally()
    for r in requests:
        t.add(r["kind"], r["latency_s"], r["outcome"])
    return t.row()


def growth_per_hour(samples, key, warmup_s):
    """(slope per hour, points) of samples[key] against samples["t_s"], over the samples that have the
    key and whose interval starts at or after warmup_s ("from_s": where it starts; the sample's own
    time when it has none); slope None with fewer than two."""
    pts = [(s["t_s"], s[key]) for s in samples
           if s.get("from_s", s.get("t_s", -1)) >= warmup_s and s.get(key) is not None]
    _, slope = linear_fit([p[0] for p in pts], [p[1] for p in pts])
    return (None if slope is None else slope * 3600.0), len(pts)


def summarize(samples, tally, baseline, final, warmup_s):
    """The run's summary (a dict, written as summary.json).

    samples: the periodic samples ({"t_s", "rss_kib", "threads", "fds", "metrics": {...}}, and the
    interval's lowest resident memory "rss_min_kib" when polled), ...);
    tally: every request (a Tally); baseline / final: the server at rest
    before the load and after it ended and the slots emptied (same keys as a sample, or None).
    Memory growth is the slope of the least-squares line through the samples after warmup_s, in
    MiB per hour: of each interval's lowest resident memory (its floor, which memory held only
    while a request runs does not raise), and of the value at the sample; leaks are what the server holds at rest after the run beyond what it held before.
    """
    floor = "rss_min_kib" if any(s.get("rss_min_kib") is not None for s in samples) else "rss_kib"
    rss_h, n_fit = growth_per_hour(samples, floor, warmup_s)
    sampled_h, _ = growth_per_hour(samples, "rss_kib", warmup_s)
    thr_h, _ = growth_per_hour(samples, "threads", warmup_s)
    fds_h, _ = growth_per_hour(samples, "fds", warmup_s)
    lat = tally.row()
    errors = {}
    for kind, row in lat.items():
        for outcome, n in row["errors"].items():
            errors[f"{kind}:{outcome}"] = n
    out = {
        "duration_s": samples[-1]["t_s"] if samples else 0.0,
        "requests": sum(tally.n.values()),
        "errors": errors,
        "n_errors": sum(errors.values()),
        "latency": lat,
        "rss_mib_per_hour": None if rss_h is None else rss_h / 1024.0,
        "rss_sampled_mib_per_hour": None if sampled_h is None else sampled_h / 1024.0,
        "threads_per_hour": thr_h,
        "fds_per_hour": fds_h,
        "fit_points": n_fit,
        "rss_kib": _span(samples, "rss_kib"),
        "threads": _span(samples, "threads"),
        "fds": _span(samples, "fds"),
    }
    if baseline and final:
        fm, bm = final.get("metrics") or {}, baseline.get("metrics") or {}
        out["at_rest"] = {
            "leaked_slots": fm.get("entropix_slots_busy"),
            "queue": fm.get("entropix_queue_length"),
            "pool_memory_bytes": fm.get("entropix_pool_memory_bytes"),
            "connections_open": fm.get("entropix_connections"),
            "threads_before": baseline.get("threads"), "threads_after": final.get("threads"),
            "fds_before": baseline.get("fds"), "fds_after": final.get("fds"),
            "rss_kib_before": baseline.get("rss_kib"), "rss_kib_after": final.get("rss_kib"),
        }
        out["server_counters"] = {k: fm.get(k, 0) - bm.get(k, 0) for k in (
            "entropix_requests_total", "entropix_request_errors_total", "entropix_http_errors_total",
            "entropix_connections_timed_out_total", "entropix_completion_tokens_total")}
    out["findings"] = findings(out)
    return out


def _span(samples, key):
    vals = [s[key] for s in samples if s.get(key) is not None]
    return {"first": vals[0], "last": vals[-1], "max": max(vals)} if vals else None


def findings(summary):
    """What a reader should look at, one line each: a slot or pool reservation held at rest, more
    threads or descriptors at rest than before the run, errors of requests that should not fail."""
    out = []
    rest = summary.get("at_rest")
    if rest:
        if rest["leaked_slots"]:
            out.append(f"{rest['leaked_slots']:.0f} slot(s) busy at rest")
        if rest["queue"]:
            out.append(f"{rest['queue']:.0f} request(s) queued at rest")
        if rest["pool_memory_bytes"]:
            out.append(f"{rest['pool_memory_bytes']:.0f} bytes of pool memory still reserved at rest")
        for what in ("threads", "fds"):
            before, after = rest[f"{what}_before"], rest[f"{what}_after"]
            if before is not None and after is not None and after > before:
                out.append(f"{what}: {before} before the load, {after} at rest after it")
    for key, n in sorted(summary["errors"].items()):
        out.append(f"{n} error(s) {key}")
    return out
