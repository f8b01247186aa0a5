#!/usr/bin/env python3
"""cuda_resources.py — the static resource report of the CUDA kernels (`make cuda`;
docs/cuda-resources.md).

    python3 tools/cuda_resources.py [--sass FILE|-] [--out PREFIX] PTXAS_LOG...

PTXAS_LOG: what `nvcc -Xptxas -v` printed while compiling a kernels/*.cu (kernels/kernels.mk keeps
it as build/cuda/kernels/X.ptxas): per kernel and arch the registers per thread, the stack frame,
the spill stores and loads (bytes) and the static shared memory. (cuobjdump --dump-resource-usage
has all of these but the spills, which are what CI must see.)
--sass: a saved `cuobjdump -sass` of kernels/matvec.o, attention.o, matvec_fused.o,
attention_decode.o, logits_metrics.o, attn_metrics.o, sampling/sampling.o and sampling/agent_pool.o
('-': stdin), for the checks of the instructions that their design relies on (SASS_CHECKS below:
the matvec's loads and __dp4a, the decode kernels' PDL instructions on sm_90, the tails' included).
--out PREFIX: writes PREFIX.md (a table) and PREFIX.json.

Exit 1, one line per problem on stderr, naming kernel and arch: a spill in a decode-path kernel,
a kernel with no entry in KERNELS (its block size is not known, so neither is its occupancy),
a SASS check that fails. The reports are written first either way.
"""
import argparse
import json
import math
import re
import sys
from collections import Counter

# Per-SM limits. CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
# (8.0: A100, 9.0: H100): 64K 32-bit registers per SM and per block, 255 per thread, 64 resident
# warps and 32 blocks per SM, 164 KB (8.0) / 228 KB (9.0) shared memory per SM, 48 KB per block
# without the opt-in attribute (no kernel here uses it), 1 KB per block reserved by the driver.
# Allocation rules (cuda_occupancy.h in the toolkit, which cudaOccupancyMaxActiveBlocksPerMultiprocessor
# and the occupancy calculator follow): registers go to warps in units of 256, each of the 4
# sub-partitions of an SM holding a quarter of the file; shared memory in units of 128 bytes.
ARCHS = {
    "sm_80": {"regs_per_sm": 65536, "regs_per_block": 65536, "max_regs_per_thread": 255,
              "reg_alloc_unit": 256, "sub_partitions": 4, "max_warps_per_sm": 64,
              "max_blocks_per_sm": 32, "smem_per_sm": 164 * 1024, "smem_per_block": 48 * 1024,
              "smem_reserved_per_block": 1024, "smem_alloc_unit": 128},
    "sm_90": {"regs_per_sm": 65536, "regs_per_block": 65536, "max_regs_per_thread": 255,
              "reg_alloc_unit": 256, "sub_partitions": 4, "max_warps_per_sm": 64,
              "max_blocks_per_sm": 32, "smem_per_sm": 228 * 1024, "smem_per_block": 48 * 1024,
              "smem_reserved_per_block": 1024, "smem_alloc_unit": 128},
}

