#!/usr/bin/env python3
"""check_layers.py — the folder layers and the size limits, checked (`make check-layers`).

    python3 tools/check_layers.py                 # check; exit 1 with each offence on failure
    python3 tools/check_layers.py --write-allow   # rewrite tools/layer_limits_allow.txt with
                                                  # today's offenders at today's sizes

(a) Includes. Every quoted #include of every source file (*.c *.h *.cu *.cuh *.cpp, tracked or
    untracked-but-not-ignored, outside tests/data) must resolve as the compilers resolve it: beside
    the including file, else from the repository root (the one -I.); files under tests/cuda_emu
    also see the emulator's tests/cuda_emu/include. The top-level folder of the included file must
    not be above the includer's in LAYERS (base <- tokenizer <- sampler <- kernels <- runtime <-
    tools <- tests): the arrows point one way, so there is no cycle between them. Inside each
    folder but tests/, its subfolders (runtime/cpu, runtime/pool, ...) must include each other
    without a cycle. Outside tests/, an include is written from the root ("kernels/common.cuh",
    not "common.cuh" beside the file), in .cu and .cuh files as in .c and .h: a reader finds the
    file from the line alone.
(b) Sizes. No source file over MAX_FILE_LINES lines, and no function over MAX_FUNC_LINES lines
    outside tests/, unless tools/layer_limits_allow.txt lists it at a size it has not outgrown.
    Function lengths come from a brace-matching scan, not a parser: comments, string and character
    literals and preprocessor lines are blanked; at brace depth 0 (extern "C" and namespace
    blocks do not count as depth), a '{' whose preceding code ends in ')' (optionally followed by
    const / noexcept / override / an __attribute__) opens a function body; its name is the
    identifier before the matching '('; its length is the lines from the line of that name to the
    line of the closing '}', both included. Initialisers (`= {`: tables), struct/enum bodies and
    control statements at depth 0 (there are none in C) are not functions.
(c) Error messages (outside tests/). A message reaches a caller's (err, errlen) through
    emx_seterr / emx_vseterr (base/errmsg.h), never a snprintf of its own into err; the format
    (its adjacent string literals joined) is one line (no \n), does not start with a capital
    unless an acronym does ("GGUF", "CUDA"), and does not end in a period.
(d) Circles between files (outside tests/). A module (a .c or .cu with its .h of the same name)
    needs another when its code names a function the other's code defines outside any `static`
    (a call, or a pointer to it in a table; a name after `.` or `->` is a field, not a use), within
    one top folder, so runtime/forward.c and runtime/cpu/forward_cpu.c count. Every set of modules
    that need each other round a circle (a strongly connected component of that graph) is
    reported, with the names that link them; one that is not within a `circle` line of
    tools/layer_limits_allow.txt fails.
"""
import os
import re
import subprocess
import sys

LAYERS = ["base", "tokenizer", "sampler", "kernels", "runtime", "api", "tools", "tests"]
MAX_FILE_LINES = 700
MAX_FUNC_LINES = 100
SRC_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
ALLOW = "tools/layer_limits_allow.txt"
CIRCLES_HEADING = "# Circles between files"
EMU_INCLUDE = "tests/cuda_emu/include"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sources():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         check=True, capture_output=True, text=True).stdout
    return sorted(p for p in set(out.split("\0"))
                  if p.endswith(SRC_EXT) and not p.startswith("tests/data/") and os.path.isfile(p))


def resolve(path, target):
    cands = [os.path.join(os.path.dirname(path), target), target]
    if path.startswith("tests/cuda_emu/"):
        cands.append(os.path.join(EMU_INCLUDE, target))
    for c in cands:
        c = os.path.normpath(c)
        if os.path.isfile(c):
            return c
    return None


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def find_cycle(graph):
    """A cycle in {node: {node: edge}} as a list of nodes, or None."""
    color, stack = {}, []

    def dfs(u):
        color[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, {})):
            if color.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if color.get(v) is None:
                c = dfs(v)
                if c:
                    return c
        stack.pop()
        color[u] = 2
        return None

    for u in sorted(graph):
        if color.get(u) is None:
            c = dfs(u)
            if c:
                return c
    return None


