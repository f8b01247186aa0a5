#!/usr/bin/env bash
# quant_quality.sh — what each weight type costs: converts one source model to f32, bf16, q8, q4
# and q4_1 and prints the perplexity of each on a text, with the change against f32.
#   tools/quant_quality.sh SOURCE TEXT [extra convert args...]
#   make quality        (SmolLM2 on tests/data/perplexity/text.txt, stories260K on tinystory.txt)
# Environment: BUILD (default build), CTX (512), THREADS (1).
set -euo pipefail
src=${1:?usage: quant_quality.sh SOURCE TEXT [convert args]}
text=${2:?usage: quant_quality.sh SOURCE TEXT [convert args]}
shift 2
build=${BUILD:-build}
out=$build/quality/$(basename "${src%.*}")
mkdir -p "$out"
printf '%-6s %12s %10s\n' dtype perplexity vs_f32
base=""
for dt in f32 bf16 q8 q4 q4_1; do
    model=$out/model.$dt.bin
    [ -f "$model" ] || "$build/tools/convert" "$src" "$model" --dtype "$dt" "$@" > "$model.log" 2>&1 \
        || { echo "$dt: conversion failed, see $model.log"; exit 1; }
    ppl=$("$build/tools/perplexity" "$model" "$text" -c "${CTX:-512}" -t "${THREADS:-1}" 2>&1 \
          | awk '/^perplexity/ {print $2}')
    [ -n "$ppl" ] || { echo "$dt: perplexity failed"; exit 1; }
    [ -n "$base" ] || base=$ppl
    printf '%-6s %12s %+9.2f%%\n' "$dt" "$ppl" "$(awk -v a="$ppl" -v b="$base" 'BEGIN {print (a / b - 1) * 100}')"
done
