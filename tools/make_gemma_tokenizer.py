#!/usr/bin/env python3
"""make_gemma_tokenizer.py — a tokenizer in Gemma 3's tokenizer.json format, trained here.

The real Gemma 3 tokenizer cannot be downloaded on this project's machines. This script builds
one with the same structure, trained with HF `tokenizers` on a small corpus (this repository's
docs/*.md and README.md as of commit 728deed, read with git show, unless files are named), so that the converter and the runtime can be
tested against HF `tokenizers` on a file of that format:

  model       BPE, byte_fallback, fuse_unk, unk <unk>, merges by rank, no ignore_merges
  normalizer  Replace " " -> "▁" (U+2581); no Prepend: no dummy prefix (Gemma 3)
  pre_tok     Split " " merged_with_previous (a no-op after the normalizer: the text between
              added tokens is one word, as in the real file)
  decoder     Replace "▁" -> " ", ByteFallback, Fuse (no Strip)
  post        TemplateProcessing: <bos> $A
  ids         the real file's layout where it is known: <pad> 0, <eos> 1, <bos> 2, <unk> 3,
              <mask> 4, [multimodal] 5, <unused0..98> 6..104, <start_of_turn> 105,
              <end_of_turn> 106, then newline runs, "▁" runs and HTML tags (Gemma's user-defined
              pieces), the 256 byte pieces <0x00>..<0xFF>, then the trained pieces.

The file written here is the compact one (only the trained vocabulary); tools/make_tiny_hf.py
pads it to Gemma 3's 262,144 entries (<start_of_image> 255999, <end_of_image> 256000,
<unused99..6241> 256001..262143, fillers in between) with the standard library alone.

    /work/hf-venv/bin/python tools/make_gemma_tokenizer.py -o tests/data/hf/gemma3-tokenizer
"""
import argparse
import hashlib
import json
import os
import subprocess
import tempfile

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPACE = "\u2581"
HTML = ["<table>", "<caption>", "<thead>", "<tbody>", "<tfoot>", "<tr>", "<th>", "<td>",
        "</table>", "</caption>", "</thead>", "</tbody>", "</tfoot>", "</tr>", "</th>", "</td>",
        "<h1>", "<h2>", "<h3>", "<h4>", "<h5>", "<h6>", "<blockquote>",
        "</h1>", "</h2>", "</h3>", "</h4>", "</h5>", "</h6>", "</blockquote>",
        "<strong>", "<em>", "<b>", "<i>", "<u>", "<s>", "<sub>", "<sup>", "<code>",
        "</strong>", "</em>", "</b>", "</i>", "</u>", "</s>", "</sub>", "</sup>", "</code>"]
CONTROL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"] + \
    [f"<unused{i}>" for i in range(99)] + ["<start_of_turn>", "<end_of_turn>"]
USER_DEFINED = ["\n" * k for k in range(1, 32)] + [SPACE * k for k in range(2, 32)] + HTML
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def train(files, n_trained):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", SPACE)
    # Training words: "▁word" pieces, single digits, runs of "▁", other whitespace; the merges
    # it learns then never join across them, roughly as SentencePiece's split_by_whitespace and
    # split_digits do. (Encoding uses Gemma's own no-op split, set below.)
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(SPACE + r"?[^" + SPACE + r"\s\p{N}]+|\p{N}|" + SPACE + r"+|\s+"), behavior="isolated")
    fixed = CONTROL + USER_DEFINED + BYTES
    trainer = trainers.BpeTrainer(vocab_size=len(fixed) + n_trained, special_tokens=fixed,
                                  limit_alphabet=400, max_token_length=16, show_progress=False)
    tok.train(files, trainer)
    return tok, fixed


def gemma_json(tok, fixed):
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for i, t in enumerate(fixed):
        assert vocab[t] == i, (t, vocab[t], i)
    added = []
    for t in CONTROL + USER_DEFINED:
        added.append({"id": vocab[t], "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": t in CONTROL})
    j["added_tokens"] = added
    j["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    j["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<bos>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}
    m = j["model"]
    m["dropout"], m["unk_token"], m["continuing_subword_prefix"] = None, "<unk>", None
    m["end_of_word_suffix"], m["fuse_unk"], m["byte_fallback"], m["ignore_merges"] = None, True, True, False
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="corpus files (default: docs/*.md README.md)")
    ap.add_argument("-o", "--out", required=True, help="folder for tokenizer.json and corpus.json")
    ap.add_argument("--trained", type=int, default=6000, help="pieces learned beyond the fixed ones")
    ap.add_argument("--commit", default="728deed", help="the commit whose docs/*.md and README.md are the corpus")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tmp = tempfile.TemporaryDirectory()
    if a.files:
        files, names = a.files, [os.path.relpath(f, root) for f in a.files]
    else:  # the docs as they were at a fixed commit: later edits of the docs change nothing here
        git = lambda *args: subprocess.run(["git", "-C", root, *args], check=True, capture_output=True).stdout
        names = [n for n in git("ls-tree", "--name-only", a.commit, "docs/").decode().split()
                 if n.endswith(".md")] + ["README.md"]
        files = []
        for n in names:
            files.append(os.path.join(tmp.name, n.replace("/", "_")))
            with open(files[-1], "wb") as fp:
                fp.write(git("show", f"{a.commit}:{n}"))
    tok, fixed = train(files, a.trained)
    j = gemma_json(tok, fixed)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as fp:
        json.dump(j, fp, ensure_ascii=False, separators=(",", ":"))
    corpus = [{"file": n, "sha256": hashlib.sha256(open(f, "rb").read()).hexdigest()}
              for n, f in zip(names, files)]
    with open(os.path.join(a.out, "corpus.json"), "w") as fp:
        json.dump({"commit": None if a.files else a.commit, "trained_pieces": a.trained, "fixed_pieces": len(fixed),
                   "vocab": len(j["model"]["vocab"]), "merges": len(j["model"]["merges"]),
                   "corpus": corpus}, fp, indent=1)
    # The file must load and round-trip a sample as HF reads it.
    t = Tokenizer.from_file(os.path.join(a.out, "tokenizer.json"))
    s = "Hello  world\n\n<start_of_turn>user 日本 🙂<end_of_turn>"
    enc = t.encode(s, add_special_tokens=False)
    assert t.decode(enc.ids, skip_special_tokens=False) == s, t.decode(enc.ids, skip_special_tokens=False)
    print(f"{a.out}/tokenizer.json: {len(j['model']['vocab'])} pieces, {len(j['model']['merges'])} merges; "
          f"sample -> {enc.tokens}")


if __name__ == "__main__":
    main()