DECODE, BENCH, NAIVE = "decode", "bench", "naive"
# Dynamic shared memory is counted for one reference shape, Qwen3-0.6B's attention (16 query heads
# on 8 KV heads, head_dim 128) with the default chunk of 64 keys: SPLIT_GQA takes
# group * (head_dim + chunk + max(head_dim, 256)) floats = 2 * 448 * 4 bytes, SPLIT (chunk +
# max(head_dim, 128)) floats.
GQA_SMEM, SPLIT_SMEM = 2 * (128 + 64 + 256) * 4, (64 + 128) * 4
# The fused decode layer at the same shape: attention_decode.cu's fresh key and value rows (f32)
# and SPLIT_GQA's floats plus the new key's and the group's pair sums; matvec_fused.cu's input at
# Qwen3-0.6B's dim of 1024 as int8 groups (q8/q4): 1024 bytes + 1024 / 32 * 8.
DECODE_SMEM = 2 * 128 * 4 + (2 * (128 + 64 + 256) + 128 + 2 * 64) * 4
FUSED_SMEM = 1024 + 1024 // 32 * 8
# The persistent decode kernel's largest phase from the classifier on: the block that takes the
# entropix decision (sampling_device.cuh's block_smem_bytes(128): a batch of 1024 keys and four,
# the reductions' scratch, a histogram, eight ints), above the metrics' chunk of 2048 logits.
DECIDE_SMEM = (1024 + 4) * 8 + 128 * (8 + 8 + 4 + 4) + 256 * 4 + 8 * 4
# Kernel (its name without template arguments) -> (threads per block, dynamic shared bytes, role,
# where the block size comes from). Roles: decode = launched by a decode step
# (runtime/cuda/forward_cuda_layers.c, the sampler and the agent pool); bench = only the kernel
# benchmarks and the lab launch it; naive = the teaching twins. A new kernel needs a line here.
KERNELS = {
    "embedding_kernel": (256, 0, DECODE, "embedding.cu <<<n, 256>>>"),
    "rmsnorm_kernel": (256, 0, DECODE, "rmsnorm.cu emx_round_to_warps(n, 256): 256 for n >= 256"),
    "quantize_acts_kernel": (128, 0, DECODE, "matvec.cu FAST_WARPS * 32"),
    "matvec_fast_kernel": (128, 0, DECODE, "matvec.cu FAST_WARPS * 32"),
    "matvec_fast_set_kernel": (128, 0, DECODE, "matvec.cu FAST_WARPS * 32 (q, k and v in one launch)"),
    "matvec_plain_kernel": (128, 0, DECODE, "matvec.cu PLAIN_THREADS (widths not a multiple of 32)"),
    "rope_kv_kernel": (64, 0, DECODE, "rope.cu emx_round_to_warps(head_dim / 2, 256): 64 at head_dim 128"),
    "kv_rows_copy_kernel": (128, 0, DECODE, "rope.cu <<<(rows, layers), 128>>> (a committed branch's tail)"),
    "attention_split_gqa_kernel": (128, GQA_SMEM, DECODE, "attention.cu ATTN_BLOCK"),
    "attention_split_kernel": (128, SPLIT_SMEM, DECODE, "attention.cu ATTN_BLOCK (SPLIT_GQA's fallback)"),
    "attention_combine_kernel": (128, 0, DECODE, "attention.cu ATTN_BLOCK"),
    "attention_decode_kernel": (128, DECODE_SMEM, DECODE, "attention_decode.cu ATTN_BLOCK (the fused decode layer)"),
    "attention_decode_rows_kernel": (128, DECODE_SMEM, DECODE, "attention_decode.cu ATTN_BLOCK (several states' rows a step)"),
    "matvec_fused_kernel": (128, FUSED_SMEM, DECODE, "matvec_fused.cu FUSED_WARPS * 32 (the fused decode layer)"),
    "decode_persistent_kernel": (128, max(DECODE_SMEM, FUSED_SMEM, DECIDE_SMEM), DECODE,
                                 "decode_persistent.cu PERSIST_THREADS = FUSED_THREADS (one launch a decode step)"),
    "fused_residual_kernel": (128, 0, DECODE, "matvec_fused.cu <<<1, FUSED_THREADS>>> (after Gemma 3's last fused layer)"),
    "logits_partial_kernel": (256, 0, DECODE, "logits_metrics.cu LM_BLOCK"),
    "logits_merge_kernel": (256, 0, DECODE, "logits_metrics.cu LM_BLOCK"),
    "logit_pair_kernel": (1024, 0, DECODE, "logits_metrics.cu PAIR_BLOCK (the critic's verdict)"),
    "attn_layer_kernel": (256, 0, DECODE, "attn_metrics.cu AM_BLOCK"),
    "attn_average_kernel": (32, 0, DECODE, "attn_metrics.cu <<<1, 32>>>"),
    "sample_kernel": (1024, 0, DECODE, "sampling.cu SB (sampling_device.cuh)"),
    "entropix_kernel": (1024, 0, DECODE, "sampling.cu SB (sampling_device.cuh)"),
    "feed_choice_kernel": (1, 0, DECODE, "sampling.cu <<<1, 1>>> (a step queued ahead: its input from the token before)"),
    "agents_propose_kernel": (1024, 0, DECODE, "agent_pool.cu SB (sampling_device.cuh)"),
    "agents_pick_kernel": (1, 0, DECODE, "agent_pool.cu <<<1, 1>>>"),
    "ban_token_kernel": (1, 0, DECODE, "agent_pool.cu <<<1, 1>>> (a rollback's ban in a pool round)"),
    "agents_feed_kernel": (128, 0, DECODE, "agent_pool.cu <<<(n + 127) / 128, 128>>> (a lookahead round's tokens)"),
    "mb_scan_kernel": (256, 0, DECODE, "sampling_mb.cuh MB_THREADS"),
    "mb_z_kernel": (256, 0, DECODE, "sampling_mb.cuh MB_THREADS"),
    "mb_hist_kernel": (256, 0, DECODE, "sampling_mb.cuh MB_THREADS"),
    "mb_gather_kernel": (256, 0, DECODE, "sampling_mb.cuh MB_THREADS"),
    "wide_level_kernel": (256, 0, DECODE, "sampling_wide.cuh MB_THREADS (top-k off: the select on mass)"),
    "wide_gather_kernel": (256, 0, DECODE, "sampling_wide.cuh MB_THREADS"),
    "wide_pick_kernel": (1024, 0, DECODE, "sampling_wide.cuh SB"),
    "fx_zero_kernel": (1, 0, BENCH, "sampling.cu <<<1, 1>>> (emx_cuda_fixed_sum, for the tests)"),
    "fx_sum_kernel": (256, 0, BENCH, "sampling_wide.cuh MB_THREADS (emx_cuda_fixed_sum, for the tests)"),
    "attention_plain_kernel": (128, 0, BENCH, "attention.cu ATTN_BLOCK (EMX_ATTN_PLAIN)"),
    "geglu_kernel": (256, 0, DECODE, "geglu.cu <<<blocks, 256>>> (Gemma's feed-forward gate)"),
    "swiglu_kernel": (256, 0, BENCH, "swiglu.cu <<<blocks, 256>>> (decode fuses it into the matvec)"),
    "gemm_tiled_kernel": (256, 0, BENCH, "gemm.cu TILE * TILE"),
    "dequant16_kernel": (256, 0, BENCH, "gemm.cu <<<grid, 256>>>"),
    "to16_kernel": (256, 0, BENCH, "gemm.cu <<<grid, 256>>>"),
    "attention_naive_kernel": (128, 0, NAIVE, "attention_naive.cu NAIVE_ATTN_THREADS"),
    "logits_metrics_naive_kernel": (256, 0, NAIVE, "logits_metrics_naive.cu NAIVE_LM_THREADS"),
    "rmsnorm_naive_kernel": (128, 0, NAIVE, "rmsnorm_naive.cu <<<..., 128>>>"),
    "geglu_naive_kernel": (256, 0, NAIVE, "geglu_naive.cu <<<(n + 255) / 256, 256>>>"),
    "add_naive_kernel": (256, 0, NAIVE, "add_naive.cu <<<(n + 255) / 256, 256>>>"),
    "matvec_naive_kernel": (128, 0, NAIVE, "matvec_naive.cu <<<..., 128>>>"),
    "gemm_naive_kernel": (128, 0, NAIVE, "gemm_naive.cu <<<..., 128>>>"),
    "sample_naive_kernel": (256, 0, NAIVE, "sampling/sampling_naive.cu NAIVE_SAMPLE_THREADS"),
    "chunk_prefix_kernel": (256, 0, BENCH, "grid_sync.cu GS_THREADS (the tests: blocks that wait on each other)"),
}

