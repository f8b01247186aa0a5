#!/usr/bin/env bash
# gpu_first_run.sh — the first contact with a machine that has a GPU (docs/gpu-first-run.md): build,
# the GPU tests, compute-sanitizer, the kernel lab, the benchmarks on a Qwen3-0.6B- and a
# Llama-3.2-1B-shaped model, the agent pool on 2 GPUs, and one report (Markdown + JSON) of all of
# it, without network, in about 30 minutes. --emulated runs the same steps on the CPU emulation
# layer (tests/cuda_emu) at small sizes and skips, saying why, what needs the hardware.
#
# Each step: a name, a command, a timeout, its log under OUT/logs/; the run goes on after a
# failure and exits 1 if any step failed (2: bad usage). tools/first_run/report.py writes
# OUT/report.md and OUT/report.json after every step it ran, so an interrupted run leaves a report.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)

usage() {
    cat <<'EOF'
usage: tools/gpu_first_run.sh [options]
  Builds, runs make test-gpu's tests, compute-sanitizer (memcheck, racecheck, synccheck), the
  kernel lab of every family (each version checked and timed: report.md's "kernel lab timings",
  the table of docs/kernel-lab.md), bench-kernels, bench speed/sampler/agents on shaped models, the
  agent pool on 2 GPUs when there are 2, and writes OUT/report.md and OUT/report.json.
  --emulated          the same steps on the CPU emulation layer, small sizes (stories260K);
                      what needs a GPU (compute-sanitizer, ncu, nvidia-smi, shaped models) is
                      skipped with the reason in the report
  --prebuilt          build nothing: use the binaries already in build/, made on another
                      machine for this GPU's architecture (for a GPU machine without compilers
                      or test libraries); the build step checks that every one is there and
                      converts the test models with build/tools/convert
  --benchmarks        the benchmarks alone (the shaped models, bench speed/sampler/agents, the
                      decode paths, the timelines, the server's slots): no tests, sanitizers,
                      labs or ncu, and only bench, the server and the converter built or checked
                      (a short lease: tools/first_run/lease.sh packs them)
  --out DIR           report directory, new or empty (default build/first-run/YYYYMMDD-HHMMSS)
  --shared DIR        the shared test data (default $SHARED or ../shared)
  --jobs N            make -j and test -j (default: the CPU count)
  --budget MIN        start no step after MIN minutes; steps left are skipped and the run
                      fails (default 30)
  --only LIST         run only these steps (comma-separated names, see --list); the others are
                      skipped as not selected
  --list              print the steps' names for the chosen mode and exit
  --fail-step NAME    test hook: run `false` instead of step NAME's command (repeatable); the
                      test of this script uses it to check that a failed step fails the run
  -h, --help          this text
EOF
}

die() { echo "gpu_first_run: $*" >&2; exit 2; }

EMULATED=0 PREBUILT=0 BENCHMARKS=0 OUT="" SHARED_DIR="${SHARED:-../shared}" JOBS=$(nproc 2>/dev/null || echo 2) BUDGET_MIN=30
ONLY="" LIST=0 FAIL_STEPS=" "
while [ $# -gt 0 ]; do
    case "$1" in
        --emulated) EMULATED=1 ;;
        --prebuilt) PREBUILT=1 ;;
        --benchmarks) BENCHMARKS=1 ;;
        --list) LIST=1 ;;
        -h|--help) usage; exit 0 ;;
        --out|--shared|--jobs|--budget|--only|--fail-step)
            [ $# -ge 2 ] || die "$1 needs a value"
            case "$1" in
                --out) OUT=$2 ;;
                --shared) SHARED_DIR=$2 ;;
                --jobs) JOBS=$2 ;;
                --budget) BUDGET_MIN=$2 ;;
                --only) ONLY=$2 ;;
                --fail-step) FAIL_STEPS+="$2 " ;;
            esac
            shift ;;
        *) die "unknown option '$1' (--help lists them)" ;;
    esac
    shift