def check_includes(paths):
    errors, n_inc = [], 0
    subgraph = {}  # top folder -> {subfolder: {subfolder: "file:line: #include"}}
    for p in paths:
        top = p.split("/")[0]
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE_RE.finditer(text):
            n_inc += 1
            where = f"{p}:{line_of(text, m.start())}: #include \"{m.group(1)}\""
            dep = resolve(p, m.group(1))
            if dep is None:
                if top in LAYERS:
                    errors.append(f"{where}: not found beside the file nor from the repository root")
                continue
            dtop = dep.split("/")[0]
            if top in LAYERS and top != "tests" and os.path.normpath(m.group(1)) != dep:
                errors.append(f"{where}: write it from the repository root (\"{dep}\")")
            if top in LAYERS and dtop in LAYERS and LAYERS.index(dtop) > LAYERS.index(top):
                errors.append(f"{where}: {top}/ may not include {dtop}/ (layers: {' <- '.join(LAYERS)})")
            if top in LAYERS and top != "tests" and dtop == top:
                a, b = os.path.dirname(p), os.path.dirname(dep)
                if a != b:
                    subgraph.setdefault(top, {}).setdefault(a, {}).setdefault(b, where)
    for top, g in sorted(subgraph.items()):
        cyc = find_cycle(g)
        if cyc:
            errors.append(f"{top}/: subfolder cycle {' -> '.join(cyc)}: "
                          + "; ".join(g[a][b] for a, b in zip(cyc, cyc[1:])))
    return errors, n_inc


TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
PREPROC = re.compile(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', re.M)


def blank(text):
    """Comments, string/char literals and preprocessor lines replaced by spaces (newlines kept)."""
    spaces = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    return PREPROC.sub(spaces, TOKENS.sub(spaces, text))


SIG_END = re.compile(r"\)\s*(?:(?:const|noexcept|override|final)\b\s*|__attribute__\s*\(\(.*?\)\)\s*)*$", re.S)
TRANSPARENT = re.compile(r'(?:extern\s*"\s*"|namespace(?:\s+\w+)?)\s*$')


def functions(text):
    """[(name, first line, last line)] of the function definitions in C/C++/CUDA source text."""
    code = blank(text)
    res, depth, i, n = [], 0, 0, len(code)
    transparent = []  # depths at which an extern "C" / namespace block opened
    while i < n:
        c = code[i]
        if c == "{" and depth == 0:
            before = code[max(0, i - 2000):i]
            if TRANSPARENT.search(before):
                transparent.append(depth)
                i += 1
                continue
            if SIG_END.search(before):
                close = before.rfind(")")
                # the matching '(' of the parameter list
                d, k = 0, close
                while k >= 0:
                    if before[k] == ")":
                        d += 1
                    elif before[k] == "(":
                        d -= 1
                        if d == 0:
                            break
                    k -= 1
                m = re.search(r"([A-Za-z_]\w*(?:::[A-Za-z_~]\w*)*)\s*$", before[:max(k, 0)])
                # the body: to the matching '}'
                d, j = 0, i
                while j < n:
                    if code[j] == "{":
                        d += 1
                    elif code[j] == "}":
                        d -= 1
                        if d == 0:
                            break
                    j += 1
                if m and m.group(1) not in ("if", "for", "while", "switch", "return", "sizeof"):
                    start = i - len(before) + m.start(1)
                    res.append((m.group(1), line_of(code, start), line_of(code, j)))
                i = j + 1
                continue
            depth += 1
        elif c == "{":
            depth += 1
        elif c == "}":
            if transparent and depth == 0:
                transparent.pop()
            else:
                depth -= 1
        i += 1
    return res


IDENT = re.compile(r"[A-Za-z_]\w*")
CODE_EXT = (".c", ".cu", ".cpp")


def module_of(path):
    """The module a source file belongs to: its path without the extension."""
    return os.path.splitext(path)[0]


def external_functions(text):
    """Names of the functions text defines outside any `static`."""
    code = blank(text)
    lines = code.split("\n")
    out = set()
    for name, first, _ in functions(text):
        line = lines[first - 1]
        at = re.search(r"\b" + re.escape(name) + r"\s*\(", line)
        before = "\n".join(lines[max(0, first - 4):first - 1] + [line[:at.start() if at else len(line)]])
        if not re.search(r"\bstatic\b", re.split(r"[;{}]", before)[-1]):
            out.add(name)
    return out


def module_graph(paths):
    """{module: {module: why}}: which module needs which (d), outside tests/."""
    defines, uses, owner, graph = {}, {}, {}, {}
    for p in paths:
        if p.startswith("tests/") or not p.endswith(CODE_EXT):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        defines[p] = {name for name, _, _ in functions(text)}
        for name in external_functions(text):
            owner.setdefault(name, set()).add(p)
        code = re.sub(r"(?:\.|->)\s*[A-Za-z_]\w*", " ", blank(text))  # fields out
        uses[p] = set(IDENT.findall(code))
    for p, names in sorted(uses.items()):
        for name in sorted(names - defines[p] - {"main"}):
            for q in sorted(owner.get(name, ())):
                if q.split("/")[0] == p.split("/")[0] and module_of(q) != module_of(p):
                    graph.setdefault(module_of(p), {}).setdefault(module_of(q), f"{p} names {name} ({q})")
    return graph


def circles(graph):
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def check_circles(paths, allowed):
    """(d): (failures, reports, count) over the module graph; allowed: [set of modules]."""
    graph = module_graph(paths)
    fails, reports, found = [], [], circles(graph)
    for comp in found:
        why = "; ".join(graph[a][b] for a in comp for b in comp if b in graph.get(a, {}))
        line = f"circle between {', '.join(comp)}: {why}"
        if any(set(comp) <= a for a in allowed):
            reports.append(line)
        else:
            fails.append(f"{line} (not in a `circle` line of {ALLOW})")
    return fails, reports, len(found)


ERRMSG_HOME = "base/errmsg.h"
OWN_SNPRINTF = re.compile(r"\bv?snprintf\s*\(\s*err\s*,\s*errlen\s*,")
SETERR_FMT = re.compile(r'\bemx_v?seterr\s*\([^;"]*?,[^;"]*?,\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def check_errmsgs(paths):
    """(c): offences as strings, and the number of emx_seterr formats checked."""
    errors, n = [], 0
    for p in paths:
        if p.startswith("tests/") or p == ERRMSG_HOME:
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in OWN_SNPRINTF.finditer(text):
            errors.append(f"{p}:{line_of(text, m.start())}: writes err with its own snprintf (use emx_seterr, {ERRMSG_HOME})")
        for m in SETERR_FMT.finditer(text):
            n += 1
            fmt = "".join(LITERAL.findall(m.group(1)))
            where = f"{p}:{line_of(text, m.start())}: error message \"{fmt[:40]}\""
            if "\\n" in fmt:
                errors.append(f"{where} has a newline (one line per message)")
            if re.match(r"[A-Z](?![A-Z0-9_])", fmt):
                errors.append(f"{where} starts with a capital")
            if fmt.endswith(".") and not fmt.endswith("..."):
                errors.append(f"{where} ends in a period")
    return errors, n


def read_allow():
    allow = {}
    if os.path.isfile(ALLOW):
        with open(ALLOW, encoding="utf-8") as f:
            for ln in f:
                ln = ln.split("#", 1)[0].split()
                if len(ln) == 3 and ln[0] in ("file", "function"):
                    allow[(ln[0], ln[1])] = int(ln[2])
    return allow


def read_allowed_circles():
    """[set of modules] from the `circle a b ...` lines of ALLOW."""
    out = []
    if os.path.isfile(ALLOW):
        with open(ALLOW, encoding="utf-8") as f:
            for ln in f:
                ln = ln.split("#", 1)[0].split()
                if len(ln) >= 3 and ln[0] == "circle":
                    out.append({module_of(m) for m in ln[1:]})
    return out


def measure(paths):
    """{("file", path) or ("function", path:name): lines} over the limits."""
    over, n_funcs = {}, 0
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            over[("file", p)] = lines
        if p.startswith("tests/"):
            continue
        for name, a, b in functions(text):
            n_funcs += 1
            key = ("function", f"{p}:{name}")
            if b - a + 1 > MAX_FUNC_LINES:
                over[key] = max(over.get(key, 0), b - a + 1)
    return over, n_funcs


def write_allow(over):
    kept_circle_lines = ""  # the circle section is written by hand: kept as it is
    if os.path.isfile(ALLOW):
        with open(ALLOW, encoding="utf-8") as f:
            text = f.read()
        at = text.find(CIRCLES_HEADING)
        kept_circle_lines = text[at:] if at >= 0 else ""
    with open(ALLOW, "w", encoding="utf-8") as f:
        f.write(f"# tools/layer_limits_allow.txt — source files over {MAX_FILE_LINES} lines and functions over\n"
                f"# {MAX_FUNC_LINES} lines (outside tests/) that tools/check_layers.py lets pass at no more than the\n"
                "# size given: each is to be split, and then its line goes. A listed one that grows fails.\n"
                "# Regenerate (after a split, or to accept a size): python3 tools/check_layers.py --write-allow\n")
        for (kind, what), n in sorted(over.items()):
            f.write(f"{kind} {what} {n}\n")
        f.write(kept_circle_lines)


def main():
    paths = sources()
    errors, n_inc = check_includes(paths)
    over, n_funcs = measure(paths)
    msg_errors, n_msgs = check_errmsgs(paths)
    errors += msg_errors
    circle_fails, circle_reports, n_circles = check_circles(paths, read_allowed_circles())
    errors += circle_fails
    if "--write-allow" in sys.argv[1:]:
        write_allow(over)
        print(f"check_layers: wrote {ALLOW} ({len(over)} entries)")
        allow = over
    else:
        allow = read_allow()
    for key, n in sorted(over.items()):
        limit = MAX_FILE_LINES if key[0] == "file" else MAX_FUNC_LINES
        if key not in allow:
            errors.append(f"{key[0]} {key[1]}: {n} lines, over {limit} and not in {ALLOW}")
        elif n > allow[key]:
            errors.append(f"{key[0]} {key[1]}: {n} lines, grew past its allowed {allow[key]} ({ALLOW})")
    notes = [f"{k[0]} {k[1]}: now within the limit or gone: remove its line from {ALLOW}"
             for k in sorted(allow) if k not in over]
    print(f"check_layers: {len(paths)} source files, {n_inc} quoted includes checked against the layers "
          f"{' <- '.join(LAYERS)} and for subfolder cycles; {n_funcs} functions outside tests/ and every "
          f"file against {MAX_FUNC_LINES}/{MAX_FILE_LINES} lines; {len(over)} over, all allowed; "
          f"{n_msgs} error message formats"
          if not any(e.startswith(("file ", "function ")) for e in errors) else
          f"check_layers: {len(paths)} source files, {n_inc} includes, {n_funcs} functions checked")
    for n in notes:
        print("check_layers: note:", n)
    print(f"check_layers: {n_circles} circles between files, {len(circle_reports)} of them allowed "
          f"(the `circle` lines of {ALLOW})")
    for r in circle_reports:
        print("check_layers: allowed:", r)
    for e in errors:
        print("check_layers: FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