QUANTISED = {3, 4, 5}  # base/model_format.h: EMX_Q8, EMX_Q4, EMX_Q4_1
LDG128 = re.compile(r"^LDG(\.[A-Z0-9_]+)*\.128(\.|$)")


def check_matvec_fast(args, ops, arch):
    """What kernels/matvec.cu's header promises of matvec_fast_kernel<DT, MAXB, SWIGLU, INT8>:
    the weights stream in 16-byte chunks (a 128-bit global load); quantised weights meet the int8
    activations with __dp4a (IDP.4A), or in the fast_f32 variant (INT8 false) are converted to f32
    in registers (I2F*) with no IDP.4A. Returns the broken promises."""
    if len(args) != 4 or not args[0].isdigit():
        return ["template arguments %s not understood" % args]
    dt, int8 = int(args[0]), args[3] == "true"
    bad = []
    if not any(LDG128.match(op) for op in ops):
        bad.append("no 128-bit global load (LDG.E.128)")
    idp = sum(n for op, n in ops.items() if op.startswith("IDP.4A"))
    if dt in QUANTISED and int8 and not idp:
        bad.append("no IDP.4A (__dp4a) in the int8 path")
    if dt in QUANTISED and not int8:
        if idp:
            bad.append("IDP.4A in the fast_f32 (dequantising) path")
        if not any(op.startswith("I2F") for op in ops):
            bad.append("no int-to-float conversion (I2F) in the dequantising path")
    return bad