done
[[ "$JOBS" =~ ^[1-9][0-9]{0,2}$ ]] || die "--jobs '$JOBS': a whole number from 1 to 999"
[[ "$BUDGET_MIN" =~ ^[1-9][0-9]{0,3}$ ]] || die "--budget '$BUDGET_MIN': a whole number of minutes from 1"

# The make that runs here is this script's own, not a sub-make of one that ran this script.
unset MAKEFLAGS MFLAGS MAKELEVEL
MAKE_CMD="make --no-print-directory SHARED=$SHARED_DIR"
# The C suites' CPU side is the CPU-only build (build/cpu/): with nvcc, build/run has the CUDA
# backend and --device auto would put the reference runs on the GPU.
TEST_ENV="OMP_WAIT_POLICY=passive EMX_SHARED=$SHARED_DIR EMX_BUILD=build EMX_RUN=build/cpu/run"
LAB_FAMILIES="matvec matvec_fused gemm attention rmsnorm rope swiglu embedding logits_metrics attn_metrics sampling agent_pool"
GPU_SUITES="run_cuda pool_cuda bench eval_cuda"
MEMCHECK_SUITES="attention matvec sampling forward_cuda forward_cuda_pair agents_cuda gemm logits_metrics attn_metrics"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_BIN=$(dirname "$NVCC")
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_BIN/compute-sanitizer")
NCU=$(command -v ncu || echo "$CUDA_BIN/ncu")

# ---- the plan: every step of the mode, in order -------------------------------------------------
# add NAME KIND TIMEOUT_S COMMAND | skip NAME KIND REASON. KIND tells report.py which figures to
# read from the log (info build tests sanitizer lab bench speed timeline server sampler agents ncu
# model).
S_NAME=() S_KIND=() S_TIMEOUT=() S_CMD=() S_SKIP=()
# --benchmarks plans the steps of these kinds alone: the machine, the build and the benchmarks.
planned() { [ "$BENCHMARKS" = 0 ] || [[ " info build model speed paths timeline server sampler agents " == *" $1 "* ]]; }
add() { planned "$2" || return 0; S_NAME+=("$1"); S_KIND+=("$2"); S_TIMEOUT+=("$3"); S_CMD+=("$4"); S_SKIP+=(""); }
skip() { planned "$2" || return 0; S_NAME+=("$1"); S_KIND+=("$2"); S_TIMEOUT+=(0); S_CMD+=(""); S_SKIP+=("$3"); }

if [ "$EMULATED" = 1 ]; then
    # The emulator's GPUs (tests/cuda_emu/README.md): EMU_DEVICE_COUNT, 4 unless set.
    N_GPUS=${EMU_DEVICE_COUNT:-4}
    GRUN=build/emu/run GBENCH=build/emu/tools/bench GEVAL=build/emu/tools/eval GSERVER=build/emu/tools/server
    DEVICE_DESC="CUDA emulation layer (tests/cuda_emu), $N_GPUS emulated GPUs: emulation timings, not GPU timings"
else
    N_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    GRUN=build/cuda/run GBENCH=build/cuda/tools/bench GEVAL=build/cuda/tools/eval GSERVER=build/cuda/tools/server
    DEVICE_DESC=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
                  sed 's/^ *\([0-9]*\) /\1 x /' | paste -sd, -)
    [ -n "$DEVICE_DESC" ] || DEVICE_DESC="no GPU found by nvidia-smi"
fi
NO_HW="emulated: needs a GPU"

add machine info 60 "uname -a; echo \"cpus: \$(nproc)\"; free -g | head -2; gcc --version | head -1; \
echo \"nvcc: \$({ $NVCC --version 2>/dev/null || echo none; } | tail -1)\"; echo \"commit: \$(git rev-parse HEAD 2>/dev/null)\"; \
echo \"shared: $SHARED_DIR\"; ls $SHARED_DIR/testdata >/dev/null"
if [ "$EMULATED" = 1 ]; then
    skip gpu-info info "$NO_HW (nvidia-smi); the emulator's $N_GPUS devices stand in"
