#!/usr/bin/env python3
"""rewrite.py — the build-time rewrite that lets g++ compile CUDA sources for the emulator.

    python3 tests/cuda_emu/rewrite.py IN OUT [IN OUT ...]

Several pairs in one run rewrite each IN to its OUT: make rewrites the kernel headers so, in one
start of Python, which is most of a small file's rewrite (tests/cuda_emu/emu.mk).

Three forms are rewritten, each on one line (so line numbers do not move; a #line directive
keeps compiler messages and __FILE__ pointing at the original file):

  name<<<grid, block, shmem, stream>>>(args);
      -> ::emu::launch("name", name, ::emu::make_config(grid, block, shmem, stream))(args);
  extern __shared__ T name[];
      -> T *name = ::emu::dynamic_shared_ptr<T>();
  __shared__ T name[N]...;   (or a scalar: __shared__ T name;)
      -> auto &name = ::emu::static_shared_ref<T[N]...>(EMU_SHARED_KEY, __FILE__, __LINE__, "name", align);

`name` may be a qualified name or a template instantiation (k<128>, ns::k<float, 4>). Comments
are left alone. A `<<<` whose `>>>` or argument list is not on the same line is an error.
"""
import re
import sys

EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?([^;=]+?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(
    r"(?<![\w])__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?([^;=,()]+?)\s*\b([A-Za-z_]\w*)\s*((?:\[[^\]]+\])*)\s*;")


def code_spans(line, in_comment):
    """Splits a line into (text, is_code) pieces; tracks /* */ comments across lines."""
    pieces, i, start = [], 0, 0
    in_string = None
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                pieces.append((line[start:], False))
                return pieces, True
            pieces.append((line[start:end + 2], False))
            i = start = end + 2
            in_comment = False
            continue
        c = line[i]
        if in_string:
            if c == "\\":
                i += 2
                continue
            if c == in_string:
                in_string = None
        elif c in "\"'":
            in_string = c
        elif line.startswith("//", i):
            pieces.append((line[start:i], True))
            pieces.append((line[i:], False))
            return pieces, False
        elif line.startswith("/*", i):
            pieces.append((line[start:i], True))
            start = i
            in_comment = True
            i += 2
            continue
        i += 1
    pieces.append((line[start:], not in_comment))
    return pieces, in_comment


def kernel_name_start(code, pos):
    """Start index of the kernel expression that ends just before `pos` (the <<<)."""
    i = pos
    while i > 0 and code[i - 1].isspace():
        i -= 1
    while i > 0:
        c = code[i - 1]
        if c == ">":  # template arguments: back to the matching <
            depth, j = 0, i - 1
            while j >= 0:
                if code[j] == ">":
                    depth += 1
                elif code[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            if j < 0:
                break
            i = j
        elif c.isalnum() or c == "_" or c == ":":
            i -= 1
        else:
            break
    return i


def rewrite_launches(code, where):
    out = code
    while True:
        pos = out.find("<<<")
        if pos < 0:
            return out
        end = out.find(">>>", pos)
        if end < 0:
            sys.exit(f"{where}: kernel launch without '>>>' on the same line (write launches on one line)")
        start = kernel_name_start(out, pos)
        name = out[start:pos].strip()
        if not name:
            sys.exit(f"{where}: kernel launch without a kernel name before '<<<'")
        rest = out[end + 3:]
        if not rest.lstrip().startswith("("):
            sys.exit(f"{where}: kernel launch without its argument list on the same line")
        inner = out[pos + 3:end]
        call = f'::emu::launch("{name}", {name}, ::emu::make_config({inner}))'
        out = out[:start] + call + rest


def rewrite_shared(code):
    def dynamic(m):
        return f"{m.group(2).strip()} *{m.group(3)} = ::emu::dynamic_shared_ptr<{m.group(2).strip()}>();"

    def static(m):
        align = m.group(1) or "1"
        type_id = m.group(2).strip() + m.group(4)
        return (f'auto &{m.group(3)} = ::emu::static_shared_ref<{type_id}>(EMU_SHARED_KEY, __FILE__, '
                f'__LINE__, "{m.group(3)}", {align});')

    code = EXTERN_SHARED.sub(dynamic, code)
    if "extern" not in code:
        code = STATIC_SHARED.sub(static, code)
    return code


def rewrite(text, path):
    out, in_comment = [f'#line 1 "{path}"'], False
    for n, line in enumerate(text.split("\n"), 1):
        pieces, in_comment = code_spans(line, in_comment)
        new = []
        for piece, is_code in pieces:
            if is_code:
                piece = rewrite_shared(rewrite_launches(piece, f"{path}:{n}"))
            new.append(piece)
        out.append("".join(new))
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: rewrite.py IN OUT [IN OUT ...]")
    for src, dst in zip(args[0::2], args[1::2]):
        with open(src, encoding="utf-8") as f:
            text = f.read()
        result = rewrite(text, src)
        with open(dst, "w", encoding="utf-8") as f:
            f.write(result)


if __name__ == "__main__":
    main()
