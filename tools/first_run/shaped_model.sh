#!/usr/bin/env bash
# shaped_model.sh SHAPE TOKENIZER_DIR OUT_DIR — OUT_DIR/SHAPE.q8.bin and OUT_DIR/SHAPE.q4.bin: a
# real model's shapes with random weights (tools/make_shaped_hf.py), converted by build/tools/convert.
# A step of tools/gpu_first_run.sh. Model files already there are kept (a rerun reuses them): the
# converter renames a model into place only once it is complete and checked, so a killed run
# leaves none half-written. The HF directory (1-2.5 GB of F16) is made afresh and removed after.
set -euo pipefail
[ $# = 3 ] || { echo "shaped_model: usage: shaped_model.sh SHAPE TOKENIZER_DIR OUT_DIR" >&2; exit 2; }
shape=$1 tok=$2 out=$3
mkdir -p "$out"
hf="$out/$shape-hf.tmp"
need=""
for dt in q8 q4; do
    if [ -s "$out/$shape.$dt.bin" ]; then echo "shaped_model: $out/$shape.$dt.bin is there, reused"; else need+=" $dt"; fi
done
[ -n "$need" ] || exit 0
rm -rf "$hf"
python3 tools/make_shaped_hf.py --shape "$shape" --tokenizer-dir "$tok" -o "$hf"
for dt in $need; do
    bin="$out/$shape.$dt.bin"
    build/tools/convert "$hf" "$bin" --dtype "$dt" | tail -5
    ls -l "$bin"
done
rm -rf "$hf"