else
    add gpu-info info 60 "nvidia-smi && nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.memory,pci.bus_id --format=csv"
fi

# The programs the steps run. After the build step no step calls make: the binaries are run
# directly, so that a --prebuilt run needs neither a compiler nor the test libraries' headers.
if [ "$EMULATED" = 1 ]; then
    KERNEL_TESTS=build/tests/emu_tests BENCH_KERNELS=build/emu/bench_kernels LAB_DIR=build/emu/lab
    BUILD_TARGETS="all build/tests/tests test-models $GRUN $GBENCH $GEVAL $GSERVER $KERNEL_TESTS $BENCH_KERNELS"
else
    KERNEL_TESTS=build/cuda/kernel_tests BENCH_KERNELS=build/cuda/bench_kernels LAB_DIR=build/cuda/lab
    BUILD_TARGETS="all build/tests/tests test-models cuda $KERNEL_TESTS $GEVAL $BENCH_KERNELS"
fi
LABS=$(printf "$LAB_DIR/%s " $LAB_FAMILIES)
# The C suites also run the CPU-only bench and eval (bench::*, eval_cuda::*: the CPU side).
PROGRAMS="build/cpu/run build/cpu/tools/bench build/cpu/tools/eval build/tools/convert build/tests/tests $GRUN $GBENCH $GEVAL $GSERVER $KERNEL_TESTS $BENCH_KERNELS $LABS"
TEST_MODELS_CMD="$MAKE_CMD -k -o build/tools/convert test-models || echo 'some test models were not made (above)'"
VERSION_PROG=$GRUN  # --prebuilt: the program that must name the CUDA backend
if [ "$BENCHMARKS" = 1 ]; then  # what the benchmark steps run: no test, no test model but
    # stories260K's when emulated (its benchmarks' model)
    PROGRAMS="build/tools/convert $GBENCH $GSERVER" BUILD_TARGETS="build/tools/convert $GBENCH $GSERVER" LABS=""
    [ "$EMULATED" = 0 ] || BUILD_TARGETS+=" build/models/stories260K.q8.bin build/models/stories260K.q4.bin"
    TEST_MODELS_CMD="true" VERSION_PROG=$GBENCH
fi
if [ "$PREBUILT" = 1 ]; then
    # Every program there and runnable here (a missing library shows in ldd), the GPU one with its
    # CUDA backend; the test models converted by the prebuilt converter (make -o: never remade),
    # those whose sources this --shared lacks named by make -k and left out: a test that reads one
    # fails in its own step.
    add build build 600 "for p in $PROGRAMS; do [ -x \$p ] || { echo \"--prebuilt: no \$p (build it elsewhere for this GPU and copy build/ here)\"; exit 1; }; \
! ldd \$p | grep 'not found' || { echo \"--prebuilt: \$p cannot load the libraries above\"; exit 1; }; done; \
$VERSION_PROG --version || exit 1; $TEST_MODELS_CMD"
else
    add build build $([ "$EMULATED" = 1 ] && echo 1800 || echo 1200) "$MAKE_CMD -j$JOBS $BUILD_TARGETS $LABS"
fi
if [ "$EMULATED" = 1 ]; then
    # A subset that takes under a minute on 2 cores (the whole emulated suite is make test's).
    add kernel-tests tests 600 "$TEST_ENV LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp $KERNEL_TESTS -j$JOBS --verbose \
--filter '@(attention|matvec|rmsnorm|logits_metrics)/*'"
else
    add kernel-tests tests 300 "EMX_SHARED=$SHARED_DIR EMX_BUILD=build $KERNEL_TESTS -j$JOBS --verbose"