def check_pdl(ops, arch):
    """What kernels/launch.cuh asks of a kernel the decode step launches with programmatic
    dependent launch: from sm_90 on, emx_pdl_trigger (griddepcontrol.launch_dependents: PREEXIT)
    and emx_pdl_wait (griddepcontrol.wait: ACQBULK); before sm_90 both compile to nothing."""
    if int(arch[3:]) < 90:
        return []
    return ["no %s (%s)" % (op, what) for op, what in
            (("PREEXIT", "emx_pdl_trigger"), ("ACQBULK", "emx_pdl_wait")) if not ops.get(op)]


def check_matvec_fused(args, ops, arch):
    """kernels/matvec_fused.cu: PDL's trigger and wait, and before the wait the prefetch of the
    block's weight rows into L2 (prefetch.global.L2: CCTL...PF2) from sm_90 on."""
    bad = check_pdl(ops, arch)
    if int(arch[3:]) >= 90 and not any(op.startswith("CCTL") and "PF2" in op for op in ops):
        bad.append("no L2 prefetch (CCTL.E.PF2) of the weight rows")
    return bad


SASS_CHECKS = {"matvec_fast_kernel": check_matvec_fast, "matvec_fused_kernel": check_matvec_fused,
               "attention_decode_kernel": lambda args, ops, arch: check_pdl(ops, arch),
               "fused_residual_kernel": lambda args, ops, arch: check_pdl(ops, arch)}
# The steps' tails (runtime/cuda/forward_cuda_tail.c), launched with PDL after the classifier: the
# decision (logits_metrics.cu, attn_metrics.cu, sampling/sampling.cu with the many-block passes,
# sampling_mb.cuh, and the wide draw, sampling_wide.cuh, it instantiates), the agents' proposals and
# a lookahead round's feed (sampling/agent_pool.cu, the many-block passes again) and the critic's
# logit pair (logits_metrics.cu).
TAIL_PDL_KERNELS = ["logits_partial_kernel", "logits_merge_kernel", "attn_layer_kernel", "attn_average_kernel",
                    "sample_kernel", "entropix_kernel", "mb_scan_kernel", "mb_z_kernel", "mb_hist_kernel",
                    "mb_gather_kernel", "wide_level_kernel", "wide_gather_kernel", "wide_pick_kernel",
                    "agents_propose_kernel", "agents_pick_kernel", "ban_token_kernel", "agents_feed_kernel",
                    "logit_pair_kernel"]
