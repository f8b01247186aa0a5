#!/usr/bin/env python3
"""make_tasks.py — the eval task sets (tools/eval/tasks/<family>.jsonl), generated from a seed.

    python3 tools/eval/make_tasks.py                      # --seed 1 --out tools/eval/tasks
    python3 tools/eval/make_tasks.py --seed 2 --out /tmp/tasks

Each family is one file of N_ITEMS items in the task format of docs/eval-tasks.md (one JSON
object per line: id, family, messages, answer, check, max_tokens, answer_cue, answer_alphabet),
except 'open' (N_OPEN open-ended prompts: check 'open', no answer). The same seed gives the same
files byte for byte: every family draws from its own random.Random seeded with the string
"SEED:FAMILY" (string seeds are hashed with SHA-512, not with the per-process str hash), only
integer draws are used (randrange/choice/shuffle/sample), and numbers are formatted from integers.

The families are pitched for SmolLM2-135M-Instruct (the measurements are in docs/eval-tasks.md,
made with build/tools/eval and tools/eval/pitch_tasks.py). Every question asks for a short
answer in a fixed form, so generations stay a few tokens long. The word lists of the one-step
fact families (capital, plural, past, opposite) are in task_words.py.
"""
import argparse
import datetime
import json
import os
import random
import sys

from task_words import (CAPITALS, EXPLAIN_TOPICS, OPPOSITES, PAST, PLURALS, STORY_CHARACTERS,
                        STORY_EVENTS)

N_ITEMS = 300
N_OPEN = 40       # open-ended prompts (the 'open' family)
OPEN_MAX_TOKENS = 128
# A short system message in place of SmolLM2's default one ("You are a helpful AI assistant named
# SmolLM, trained by Hugging Face"): 13 prompt tokens fewer per item for the same accuracy
# (docs/eval-tasks.md has both measurements).
SYSTEM = "Be brief."
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
# Short common words for the letter-counting and list-counting items: one to three syllables,
# lower case ASCII, no proper nouns.
WORDS = """apple banana cherry orange lemon melon grape peach pear plum mango kiwi berry
tomato potato carrot pepper onion garlic butter cheese bread honey sugar coffee water
letter mirror rabbit kitten puppy parrot turtle pillow window ladder hammer basket bottle
pencil paper table chair sofa carpet garden flower forest river ocean island desert valley
mountain bridge tunnel castle school teacher doctor banana rocket planet comet summer winter
spring autumn morning evening yellow purple silver copper little bubble coffee balloon
cookie muffin noodle salad pizza pasta tennis soccer hockey guitar violin trumpet piano
""".split()
LIST_ITEMS = """cat dog cow pig hen fox owl bee ant bat cup pen box hat key bus car van map bed
red blue green pink gray gold rose lily oak elm fig nut egg jam tea milk rice corn""".split()


# The answer cue of each check (answer_cue: the words a branching decoder appends before it reads
# the answer's distribution over answer_alphabet).
CUES = {"number": "The answer is", "choice": "Answer:", "word": "The answer is"}


def item(family, idx, user, answer, check, max_tokens, alphabet=None):
    """One task in chat mode: SYSTEM and one user message (./run --chat --system SYSTEM -p USER).
    alphabet: the family's possible answers (answer_alphabet), as strings."""
    msgs = [{"role": "system", "content": SYSTEM}]
    obj = {"id": "%s-%04d" % (family, idx), "family": family,
           "messages": msgs + [{"role": "user", "content": user}]}
    if answer is not None:
        obj["answer"] = answer
    obj["check"] = check
    obj["max_tokens"] = max_tokens
    if alphabet is not None:
        assert answer in alphabet and 0 < len(alphabet) <= 256, (family, idx, answer)
        obj["answer_cue"] = CUES[check]
        obj["answer_alphabet"] = alphabet
    return obj


def numbers(values):
    """An answer alphabet of integers: sorted, as strings."""
    return [str(v) for v in sorted(set(values))]


# --- arith: one- and two-step integer arithmetic, answer checked as a number -------------------
# Every value an arith item can have (its answer_alphabet): the ranges of gen_arith's five kinds.
ARITH_VALUES = numbers([a + b for a in range(2, 60) for b in range(2, 40)] +
                       [a - b for a in range(10, 80) for b in range(1, a)] +
                       [a * b for a in range(2, 10) for b in range(2, 11)] +
                       [a + b - c for a in range(2, 20) for b in range(2, 20) for c in range(1, a + b)] +
                       [a * b + c for a in range(2, 10) for b in range(2, 6) for c in range(1, 10)])


