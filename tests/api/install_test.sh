#!/bin/bash
# install_test.sh BUILD RUN MODELS [CFLAGS] — `make install` as a user runs it, checked (tests/test_api_generate.c):
#   1. make install PREFIX=<tmp>/prefix: the header, libentropix.so.0.1.0 with its two symlinks,
#      libentropix.a, entropix.pc and the five programs land where docs/c-api.md says;
#   2. examples/c/generate.c built with `pkg-config --cflags --libs entropix` against that tree
#      (NEEDED libentropix.so.0, run with LD_LIBRARY_PATH) and once statically against
#      libentropix.a: both print ./run's text for the same flags (greedy, and a seeded combined
#      sampler) on stories260K;
#   3. make uninstall removes everything install wrote (the prefix holds no file afterwards);
#   4. DESTDIR: install and uninstall under a staging root.
# CFLAGS: what the outside program is compiled and linked with besides (a sanitized build's
# -fsanitize=..., whose library needs its runtime in the program). Prints "install test: ok" at
# the end; exits non-zero at the first failure, saying which.
set -euo pipefail
BUILD=$1 RUN=$2 MODELS=$3 XFLAGS=${4:-}
MODEL=$MODELS/stories260K.f32.bin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# A make started from a test that `make test` runs must not talk to that make's job server.
unset MAKEFLAGS MFLAGS MAKELEVEL
fail() { echo "install test: $*" >&2; exit 1; }
# The build's own CUDA setting: a make with another would relink the programs in that folder.
BACKEND=$(cat "$BUILD/backend.cfg" 2>/dev/null || echo CUDA=0)
mk() { make --no-print-directory BUILD="$BUILD" "$BACKEND" "$@" >"$TMP/make.log" 2>&1 || { cat "$TMP/make.log" >&2; fail "make $* failed"; }; }

P=$TMP/prefix
mk install PREFIX="$P"
for f in include/entropix.h lib/libentropix.so.0.1.0 lib/libentropix.a lib/pkgconfig/entropix.pc \
         bin/entropix-run bin/entropix-server bin/entropix-eval bin/entropix-convert bin/entropix-bench; do
    [ -f "$P/$f" ] || fail "$P/$f missing after make install"
done
[ "$(readlink "$P/lib/libentropix.so.0")" = libentropix.so.0.1.0 ] || fail "libentropix.so.0 does not point at libentropix.so.0.1.0"
[ "$(readlink "$P/lib/libentropix.so")" = libentropix.so.0 ] || fail "libentropix.so does not point at libentropix.so.0"

export PKG_CONFIG_PATH=$P/lib/pkgconfig
cc -std=c11 -Wall -Wextra -Werror $XFLAGS examples/c/generate.c $(pkg-config --cflags --libs entropix) -o "$TMP/generate" \
    || fail "examples/c/generate.c does not build with pkg-config's flags"
readelf -d "$TMP/generate" | grep -q 'NEEDED.*\[libentropix.so.0\]' || fail "generate does not need libentropix.so.0"
cc -std=c11 -Wall -Wextra -Werror $XFLAGS examples/c/generate.c $(pkg-config --cflags entropix) "$P/lib/libentropix.a" \
    $(pkg-config --static --libs-only-l entropix | sed 's/-lentropix//') -o "$TMP/generate-static" \
    || fail "examples/c/generate.c does not link statically against libentropix.a"
readelf -d "$TMP/generate-static" | grep -q libentropix && fail "generate-static still needs libentropix.so"

compare() {  # compare NAME RUN-FLAGS -- GENERATE-FLAGS
    local name=$1; shift
    local runflags=() genflags=()
    while [ "$1" != -- ]; do runflags+=("$1"); shift; done; shift
    genflags=("$@")
    "$RUN" "$MODEL" --raw -p "Once upon a time" -n 48 -t 1 -c 256 "${runflags[@]}" >"$TMP/run.txt" 2>/dev/null \
        || fail "./run $name failed"
    LD_LIBRARY_PATH=$P/lib "$TMP/generate" "$MODEL" "Once upon a time" -n 48 -t 1 -c 256 "${genflags[@]}" \
        >"$TMP/gen.txt" 2>/dev/null || fail "generate $name failed"
    "$TMP/generate-static" "$MODEL" "Once upon a time" -n 48 -t 1 -c 256 "${genflags[@]}" \
        >"$TMP/gen-static.txt" 2>/dev/null || fail "generate-static $name failed"
    cmp -s "$TMP/run.txt" "$TMP/gen.txt" || fail "$name: generate's text differs from ./run's: $(cat "$TMP/gen.txt") vs $(cat "$TMP/run.txt")"
    cmp -s "$TMP/run.txt" "$TMP/gen-static.txt" || fail "$name: the static generate's text differs from ./run's"
    echo "install test: $name: $(wc -c <"$TMP/run.txt") bytes equal ./run's (shared and static)"
}
compare greedy --sampler greedy -- --sampler greedy
compare "combined seed 42" --sampler combined -s 42 --temp 1.0 -- --sampler combined -s 42 --temp 1.0

mk uninstall PREFIX="$P"
left=$(find "$P" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"

S=$TMP/stage
mk install PREFIX=/usr/local DESTDIR="$S"
[ -f "$S/usr/local/include/entropix.h" ] && [ -L "$S/usr/local/lib/libentropix.so" ] || fail "DESTDIR not honoured"
grep -q '^prefix=/usr/local$' "$S/usr/local/lib/pkgconfig/entropix.pc" || fail "entropix.pc under DESTDIR names the staging root"
mk uninstall PREFIX=/usr/local DESTDIR="$S"
left=$(find "$S" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall DESTDIR=... left: $left"
echo "install test: ok"
