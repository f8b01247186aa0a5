#!/usr/bin/env python3
"""HF `tokenizers` side of the tokenizer benchmark (tools/tokbench.c runs it; it also runs alone).

    python3 tools/tokbench_hf.py TOKENIZER_JSON CORPUS [--runs N] [--ids FILE] [--mode batch|call]

TOKENIZER_JSON may also be a .gguf file (pip install gguf; other than SmolLM2 also transformers):
the Tokenizer is rebuilt from its vocabulary, see load_tokenizer().

Same work as tokbench's side, single-threaded, wall time, best of N runs:
  chunks   the corpus split after every b"\\n" (a chunk keeps its newline), decoded as UTF-8
           with errors="replace" (what our encoder does with invalid bytes);
  encode   add_special_tokens=False; --mode batch (default): one encode_batch_fast() call over
           all chunks (HF's fastest path: no offsets, no per-call Python overhead; with
           TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 it runs serially);
           --mode call: encode() per chunk in a Python loop;
  decode   decode_batch(ids per chunk, skip_special_tokens=False), MB/s of UTF-8 output.
With --ids FILE (tokbench's ids: per chunk a little-endian uint32 count then int32 ids) the
ids of every chunk are compared with ours. The last line is for tokbench to parse:
    tokbench_hf: version=V enc_s=S dec_s=S tokens=N out_bytes=N chunks=N diff_chunks=N
                 roundtrip_bad=N
(diff_chunks is -1 without --ids).
"""
import os

# Before the import: the Rayon pool is created on first use and reads these then.
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import tokenizers  # noqa: E402


def split_chunks(data):
    """The corpus bytes split after each newline, as tokbench.c does."""
    chunks, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        chunks.append(data[start:end])
        start = end
    return chunks


def load_tokenizer(path):
    """A tokenizer.json, or a .gguf. A GGUF's tokenizer is rebuilt from its tokenizer.ggml.* keys:
    for pre-tokenizer "smollm" (SmolLM2) as SmolLM2's tokenizer.json is configured, by
    tools/make_smollm2_tokens.py (the builder of tests/data/smollm2's reference ids); otherwise by
    transformers' GGUF tokenizer converter (an internal module: AutoTokenizer's GGUF path would
    also need torch). transformers has no "smollm" entry: it would drop SmolLM2's Digits step."""
    if not path.endswith(".gguf"):
        return tokenizers.Tokenizer.from_file(path)
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    meta = {n: f.contents() for n, f in fields.items()
            if n.startswith("tokenizer.") or n == "general.architecture"}
    if meta.get("tokenizer.ggml.pre") == "smollm":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from make_smollm2_tokens import build_hf_tokenizer

        return build_hf_tokenizer(path)[0]
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

    tok = {name: meta["tokenizer." + key] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
           if "tokenizer." + key in meta}
    return convert_gguf_tokenizer(meta["general.architecture"], tok)[0]


def read_ids(path, n_chunks):
    with open(path, "rb") as f:
        raw = f.read()
    out, pos = [], 0
    for _ in range(n_chunks):
        if pos + 4 > len(raw):
            sys.exit(f"tokbench_hf: {path}: truncated at offset {pos} (chunk {len(out)})")
        (n,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if pos + 4 * n > len(raw):
            sys.exit(f"tokbench_hf: {path}: chunk {len(out)} count {n} runs past the end")
        out.append(list(struct.unpack_from(f"<{n}i", raw, pos)))
        pos += 4 * n
    return out


def best_of(runs, fn):
    best, result = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer_json")
    ap.add_argument("corpus")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ids", help="tokbench's ids file to compare with")
    ap.add_argument("--mode", choices=["batch", "call"], default="batch")
    args = ap.parse_args()

    tok = load_tokenizer(args.tokenizer_json)
    with open(args.corpus, "rb") as f:
        data = f.read()
    texts = [c.decode("utf-8", "replace") for c in split_chunks(data)]

    if args.mode == "batch":
        enc_s, encs = best_of(args.runs, lambda: tok.encode_batch_fast(texts, add_special_tokens=False))
    else:
        enc_s, encs = best_of(args.runs, lambda: [tok.encode(t, add_special_tokens=False) for t in texts])
    ids = [e.ids for e in encs]
    dec_s, outs = best_of(args.runs, lambda: tok.decode_batch(ids, skip_special_tokens=False))
    out_bytes = sum(len(o.encode("utf-8")) for o in outs)
    roundtrip_bad = sum(o != t for o, t in zip(outs, texts))

    diff_chunks = -1
    if args.ids:
        ours = read_ids(args.ids, len(texts))
        diff = [i for i, (a, b) in enumerate(zip(ours, ids)) if a != b]
        diff_chunks = len(diff)
        for i in diff[:3]:  # enough to start debugging from
            print(f"tokbench_hf: chunk {i} {texts[i][:60]!r}: ours {ours[i][:12]} HF {ids[i][:12]}",
                  file=sys.stderr)

    n_tokens = sum(len(x) for x in ids)
    print(f"HF tokenizers {tokenizers.__version__} ({args.mode}): {len(data)} bytes, "
          f"{len(texts)} chunks -> {n_tokens} tokens; encode {len(data) / enc_s / 1e6:.2f} MB/s, "
          f"decode {out_bytes / dec_s / 1e6:.2f} MB/s (best of {args.runs})")
    print(f"tokbench_hf: version={tokenizers.__version__} enc_s={enc_s:.6f} dec_s={dec_s:.6f} "
          f"tokens={n_tokens} out_bytes={out_bytes} chunks={len(texts)} diff_chunks={diff_chunks} "
          f"roundtrip_bad={roundtrip_bad}")


if __name__ == "__main__":
    main()
