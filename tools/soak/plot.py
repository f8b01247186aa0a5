#!/usr/bin/env python3
"""plot.py — the soak test's figure (docs/server.md "Soak test"): DIR/soak.png from DIR/samples.jsonl
and DIR/summary.json, as tools/soak/soak.py writes them. Needs matplotlib (`make soak-venv`, then
build/soak-venv/bin/python tools/soak/plot.py DIR).

Four panels against minutes since the load started: resident memory (each interval's lowest and
highest, polled about once a second, and the value at the sample) with the least-squares line of
the lowest after the warm-up and the server at rest before and after the load; threads and open
descriptors (at the sample, and the most in the interval); each request kind's p50 (solid), p90 (dashed) and
p99 (dotted) latency of the interval, log scale; the slots busy, the queue and the connections
when sampled, and the errors of each interval.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_lib  # noqa: E402


def series(samples, fn):
    xs, ys = [], []
    for s in samples:
        v = fn(s)
        if v is not None:
            xs.append(s["t_s"] / 60.0)
            ys.append(v)
    return xs, ys


def metric(name):
    return lambda s: (s.get("metrics") or {}).get(name)


def memory_panel(ax, samples, summary):
    mib = lambda key: lambda s: None if s.get(key) is None else s[key] / 1024.0  # noqa: E731
    xs, lo = series(samples, mib("rss_min_kib"))
    _, hi = series(samples, mib("rss_max_kib"))
    if xs and len(lo) == len(hi):
        ax.fill_between(xs, lo, hi, color="tab:blue", alpha=0.15, label="lowest .. highest in the interval")
        ax.plot(xs, lo, "o-", color="tab:blue", label="floor (lowest in the interval)")
    ax.plot(*series(samples, mib("rss_kib")), "x", color="tab:gray", label="at the sample")
    key = "rss_min_kib" if xs else "rss_kib"
    warm = summary["args"]["warmup"]
    fit = [(s["t_s"], s[key] / 1024.0) for s in samples
           if s.get("from_s", s["t_s"]) >= warm and s.get(key) is not None]  # as soak_lib.growth_per_hour
    a, b = soak_lib.linear_fit([p[0] for p in fit], [p[1] for p in fit])
    if b is not None:
        x0, x1 = fit[0][0], fit[-1][0]
        ax.plot([x0 / 60.0, x1 / 60.0], [a + b * x0, a + b * x1], "--", color="tab:red",
                label=f"least squares after {warm:.0f} s: {b * 3600:+.2f} MiB/hour")
    rest = summary.get("at_rest") or {}
    if rest.get("rss_kib_before") is not None:
        ax.axhline(rest["rss_kib_before"] / 1024.0, color="tab:green", lw=0.8, label="at rest before the load")
    if rest.get("rss_kib_after") is not None:
        ax.axhline(rest["rss_kib_after"] / 1024.0, color="tab:purple", lw=0.8, ls=":", label="at rest after it")
    ax.set_ylabel("RSS (MiB)")
    ax.legend(loc="best", fontsize=8)


def threads_panel(ax, samples):
    ax.plot(*series(samples, lambda s: s["threads"]), "o-", color="tab:blue", label="threads")
    ax.plot(*series(samples, lambda s: s.get("threads_max")), "^:", color="tab:blue", label="threads, most in the interval")
    ax.plot(*series(samples, lambda s: s["fds"]), "s-", color="tab:orange", label="open descriptors")
    ax.plot(*series(samples, lambda s: s.get("fds_max")), "v:", color="tab:orange", label="descriptors, most in the interval")
    ax.set_ylabel("count")
    ax.legend(loc="best", fontsize=8)


def latency_panel(ax, samples):
    colors = dict(zip(soak_lib.KINDS, ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
    for kind in soak_lib.REQUEST_KINDS:
        for p, style in zip(soak_lib.PERCENTILES, ("-", "--", ":")):
            xs, ys = series(samples, lambda s, k=kind, q=p: (s.get("latency") or {}).get(k, {}).get(f"p{q}"))
            if xs:
                ax.plot(xs, ys, style, color=colors[kind], label=f"{kind} p{p}" if p == 50 else None)
    ax.set_yscale("log")
    ax.set_ylabel("latency (s): p50 — p90 -- p99 ··")
    ax.legend(loc="best", fontsize=8, ncol=2)


def server_panel(ax, samples):
    for name, label in (("entropix_slots_busy", "slots busy"), ("entropix_queue_length", "queued"),
                        ("entropix_connections", "connections")):
        ax.plot(*series(samples, metric(name)), "o-", label=label)
    xs, ys = series(samples, lambda s: sum(sum(v["errors"].values()) for v in (s.get("latency") or {}).values()))
    ax.bar(xs, ys, width=0.3, color="tab:red", alpha=0.5, label="errors in the interval")
    ax.set_ylabel("when sampled")
    ax.set_xlabel("minutes since the load started")
    ax.legend(loc="best", fontsize=8)


def main(out_dir):
    with open(os.path.join(out_dir, "samples.jsonl")) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(out_dir, "summary.json")) as f:
        summary = json.load(f)
    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    memory_panel(axes[0], samples, summary)
    threads_panel(axes[1], samples)
    latency_panel(axes[2], samples)
    server_panel(axes[3], samples)
    args = summary["args"]
    model = os.path.basename(args.get("model") or args.get("url") or "")
    fig.suptitle(f"soak: {model}, {summary['duration_s'] / 60:.1f} min, {summary['requests']} requests, "
                 f"{summary['n_errors']} errors, concurrency {args['concurrency']}", fontsize=11)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, "soak.png")
    fig.savefig(path, dpi=90)
    print(f"soak: plot {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot.py DIR (soak.py's --out)")
    main(sys.argv[1])