fi
# make test-gpu's C suites, one step each so that one failing does not hide the others. Emulated,
# a whole generation takes minutes (every GPU thread is a fiber under ASan: run_cuda's greedy test
# 230 s on 2 cores), so each suite runs its quick tests; make test runs them all.
declare -A EMU_SUITE_FILTER=([run_cuda]=device_errors_are_one_line [pool_cuda]=device_list_errors
                             [bench]='@(gpu_speed_report|gpu_sampler_and_agents)')
for s in $GPU_SUITES; do
    filter='*'
    if [ "$EMULATED" = 1 ]; then
        filter=${EMU_SUITE_FILTER[$s]:-}
        [ -n "$filter" ] || { skip "suite-$s" tests "emulated: its tests run whole generations (minutes each emulated); make test runs them"; continue; }
    fi
    add "suite-$s" tests 600 "$TEST_ENV EMX_GPU_RUN=$GRUN EMX_GPU_BENCH=$GBENCH EMX_GPU_EVAL=$GEVAL build/tests/tests -j1 --verbose --filter '$s/$filter'"
done

# The models the benchmarks run on: real shapes, random weights (tools/make_shaped_hf.py), or
# stories260K from test-models when emulated.
if [ "$EMULATED" = 1 ]; then
    MODELS="stories260K:build/models/stories260K"
    for m in qwen3-0.6b llama3.2-1b; do skip "model-$m" model "emulated: too large to run emulated; build/models/stories260K.{q8,q4}.bin stand in"; done
    # Emulated, a decode step of stories260K takes about 0.3 s and a prefill token 0.4 s.
    DEV="--device cuda:0" SPEED="-p 8 -n 4 --runs 1" SAMPLER="-n 4 --runs 1" AGENTS="-n 4 --runs 1 --agents 8 --check-every 2"
    TIMELINE="-p 0 -n 2 --runs 1" SLOTS="--parallel 1,4,4:EMX_CUDA_FUSED=1 --clients 4 --requests 1 --max-tokens 4"
else
    MODELS="qwen3-0.6b:build/shaped/qwen3-0.6b llama3.2-1b:build/shaped/llama3.2-1b"
    for m in qwen3-0.6b:qwen3 llama3.2-1b:llama3; do
        add "model-${m%%:*}" model 600 "tools/first_run/shaped_model.sh ${m%%:*} $SHARED_DIR/testdata/tokenizers/${m#*:} build/shaped"
    done
    DEV="--device cuda:0" SPEED="-p 512 -n 128 --runs 3" SAMPLER="-n 128 --runs 3" AGENTS="-n 64 --runs 2 --agents 8 --check-every 5"
    TIMELINE="-p 0 -n 128 --runs 3" SLOTS="--parallel 1,8,8:EMX_CUDA_FUSED=1,1,8,8:EMX_CUDA_FUSED=1 --clients 8 --requests 2 --max-tokens 128"
fi
# The order is what a short lease most needs first (--budget skips what is left): the new decode
# paths (the persistent kernel beside the graph path, its timeline, the sampler through it, the
# server's slots), then the figures earlier runs already recorded.
FIRST=${MODELS%% *}
# The decode step as one persistent kernel (docs/cuda.md, "One launch a token"), alternated round
# by round with the graph path in one run: their µs a token and ratio (bench speed --persistent).
for m in $MODELS; do
    for dt in q8 q4; do
        if [ "$EMULATED" = 1 ]; then
            skip "paths-${m%%:*}-$dt" paths "emulated: stories260K's layers mix dtypes, which the persistent kernel does not take; the emulated decode_persistent and forward_cuda_persistent suites run it"
        else add "paths-${m%%:*}-$dt" paths 600 "$GBENCH speed ${m#*:}.$dt.bin $DEV $SPEED --persistent"
        fi
    done
