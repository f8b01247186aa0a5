#!/usr/bin/env python3
"""Writes the fixed tokenizer-benchmark corpus (tests/data/tokbench/corpus.txt).

    python3 tools/make_tokbench_corpus.py [--shared ../shared] [--out tests/data/tokbench/corpus.txt]

The corpus is committed (so every machine benchmarks the same bytes, whatever its Python); this
script documents how it was made and regenerates it byte for byte (it prints the sha256).

Content, mixed the way chat/code traffic is: English prose assembled from sentences and word
lists written for this file, source code (C, Python, JSON, shell) written for this file, numbers
(tables, dates, hex, floats), short sentences in other scripts written for this file, emoji, and
the texts of ../shared/testdata/tokenizers/golden/{qwen3,llama3}.encode.jsonl. Everything is
deterministic (random.Random with a fixed seed; no hash-order dependence).

Rules that keep the comparison with HF tokenizers exact:
  - no text containing an added-token string of either tokenizer ("<|im_end|>", "<think>", ...):
    HF `encode` always matches those, tokbench (without --special) treats them as plain text;
  - everything NFC (Qwen3 normalises to NFC, so decode(encode(x)) == x needs NFC input);
  - valid UTF-8 only (texts with lone surrogates are dropped).
"""
import argparse
import hashlib
import json
import os
import random
import unicodedata

SEED = 20261121
TARGET_BYTES = 900_000  # the committed file must stay under 1 MB

PROSE_SENTENCES = [
    "The build finished in under a minute, which surprised everyone on the team.",
    "She kept a notebook of every experiment, including the ones that failed.",
    "A small change in the learning rate made the loss curve far less noisy.",
    "Rain had been falling since morning, and the river was rising slowly.",
    "He read the error message twice before he understood what it meant.",
    "The library opens at nine, but the reading room stays closed until ten.",
    "Most of the memory went to the key-value cache, not to the weights.",
    "They walked along the old railway line until the sun went down.",
    "Nobody expected the benchmark to run faster on the older machine.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Every token the model writes depends on all the tokens before it.",
    "Her grandfather repaired clocks in a shop that smelled of oil and brass.",
    "If the file is truncated, the loader must say so instead of crashing.",
    "The committee postponed its decision until the next quarterly meeting.",
    "On clear nights you can see the lights of the harbour from the hill.",
    "Quantising the weights to four bits cut the download size by a factor of four.",
    "The children built a raft from driftwood and an old blue tarpaulin.",
    "Temperature scales the logits before the softmax turns them into probabilities.",
    "It's not the first time we've seen this, and it won't be the last.",
    "I'd rather ship a small feature that works than a large one that doesn't.",
    "The museum's new wing holds paintings that hadn't been shown in decades.",
    "When entropy is low, the sampler can simply take the most likely token.",
    "A stray cat had adopted the bakery and slept every day beside the oven.",
    "The contract was signed on Tuesday; the work starts on the first of March.",
]

WORDS = {
    "adj": ["quiet", "rapid", "careful", "ancient", "bright", "heavy", "curious", "narrow",
            "generous", "fragile", "distant", "practical", "stubborn", "gentle", "honest"],
    "noun": ["river", "engineer", "compiler", "village", "garden", "teacher", "signal",
             "mountain", "kernel", "window", "letter", "machine", "forest", "student", "market",
             "tokenizer", "matrix", "harbour", "lantern", "question"],
    "verb": ["followed", "measured", "painted", "rewrote", "crossed", "explained", "repaired",
             "ignored", "visited", "described", "counted", "carried", "tested", "noticed"],
    "adv": ["slowly", "quietly", "twice", "again", "carefully", "suddenly", "rarely", "almost"],
    "place": ["near the station", "in the old town", "after the storm", "before dawn",
              "under the bridge", "at the end of the corridor", "during the meeting",
              "on the second floor", "across the valley", "behind the library"],
}

CODE_SNIPPETS = [
    '''static float {name}(const float *x, int n) {{
    // the largest value first: exp() of anything else then stays below 1
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += expf(x[i] - m);
    return m + logf(sum);
}}
''',
    '''def {name}(path, limit={num}):
    """Return the first `limit` non-empty lines of a file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\\n")
            if line and not line.startswith("#"):
                out.append(line)
            if len(out) >= limit:
                break
    return out
''',
    '''{{"name": "{name}", "version": "{num}.{num2}.0", "dependencies": {{"left-pad": "^1.3.0"}},
 "scripts": {{"test": "node test.js", "build": "tsc -p ."}}, "private": true}}
''',
    '''for f in build/*.log; do
  if grep -q "error:" "$f"; then
    echo "$f: $(grep -c 'error:' "$f") errors" >&2
  fi
done
export {upper}_THREADS={num}
''',
    '''typedef struct {{
    int    n_layers;   // transformer blocks
    int    dim;        // residual width
    float *{name};     // [n_layers][dim]
}} Config{num};

int config_{name}_valid(const Config{num} *c) {{
    return c->n_layers > 0 && c->dim % 64 == 0 && c->{name} != NULL;
}}
''',
    '''class {cls}:
    def __init__(self, size={num}):
        self.items = [None] * size
        self.head = 0

    def push(self, item):
        self.items[self.head % len(self.items)] = item
        self.head += 1
''',
    '''SELECT user_id, COUNT(*) AS n, AVG(latency_ms) AS avg_ms
FROM requests
WHERE created_at >= '2024-0{d1}-1{d2}' AND status <> 500
GROUP BY user_id
HAVING COUNT(*) > {num}
ORDER BY avg_ms DESC;
''',
    '''fn {name}(v: &[u32]) -> Option<u32> {{
    v.iter().copied().filter(|&x| x % {num} == 0).max()
}}
''',
]

