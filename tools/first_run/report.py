#!/usr/bin/env python3
"""report.py OUT — the report of a tools/gpu_first_run.sh run: OUT/report.json and OUT/report.md.

Reads OUT/meta.txt (key=value lines), OUT/steps.tsv (a line per step that has ended: name, kind,
status, exit, seconds, timeout, log, reason, command) and the steps' logs under OUT, from which it
takes the figures: bench speed's, sampler's and agents' report lines, Criterion's synthesis,
compute-sanitizer's summaries, the kernel lab's PASS/FAIL rows, Nsight Compute's CSV. Standard
library only. Both files are written beside their final name and renamed over it, so a reader
never sees half a report (the script rewrites them after every step).

report.py --verdict KIND LOG prints why a step whose command exited 0 fails all the same (verdict
below), or nothing: the script asks it after each step, so one parser reads the logs.
"""
import csv
import io
import json
import os
import re
import sys

NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


DEPTH = r"(?: @ d\d+)?"  # "tg128 @ d4096": bench speed -d


def speed_figures(text):
    """bench speed's `key: value` lines (tools/bench/speed_report.c)."""
    f = {}
    pats = {
        "device": r"^device:\s+(.+)$",
        "prefill_tokens": r"^prefill pp(\d+)" + DEPTH + ":", "prefill_tok_s": r"^prefill pp\d+" + DEPTH + r":\s+" + NUM + " tok/s",
        "decode_tokens": r"^decode tg(\d+)" + DEPTH + ":", "decode_tok_s": r"^decode tg\d+" + DEPTH + r":\s+" + NUM + " tok/s",
        "decode_ms_per_token": r"^decode tg\d+" + DEPTH + ":.*, " + NUM + " ms/token",
        "depth": r"^decode tg\d+ @ d(\d+):",
        "bytes_per_token": r"^bytes/token:\s+(\d+)", "achieved_gbps": r"^achieved GB/s:\s+" + NUM,
        "peak_gbps": r"^peak GB/s:\s+" + NUM, "of_peak_pct": r"^of peak:\s+" + NUM + "%",
        "launches_per_step": r"^launches/step:\s+(\d+)",
    }
    for key, pat in pats.items():
        m = re.search(pat, text, re.M)
        if m:
            f[key] = m.group(1).strip() if key == "device" else num(m.group(1))
    return f


TIMELINE_ROW = re.compile(r"^  (\S.*?)\s+" + NUM + r"\s+" + NUM + r"%\s+(\d+)\s+" + NUM + r"\s+" + NUM + r"%(?:\s+" + NUM
                          + r")?$", re.M)


def timeline_figures(text):
    """bench speed --timeline (tools/bench/timeline.c): bench speed's lines, then a row per phase of
    one decode token [phase, us/token, share %, bytes/token, us at peak, % of bound, barrier us
    (the persistent kernel's, with --persistent; else None)] and the graph path's and the timed
    step's us/token."""
    f = speed_figures(text)
    _, found, table_text = text.partition("\ntimeline of one decode token")
    if not found:
        return f
    f["phases"] = [[m.group(1), num(m.group(2)), num(m.group(3)), int(m.group(4)), num(m.group(5)), num(m.group(6)),
                    num(m.group(7)) if m.group(7) else None]
                   for m in TIMELINE_ROW.finditer(table_text)]
    for key, label in (("graph_us_per_token", "graph step"), ("timed_us_per_token", "timed step")):
        m = re.search(r"^  %s, wall clock\s+%s" % (label, NUM), table_text, re.M)
        if m:
            f[key] = num(m.group(1))
    return f


