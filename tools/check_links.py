#!/usr/bin/env python3
"""check_links.py — the documentation's links, checked (`make check-links`).

    python3 tools/check_links.py               # check; exit 1 with one line per broken link
    python3 tools/check_links.py --self-test   # show that the checker catches what it should

Checked files: README.md and docs/*.md (tracked or untracked-but-not-ignored).
(a) Links. Every relative link, markdown `[text](target)`, image `![alt](target)` or reference
    definition `[label]: target`, outside fenced code blocks and inline code, must name a file or
    folder that exists inside the repository (a link to ../shared or above the root is broken:
    a reader of the repository does not have it). URLs with a scheme (https:, mailto:) are not
    fetched.
(b) Anchors. `target#anchor` (or `#anchor` alone, for the same file) into a markdown file must
    be the slug of one of its headings as GitHub makes it: the heading's text without markdown
    (code ticks, emphasis, link targets), lower-cased, every character that is not a letter,
    digit, '_', '-' or space dropped, spaces turned into '-'; the second heading with the same
    slug gets '-1', the third '-2'. An explicit `<a name="x">` / `id="x"` counts too.
(c) Size. README.md is the front door: at most README_MAX bytes; the rest belongs in docs/.
"""
import os
import re
import subprocess
import sys
import tempfile

README_MAX = 12000  # 12 KB, as the reader's front door is promised
FENCE_RE = re.compile(r"^\s*(```|~~~)")
HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE_RE = re.compile(r"(`+)(.+?)\1")
LINK_RE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR_RE = re.compile(r"<a\s[^>]*(?:name|id)\s*=\s*\"([^\"]+)\"", re.I)
SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files(root):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z",
                          "--", "README.md", "docs/*.md"],
                         cwd=root, check=True, capture_output=True, text=True).stdout
    return sorted(p for p in set(out.split("\0")) if p and os.path.isfile(os.path.join(root, p)))


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for i, line in enumerate(text.split("\n"), 1):
        m = FENCE_RE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield i, line


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)                       # inline HTML tags
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for _, line in prose_lines(text):
        for name in HTML_ANCHOR_RE.findall(line):
            out.add(name)
        m = HEADING_RE.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def links(text):
    """(line number, target) of every link outside code. A link's text may span lines, so the
    links are found in the whole prose (code blocks and inline code blanked, lines kept)."""
    lines = text.split("\n")
    prose = [""] * len(lines)
    for no, line in prose_lines(text):
        m = REFDEF_RE.match(line)
        if m:
            yield no, m.group(1)
            continue
        prose[no - 1] = INLINE_CODE_RE.sub(lambda c: " " * len(c.group(0)), line)
    bare = "\n".join(prose)
    for lm in LINK_RE.finditer(bare):
        yield bare.count("\n", 0, lm.start()) + 1, lm.group(1)


def check_file(root, rel, cache):
    errors = []
    path = os.path.join(root, rel)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    real_root = os.path.realpath(root)
    for no, target in links(text):
        if not target or SCHEME_RE.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        if file_part:
            dest = os.path.realpath(os.path.join(os.path.dirname(path), file_part))
            if dest != real_root and not dest.startswith(real_root + os.sep):
                errors.append("%s:%d: link '%s' leaves the repository" % (rel, no, target))
                continue
            if not os.path.exists(dest):
                errors.append("%s:%d: link '%s': no such file" % (rel, no, target))
                continue
        else:
            dest = os.path.realpath(path)
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if dest not in cache:
                with open(dest, encoding="utf-8") as f:
                    cache[dest] = anchors(f.read())
            if anchor not in cache[dest]:
                errors.append("%s:%d: link '%s': %s has no heading '#%s'"
                              % (rel, no, target, os.path.relpath(dest, real_root), anchor))
    return errors


def check(root):
    errors, cache = [], {}
    for rel in doc_files(root):
        errors += check_file(root, rel, cache)
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme) and os.path.getsize(readme) > README_MAX:
        errors.append("README.md: %d bytes, more than %d: move detail into docs/"
                      % (os.path.getsize(readme), README_MAX))
    return errors


def self_test():
    """A scratch repository with one good and each kind of bad link: every bad one must be
    reported, the good ones not."""
    good = ("[a](docs/b.md) [b](docs/b.md#two-words) [c](docs/b.md#two-words-1) [d](#top) "
            "![img](docs/) [e](docs/b.md#running-run) [f](https://example.com/x.md#nope) "
            "`[code](nowhere.md)` [g](docs/b.md#named)\n\n[ref]: docs/b.md#snake_case\n")
    bad = {"nowhere.md": "no such file", "../outside.md": "leaves the repository",
           "split-text.md": "no such file",
           "docs/b.md#missing": "has no heading", "#not-here": "has no heading",
           "docs/b.md#two-words-2": "has no heading"}
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "init", "-q", d], check=True)
        os.mkdir(os.path.join(d, "docs"))
        with open(os.path.join(d, "docs", "b.md"), "w") as f:
            f.write("# Top\n## Two words\n## Two `words`\n## Running: `./run`\n"
                    "## snake_case\n<a name=\"named\"></a>\n```\n# Not a heading\n```\n")
        body = "# Top\n" + good + "".join("[x](%s)\n" % t for t in bad if t != "split-text.md")
        body += "[a link's text\nover two lines](split-text.md)\n"
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write(body)
        errors = check(d)
        failures = []
        for target, why in bad.items():
            if not any("'%s'" % target in e and why in e for e in errors):
                failures.append("not reported: %s (%s)" % (target, why))
        if len(errors) != len(bad):
            failures.append("expected %d errors, got: %s" % (len(bad), errors))
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write("x" * (README_MAX + 1))
        if not any("more than %d" % README_MAX in e for e in check(d)):
            failures.append("an oversized README.md was not reported")
    for f in failures:
        print("check_links self-test: " + f)
    return 1 if failures else 0


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print("check-links: %d broken link(s) or limit(s) above" % len(errors))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
