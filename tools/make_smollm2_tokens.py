#!/usr/bin/env python3
"""make_smollm2_tokens.py — golden SmolLM2 tokenizer encodings, by two independent implementations.

Not run by CI: its output, tests/data/smollm2/smollm2.encode.jsonl (+ llamacpp_agreement.json), is
committed. It re-encodes the 328 texts of ../shared/testdata/tokenizers/golden/qwen3.encode.jsonl
with the SmolLM2-135M-Instruct tokenizer:

  * HuggingFace `tokenizers` (Rust), configured exactly as SmolLM2's tokenizer.json: byte-level BPE
    with the vocabulary and merges stored in the GGUF, no normalizer, pre-tokenizer
    Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
    (GPT-2 regex), the 17 control tokens (<|endoftext|>, <|im_start|>, ...) as special added
    tokens, encode(text, add_special_tokens=False). These ids go into the .jsonl.
    Why not transformers' AutoTokenizer.from_pretrained(gguf_file=...): its GGUF importer has no
    entry for llama.cpp's pre-tokenizer "smollm" and falls back to plain GPT-2 pre-tokenisation
    (no Digits step), which is not SmolLM2's tokenizer; and transformers 5 needs torch to read a GGUF.
  * llama.cpp's tokenizer (llama-cpp-python, vocab_only=True; tokenize(add_bos=False,
    special=True)) on the same GGUF (pre-tokenizer "smollm"). Only compared, line by line.

The SmolLM2 vocabulary lacks 21 of the 256 byte symbols (bytes 0x04 0x06 0x13 0x14 0x16 0x1D 0xC0
0xC1 0xF1 0xF2 0xF5..0xFF). HF `tokenizers` drops such bytes silently (no unk token); llama.cpp
may throw on them, which would kill the process, so each llama.cpp tokenisation runs in a child
process and a crash is recorded as such.

Usage (from the repository root, in a venv with: tokenizers gguf numpy llama-cpp-python):
  python tools/make_smollm2_tokens.py [--gguf weights/download/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import multiprocessing as mp
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

GGUF_CONTROL = 3  # tokenizer.ggml.token_type value of control (special) tokens


def gguf_field(reader, key):
    field = reader.fields.get(key)
    if field is None:
        sys.exit(f"make_smollm2_tokens: {key} missing from the GGUF")
    return field.contents()


def build_hf_tokenizer(gguf_path):
    """SmolLM2's tokenizer.json, rebuilt from the GGUF's vocabulary and merges."""
    reader = gguf.GGUFReader(gguf_path)
    tokens = gguf_field(reader, "tokenizer.ggml.tokens")            # [49152] byte-level spellings
    token_types = gguf_field(reader, "tokenizer.ggml.token_type")   # [49152]
    merges = gguf_field(reader, "tokenizer.ggml.merges")            # [48900] "a b"
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        sys.exit("make_smollm2_tokens: duplicate token strings in the GGUF vocabulary")
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges],
                     dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False)
                for t, ty in zip(tokens, token_types) if ty == GGUF_CONTROL]
    tok.add_special_tokens(specials)
    for t in specials:  # adding must not have created new ids: they are the GGUF's ids 0..16
        assert tok.token_to_id(t.content) == vocab[t.content], t.content
    return tok, len(specials)


# ---- llama.cpp, in a child process (it may abort on bytes that have no token) ----

def _llama_worker(gguf_path, texts, conn):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)
    for text in texts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        conn.send(list(ids))
    conn.close()


def llama_tokenize_all(gguf_path, texts):
    """List parallel to texts: ids, or the string "crashed: ..." where llama.cpp died."""
    out = [None] * len(texts)
    i = 0
    while i < len(texts):
        parent, child = mp.Pipe(duplex=False)
        proc = mp.Process(target=_llama_worker, args=(gguf_path, texts[i:], child))
        proc.start()
        child.close()
        while i < len(texts):
            try:
                out[i] = parent.recv()
            except EOFError:
                break
            i += 1
        proc.join()
        if i < len(texts):  # the child died on texts[i]: record it and go on after it
            out[i] = f"crashed: llama.cpp process exit code {proc.exitcode}"
            i += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default="weights/download/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--golden", default="../shared/testdata/tokenizers/golden/qwen3.encode.jsonl")
    ap.add_argument("--out", default="tests/data/smollm2/smollm2.encode.jsonl")
    ap.add_argument("--agreement", default="tests/data/smollm2/llamacpp_agreement.json")
    ap.add_argument("--no-llamacpp", action="store_true", help="HF encodings only")
    args = ap.parse_args()

    lines = [json.loads(l) for l in open(args.golden, encoding="utf-8")]
    texts = [l["text"] for l in lines]
    hf, n_special = build_hf_tokenizer(args.gguf)
    print(f"HF tokenizers {__import__('tokenizers').__version__}: vocab {hf.get_vocab_size()}, "
          f"{n_special} special tokens; {len(texts)} texts")

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    hf_ids = []
    with open(args.out, "w", encoding="utf-8") as f:
        for line, text in zip(lines, texts):
            ids = hf.encode(text, add_special_tokens=False).ids
            hf_ids.append(ids)
            rec = {"cat": line["cat"], "text": text, "ids": ids}
            decoded = hf.decode(ids, skip_special_tokens=False)
            if decoded != text:  # as in the golden files: only where decode(ids) is not the text
                rec["decoded"] = decoded
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    n_lossy = sum(1 for t, ids in zip(texts, hf_ids) if hf.decode(ids, skip_special_tokens=False) != t)
    print(f"wrote {args.out} ({len(texts)} lines, {n_lossy} whose decode differs from the text)")

    if args.no_llamacpp:
        return
    import llama_cpp
    lc_ids = llama_tokenize_all(args.gguf, texts)
    disagree = []
    for line, ids_hf, ids_lc in zip(lines, hf_ids, lc_ids):
        if ids_hf != ids_lc:
            disagree.append({"cat": line["cat"], "text": line["text"], "hf": ids_hf, "llamacpp": ids_lc})
    report = {
        "what": "llama.cpp tokenize(add_bos=False, special=True) vs HF tokenizers encode(add_special_tokens=False), "
                "SmolLM2-135M-Instruct vocabulary from the GGUF",
        "gguf": os.path.basename(args.gguf),
        "llama_cpp_python": llama_cpp.__version__,
        "tokenizers": __import__("tokenizers").__version__,
        "agree": len(texts) - len(disagree),
        "total": len(texts),
        "disagree": disagree,
    }
    with open(args.agreement, "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"llama.cpp agrees on {report['agree']}/{report['total']} lines; details in {args.agreement}")
    for d in disagree:
        print(f"  [{d['cat']}] {d['text']!r}\n    hf       {d['hf']}\n    llamacpp {d['llamacpp']}")


if __name__ == "__main__":
    main()