PATH_ROW = re.compile(r"^  ((?:graph|persistent kernel)\S*.*?)\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM + "%$", re.M)


def paths_figures(text):
    """bench speed --persistent (tools/bench/decode_paths.c): bench speed's lines, then the graph
    path's and the persistent kernel's us/token, tok/s and share of the bound (and the persistent
    kernel's without its L2 warming, where it warms), and their ratios; or why the persistent
    kernel did not take the model."""
    f = speed_figures(text)
    _, found, table_text = text.partition("\ndecode paths (")
    if not found:
        return f
    rows = PATH_ROW.findall(table_text)
    for key, row in zip(("graph", "persistent", "persistent_cold"), rows):
        f[key + "_path"] = row[0]
        f[key + "_us_per_token"], f[key + "_tok_s"], f[key + "_of_bound_pct"] = map(num, row[1:])
    m = re.search(r"^  persistent / graph: " + NUM + "x tok/s", table_text, re.M)
    if m:
        f["persistent_vs_graph"] = num(m.group(1))
    m = re.search(r"^  L2 warmed / not warmed: " + NUM + "x tok/s", table_text, re.M)
    if m:
        f["warmed_vs_not"] = num(m.group(1))
    m = re.search(r"^  not measured: (.+)$", table_text, re.M)
    if m:
        f["not_measured"] = m.group(1)
    return f


def server_figures(text):
    """tools/bench/server_parallel.py: the best aggregate tok/s at each --parallel entry (P, or P
    with a setting NAME=VALUE: parallelP_NAME_VALUE_tok_s), the ratios to the smallest P (the
    largest plain P's: ratio; a setting's: ratio_NAME_VALUE), and whether every request's text
    was the same in every run."""
    f = {}
    run = r"^parallel (\d+)(?: (\w+)=(\S+))?: \d+ tokens in [0-9.]+ s: " + NUM + " tok/s aggregate"
    for par, name, value, tps in re.findall(run, text, re.M):
        key = f"parallel{par}" + (f"_{name}_{value}" if name else "") + "_tok_s"
        f[key] = max(f.get(key, 0.0), num(tps))
    for name, value, ratio in re.findall(r"^best: parallel \d+(?: (\w+)=(\S+))? .* = " + NUM + "x$", text, re.M):
        f["ratio" + (f"_{name}_{value}" if name else "")] = num(ratio)
    if re.search(r"^texts: every request's text the same", text, re.M):
        f["texts_equal"] = True
    elif "text(s) differ" in text:
        f["texts_equal"] = False
    return f


def sampler_figures(text):
    f = {}
    for name in ("greedy", "entropix", "combined"):
        m = re.search(r"^%s\s+%s\s+(\S+)" % (name, NUM), text, re.M)
        if m:
            f[name + "_tok_s"] = num(m.group(1))
            f[name + "_sampler_ms_per_token"] = num(m.group(2))
    m = re.search(r"^overhead: decode %s%% slower \(tok/s ratio %s\)" % (NUM, NUM), text, re.M)
    if m:
        f["entropix_slower_pct"], f["entropix_tok_s_ratio"] = num(m.group(1)), num(m.group(2))
    m = re.search(r"^combined: decode %s%% slower \(tok/s ratio %s\)" % (NUM, NUM), text, re.M)
    if m:
        f["combined_slower_pct"], f["combined_tok_s_ratio"] = num(m.group(1)), num(m.group(2))
    m = re.search(r"^queued ahead: greedy %s tok/s, with its steps in turn %s \(ratio %s: %s us a token saved\)"
                  % (NUM, NUM, NUM, NUM), text, re.M)
    if m:
        f["greedy_in_turn_tok_s"], f["queued_ahead_ratio"] = num(m.group(2)), num(m.group(3))
        f["queued_ahead_us_saved"] = num(m.group(4))
    return f


def agents_figures(text):
    f = {}
    m = re.search(r"^pool: (.+)$", text, re.M)
    if m:
        f["pool"] = m.group(1)
    m = re.search(r"^single stream \(greedy\)\s+" + NUM, text, re.M)
    if m:
        f["single_tok_s"] = num(m.group(1))
    for m in re.finditer(r"^(\d+) agents, lookahead (\d+)\s+%s\s+%s" % (NUM, NUM), text, re.M):
        f["agents"] = int(m.group(1))
        f["lookahead%s_tok_s" % m.group(2)] = num(m.group(3))
        f["lookahead%s_vs_single" % m.group(2)] = num(m.group(4))
    m = re.search(r"^\d+ agents, lookahead 1, critic every (\d+)\s+%s\s+%s" % (NUM, NUM), text, re.M)
    if m:
        f["critic_every"] = int(m.group(1))
        f["critic_tok_s"], f["critic_vs_single"] = num(m.group(2)), num(m.group(3))
    m = re.search(r"^critic: (\d+) judgments a run, %s%% of the pool's decode time" % NUM, text, re.M)
    if m:
        f["critic_judgments"], f["critic_share_pct"] = int(m.group(1)), num(m.group(2))
    m = re.search(r"^note: (.+)$", text, re.M)
    if m:
        f["note"] = m.group(1)
    return f


# Criterion --verbose: "[SKIP] suite::test: reason". A --filter disables the tests it leaves out
# ("Test is disabled"); those are not skips. Criterion's synthesis does not count skips at all.
SKIP = re.compile(r"^\[SKIP\] (\S+): (.*)$", re.M)
HARDWARE = re.compile(r"needs \d+ GPUs")  # a test for more GPUs than the machine has


def skipped_tests(text):
    return [(n, r.strip()) for n, r in SKIP.findall(text) if r.strip() != "Test is disabled"]


def tests_figures(text):
    tot = {}
    for m in re.finditer(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)", text):
        for key, v in zip(("tested", "passing", "failing", "crashing"), m.groups()):
            tot[key] = tot.get(key, 0) + int(v)
    skips = skipped_tests(text)
    if tot or skips:
        tot["skipped"] = len(skips)
    if skips:
        tot["skips"] = [f"{n}: {r}" for n, r in skips[:5]]
    return tot


def verdict(kind, text):
    """Why a step whose command exited 0 still fails ("" when it does not): a test filter that ran
    no test, a test skipped for anything but a missing GPU (a missing model or program is the
    run's fault, not the machine's), a compute-sanitizer summary missing or not 0."""
    if kind in ("tests", "sanitizer"):
        if kind == "tests" and not re.search(r"Synthesis: Tested: [1-9]", text):
            return "no test ran (no 'Synthesis: Tested: N' line with N > 0)"
        skips = [(n, r) for n, r in skipped_tests(text) if not HARDWARE.search(r)]
        if skips:
            return f"{len(skips)} test(s) skipped, the first {skips[0][0]}: {skips[0][1]}"
    if kind == "sanitizer":
        sums = re.findall(r"SUMMARY: .*", text)
        if not sums:
            return "no compute-sanitizer summary in the log"
        if any(not x.startswith("SUMMARY: 0 ") for x in sums):
            return "compute-sanitizer reported errors or hazards"
    return ""


def sanitizer_figures(text):
    lines = re.findall(r"(?:ERROR|RACECHECK|SYNCCHECK) SUMMARY: (\d+) (errors?|hazards?)", text)
    return {"summaries": len(lines), "errors": sum(int(n) for n, _ in lines)} if lines else {}


LAB_ROW = re.compile(r"^(\S.*?)\s+\S+\s+\S+\s+(PASS|FAIL)(?:\s+(\S+)\s+(\d+)\s+(\S+)(?:\s+([\d.]+)%)?)?[ \t]*$", re.M)


def lab_figures(text):
    """PASS/FAIL per version, and each version's row: [name, check, time us, bytes, GB/s, % of peak]
    (time "emulated" and GB/s "-" through the emulator; the last column on a GPU only)."""
    rows = [list(m.groups()) for m in LAB_ROW.finditer(text)]
    checks = [r[1] for r in rows]
    return {"versions": len(rows), "pass": checks.count("PASS"), "fail": checks.count("FAIL"),
            "rows": [[r[0], r[1], r[2] or "", r[3] or "", r[4] or "", r[5] or ""] for r in rows]} if rows else {}


def ncu_figures(text):
    """Kernel time per kernel name (nanoseconds), from `ncu --csv --metrics gpu__time_duration.sum`."""
    start = text.find('"ID","Process ID"')
    if start < 0:
        return {}
    scale = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
    per, launches = {}, 0
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = num((row.get("Metric Value") or "").replace(",", ""))
        if v is None:
            continue
        name = re.sub(r"\(.*", "", row.get("Kernel Name") or "?")
        per[name] = per.get(name, 0.0) + v * scale.get(row.get("Metric Unit", "ns"), 1)
        launches += 1
    top = sorted(per.items(), key=lambda kv: -kv[1])[:12]
    return {"launches": launches, "total_us": round(sum(per.values()) / 1e3, 2),
            "top_kernels_us": [[k, round(v / 1e3, 2)] for k, v in top]} if launches else {}


PARSERS = {"speed": speed_figures, "timeline": timeline_figures, "paths": paths_figures, "server": server_figures, "sampler": sampler_figures, "agents": agents_figures, "tests": tests_figures,
           "sanitizer": sanitizer_figures, "lab": lab_figures, "ncu": ncu_figures}


def read_steps(out):
    steps = []
    with open(os.path.join(out, "steps.tsv"), encoding="utf-8", errors="replace") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            s = dict(zip(header, line.rstrip("\n").split("\t")))
            step = {"name": s["name"], "kind": s["kind"], "status": s["status"], "command": s["command"],
                    "timeout_s": int(s["timeout"] or 0), "seconds": int(s["seconds"] or 0),
                    "exit_status": int(s["exit"]) if s["exit"] else None, "log": s["log"] or None,
                    "reason": s["reason"] or None, "figures": {}}
            if step["log"] and s["kind"] in PARSERS:
                with open(os.path.join(out, step["log"]), encoding="utf-8", errors="replace") as lf:
                    step["figures"] = PARSERS[s["kind"]](lf.read())
            steps.append(step)
    return steps


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        # emulated figures are tiny (0.0004 GB/s): significant digits, not 0.00
        return f"{v:.3g}" if 0 < abs(v) < 1 else f"{v:,.{digits}f}"
    return str(v)


def table(md, head, rows):
    if not rows:
        return
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md.append("")


def markdown(rep):
    m, steps = rep["meta"], rep["steps"]
    n = {k: sum(s["status"] == k for s in steps) for k in ("pass", "FAIL", "skipped")}
    md = [f"# First run: {m.get('device', '?')}", ""]
    md.append(f"Mode **{m.get('mode')}**, started {m.get('started')} on {m.get('host')}, commit "
              f"`{m.get('commit')}`, {m.get('gpus')} GPU(s), budget {m.get('budget_min')} min. "
              f"Steps: {n['pass']} passed, {n['FAIL']} FAILED, {n['skipped']} skipped; "
              f"{rep['seconds']} s of steps.")
    if m.get("mode") == "emulated":
        md.append("Emulated: every figure below is an emulation timing, not a GPU timing.")
    md.append("")
    md.append("## Steps")
    md.append("")
    table(md, ["#", "step", "status", "time (s)", "why / note", "log"],
          [[str(i + 1), f"`{s['name']}`", s["status"], str(s["seconds"]), s["reason"] or "",
            f"[{s['log']}]({s['log']})" if s["log"] else ""] for i, s in enumerate(steps)])
    by = lambda kind: [s for s in steps if s["kind"] == kind and s["figures"]]
    f = lambda s, k, d=2: fmt(s["figures"].get(k), d)
    if any(s["figures"] for s in steps):
        md += ["## Figures", ""]
    table(md, ["bench speed", "pp tok/s", "tg tok/s", "ms/token", "GB/s", "of peak %", "launches/step"],
          [[s["name"], f(s, "prefill_tok_s"), f(s, "decode_tok_s"), f(s, "decode_ms_per_token", 3),
            f(s, "achieved_gbps"), f(s, "of_peak_pct"), f(s, "launches_per_step", 0)] for s in by("speed")])
    for s in by("timeline"):  # one token's phases (docs/cuda.md: "Where a token's time goes")
        phases = s["figures"].get("phases", [])
        barrier = any(p[6] is not None for p in phases)  # the persistent kernel's: each phase's barrier
        table(md, [f"{s['name']}: phase", "µs/token", "share %", "bytes/token", "µs at peak", "of bound %"]
              + (["barrier µs"] if barrier else []),
              [[p[0], fmt(p[1]), fmt(p[2], 1), str(p[3]), fmt(p[4]), fmt(p[5], 1)] + ([fmt(p[6])] if barrier else [])
               for p in phases]
              + [["graph step, wall clock", f(s, "graph_us_per_token"), "", "", "", ""] + ([""] if barrier else [])])
    table(md, ["decode paths", "graph µs/token", "persistent µs/token", "persistent / graph", "persistent of bound %",
               "not warmed µs/token", "warmed / not", "persistent path"],
          [[s["name"], f(s, "graph_us_per_token"), f(s, "persistent_us_per_token"), f(s, "persistent_vs_graph", 3),
            f(s, "persistent_of_bound_pct", 1), f(s, "persistent_cold_us_per_token"), f(s, "warmed_vs_not", 3),
            s["figures"].get("persistent_path") or s["figures"].get("not_measured", "-")]
           for s in by("paths")])
    table(md, ["server slots", "1 slot tok/s", "most slots tok/s", "ratio", "texts equal", "with a setting: ratio"],
          [[s["name"], f(s, "parallel1_tok_s"),
            fmt(max((v for k, v in s["figures"].items() if re.fullmatch(r"parallel\d+_tok_s", k) and
                     k != "parallel1_tok_s"), default=None)),
            f(s, "ratio"), fmt({True: "yes", False: "NO"}.get(s["figures"].get("texts_equal"))),
            "; ".join(f"{k[6:]} {v:.2f}" for k, v in s["figures"].items() if k.startswith("ratio_")) or "-"]
           for s in by("server")])
    table(md, ["bench sampler", "greedy tok/s", "entropix tok/s", "entropix slower %", "combined tok/s",
               "combined slower %", "greedy, steps in turn tok/s", "queued ahead: ratio", "us a token saved"],
          [[s["name"], f(s, "greedy_tok_s"), f(s, "entropix_tok_s"), f(s, "entropix_slower_pct", 1),
            f(s, "combined_tok_s"), f(s, "combined_slower_pct", 1), f(s, "greedy_in_turn_tok_s"), f(s, "queued_ahead_ratio", 3), f(s, "queued_ahead_us_saved", 2)]
           for s in by("sampler")])
    table(md, ["bench agents", "pool", "single tok/s", "lookahead 1 tok/s", "vs single", "lookahead 4 tok/s",
               "vs single", "critic tok/s", "vs single", "critic share %"],
          [[s["name"], f(s, "pool"), f(s, "single_tok_s"), f(s, "lookahead1_tok_s"), f(s, "lookahead1_vs_single", 3),
            f(s, "lookahead4_tok_s"), f(s, "lookahead4_vs_single", 3), f(s, "critic_tok_s"),
            f(s, "critic_vs_single", 3), f(s, "critic_share_pct", 1)] for s in by("agents")])
    table(md, ["tests", "tested", "passing", "failing", "crashing", "skipped"],
          [[s["name"]] + [f(s, k) for k in ("tested", "passing", "failing", "crashing", "skipped")]
           for s in by("tests")])
    table(md, ["compute-sanitizer", "summaries", "errors / hazards"],
          [[s["name"], f(s, "summaries"), f(s, "errors")] for s in by("sanitizer")])
    table(md, ["kernel lab", "versions", "PASS", "FAIL"],
          [[s["name"], f(s, "versions"), f(s, "pass"), f(s, "fail")] for s in by("lab")])
    # every version's time, naive first (docs/kernel-lab.md, "Timings on a GPU")
    table(md, ["kernel lab timings", "version", "check", "time (µs)", "bytes", "GB/s", "of peak %"],
          [[s["name"][len("lab-"):], v[0], v[1], v[2], v[3], v[4], v[5]]
           for s in by("lab") for v in s["figures"].get("rows", [])])
    for s in by("ncu"):
        table(md, [f"ncu: kernel ({s['figures']['launches']} launches)", "total µs"],
              [[f"`{k}`", fmt(v)] for k, v in s["figures"]["top_kernels_us"]])
    return "\n".join(md) + "\n"


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--verdict":
        # report.py --verdict KIND LOG: the step's reason to fail, printed (nothing: it passes)
        with open(sys.argv[3], encoding="utf-8", errors="replace") as f:
            print(verdict(sys.argv[2], f.read()))
        return 0
    if len(sys.argv) != 2:
        print("report: usage: report.py OUT_DIR | report.py --verdict KIND LOG", file=sys.stderr)
        return 2
    out = sys.argv[1]
    meta = {}
    with open(os.path.join(out, "meta.txt"), encoding="utf-8") as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            meta[k] = v
    meta["gpus"] = int(meta.get("gpus") or 0)
    meta["steps_planned"] = int(meta.get("steps_planned") or 0)
    steps = read_steps(out)
    # complete: every planned step has ended (a run still going, or killed, has not)
    rep = {"meta": meta, "ok": all(s["status"] != "FAIL" for s in steps),
           "complete": len(steps) == meta["steps_planned"],
           "seconds": sum(s["seconds"] for s in steps), "steps": steps}
    write(os.path.join(out, "report.json"), json.dumps(rep, indent=1) + "\n")
    write(os.path.join(out, "report.md"), markdown(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