done
# The persistent kernel after 4096 tokens of context (f16 cache): what the attention phase costs
# at that length beside its depth-0 figures above.
if [ "$EMULATED" = 1 ]; then skip "paths-d4096-${FIRST%%:*}-q8" paths "emulated: stories260K holds 512 positions, and 4096 would take hours emulated"
else add "paths-d4096-${FIRST%%:*}-q8" paths 600 "$GBENCH speed ${FIRST#*:}.q8.bin $DEV $SPEED -d 4096 --cache-type f16 --persistent"
fi
# The same token through the persistent kernel: its one launch split between the phases by its
# blocks' clocks, with each phase's time at its grid barrier (bench speed --timeline --persistent).
for m in $MODELS; do
    if [ "$EMULATED" = 1 ]; then
        skip "timeline-persistent-${m%%:*}-q8" timeline "emulated: stories260K stays on the graph path (the emulated bench and forward_cuda_timeline suites run it on llama3-tiny)"
    else add "timeline-persistent-${m%%:*}-q8" timeline 600 "$GBENCH speed ${m#*:}.q8.bin $DEV $TIMELINE --timeline --persistent"
    fi
done
# Entropix against greedy with the persistent kernel, which makes the decision's statistics in its
# launch (bench sampler --persistent).
for m in $MODELS; do
    if [ "$EMULATED" = 1 ]; then
        skip "sampler-persistent-${m%%:*}-q8" sampler "emulated: stories260K's layers mix dtypes, which the persistent kernel does not take; the emulated bench gpu_sampler_and_agents test runs it"
    else add "sampler-persistent-${m%%:*}-q8" sampler 600 "$GBENCH sampler ${m#*:}.q8.bin $DEV $SAMPLER --persistent"
    fi
done
# The server's slots decoding together on the GPU (several states' rows in one step): aggregate
# tok/s at 1 and 8 slots, and 8 with the step on the separate kernels (EMX_CUDA_FUSED=1: the
# fused layer for single rows only), alternated; every request's text the same whatever the slots
# (tools/bench/server_parallel.py --check-texts: a slot beside others gives what it gives alone).
for m in $MODELS; do
    add "server-slots-${m%%:*}-q8" server 600 "python3 tools/bench/server_parallel.py ${m#*:}.q8.bin --server $GSERVER $DEV --threads 1 --completions --check-texts $SLOTS"
done
for m in $MODELS; do
    for dt in q8 q4; do add "speed-${m%%:*}-$dt" speed 600 "$GBENCH speed ${m#*:}.$dt.bin $DEV $SPEED"; done
done
# On a GPU, the decode step three ways, alternated (the q8 rows above are the default, the last):
# the separate kernels of each layer (EMX_CUDA_FUSED=0), the fused decode layer launched plainly
# (EMX_CUDA_PDL=0), the fused layer with programmatic dependent launch (the default on sm_90;
# docs/cuda.md).
if [ "$EMULATED" != 1 ]; then
    for m in $MODELS; do
        add "speed-separate-${m%%:*}-q8" speed 600 "EMX_CUDA_FUSED=0 EMX_CUDA_PDL=0 $GBENCH speed ${m#*:}.q8.bin $DEV $SPEED"
        add "speed-fused-${m%%:*}-q8" speed 600 "EMX_CUDA_PDL=0 $GBENCH speed ${m#*:}.q8.bin $DEV $SPEED"
        add "speed-pdl-${m%%:*}-q8" speed 600 "$GBENCH speed ${m#*:}.q8.bin $DEV $SPEED"
    done
fi
# Where one token's time goes: each phase of the decode step timed by CUDA events between direct
# launches, beside its bytes in the bandwidth model, and the graph path's token alternated with it
# (bench speed --timeline, docs/cuda.md).
for m in $MODELS; do add "timeline-${m%%:*}-q8" timeline 600 "$GBENCH speed ${m#*:}.q8.bin $DEV $TIMELINE --timeline"; done
for m in $MODELS; do add "sampler-${m%%:*}-q8" sampler 600 "$GBENCH sampler ${m#*:}.q8.bin $DEV $SAMPLER"; done
for m in $MODELS; do add "agents-${m%%:*}-q8" agents 600 "$GBENCH agents ${m#*:}.q8.bin $DEV $AGENTS"; done
# Decode and prefill after 4096 tokens of context, with the f32 and the f16 KV cache: what the
# attention costs at that length, and what halving its bytes changes.
for c in f32 f16; do
    if [ "$EMULATED" = 1 ]; then skip "speed-d4096-${FIRST%%:*}-q8-$c" speed "emulated: stories260K holds 512 positions, and 4096 would take hours emulated"
    else add "speed-d4096-${FIRST%%:*}-q8-$c" speed 600 "$GBENCH speed ${FIRST#*:}.q8.bin $DEV $SPEED -d 4096 --cache-type $c"
    fi