def gen_arith(rng, n):
    out = []
    kinds = ["add", "sub", "mul", "add_sub", "mul_add"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "add":        # two 1-2 digit addends
            a, b = rng.randrange(2, 60), rng.randrange(2, 40)
            expr, val = "%d + %d" % (a, b), a + b
        elif kind == "sub":      # non-negative difference
            a = rng.randrange(10, 80)
            b = rng.randrange(1, a)
            expr, val = "%d - %d" % (a, b), a - b
        elif kind == "mul":      # times table
            a, b = rng.randrange(2, 10), rng.randrange(2, 11)
            expr, val = "%d * %d" % (a, b), a * b
        elif kind == "add_sub":  # two steps, small numbers, result >= 0
            a, b = rng.randrange(2, 20), rng.randrange(2, 20)
            c = rng.randrange(1, a + b)
            expr, val = "%d + %d - %d" % (a, b, c), a + b - c
        else:                    # two steps: product plus a small number
            a, b, c = rng.randrange(2, 10), rng.randrange(2, 6), rng.randrange(1, 10)
            expr, val = "%d * %d + %d" % (a, b, c), a * b + c
        # room for "EXPR = VALUE" and the stop token: SmolLM2 spells each digit as a token
        limit = len("%s = %d" % (expr, val)) + 1
        out.append(item("arith", i, "What is %s? Reply with the number only." % expr,
                        str(val), "number", limit, ARITH_VALUES))
    return out


# --- decimals: which of two decimals is larger/smaller (the 9.9 vs 9.11 trap), choice A/B --------
def decimal_pair(rng, kind):
    """Two different decimals as (text, value in thousandths)."""
    whole = rng.randrange(0, 20)
    if kind == "trap":    # same whole part; the one with more digits after the point is smaller
        x1 = rng.randrange(2, 10)           # x.d
        x2 = rng.randrange(10, x1 * 10)     # x.dd with dd < d0: e.g. 9.9 vs 9.11
        if x2 % 10 == 0:
            x2 += 1
        a = ("%d.%d" % (whole, x1), whole * 1000 + x1 * 100)
        b = ("%d.%02d" % (whole, x2), whole * 1000 + x2 * 10)
    elif kind == "plain":  # same whole part, same number of decimals
        x1, x2 = rng.sample(range(1, 100), 2)
        a = ("%d.%02d" % (whole, x1), whole * 1000 + x1 * 10)
        b = ("%d.%02d" % (whole, x2), whole * 1000 + x2 * 10)
    else:                  # "whole": the whole parts differ, the decimals mislead
        w2 = whole + rng.randrange(1, 4)
        x1, x2 = rng.randrange(10, 100), rng.randrange(1, 10)   # 3.85 vs 4.2
        a = ("%d.%02d" % (whole, x1), whole * 1000 + x1 * 10)
        b = ("%d.%d" % (w2, x2), w2 * 1000 + x2 * 100)
    return a, b


def gen_decimals(rng, n):
    out = []
    kinds = ["trap", "trap", "plain", "whole"]
    for i in range(n):
        a, b = decimal_pair(rng, kinds[i % len(kinds)])
        larger = (i // len(kinds)) % 2 == 0
        # the answer is A for half of each (kind, larger/smaller) pair: a model that always
        # says A scores 50%
        if ((a[1] > b[1]) == larger) != ((i // (2 * len(kinds))) % 2 == 0):
            a, b = b, a
        want_a = (a[1] > b[1]) == larger
        q = "Which number is %s? A) %s B) %s Reply with the letter only." % (
            "larger" if larger else "smaller", a[0], b[0])
        out.append(item("decimals", i, q, "A" if want_a else "B", "choice", 4, ["A", "B"]))
    return out


# --- count: letters in a word, items in a list, answer checked as a number ---------------------
def gen_count(rng, n):
    out = []
    for i in range(n):
        if i % 2 == 0:   # letters: a letter of the word (1-3 times) or, one item in 6, a missing one
            word = rng.choice(WORDS)
            if i % 12 == 0:
                letter = rng.choice([c for c in "abcdefghijklmnoprstuwy" if c not in word])
            else:
                letter = rng.choice(sorted(set(word)))
            val = word.count(letter)
            q = "How many times does the letter %s appear in the word %s? Reply with the number only." % (
                letter, word)
        else:            # items: 3-9 distinct short words
            k = rng.randrange(3, 10)
            items = rng.sample(LIST_ITEMS, k)
            val = k
            q = "How many words are in this list: %s? Reply with the number only." % ", ".join(items)
        out.append(item("count", i, q, str(val), "number", 10, numbers(range(10))))
    return out


# --- weekday: the day of the week N days after or before a given one, choice A/B/C -------------
def gen_weekday(rng, n):
    out = []
    # The answer comes from the calendar (2024-01-01 was a Monday), independently of the index
    # arithmetic of the distractors.
    monday = datetime.date(2024, 1, 1)
    for i in range(n):
        start = rng.randrange(7)
        days = -rng.randrange(1, 8) if i % 3 == 2 else rng.randrange(1, 15)
        ans = (monday + datetime.timedelta(days=start + 28 + days)).strftime("%A")
        assert ans == DAYS[(start + days) % 7]
        # "Which day is N days after DAY?", not "Today is DAY. ...": with the latter SmolLM2-135M
        # answers "Today is DAY." and picks no option (10% vs 33% greedy, docs/eval-tasks.md)
        q = "Which day is %d day%s %s %s?" % (abs(days), "" if abs(days) == 1 else "s",
                                              "after" if days > 0 else "before", DAYS[start])
        # distractors: one day off either way, or the day named (what the model likes to echo)
        wrong = sorted({DAYS[(start + days + d) % 7] for d in (-1, 1)} | {DAYS[start]} - {ans})
        opts = rng.sample(wrong, 2)
        opts.insert(i // 3 % 3, ans)  # A, B, C a third each, for each kind of question
        letters = "ABC"
        q += " " + " ".join("%s) %s" % (letters[k], o) for k, o in enumerate(opts))
        out.append(item("weekday", i, q + " Reply with the letter only.", letters[opts.index(ans)],
                        "choice", 4, ["A", "B", "C"]))
    return out


# --- units: which of two quantities in different units is more, choice A/B ---------------------
# (question word, [(unit, size in the smallest unit)]): sizes are integers so values compare exactly.
UNITS = [
    ("longer", [("mm", 1), ("cm", 10), ("m", 1000), ("km", 1000000)]),
    ("heavier", [("g", 1), ("kg", 1000)]),
    ("longer", [("seconds", 1), ("minutes", 60), ("hours", 3600)]),
    ("bigger", [("KB", 1), ("MB", 1000), ("GB", 1000000)]),
    ("more", [("mL", 1), ("L", 1000)]),
]


def gen_units(rng, n):
    out = []
    for i in range(n):
        word, units = UNITS[i % len(UNITS)]
        while True:
            lo = rng.randrange(len(units) - 1)   # neighbouring units: km vs m, not km vs mm
            hi = lo + 1
            # the bigger unit has the smaller count half of the time: 2 km vs 1500 m; 2 km vs 900 m
            ratio = units[hi][1] // units[lo][1]
            a_n = rng.randrange(1, 10)
            b_n = rng.randrange(max(1, a_n * ratio // 4), a_n * ratio * 2)
            a_val, b_val = a_n * units[hi][1], b_n * units[lo][1]
            if a_val != b_val:
                break
        a, b = ("%d %s" % (a_n, units[hi][0]), a_val), ("%d %s" % (b_n, units[lo][0]), b_val)
        if (a[1] > b[1]) != ((i // len(UNITS)) % 2 == 0):  # the answer is A for half of each kind
            a, b = b, a
        q = "Which is %s? A) %s B) %s Reply with the letter only." % (word, a[0], b[0])
        out.append(item("units", i, q, "A" if a[1] > b[1] else "B", "choice", 4, ["A", "B"]))
    return out


# --- arith1: one-digit arithmetic (a + b, a - b, a * b), answer checked as a number ------------
ARITH1_KINDS = {  # kind: (operator, every (a, b) it draws from)
    "add": ("+", [(a, b) for a in range(1, 10) for b in range(1, 10)]),
    "sub": ("-", [(a, b) for a in range(1, 10) for b in range(0, a + 1)]),
    "mul": ("*", [(a, b) for a in range(2, 10) for b in range(2, 10)]),
}
ARITH1_TEMPLATES = ["What is %s? Reply with the number only.", "Calculate %s. Reply with the number only.",
                    "%s = ? Reply with the number only."]
ARITH1_VALUES = numbers([eval("%d %s %d" % (a, op, b)) for op, pairs in ARITH1_KINDS.values() for a, b in pairs])


def distinct_draws(rng, pool, n):
    """n draws from pool, without replacement until it is used up (then again), in random order."""
    out = []
    while len(out) < n:
        out += rng.sample(pool, min(len(pool), n - len(out)))
    return out


def gen_arith1(rng, n):
    out = []
    kinds = list(ARITH1_KINDS)
    per_kind = {k: distinct_draws(rng, [(t, ab) for t in range(len(ARITH1_TEMPLATES)) for ab in ARITH1_KINDS[k][1]],
                                  (n + len(kinds) - 1) // len(kinds)) for k in kinds}
    for i in range(n):
        kind = kinds[i % len(kinds)]
        t, (a, b) = per_kind[kind][i // len(kinds)]
        op = ARITH1_KINDS[kind][0]
        expr = "%d %s %d" % (a, op, b)
        val = a + b if op == "+" else a - b if op == "-" else a * b
        out.append(item("arith1", i, ARITH1_TEMPLATES[t] % expr, str(val), "number", 12, ARITH1_VALUES))
    return out


# --- one-step facts: capital, plural, past, opposite; answer checked as a word of the alphabet -
# Each family: (word list, question templates, max_tokens). The items are (word, template) pairs
# drawn without replacement, so a family of n <= len(words) * len(templates) items has no two
# identical prompts.
FACTS = {
    "capital": (CAPITALS, ["What is the capital of %s? Reply with the city's name only.",
                           "Which city is the capital of %s? Reply with the name only.",
                           "Name the capital city of %s. Reply with the name only.",
                           "What is the capital city of %s? Reply with one word."], 16),
    "plural": (PLURALS, ["What is the plural of %s? Reply with one word.",
                         "What is the plural form of the word \"%s\"? Reply with one word.",
                         "Give the plural of the noun %s. Reply with one word."], 16),
    # Asked "What is the simple past of go?", SmolLM2-135M mostly repeats the verb (9% right);
    # asked to finish "Today I go. Yesterday I" it writes the past form (docs/eval-tasks.md)
    "past": (PAST, ["Finish the sentence with the past tense: Today I %s. Yesterday I",
                    "Complete the sentence: Every day I %s. Yesterday I",
                    "What is the past tense of the verb \"%s\"? Reply with one word."], 16),
    "opposite": (OPPOSITES, ["What is the opposite of %s? Reply with one word.",
                             "What is the opposite of the word \"%s\"? Reply with one word.",
                             "Give a word that means the opposite of %s. Reply with one word."], 16),
}


def gen_facts(family):
    pairs, templates, max_tokens = FACTS[family]
    questions = {q for q, _ in pairs}
    alphabet = sorted({a for _, a in pairs})
    # a reply that echoes the question's word must not be read as an answer (the 'word' check)
    assert not questions & set(alphabet), (family, questions & set(alphabet))

    def gen(rng, n):
        draws = distinct_draws(rng, [(t, k) for t in range(len(templates)) for k in range(len(pairs))], n)
        return [item(family, i, templates[t] % pairs[k][0], pairs[k][1], "word", max_tokens, alphabet)
                for i, (t, k) in enumerate(draws)]
    return gen


# --- open: story starts and explanations, no answer (check 'open') -----------------------------
def gen_open(rng, n):
    stories = ["Write a short story about %s who %s." % (c, e) for c in STORY_CHARACTERS for e in STORY_EVENTS]
    explain = ["Explain %s to a child." % t for t in EXPLAIN_TOPICS]
    half = n // 2
    prompts = distinct_draws(rng, stories, half) + distinct_draws(rng, explain, n - half)
    rng.shuffle(prompts)
    return [item("open", i, p, None, "open", OPEN_MAX_TOKENS) for i, p in enumerate(prompts)]


FAMILIES = {
    "arith": gen_arith,
    "decimals": gen_decimals,
    "count": gen_count,
    "weekday": gen_weekday,
    "units": gen_units,
    "arith1": gen_arith1,
    "capital": gen_facts("capital"),
    "plural": gen_facts("plural"),
    "past": gen_facts("past"),
    "opposite": gen_facts("opposite"),
    "open": gen_open,
}


def write_family(out_dir, name, items):
    ids = [it["id"] for it in items]
    assert len(set(ids)) == len(ids), name
    path = os.path.join(out_dir, name + ".jsonl")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    os.replace(tmp, path)  # a half-written file never replaces a good one


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks"))
    ap.add_argument("--n", type=int, default=N_ITEMS, help="items per family (default %d; 'open': %d)" % (N_ITEMS, N_OPEN))
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help="the families to write, comma-separated (default: all)")
    args = ap.parse_args()
    if args.n < 1:
        sys.exit("make_tasks: --n must be >= 1, not %d" % args.n)
    names = args.families.split(",")
    for name in names:
        if name not in FAMILIES:
            sys.exit("make_tasks: --families: unknown family '%s' (%s)" % (name, ", ".join(FAMILIES)))
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        rng = random.Random("%d:%s" % (args.seed, name))
        n = args.n if name != "open" or args.n != N_ITEMS else N_OPEN
        write_family(args.out, name, FAMILIES[name](rng, n))


if __name__ == "__main__":
    main()
