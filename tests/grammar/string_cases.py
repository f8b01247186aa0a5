#!/usr/bin/env python3
"""string_cases.py — the expectations of tests/test_json_schema_pattern.c, from Python's standard
library (seeded: the same lines every run):

    string_cases.py   # one line per case: SCHEMA_JSON <TAB> STRING_JSON <TAB> 0|1

SCHEMA_JSON is {"type": "string", "pattern": P} or {"type": "string", "format": F}; STRING_JSON
a test string as json.dumps writes it (ensure_ascii=False: raw non-ASCII, \\" \\\\ \\n and
\\u00XX escapes), which the schema's grammar must accept (as a whole JSON value) exactly when the
last field is 1: re.search finds P in the string; the string is F (date: jsonschema's check,
a YYYY-MM-DD shape and date.fromisoformat; time and date-time: RFC 3339's shape and ranges and
datetime.fromisoformat, which also refuses leap seconds; uuid: jsonschema's check; ipv4:
ipaddress.IPv4Address, jsonschema's check).

The patterns are ECMA-262 (JSON Schema's dialect); Python reads them with re.ASCII (\\d \\w \\s
ASCII, as ECMA-262's \\d \\w) after two rewrites where the dialects differ: `.` (outside a
class) becomes [^\\n\\r\\u2028\\u2029] (ECMA-262's `.` leaves out \\r too) and `$` becomes \\Z
(Python's `$` also matches before a final newline). The strings avoid the characters the
dialects' \\s disagree on (U+001C-U+001F, U+0085, U+00A0, U+FEFF, ...).
"""
import datetime
import ipaddress
import json
import random
import re
import uuid

PATTERNS = [
    ("abc", ["abc", "xxabcxx"]),
    ("^abc", ["abc", "abcd"]),
    ("abc$", ["abc", "zabc"]),
    ("^abc$", ["abc"]),
    ("^a|b$", ["a", "ab", "xb"]),
    ("^(a|bc)+$", ["abca", "bcbc"]),
    ("^[a-c]{2,3}$", ["ab", "cab"]),
    ("^[^a-c]*$", ["xyz", ""]),
    ("x*", ["", "q"]),
    ("^x?y{2}z{1,}$", ["yyz", "xyyzzz"]),
    ("^\\d{3}-\\d{4}$", ["555-1234"]),
    ("\\w+@\\w+\\.com", ["a@b.com", "x a_1@Z9.com y"]),
    ("^\\s*$", ["", " \t\n"]),
    ("^\\S+$", ["a\"b", "\\x\u00e9"]),
    ("^[\\s\\S]{0,3}$", ["a\n\u65e5", ""]),
    ("^[^\\s]+$", ["ab", "\u00e9\u65e5"]),
    ("^[^\\S]*$", [" ", "\t\n\r"]),
    ("\"", ["a\"b", "\""]),
    ("\\\\", ["a\\b"]),
    ("^[\"\\\\]+$", ["\"\\\"", "\\"]),
    ("^a\\nb$", ["a\nb"]),
    ("[\\x00-\\x1f]", ["a\x01", "\n", "\x08"]),
    ("^\\t", ["\tx"]),
    ("^.$", ["a", "\u00e9", "\U0001F600"]),
    ("^..$", ["ab", "\"\\"]),
    ("^.*\u00e9.*$", ["caf\u00e9", "\u00e9"]),
    ("^[^\u00e9]+$", ["cafe"]),
    ("\u65e5", ["\u65e5\u672c"]),
    ("^[\\u00e0-\\u00ff]+$", ["\u00e9\u00e8"]),
    ("^(?:ab|cd)*$", ["", "abcdab"]),
    ("^(a(b(c)?)?)?$", ["", "a", "ab", "abc"]),
    ("^[-+]?\\d+(\\.\\d+)?$", ["-1.5", "42", "+0.25"]),
    ("^[A-Z][a-z]*( [A-Z][a-z]*)*$", ["Ada Lovelace", "Z"]),
    ("\\/", ["a/b"]),
    ("^[/]$", ["/"]),
    ("^\\.$", ["."]),
    ("^\\x41\\u0042$", ["AB"]),
    ("^\\0$", ["\x00"]),
    ("^[\\b]$", ["\x08"]),
    ("^a{0}b$", ["b"]),
    ("^(ab){2}$", ["abab"]),
    ("^[a-]+$", ["a-a", "-"]),
    ("^[\\d.]+$", ["1.2.3"]),
    ("^[^\\d\\s]+$", ["abc", "\u00e9x"]),
    ("(x|y)z|^w", ["xz", "wq", "ayz"]),
    ("\U0001F600", ["a\U0001F600"]),
    ("^[\U0001F600-\U0001F602]$", ["\U0001F601"]),
    ("a}b", ["a}b"]),
    ("a]b", ["a]b"]),
    ("^\\w+$", ["abc_9"]),
    ("^\\W+$", ["-\u00e9 ", "\"\\"]),
    ("^\\D$", ["a", "\u00e9"]),
    ("^[\\w-]+(\\.[\\w-]+)*$", ["a.b-c", "x"]),
    ("^(\\([0-9]{3}\\) |[0-9]{3}-)[0-9]{3}-[0-9]{4}$", ["(555) 555-1234", "555-555-1234"]),
    ("^$", [""]),
    ("|x", ["", "a"]),
    ("^(|a)b$", ["b", "ab"]),
]