done
if [ "$N_GPUS" -ge 2 ]; then
    add "agents-2gpu-${FIRST%%:*}-q8" agents 600 "$GBENCH agents ${FIRST#*:}.q8.bin $DEV --devices cuda:0,cuda:1 $AGENTS"
else
    skip "agents-2gpu-${FIRST%%:*}-q8" agents "needs 2 GPUs, this machine has $N_GPUS (the NCCL pool)"
fi

if [ "$EMULATED" = 1 ]; then
    # Every family emulated takes minutes: one shows the program runs (make test-first-run's budget).
    add bench-kernels bench 600 "$BENCH_KERNELS --emu --only rmsnorm"
else
    add bench-kernels bench 300 "$BENCH_KERNELS"
fi
SAN_ENV="EMX_SHARED=$SHARED_DIR EMX_BUILD=build"
for s in $MEMCHECK_SUITES; do
    if [ "$EMULATED" = 1 ]; then skip "memcheck-$s" sanitizer "$NO_HW (compute-sanitizer); emulated kernels run under ASan and UBSan instead"
    elif [ ! -x "$SANITIZER" ]; then skip "memcheck-$s" sanitizer "no compute-sanitizer at $SANITIZER"
    else add "memcheck-$s" sanitizer 300 "$SAN_ENV $SANITIZER --tool memcheck --error-exitcode 1 --target-processes all build/cuda/kernel_tests -j1 --verbose --filter '$s/*'"
    fi
done
for tool in racecheck synccheck; do
    if [ "$EMULATED" = 1 ]; then skip "$tool-attention" sanitizer "$NO_HW (compute-sanitizer); the emulator's reverse schedule finds missing barriers instead"
    elif [ ! -x "$SANITIZER" ]; then skip "$tool-attention" sanitizer "no compute-sanitizer at $SANITIZER"
    else add "$tool-attention" sanitizer 300 "$SAN_ENV $SANITIZER --tool $tool --error-exitcode 1 --target-processes all build/cuda/kernel_tests -j1 --verbose --filter 'attention/*'"
    fi
done
for k in $LAB_FAMILIES; do
    add "lab-$k" lab 300 "$LAB_DIR/$k"  # timed on a GPU (50 launches a version); emulated, checked only
done
if [ "$EMULATED" = 1 ]; then skip ncu ncu "$NO_HW (Nsight Compute)"
elif [ ! -x "$NCU" ]; then skip ncu ncu "no Nsight Compute at $NCU (optional)"
else
    # Each kernel of two Qwen3 decode steps alone, caches flushed; launched one by one (--graphs 0).
    add ncu ncu 600 "$NCU --metrics gpu__time_duration.sum --csv --launch-count 2000 $GBENCH speed ${FIRST#*:}.q8.bin $DEV -p 0 -n 2 --runs 1 --graphs 0"
fi

if [ "$LIST" = 1 ]; then printf '%s\n' "${S_NAME[@]}"; exit 0; fi
[ "$EMULATED" = 1 ] || [ "$N_GPUS" -gt 0 ] ||
    die "no GPU: 'nvidia-smi -L' lists none (--emulated runs the steps on the CPU emulation layer)"