SASS_CHECKS.update({k: (lambda args, ops, arch: check_pdl(ops, arch)) for k in TAIL_PDL_KERNELS})
SASS_REPORTED = ["attention_split_gqa_kernel"]  # loads listed, nothing required


def demangle(mangled):
    """(name, template arguments) of an Itanium-mangled kernel name, for the forms this project's
    kernels take: a name, maybe in a namespace, with integer, bool or type arguments."""
    builtin = {"f": "float", "d": "double", "i": "int", "j": "unsigned", "b": "bool", "c": "char"}

    def source_name(i):
        j = i
        while mangled[j].isdigit():
            j += 1
        n = int(mangled[i:j])
        return mangled[j:j + n], j + n

    if not mangled.startswith("_Z"):
        return mangled, []
    try:
        nested = mangled[2] == "N"
        i, name = 2 + nested, None
        while mangled[i].isdigit():
            name, i = source_name(i)
            if not nested:
                break
        args = []
        if mangled[i] == "I":
            i += 1
            while mangled[i] != "E":
                if mangled[i] == "L":  # a literal: L <type> <value> E
                    j = mangled.index("E", i)
                    t, v = mangled[i + 1], mangled[i + 2:j].replace("n", "-")
                    args.append({"0": "false", "1": "true"}[v] if t == "b" else v)
                    i = j + 1
                elif mangled[i].isdigit():
                    arg, i = source_name(i)
                    args.append(arg)
                else:
                    args.append(builtin.get(mangled[i], mangled[i]))
                    i += 1
        return name, args
    except (IndexError, KeyError, ValueError):
        return mangled, []


def display(mangled):
    """matvec_fast_kernel<3, 1, false, true>: the name with its template arguments."""
    name, targs = demangle(mangled)
    return name + ("<%s>" % ", ".join(targs) if targs else "")


def parse_ptxas(text, source):
    """{(mangled, arch): resources} of one ptxas -v log: its entry functions (kernels), and the
    subroutines they call (non-inlined device functions, such as CUDA's slow paths of the math
    library), which have a stack frame and spill counts of their own but no register count."""
    out, arch, props, entry = {}, None, None, None

    def record(name, subroutine):
        return out.setdefault((name, arch), {
            "mangled": name, "arch": arch, "source": source, "subroutine": subroutine, "regs": None,
            "stack": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0, "lmem": 0})

    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            arch = m.group(2)
            entry = record(m.group(1), False)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props and arch:
            r = entry if entry and entry["mangled"] == props else record(props, True)
            r["stack"], r["spill_stores"], r["spill_loads"] = map(int, m.groups())
            props = None
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            entry["regs"] = int(m.group(1))
            for key in ("smem", "lmem"):
                k = re.search(r"(\d+) bytes " + key, line)
                entry[key] = int(k.group(1)) if k else 0
            entry = None
    return out


def parse_sass(text):
    """{(mangled, arch): Counter of opcodes} of a cuobjdump -sass listing."""
    out, arch, ops = {}, None, None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\d+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            ops = out.setdefault((m.group(1), arch), Counter())
            continue
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and ops is not None:
            ops[m.group(1)] += 1
    return out


def load_widths(ops):
    """Global loads by width in bits, e.g. {32: 10, 16: 9}."""
    widths = Counter()
    for op, n in ops.items():
        if op.startswith("LDG"):
            w = re.search(r"\.(128|64)(\.|$)", op) or re.search(r"\.[US](16|8)(\.|$)", op)
            widths[int(w.group(1)) if w else 32] += n
    return dict(sorted(widths.items(), reverse=True))