OTHER_SCRIPTS = [
    "El tren sale a las ocho y llega a Madrid antes del mediodía.",
    "Die Bibliothek ist am Sonntag geschlossen, aber der Garten bleibt offen.",
    "Le café était froid, mais la conversation était très agréable.",
    "Il gatto dorme sul divano tutto il pomeriggio.",
    "A reunião foi adiada para a próxima semana.",
    "Dzisiaj pada deszcz, więc zostanę w domu.",
    "Сегодня вечером мы будем читать новую книгу.",
    "Η θάλασσα ήταν ήσυχη όλο το πρωί.",
    "今天的天气很好，我们去公园散步吧。",
    "这个程序在两秒钟内处理了一百万个字符。",
    "明日は朝早く起きて、駅まで歩いて行きます。",
    "このモデルは小さいですが、とても速く動きます。",
    "오늘 저녁에 친구와 함께 영화를 볼 거예요.",
    "새로운 컴파일러는 예전 것보다 훨씬 빠릅니다.",
    "ฉันชอบอ่านหนังสือในวันหยุด",
    "मैं हर सुबह चाय पीता हूँ।",
    "הספרייה פתוחה עד שמונה בערב.",
    "المكتبة مفتوحة حتى الساعة الثامنة مساءً.",
    "Tôi đang học lập trình bằng ngôn ngữ C.",
    "Bugün hava çok güzel, dışarı çıkalım.",
]

EMOJI = ["🙂", "🚀", "🎉", "🔥", "👍🏽", "👩‍💻", "🇫🇷", "❤️", "🤔", "✅", "📦", "🌧️", "🐍", "☕"]


def golden_texts(shared):
    """The golden encode texts of both tokenizers, without added-token strings, NFC, deduplicated
    in file order."""
    tok_dir = os.path.join(shared, "testdata", "tokenizers")
    added = set()
    for name in ("qwen3", "llama3"):
        with open(os.path.join(tok_dir, name, "tokenizer.json"), encoding="utf-8") as f:
            added.update(t["content"] for t in json.load(f)["added_tokens"])
    seen, out = set(), []
    for name in ("qwen3", "llama3"):
        with open(os.path.join(tok_dir, "golden", name + ".encode.jsonl"), encoding="utf-8") as f:
            for line in f:
                text = unicodedata.normalize("NFC", json.loads(line)["text"])
                if not text or text in seen or any(a in text for a in added):
                    continue
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # lone surrogates
                    continue
                seen.add(text)
                out.append(text)
    return out


def prose_paragraph(rng):
    sentences = []
    for _ in range(rng.randint(3, 7)):
        if rng.random() < 0.5:
            sentences.append(rng.choice(PROSE_SENTENCES))
        else:
            w = {k: rng.choice(v) for k, v in WORDS.items()}
            n = rng.choice(WORDS["noun"])
            sentences.append(f"The {w['adj']} {w['noun']} {w['adv']} {w['verb']} the {n} {w['place']}.")
    return " ".join(sentences) + "\n"


def code_block(rng):
    names = ["softmax_lse", "read_lines", "emx_cache", "scale_rows", "ring", "pick_max", "norm"]
    return rng.choice(CODE_SNIPPETS).format(
        name=rng.choice(names), cls="Ring" + str(rng.randint(1, 99)), num=rng.randint(2, 4096),
        num2=rng.randint(0, 40), upper=rng.choice(["OMP", "EMX", "MKL"]), d1=rng.randint(1, 9),
        d2=rng.randint(0, 9))


def numbers_block(rng):
    rows = ["date,item,qty,price,checksum"]
    for _ in range(rng.randint(4, 12)):
        rows.append("%04d-%02d-%02d,%s,%d,%.2f,0x%08x" % (
            rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28),
            rng.choice(["bolt", "nut", "gear", "valve", "cable"]), rng.randint(1, 100000),
            rng.uniform(0, 99999), rng.getrandbits(32)))
    rows.append("total: %d items, mean %.6f, pi ~ 3.14159265358979, 1e-%d, %d%%" % (
        rng.randint(1, 10**9), rng.gauss(0, 1000), rng.randint(1, 30), rng.randint(0, 100)))
    return "\n".join(rows) + "\n"


def other_block(rng):
    lines = []
    for _ in range(rng.randint(2, 5)):
        s = rng.choice(OTHER_SCRIPTS)
        if rng.random() < 0.4:
            s += " " + "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
        lines.append(s)
    return "\n".join(lines) + "\n"


def golden_block(rng, golden):
    return "\n".join(rng.choice(golden) for _ in range(rng.randint(3, 8))) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("EMX_SHARED", "../shared"))
    ap.add_argument("--out", default="tests/data/tokbench/corpus.txt")
    args = ap.parse_args()

    rng = random.Random(SEED)
    golden = golden_texts(args.shared)
    makers = [(45, prose_paragraph), (25, code_block), (10, numbers_block), (10, other_block),
              (10, lambda r: golden_block(r, golden))]
    weights = [w for w, _ in makers]
    parts, size = [], 0
    while size < TARGET_BYTES:
        block = unicodedata.normalize("NFC", rng.choices(makers, weights)[0][1](rng)) + "\n"
        parts.append(block)
        size += len(block.encode("utf-8"))
    data = "".join(parts).encode("utf-8")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(data)
    n_lines = data.count(b"\n")
    print(f"{args.out}: {len(data)} bytes, {n_lines} lines, "
          f"sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