for name in ${ONLY//,/ } $FAIL_STEPS; do
    [[ " ${S_NAME[*]} " == *" $name "* ]] || die "no step '$name' in this mode (--list names them)"
done

# ---- the report directory: new or empty, never someone's files ---------------------------------
[ -n "$OUT" ] || OUT="build/first-run/$(date +%Y%m%d-%H%M%S)"
if [ -e "$OUT" ]; then
    [ -d "$OUT" ] || die "--out $OUT: exists and is not a directory"
    [ -z "$(ls -A "$OUT")" ] || die "--out $OUT: the directory is not empty (a report is never written over files)"
fi
mkdir -p "$OUT/logs" || die "--out $OUT: cannot create the directory"
[ -w "$OUT/logs" ] || die "--out $OUT: not writable"
TSV="$OUT/steps.tsv"
{
    echo "mode=$([ "$EMULATED" = 1 ] && echo emulated || echo gpu)"
    echo "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host=$(hostname)"
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "gpus=$N_GPUS"
    echo "device=$DEVICE_DESC"
    echo "budget_min=$BUDGET_MIN"
    echo "steps_planned=${#S_NAME[@]}"
} > "$OUT/meta.txt"
printf 'name\tkind\tstatus\texit\tseconds\ttimeout\tlog\treason\tcommand\n' > "$TSV"

report() { python3 tools/first_run/report.py "$OUT" || echo "gpu_first_run: the report could not be written (above)" >&2; }
T0=$SECONDS
stamp() { local t=$((SECONDS - T0)); printf '[%3d:%02d]' $((t / 60)) $((t % 60)); }
record() {  # name kind status exit seconds timeout log reason command; no tab or newline in a field
    local f out=()
    for f in "$@"; do out+=("$(printf '%s' "$f" | tr '\t\n' '  ')"); done
    (IFS=$'\t'; echo "${out[*]}") >> "$TSV"
}

# A step's own verdict beyond its exit status (report.py's verdict): a test filter that ran no
# test, a test skipped for anything but a missing GPU (Criterion's synthesis does not count skips:
# without the models, 35 kernel tests skip and the rest still "pass"), a sanitizer that printed
# no summary or a non-zero one.
postcheck() {  # kind log -> prints the reason it fails, if it does
    case "$1" in
        tests|sanitizer) python3 tools/first_run/report.py --verdict "$1" "$2" || echo "report.py --verdict failed" ;;
    esac
}

# timeout runs a step in a process group of its own, which a terminal's Ctrl-C does not reach:
# the trap passes the signal on, and the step ends as interrupted.
# The shaped models are CPU work (numpy, then the converter) of a minute or two each: on a GPU they
# are made in the background from the end of the build step on, while the tests hold the GPU; a
# model step then waits for its own job and shows its log. The jobs are timeout's process groups,
# so that stopping one (the end of the run, Ctrl-C) stops its children.
declare -A BG_PREFIX=()
BG_PIDS=()
chosen() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }  # name -> picked by --only (or no --only)
hooked() { [[ "$FAIL_STEPS" == *" $1 "* ]]; }                  # name -> --fail-step names it
selected() {  # index -> true when the step would run its command (not skipped, chosen, no hook)
    [ -z "${S_SKIP[$1]}" ] && chosen "${S_NAME[$1]}" && ! hooked "${S_NAME[$1]}"
}
start_models() {
    local i bg
    for i in "${!S_NAME[@]}"; do
        [ "${S_KIND[$i]}" = model ] && selected "$i" || continue
        bg="$OUT/logs/background-${S_NAME[$i]}"
        ( timeout -k 10 "${S_TIMEOUT[$i]}" bash -c "${S_CMD[$i]}" > "$bg.log" 2>&1 < /dev/null; echo $? > "$bg.rc" ) &
        BG_PIDS+=("$!")
        BG_PREFIX[$i]=$bg
        echo "$(stamp) ${S_NAME[$i]}: started in the background, log $bg.log"
    done
}
stop_models() { local p; for p in "${BG_PIDS[@]}"; do pkill -TERM -P "$p" 2>/dev/null; done; }
BG_STARTED=0

