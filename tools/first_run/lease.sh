#!/usr/bin/env bash
# lease.sh — the first-contact benchmarks on a GPU machine lent for minutes, with no compiler, no
# test libraries and no network (docs/gpu-first-run.md, "A short lease"): `pack` here builds what
# the benchmarks run and packs it small enough to travel with the repository; `run` there unpacks
# it and runs tools/gpu_first_run.sh --prebuilt --benchmarks, and packs the report into one file.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

usage() {
    cat <<'EOF'
usage: tools/first_run/lease.sh pack [--arch SM] [--dir DIR] [--shared DIR] [--jobs N]
       tools/first_run/lease.sh run [--dir DIR] [--budget MIN] [--out DIR] [-- gpu_first_run options]
  pack  here, where the compilers are: a clean clone of HEAD built for one GPU architecture
        (--arch, default 90: H100 and H200) with host code for AVX2 (any x86-64 host of the
        last decade runs it); DIR/prebuilt.tar.xz (DIR default .lease, which git ignores)
        holds build/tools/convert, build/cuda/tools/bench and build/cuda/tools/server, the
        libraries they link beyond the C library's and CUDA's, and the tokenizers the shaped
        models take (SHARED/testdata/tokenizers/qwen3, llama3); prints its size
  run   there, in a fresh copy of the repository: unpacks DIR/prebuilt.tar.xz (the programs
        into build/; a different one already there is an error), links the carried libraries
        the machine lacks, finds CUDA's (the toolkit's lib64, Python's nvidia-* packages), runs
        tools/gpu_first_run.sh --prebuilt --benchmarks --budget MIN (default 7) --out OUT
        (default build/first-run/lease-YYYYMMDD-HHMMSS) and writes OUT.tar.gz: the report, one
        file to bring back; exits as gpu_first_run.sh does
EOF
}
die() { echo "lease: $*" >&2; exit 2; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
VERB=$1
shift
DIR=.lease ARCH=90 SHARED_DIR="${SHARED:-../shared}" JOBS=$(nproc 2>/dev/null || echo 2) BUDGET=7 OUT=build/first-run/lease-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        --arch|--dir|--shared|--jobs|--budget|--out)
            [ $# -ge 2 ] || die "$1 needs a value"
            case "$1" in
                --arch) ARCH=$2 ;; --dir) DIR=$2 ;; --shared) SHARED_DIR=$2 ;;
                --jobs) JOBS=$2 ;; --budget) BUDGET=$2 ;; --out) OUT=$2 ;;
            esac
            shift ;;
        *) die "unknown option '$1' (--help lists them)" ;;
    esac
    shift
done
[[ "$ARCH" =~ ^[1-9][0-9]{1,2}a?$ ]] || die "--arch '$ARCH': a compute capability without its dot, as 90 or 80"
[[ "$BUDGET" =~ ^[1-9][0-9]{0,2}$ ]] || die "--budget '$BUDGET': a whole number of minutes from 1"
PROGRAMS="build/tools/convert build/cuda/tools/bench build/cuda/tools/server"
TOKENIZERS="qwen3 llama3"
# Never carried: the C library's own, the compiler's runtime (every image that runs Python has
# newer ones) and CUDA's (the driver's libcuda must be the machine's; cuBLAS and NCCL are hundreds
# of megabytes, and a CUDA image has them).
SYSTEM_LIB='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|linux-vdso|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'