def occupancy(arch, regs, smem, threads):
    """(resident blocks per SM, occupancy in %, the limit that binds), cuda_occupancy.h's rules."""
    a = ARCHS[arch]
    warps = math.ceil(threads / 32)
    regs_warp = math.ceil(max(regs, 1) * 32 / a["reg_alloc_unit"]) * a["reg_alloc_unit"]
    sub = a["sub_partitions"]
    if regs > a["max_regs_per_thread"] or regs_warp * math.ceil(warps / sub) * sub > a["regs_per_block"]:
        by_regs = 0
    else:  # each sub-partition holds a quarter of the register file
        by_regs = a["regs_per_sm"] // sub // regs_warp * sub // warps
    unit = a["smem_alloc_unit"]
    smem_block = math.ceil((smem + a["smem_reserved_per_block"]) / unit) * unit
    by_smem = 0 if smem > a["smem_per_block"] else a["smem_per_sm"] // smem_block
    limits = {"warps": a["max_warps_per_sm"] // warps, "registers": by_regs,
              "shared memory": by_smem, "blocks": a["max_blocks_per_sm"]}
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return blocks, round(100.0 * blocks * warps / a["max_warps_per_sm"], 1), limiter


def kernel_role(name, targs, role):
    """The role of one instantiation where it differs from its kernel's: matvec_fast_kernel's
    <DT, MAXB, SWIGLU, INT8> with INT8 false is the fast_f32 variant (EMX_MATVEC_FAST_F32), which
    only the lab and the kernel benchmarks launch; a decode step takes the int8 one."""
    if name == "matvec_fast_kernel" and len(targs) == 4 and targs[3] == "false":
        return BENCH
    return role


def build_rows(kernels, problems):
    rows = []
    for (mangled, arch), k in sorted(kernels.items(), key=lambda kv: (demangle(kv[0][0]), kv[0][1])):
        name = demangle(mangled)[0]
        row = dict(k, kernel=display(mangled), name=name)
        known = KERNELS.get(name)
        if k["subroutine"]:  # no launch of its own: its spills count against its callers
            row.update(role="called", threads=None, dyn_smem=None, blocks_per_sm=None,
                       occupancy_pct=None, limiter=None)
            if k["spill_stores"] or k["spill_loads"]:
                problems.append("spill in device function %s (%s), called by the kernels in %s: %d bytes "
                                "spill stores, %d bytes spill loads" % (name, arch, k["source"],
                                                                        k["spill_stores"], k["spill_loads"]))
        elif not known:
            problems.append("kernel %s (%s) in %s has no block size in tools/cuda_resources.py's "
                            "KERNELS table" % (name, arch, k["source"]))
            row.update(role="unknown", threads=None, dyn_smem=None, blocks_per_sm=None,
                       occupancy_pct=None, limiter=None)
        else:
            threads, dyn, role, where = known
            role = kernel_role(name, demangle(mangled)[1], role)
            if arch not in ARCHS or k["regs"] is None:
                problems.append("kernel %s (%s) in %s: no register count or unknown arch" % (name, arch, k["source"]))
                blocks, occ, limiter = None, None, None
            else:
                blocks, occ, limiter = occupancy(arch, k["regs"], k["smem"] + dyn, threads)
            row.update(role=role, threads=threads, dyn_smem=dyn, block_size_from=where,
                       blocks_per_sm=blocks, occupancy_pct=occ, limiter=limiter)
            if role == DECODE and (k["spill_stores"] or k["spill_loads"]):
                problems.append("spill in decode-path kernel %s (%s): %d bytes spill stores, %d bytes "
                                "spill loads (%s)" % (row["kernel"], arch, k["spill_stores"],
                                                      k["spill_loads"], k["source"]))
        rows.append(row)
    return rows


