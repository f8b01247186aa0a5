#!/usr/bin/env bash
# entropix_cases.sh — the share of generated tokens each entropix case takes, per profile:
# 5 fixed prompts × N tokens (seeds 1..5), counted from ./run's "entropix cases:" line.
#
#   tools/entropix_cases.sh MODEL.bin [-n N] [--raw] PROFILE [PROFILE ...]
#
# Used for the case-distribution table of docs/entropix.md (`make entropix-cases`).
set -euo pipefail
RUN=${RUN:-./run}
model=$1; shift
n=128; mode=()
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
        -n) n=$2; shift 2 ;;
        --raw) mode=(--raw); shift ;;
        *) echo "entropix_cases.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[[ $# -gt 0 ]] || { echo "usage: entropix_cases.sh MODEL.bin [-n N] [--raw] PROFILE..." >&2; exit 2; }
prompts=("Tell me a short story about a lighthouse." "Why is the sky blue?"
         "Write a poem about autumn leaves." "Explain how a bicycle works to a child."
         "What should I pack for a weekend hiking trip?")
for profile in "$@"; do
    counts=(0 0 0 0 0); pauses=0
    for i in 0 1 2 3 4; do
        line=$("$RUN" "$model" "${mode[@]}" -p "${prompts[$i]}" -n "$n" -s $((i + 1)) \
               --profile "$profile" 2>&1 >/dev/null | grep '^entropix cases:')
        # "entropix cases: LELV 0.0% (0), HELV ... ADAPTIVE 7.5% (6); pauses inserted: 0"
        read -r -a c <<<"$(grep -o '([0-9]*)' <<<"$line" | tr -d '()' | tr '\n' ' ')"
        for k in 0 1 2 3 4; do counts[k]=$((counts[k] + c[k])); done
        pauses=$((pauses + ${line##*: }))
    done
    total=$((counts[0] + counts[1] + counts[2] + counts[3] + counts[4]))
    awk -v p="$profile" -v t="$total" -v a="${counts[0]}" -v b="${counts[1]}" -v c="${counts[2]}" \
        -v d="${counts[3]}" -v e="${counts[4]}" -v ps="$pauses" 'BEGIN {
        printf "%-48s %4d tokens  LELV %5.1f%%  HELV %5.1f%%  LEHV %5.1f%%  HEHV %5.1f%%  ADAPTIVE %5.1f%%  pauses %d\n",
               p, t, 100*a/t, 100*b/t, 100*c/t, 100*d/t, 100*e/t, ps }'
done