BASE = list("abcxyzAZ019_-.@/ ") + ["\"", "\\", "\n", "\t", "\r", "\x01", "\x08", "\u00e9", "\u65e5", "\U0001F600"]


def to_python(pat):
    """ECMA-262 `.` and `$` as Python reads them (see the docstring)."""
    out, i, in_class = [], 0, False
    while i < len(pat):
        c = pat[i]
        if c == "\\":
            out.append(pat[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == ".":
            c = "[^\\n\\r\\u2028\\u2029]"
        elif c == "$":
            c = "\\Z"
        out.append(c)
        i += 1
    return "".join(out)


def strings(rng, pat, positives):
    alphabet = BASE + [c for c in pat if c not in "\\^$|()[]{}*+?"]
    out = set(positives)
    for p in positives:  # near misses: one character deleted, inserted or replaced
        for _ in range(25):
            k = rng.randrange(len(p) + 1)
            op = rng.randrange(3)
            if op == 0 and p:
                k = min(k, len(p) - 1)
                out.add(p[:k] + p[k + 1:])
            elif op == 1:
                out.add(p[:k] + rng.choice(alphabet) + p[k:])
            elif p:
                k = min(k, len(p) - 1)
                out.add(p[:k] + rng.choice(alphabet) + p[k + 1:])
    for _ in range(120):
        out.add("".join(rng.choice(alphabet) for _ in range(rng.randrange(7))))
    return sorted(out)


_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-](\d\d):(\d\d))", re.ASCII)


def rfc3339_time(t):
    """RFC 3339 full-time (upper-case Z), as datetime reads it (no leap second)."""
    m = _TIME.fullmatch(t)
    if not m or int(m[1]) > 23 or int(m[2]) > 59 or (m[6] and (int(m[6]) > 23 or int(m[7]) > 59)):
        return False
    try:
        datetime.time.fromisoformat(t)
        return True
    except ValueError:
        return False


def rfc3339_date(d):
    try:
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d, re.ASCII)) and bool(datetime.date.fromisoformat(d))
    except ValueError:
        return False


def rfc3339_date_time(s):
    return len(s) > 11 and s[10] == "T" and rfc3339_date(s[:10]) and rfc3339_time(s[11:])


def is_uuid(s):
    try:
        uuid.UUID(s)
    except ValueError:
        return False
    return all(len(s) > p and s[p] == "-" for p in (8, 13, 18, 23))


def is_ipv4(s):
    try:
        ipaddress.IPv4Address(s)
        return True
    except ValueError:
        return False


def format_strings(rng):
    years = ["0000", "0001", "0004", "0100", "0400", "1900", "2000", "2023", "2024", "9999"]
    dates = [f"{y}-{m:02d}-{d:02d}" for y in years for m in range(14) for d in range(33)]
    dates += ["2024-1-01", "20240101", "2024-01-1", "2024-01-01T", "12024-01-01", "2024/01/01", ""]
    times = []
    for _ in range(1500):
        hh = rng.choice(["00", "09", "19", "23", "24", "25", "9"])
        mm = rng.choice(["00", "07", "59", "59", "60"])
        ss = rng.choice(["00", "30", "59", "59", "60", "61"])
        frac = rng.choice(["", "", ".5", ".123456", ".123456789", "."])
        off = rng.choice(["Z", "Z", "+00:00", "-23:59", "+13:30", "+24:00", "+05:60", "", "+0500", "+5:00"])
        times.append(f"{hh}:{mm}:{ss}{frac}{off}")
    date_times = [rng.choice(dates[:4620]) + "T" + rng.choice(times) for _ in range(1500)]
    date_times += ["2024-02-29 12:00:00Z", "2024-02-29t12:00:00Z", "2024-02-29T12:00:00"]
    hexd = "0123456789abcdefABCDEF"
    uuids = []
    for _ in range(200):
        parts = [8, 4, 4, 4, 12]
        if rng.random() < 0.3:
            parts[rng.randrange(5)] += rng.choice([-1, 1])
        u = "-".join("".join(rng.choice(hexd) for _ in range(n)) for n in parts)
        if rng.random() < 0.1:
            u = u.replace("-", "")
        if rng.random() < 0.1:
            k = rng.randrange(len(u))
            u = u[:k] + "g" + u[k + 1:]
        uuids.append(u)
    octets = ["0", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255", "256", "300", "01", "00", "", "1000"]
    ips = [".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 4, 4, 5]))) for _ in range(400)]
    return [("date", dates, rfc3339_date), ("time", times, rfc3339_time), ("date-time", date_times, rfc3339_date_time),
            ("uuid", uuids, is_uuid), ("ipv4", ips, is_ipv4)]


def emit(schema, s, hit):
    print(f"{json.dumps(schema, ensure_ascii=False)}\t{json.dumps(s, ensure_ascii=False)}\t{1 if hit else 0}")


def main():
    rng = random.Random(7)
    for pat, positives in PATTERNS:
        rx = re.compile(to_python(pat), re.ASCII)
        for p in positives:
            assert rx.search(p), (pat, p)
        for s in strings(rng, pat, positives):
            emit({"type": "string", "pattern": pat}, s, rx.search(s))
    for fmt, cases, check in format_strings(rng):
        for s in sorted(set(cases)):
            emit({"type": "string", "format": fmt}, s, check(s))


if __name__ == "__main__":
    main()