def sass_results(sass, problems):
    results = []
    for kernel in list(SASS_CHECKS) + SASS_REPORTED:
        found = [(m, arch, ops) for (m, arch), ops in sorted(sass.items()) if demangle(m)[0] == kernel]
        if not found:
            problems.append("the SASS listing has no %s: nothing to check" % kernel)
        for mangled, arch, ops in found:
            full = display(mangled)
            bad = SASS_CHECKS[kernel](demangle(mangled)[1], ops, arch) if kernel in SASS_CHECKS else []
            for b in bad:
                problems.append("SASS of %s (%s): %s" % (full, arch, b))
            results.append({"kernel": full, "arch": arch, "global_loads_by_bits": load_widths(ops),
                            "idp4a": sum(n for op, n in ops.items() if op.startswith("IDP.4A")),
                            "checked": kernel in SASS_CHECKS, "failed": bad})
    return results


def fmt(v):
    return "-" if v is None else str(v)


def write_markdown(path, rows, sass):
    out = ["# CUDA kernel resources", "",
           "Generated by tools/cuda_resources.py from ptxas's report (`-Xptxas -v`) and the SASS; "
           "docs/cuda-resources.md explains the columns.", "",
           "| kernel | arch | role | regs | static smem | dyn smem | spill st/ld | stack | lmem | "
           "threads/block | blocks/SM | occupancy % | limited by |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append("| `%s` | %s | %s | %s | %d | %s | %d/%d | %d | %d | %s | %s | %s | %s |" % (
            r["kernel"], r["arch"], r["role"], fmt(r["regs"]), r["smem"], fmt(r["dyn_smem"]),
            r["spill_stores"], r["spill_loads"], r["stack"], r["lmem"], fmt(r["threads"]),
            fmt(r["blocks_per_sm"]), fmt(r["occupancy_pct"]), fmt(r["limiter"])))
    if sass:
        out += ["", "## SASS", "", "| kernel | arch | global loads (bits: count) | IDP.4A | check |",
                "|---|---|---|---:|---|"]
        for s in sass:
            loads = ", ".join("%d: %d" % kv for kv in s["global_loads_by_bits"].items())
            check = ("FAILED: " + "; ".join(s["failed"])) if s["failed"] else ("ok" if s["checked"] else "reported")
            out.append("| `%s` | %s | %s | %d | %s |" % (s["kernel"], s["arch"], loads, s["idp4a"], check))
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ptxas", nargs="+", help="ptxas -v logs (build/cuda/kernels/*.ptxas)")
    ap.add_argument("--sass", help="a cuobjdump -sass listing of the kernel objects named above ('-': stdin)")
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    opts = ap.parse_args(argv)
    problems, kernels = [], {}
    try:
        for path in opts.ptxas:
            with open(path) as f:
                kernels.update(parse_ptxas(f.read(), path))
        sass_text = None
        if opts.sass:
            with (sys.stdin if opts.sass == "-" else open(opts.sass)) as f:
                sass_text = f.read()
    except OSError as e:
        print("cuda_resources: %s: %s" % (e.filename, e.strerror), file=sys.stderr)
        return 1
    if not kernels:
        problems.append("no kernel in %s (not ptxas -v output?)" % " ".join(opts.ptxas))
    rows = build_rows(kernels, problems)
    sass = sass_results(parse_sass(sass_text), problems) if sass_text is not None else []
    if opts.out:
        write_markdown(opts.out + ".md", rows, sass)
        with open(opts.out + ".json", "w") as f:
            json.dump({"archs": ARCHS, "kernels": rows, "sass": sass, "problems": problems}, f, indent=1)
    for p in problems:
        print("cuda_resources: " + p, file=sys.stderr)
    if not problems:
        decode = [r for r in rows if r["role"] == DECODE]
        print("cuda_resources: %d kernels x arch, %d on the decode path, no spill there%s%s" % (
            len(rows), len(decode), ", SASS checks passed" if sass else "",
            ("; wrote %s.md, %s.json" % (opts.out, opts.out)) if opts.out else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