pack() {
    [ -d "$SHARED_DIR/testdata/tokenizers" ] || die "--shared $SHARED_DIR: no testdata/tokenizers there"
    local src
    src=$(mktemp -d "${TMPDIR:-/tmp}/lease-XXXXXX") || die "no temporary directory"
    trap "rm -rf '$src'" EXIT  # the clone and its build go, whatever ends the script
    git clone -q . "$src/repo" || die "git clone of this repository failed"
    echo "lease: building $PROGRAMS for sm_$ARCH, host code for AVX2, in a clean clone of $(git rev-parse --short HEAD)"
    make --no-print-directory -C "$src/repo" -j"$JOBS" CUDA=1 \
        CUDA_ARCHS="-gencode arch=compute_$ARCH,code=sm_$ARCH" ARCHFLAGS="-mavx2 -mfma -mf16c" $PROGRAMS ||
        die "the build failed (above)"
    local stage="$src/stage" p lib name
    mkdir -p "$stage/lib" "$stage/shared/testdata/tokenizers"
    (cd "$src/repo" && cp --parents $PROGRAMS "$stage/") || die "the programs are not where the build put them"
    for p in $PROGRAMS; do strip --strip-debug "$stage/$p" || die "strip $p failed"; done  # -g: not needed to run
    for p in $PROGRAMS; do
        ldd "$src/repo/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
        name=$(basename "$lib")
        [[ "$name" =~ $SYSTEM_LIB ]] || cp -L "$lib" "$stage/lib/$name"
    done
    for t in $TOKENIZERS; do cp -r "$SHARED_DIR/testdata/tokenizers/$t" "$stage/shared/testdata/tokenizers/"; done
    mkdir -p "$DIR"
    tar -C "$stage" -cJf "$DIR/prebuilt.tar.xz.tmp" . && mv "$DIR/prebuilt.tar.xz.tmp" "$DIR/prebuilt.tar.xz" ||
        die "could not write $DIR/prebuilt.tar.xz"
    echo "lease: $DIR/prebuilt.tar.xz, $(du -m "$DIR/prebuilt.tar.xz" | cut -f1) MiB (with the repository, under 64 MiB travels):"
    echo "  carried libraries: $(ls "$stage/lib" | paste -sd' ')"
    echo "  there: tools/first_run/lease.sh run --dir $DIR --out \$OUT/first-run (name $DIR in the call's carry)"
}

# The directories that hold each library the programs lack, searched where CUDA images keep them.
find_missing() {
    local roots name hit
    roots="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu"
    roots+=" $(python3 -c 'import site; print(*site.getsitepackages())' 2>/dev/null)"
    for name in $(for p in $PROGRAMS; do ldd "$p"; done | awk '/not found/ {print $1}' | sort -u); do
        hit=$(for r in $roots; do [ -d "$r" ] && find -L "$r" -maxdepth 5 -name "$name" -print -quit 2>/dev/null; done | head -1)
        [ -n "$hit" ] && dirname "$hit"
    done | sort -u
}

run() {
    [ -f "$DIR/prebuilt.tar.xz" ] || die "no $DIR/prebuilt.tar.xz (lease.sh pack makes it; carry $DIR)"
    local unpacked="$DIR/unpacked" need="$DIR/unpacked/lib-needed" lib d p
    rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$DIR/prebuilt.tar.xz" ||
        die "could not unpack $DIR/prebuilt.tar.xz"
    # Placed in a fresh copy of the repository (a device call's), never over a build of this one:
    # make would take an AVX2, one-architecture program for its own and not build it again.
    for p in $PROGRAMS; do
        [ ! -e "$p" ] || cmp -s "$unpacked/$p" "$p" ||
            die "$p exists and is not the packed one: run goes in a fresh copy of the repository, not over a build"
    done
    for p in $PROGRAMS; do mkdir -p "$(dirname "$p")" && cp "$unpacked/$p" "$p" || die "could not place $p"; done
    # A carried library goes on the path only where the machine has none of that name: its own
    # copies stay in use for everything else this run starts (Python among them).
    mkdir -p "$need"
    for lib in "$unpacked"/lib/*; do
        [ -e "$lib" ] || continue
        ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qxF "$(basename "$lib")" || ln -sf "$(realpath "$lib")" "$need/"
    done
    export LD_LIBRARY_PATH="$(realpath "$need")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for d in $(find_missing); do LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
    for p in $PROGRAMS; do
        ! ldd "$p" | grep 'not found' || die "$p: the libraries above are not on this machine"
    done
    echo "lease: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    mkdir -p "$(dirname "$OUT")"
    tools/gpu_first_run.sh --prebuilt --benchmarks --budget "$BUDGET" --shared "$unpacked/shared" --out "$OUT" "$@"
    local rc=$?
    if [ -d "$OUT" ]; then
        tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")" && echo "lease: the report in $OUT.tar.gz"
    else echo "lease: gpu_first_run.sh wrote no report (above)" >&2
    fi
    return $rc
}

case "$VERB" in
    pack) pack ;;
    run) run "$@" ;;
    -h|--help) usage ;;
    *) die "unknown verb '$VERB': pack or run (--help)" ;;
esac
