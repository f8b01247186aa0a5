#!/usr/bin/env bash
# ppl_vs_llama.sh — perplexity of llama.cpp's quantisation types, measured by llama.cpp's
# llama-perplexity and by ours opening the same GGUF (converted once into a cache: each type kept
# exactly where ours holds it, else q8), on one text with the same protocol (windows of CTX
# tokens, the second half of each scored).
#   tools/ppl_vs_llama.sh LLAMA_BIN_DIR SOURCE.gguf TEXT [TYPE...]
#   (default types: source Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0: "source" is SOURCE.gguf itself, the
#    others are made by llama-quantize --allow-requantize from it)
# LLAMA_BIN_DIR holds llama-quantize and llama-perplexity (docs/benchmarking.md builds them).
# Environment: BUILD (default build), CTX (512), THREADS (2), OUT (default $BUILD/ppl_vs_llama:
# the quantised GGUFs, the cache, each run's log; a log holding its result is not run again).
# Prints a Markdown table: type, file size, llama.cpp's perplexity, ours, ours/llama.cpp - 1.
set -euo pipefail
bin=${1:?usage: ppl_vs_llama.sh LLAMA_BIN_DIR SOURCE.gguf TEXT [TYPE...]}
src=${2:?usage: ppl_vs_llama.sh LLAMA_BIN_DIR SOURCE.gguf TEXT [TYPE...]}
text=${3:?usage: ppl_vs_llama.sh LLAMA_BIN_DIR SOURCE.gguf TEXT [TYPE...]}
shift 3
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(source Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0)
build=${BUILD:-build}
ctx=${CTX:-512}
threads=${THREADS:-2}
out=${OUT:-$build/ppl_vs_llama}
mkdir -p "$out/cache"
echo "| type | MB | llama-perplexity | ours (same GGUF) | ours / llama.cpp |"
echo "|---|---:|---:|---:|---:|"
for t in "${types[@]}"; do
    g=$src
    if [ "$t" != source ]; then
        g=$out/$(basename "${src%.gguf}").$t.gguf
        [ -f "$g" ] || "$bin/llama-quantize" --allow-requantize "$src" "$g" "$t" > "$g.log" 2>&1 \
            || { echo "$t: llama-quantize failed, see $g.log" >&2; exit 1; }
    fi
    # a log that holds its result already is reused: a rerun measures only what is missing
    grep -q "Final estimate: PPL" "$out/$t.llama.log" 2>/dev/null ||
        "$bin/llama-perplexity" -m "$g" -f "$text" -c "$ctx" -t "$threads" > "$out/$t.llama.log" 2>&1 || true
    grep -q "^perplexity [0-9]" "$out/$t.ours.log" 2>/dev/null ||
        EMX_CACHE="$out/cache" "$build/tools/perplexity" "$g" "$text" -c "$ctx" -t "$threads" > "$out/$t.ours.log" 2>&1 || true
    theirs=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/$t.llama.log")
    ours=$(awk '/^perplexity [0-9]/ {print $2}' "$out/$t.ours.log")
    [ -n "$theirs" ] && [ -n "$ours" ] || { echo "$t: a perplexity run failed, see $out/$t.*.log" >&2; exit 1; }
    mb=$(awk -v b="$(stat -c %s "$g")" 'BEGIN {printf "%.1f", b / 1e6}')
    printf '| %s | %s | %s | %s | %+.2f%% |\n' "$t" "$mb" "$theirs" "$ours" \
        "$(awk -v a="$ours" -v b="$theirs" 'BEGIN {print (a / b - 1) * 100}')"
done