INTERRUPTED=0 STEP_PID=""
trap 'INTERRUPTED=1; stop_models; [ -z "$STEP_PID" ] || kill -TERM "$STEP_PID" 2>/dev/null' INT TERM
FAILED=0 NOT_RUN=0 BUILD_FAILED=0
echo "gpu_first_run: $(sed -n 's/^mode=//p' "$OUT/meta.txt") mode, ${#S_NAME[@]} steps, report in $OUT"
for i in "${!S_NAME[@]}"; do
    name=${S_NAME[$i]} kind=${S_KIND[$i]} tmo=${S_TIMEOUT[$i]} cmd=${S_CMD[$i]}
    log=$(printf 'logs/%02d-%s.log' $((i + 1)) "$name")
    reason=${S_SKIP[$i]}
    if [ "$INTERRUPTED" = 1 ]; then reason="interrupted before it started"; NOT_RUN=1
    elif [ -z "$reason" ] && ! chosen "$name"; then reason="not selected (--only)"
    elif [ -z "$reason" ] && [ $((SECONDS - T0)) -ge $((BUDGET_MIN * 60)) ]; then
        reason="the budget of $BUDGET_MIN min was spent before it started"; NOT_RUN=1
    fi
    if [ -n "$reason" ]; then
        echo "$(stamp) $name: skipped: $reason"
        record "$name" "$kind" skipped "" 0 "$tmo" "" "$reason" "$cmd"
        continue
    fi
    hooked "$name" && cmd="false  # --fail-step $name (test hook)"
    if [ "$BG_STARTED" = 0 ] && [ "$BUILD_FAILED" = 0 ] &&
       [[ " machine gpu-info build " != *" $name "* ]]; then
        BG_STARTED=1
        start_models
    fi
    run=$cmd
    [ -z "${BG_PREFIX[$i]:-}" ] ||
        run="while [ ! -e ${BG_PREFIX[$i]}.rc ]; do sleep 1; done; cat ${BG_PREFIX[$i]}.log; exit \$(cat ${BG_PREFIX[$i]}.rc)"
    echo "$(stamp) $name: $cmd"
    { echo "\$ $cmd"; echo; } > "$OUT/$log"
    t=$SECONDS
    # Its own process group under timeout: a timed-out step's children go with it. A trapped
    # signal ends `wait` early: wait again until the step has really ended.
    timeout -k 10 "$tmo" bash -c "$run" >> "$OUT/$log" 2>&1 < /dev/null &
    STEP_PID=$!
    wait "$STEP_PID"; rc=$?
    while kill -0 "$STEP_PID" 2>/dev/null; do wait "$STEP_PID"; rc=$?; done
    STEP_PID="" secs=$((SECONDS - t)) status=pass why=""
    if [ "$INTERRUPTED" = 1 ]; then status=FAIL why="interrupted"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status=FAIL why="timed out after $tmo s"
    elif [ "$rc" != 0 ]; then status=FAIL why="exit status $rc"
    else why=$(postcheck "$kind" "$OUT/$log"); [ -z "$why" ] || status=FAIL
    fi
    [ "$status" = pass ] || FAILED=1
    [ "$name" != build ] || [ "$status" = pass ] || BUILD_FAILED=1
    echo "$(stamp) $name: $status${why:+ ($why)}, $secs s, log $OUT/$log"
    record "$name" "$kind" "$status" "$rc" "$secs" "$tmo" "$log" "$why" "$cmd"
    report
done
stop_models
report
echo "gpu_first_run: report $OUT/report.md, $OUT/report.json ($(stamp | tr -d '[]') elapsed)"
[ "$INTERRUPTED" = 1 ] && { echo "gpu_first_run: interrupted"; exit 130; }
[ "$FAILED" = 0 ] || { echo "gpu_first_run: some steps FAILED (report above)"; exit 1; }
[ "$NOT_RUN" = 0 ] || { echo "gpu_first_run: some steps did not run (budget spent)"; exit 1; }
echo "gpu_first_run: every step that ran passed"
