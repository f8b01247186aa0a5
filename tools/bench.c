// bench.c — benchmarks of the runtime on the CPU or a GPU, one report format for both, and
// ratios to another runtime run alternately on the same machine.
//
//   build/tools/bench speed MODEL.bin [--device cpu|cuda:N|auto] [-t threads] [-p 512] [-n 128]
//                                     [--runs 3] [--peak-gbps X] [--graphs 0|1] [--cache-type T] [-d N]
//                                     [--llama-bench BIN --gguf MODEL.gguf | --compare-cmd CMD]
//                                     [--save FILE] [--baseline FILE]
//                                     [--bandwidth-model] [--model-device NAME]
//   build/tools/bench sampler MODEL.bin [--device D] [-n 128] [-t threads] [--runs 5]
//                                       [--prompt TEXT] [--profile NAME|FILE] [--persistent]
//   build/tools/bench agents MODEL.bin [--device D] [-n 128] [-t threads] [--runs 3] [--agents 8]
//                                      [--workers 1] [--lookahead 4] [--check-every K]
//
// --device is ./run's: "auto" (the default) is GPU 0 when this build has the CUDA backend and
// the machine a GPU, else the CPU. Every report names the device it ran on.
//
// `speed`: prefill (pp: one batched pass over -p tokens) and decode (tg: -n single-token
// passes) tok/s of the forward pass, as llama.cpp's llama-bench measures pp512/tg128, and what a
// decode step moves: the bytes it reads (weights + the KV cache at the run's mean position),
// the GB/s that makes, its share of the device's peak bandwidth and, on a GPU, the kernel
// launches per step (speed_report.h has the format). With --llama-bench, llama.cpp's
// llama-bench runs alternately with ours on the GGUF of the same model (-r 1 per round, -ngl 0
// or 99 to match our device); with --compare-cmd, any command that prints its decode tok/s
// (compare_cmd.h). --save writes the result as JSON; --baseline compares with a saved one (the
// regression guard). Medians over --runs rounds. Under the CUDA emulator, and on any device with
// --bandwidth-model, a bandwidth model follows: the step's bytes per kernel and the lower bound
// they imply on a named GPU (bandwidth_model.h).
//
// `agents`: what the agent pool costs: decode tok/s of the single stream (greedy), of N agents
// at lookahead 1 (one forward per token, N proposals), of N agents at lookahead L (one batched
// pass of N branches per step) and, with --check-every K, of N agents at lookahead 1 with the
// model as its own critic every K tokens (verdicts forced GOOD: the judgments' cost, not
// rollbacks), runs alternated, n tokens each, stop tokens fed back, on --device (the single
// stream) and --devices (the pool: cpu, or one worker per GPU; default: --device). A build whose
// pool cannot use GPUs runs the single stream only, with a note.
//
// `sampler`: what the entropix sampler costs. Decodes n tokens after the same prompt with the
// greedy sampler, with entropix and with the fixed combined sampler (the CLI's defaults: top-k 40,
// top-p, min-p at T 0.8), alternating (greedy, entropix, combined, greedy, ...) so that drift
// in the machine's load hits them alike; stop tokens are fed back like any other token so all
// decode exactly n tokens. Reports per sampler the median decode tok/s and the median time
// per token spent choosing it (metrics + decision + draw for entropix, the passes and the draw
// for combined, an argmax for greedy), and the overheads: how much slower each decodes than
// greedy, from both figures. On a GPU the tokens are chosen on the device (only the id comes
// back): no host time to show, the tok/s ratios are it.
// --persistent: all through the persistent decode kernel (docs/cuda.md), which makes entropix's
// decision and the combined sampler's draw in its launch.
#include <errno.h>
#include <float.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/calibrate.h"
#include "tools/bench/agents_bench.h"
#include "tools/bench/bandwidth_model.h"
#include "tools/bench/compare_cmd.h"
#include "runtime/cpu/cpu_matmul.h"
#include "base/dtype.h"
#include "base/errmsg.h"
#include "base/out_file.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward.h"
#include "tools/bench/forward_bench.h"
#include "tools/bench/llama_bench.h"
#include "tools/bench/machine.h"
#include "tools/bench/result.h"
#include "tools/bench/sampler_bench.h"
#include "tools/bench/speed_report.h"
#include "tools/bench/decode_paths.h"
#include "tools/bench/timeline.h"
#include "tools/tool_args.h"
#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_io.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/convert/gguf_cache.h"
#include "runtime/pool/pool_generate.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: bench speed MODEL.bin [options]\n"
            "  Prefill and decode tok/s of the forward pass (llama-bench's pp/tg), bytes and GB/s per\n"
            "  decode step against the device's peak, kernel launches per step (GPU).\n"
            "  --device D          cpu, cuda:N or auto (default auto: GPU 0 if there is one)\n"
            "  -t N                CPU threads (default: all cores)\n"
            "  -p N                prompt tokens for the prefill test (default 512; 0 = skip)\n"
            "  -n N                tokens for the decode test (default 128; 0 = skip)\n"
            "  --runs N            rounds; medians are reported (default 3)\n"
            "  --peak-gbps X       the device's peak bandwidth in GB/s (default: a GPU's own; CPU: none)\n"
            "  --graphs 0|1        GPU: replay the decode step as a CUDA graph (default 1)\n"
            "  --cache-type T      the KV cache's elements: f32, f16 or auto (default)\n"
            "  -d, --depth N       run both tests after N tokens of context (llama-bench's -d;\n"
            "                      default 0: an empty cache)\n"
            "  --mmap              map the model file instead of copying it into 2 MiB pages\n"
            "                      (as ./run --mmap; llama-bench maps its GGUF by default)\n"
            "  --llama-bench BIN   also run llama.cpp's llama-bench, alternating with ours\n"
            "  --gguf FILE         the GGUF of the same model for llama-bench\n"
            "  --compare-cmd CMD   also run `sh -c CMD`, alternating with ours; it prints its decode\n"
            "                      speed as '<number> tok/s' (env: EMX_BENCH_N_PROMPT, EMX_BENCH_N_GEN,\n"
            "                      EMX_BENCH_THREADS, EMX_BENCH_DEVICE)\n"
            "  --save FILE         write the result as JSON\n"
            "  --baseline FILE     compare with a result saved earlier\n"
            "  --bandwidth-model   print the decode step's bandwidth model (a lower bound, not a\n"
            "                      measurement; printed anyway when the step runs under the CUDA emulator)\n"
            "  --timeline          GPU: also time one decode token's phases (direct launches, an event\n"
            "                      after each), beside the bandwidth model and the graph path's token;\n"
            "                      with --persistent the persistent kernel's (split by its blocks' clocks)\n"
            "  --persistent        GPU: also decode with the persistent kernel (one launch a token),\n"
            "                      alternated round by round with the graph path\n"
            "  --model-device NAME the model's GPU: h100-sxm (default), h100-pcie, h200, a100-80gb,\n"
            "                      a100-40gb, l40s, rtx4090\n"
            "usage: bench sampler MODEL.bin [options]\n"
            "  Decode tok/s and sampler time per token: greedy, entropix and combined (top-k 40,\n"
            "  top-p 0.95, min-p 0.05, T 0.8), runs alternated.\n"
            "  --device D          cpu, cuda:N or auto (default auto)\n"
            "  -n N                tokens to decode per run (default 128)\n"
            "  -t N                threads (default: all cores)\n"
            "  --runs N            runs per sampler (default 5; medians are reported)\n"
            "  --prompt TEXT       prompt (default: a short story opening)\n"
            "  --profile P         entropix profile (default " EMX_PROFILE_DEFAULT ")\n"
            "  --persistent        GPU: decode with the persistent kernel (one launch a token, entropix's\n"
            "                      decision and the combined draw inside it)\n"
            "usage: bench agents MODEL.bin [options]\n"
            "  Decode tok/s: single stream vs the agent pool at lookahead 1 and L, runs alternated.\n"
            "  --device D          cpu, cuda:N or auto (default auto): the single stream's device\n"
            "  --devices LIST      the pool's: cpu, or cuda:N[,cuda:M...], a worker per GPU (default: D)\n"
            "  -n N                tokens to decode per run (default 128)\n"
            "  -t N                threads (default: all cores)\n"
            "  --runs N            runs per configuration (default 3; medians are reported)\n"
            "  --agents N          agents (default 8)\n"
            "  --workers N         CPU workers of the pool (default 1)\n"
            "  --lookahead L       the branch length of the third configuration (default 4)\n"
            "  --check-every K     a fourth: lookahead 1 with the model as its own critic every K tokens\n"
            "                      (verdicts forced GOOD: what the judgments cost; default 0, none)\n"
            "usage: bench --version    the version and the backends of this build\n");
    return f == stdout ? 0 : 2;
}

// The report's first line: where the benchmark runs.
static void print_device(const EmxState *st) {
    EmxStateInfo info;
    emx_state_info(st, &info);
    printf("device: %s (%s)\n", info.device, info.device_desc);
}

// The median, numpy's rule (the mean of the middle two for an even count).
static double median(const double *x, int n) { return emx_percentile(x, (size_t)n, 50.0); }

static int bench_sampler(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Once upon a time, in a small village by the sea,";
    const char *profile_name = EMX_PROFILE_DEFAULT, *device = "auto";
    int n = 128, threads = 0, runs = 5, persistent = 0;
    const ToolOpt opts[] = {
        {"-n", TOOL_INT, &n, 1, 1 << 20},      {"-t", TOOL_INT, &threads, 0, 4096},
        {"--runs", TOOL_INT, &runs, 1, 1000},  {"--prompt", TOOL_STR, &prompt, 0, 0},
        {"--profile", TOOL_STR, &profile_name, 0, 0}, {"--device", TOOL_STR, &device, 0, 0},
        {"--persistent", TOOL_FLAG, &persistent, 0, 0},
    };
    int rc = tool_parse_args("bench", argc, argv, opts, sizeof opts / sizeof opts[0], &model_path, 1);
    if (rc) return rc == 1 ? usage(stdout) : 2;
    if (!model_path) return usage(stderr);
    if (persistent && emx_device_is_cpu(device)) {
        fprintf(stderr, "bench: --persistent decodes with a GPU's persistent kernel: it needs --device cuda:N, not %s\n",
                device);
        return 2;
    }

    char err[512];
    EmxProfile profile;
    if (emx_profile_load(&profile, profile_name, err, sizeof err) != 0) {
        fprintf(stderr, "bench: --profile: %s\n", err);
        return 2;
    }
    int status = 1;
    EmxModel model;
    int model_open = 0;
    EmxTokenizer *tk = NULL;
    EmxState *st = NULL;
    int *ids = NULL;
    char file[4096];  // the model path, or a GGUF's converted cache file (gguf_cache.h)
    if (emx_gguf_model_path(model_path, NULL, "bench", file, sizeof file, err, sizeof err) ||
        emx_model_open_load(&model, file, emx_load_for_device(device, 0), err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    model_open = 1;
    tk = emx_tokenizer_new(&model.tok, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "bench: %s: %s\n", model_path, err);
        goto done;
    }
    EmxPromptSpec ps = {.text = prompt, .len = strlen(prompt)};
    int n_ids = 0;
    if (emx_prompt_ids(&model, tk, &ps, &ids, &n_ids, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    int ctx = n_ids + n + 1;
    if (ctx > (int)model.cfg.max_seq_len) {
        fprintf(stderr, "bench: prompt (%d) + -n %d exceeds the model's context %u\n", n_ids, n,
                model.cfg.max_seq_len);
        goto done;
    }
    st = emx_state_new(&model,
                       &(EmxStateOptions){.n_threads = threads, .ctx = ctx, .device = device, .persistent = persistent},
                       err, sizeof err);
    if (!st) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    fprintf(stderr, "bench sampler: %s, prompt %d tokens, %d decoded per run, %d runs each, profile %s\n",
            model_path, n_ids, n, runs, profile_name);
    print_device(st);
    EmxStateInfo info;
    emx_state_info(st, &info);
    if (persistent && !info.persistent_blocks) {  // --device auto without a GPU, or a model it does not take
        fprintf(stderr, "bench: --persistent: %s\n", info.decode_path ? info.decode_path : "this device has no persistent kernel");
        goto done;
    }
    if (persistent) printf("decode: %s\n", info.decode_path);

    if (emx_bench_sampler_rounds(st, tk, &model, &profile, ids, n_ids, n, runs) != 0) goto done;
    status = 0;

done:
    free(ids);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    return status;
}

// --peak-gbps X: a positive number, else a one-line error.
static int parse_peak(const char *text, double *out) {
    if (!text) return 0;
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    if (end == text || *end || errno || !(v > 0)) {
        fprintf(stderr, "bench: --peak-gbps: '%s' is not a positive number of GB/s\n", text);
        return -1;
    }
    *out = v;
    return 0;
}

// `bench speed`'s options.
typedef struct {
    const char *model_path, *llama, *gguf, *save, *baseline, *device, *compare, *peak_text, *model_device, *cache;
    int threads, n_prompt, n_gen, runs, graphs, bw_model, depth, use_mmap, timeline, persistent;
} SpeedArgs;

// Parses argv into a (the defaults first): 0, or the exit status (--help: 0 after the usage).
static int parse_speed_args(int argc, char **argv, SpeedArgs *a, int *exit_status) {
    *a = (SpeedArgs){.device = "auto", .model_device = "h100-sxm", .cache = "auto", .n_prompt = 512, .n_gen = 128,
                     .runs = 3, .graphs = 1};
    const ToolOpt opts[] = {
        {"-t", TOOL_INT, &a->threads, 0, 4096},        {"-p", TOOL_INT, &a->n_prompt, 0, 1 << 20},
        {"-n", TOOL_INT, &a->n_gen, 0, 1 << 20},       {"--runs", TOOL_INT, &a->runs, 1, 1000},
        {"--llama-bench", TOOL_STR, &a->llama, 0, 0},  {"--gguf", TOOL_STR, &a->gguf, 0, 0},
        {"--save", TOOL_STR, &a->save, 0, 0},          {"--baseline", TOOL_STR, &a->baseline, 0, 0},
        {"--device", TOOL_STR, &a->device, 0, 0},      {"--compare-cmd", TOOL_STR, &a->compare, 0, 0},
        {"--peak-gbps", TOOL_STR, &a->peak_text, 0, 0}, {"--graphs", TOOL_INT, &a->graphs, 0, 1},
        {"--bandwidth-model", TOOL_FLAG, &a->bw_model, 0, 0}, {"--model-device", TOOL_STR, &a->model_device, 0, 0},
        {"--cache-type", TOOL_STR, &a->cache, 0, 0},   {"-d", TOOL_INT, &a->depth, 0, 1 << 20},
        {"--depth", TOOL_INT, &a->depth, 0, 1 << 20}, {"--mmap", TOOL_FLAG, &a->use_mmap, 0, 0},
        {"--timeline", TOOL_FLAG, &a->timeline, 0, 0}, {"--persistent", TOOL_FLAG, &a->persistent, 0, 0},
    };
    int rc = tool_parse_args("bench", argc, argv, opts, sizeof opts / sizeof opts[0], &a->model_path, 1);
    if (rc) return *exit_status = rc == 1 ? usage(stdout) : 2, -1;
    if (!a->model_path) return *exit_status = usage(stderr), -1;
    return 0;
}

// The option combinations `speed` refuses.
static int check_speed_args(const SpeedArgs *a, EmxKvType *cache_type) {
    if (emx_kv_type_parse(a->cache, cache_type) != 0) {
        fprintf(stderr, "bench: --cache-type '%s': expected auto, f32 or f16\n", a->cache);
        return -1;
    }
    if (!a->llama != !a->gguf) {
        fprintf(stderr, "bench: --llama-bench and --gguf go together\n");
        return -1;
    }
    if (a->llama && a->compare) {
        fprintf(stderr, "bench: --llama-bench and --compare-cmd: one comparison runtime at a time\n");
        return -1;
    }
    if (a->n_prompt == 0 && a->n_gen == 0) {
        fprintf(stderr, "bench: -p 0 and -n 0: nothing to measure\n");
        return -1;
    }
    if (a->depth > 0 && (a->llama || a->compare)) {
        fprintf(stderr, "bench: --depth runs ours alone (the comparison runtimes are run without a depth)\n");
        return -1;
    }
    if ((a->timeline || a->persistent) && (emx_device_is_cpu(a->device) || a->n_gen < 1)) {
        fprintf(stderr, "bench: --%s times a GPU's decode steps: it needs --device cuda:N and -n >= 1\n",
                a->timeline ? "timeline" : "persistent");
        return -1;
    }
    return 0;
}

// The result's description of the machine (CPU, SIMD, threads, device; on the CPU its copy
// bandwidth, the ceiling a decode step can reach), also printed to stderr.
static void describe_machine(EmxBenchResult *r, const char *model_path, const EmxStateInfo *info, int threads,
                             int n_prompt, int n_gen, int on_gpu) {
    *r = (EmxBenchResult){.threads = threads > 0 ? threads : omp_get_num_procs(),
                          .n_prompt = n_prompt, .n_gen = n_gen};
    snprintf(r->model, sizeof r->model, "%s", model_path);
    snprintf(r->device, sizeof r->device, "%s", info->device);
    snprintf(r->device_desc, sizeof r->device_desc, "%s", info->device_desc);
    snprintf(r->simd, sizeof r->simd, "%s", emx_cpu_simd_name());
    emx_bench_cpu_name(r->cpu, sizeof r->cpu);
    // The host's copy bandwidth is the CPU's ceiling; a GPU's is its peak_gbps.
    if (!on_gpu) r->memcpy_gbs = emx_bench_memcpy_gbs((size_t)256 << 20, r->threads, 5);
    fprintf(stderr, "machine: %s, %s, %d threads; device %s (%s), %s KV cache\n", r->cpu, r->simd, r->threads,
            info->device, info->device_desc, emx_kv_type_name(info->cache_type));
    const char *wait = on_gpu ? NULL : emx_bench_wait_policy_note();
    if (wait) fprintf(stderr, "bench: note: %s\n", wait);
}

// The runtime that `speed` compares with, run alternately with ours.
typedef struct {
    const char *llama, *gguf, *compare;  // llama-bench + its GGUF, or a command, or none
    int threads, on_gpu;
    const char *device;
} OtherRuntime;

// Round k: ours (then the other runtime, if any) over the same prompt and decode lengths; the
// [prefill, decode] tok/s go to ours[] and theirs[] (theirs untouched without another runtime).
// read_gbs (CPU; NULL on a GPU): the memory's read bandwidth, measured between the rounds it is
// compared with: on a machine whose bandwidth moves by the hour, a figure from another run means little.
static int speed_round(EmxState *st, const EmxModel *model, int n_prompt, int n_gen, int depth, const OtherRuntime *o,
                       int k, double ours[2], double theirs[2], double *read_gbs) {
    char err[512];
    EmxForwardSpeed fs;
    if (emx_bench_forward_once(st, model, n_prompt, n_gen, depth, &fs, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s (%s)\n", err, emx_state_error(st));
        return -1;
    }
    ours[0] = fs.prefill_tps;
    ours[1] = fs.decode_tps;
    fprintf(stderr, "  round %d  ours   pp%d %9.2f tok/s  tg%d %8.2f tok/s\n", k + 1, n_prompt,
            fs.prefill_tps, n_gen, fs.decode_tps);
    if (read_gbs) {
        *read_gbs = emx_bench_read_gbs((size_t)256 << 20, o->threads, 3);
        fprintf(stderr, "  round %d  read pass %.1f GB/s\n", k + 1, *read_gbs);
    }
    if (o->llama) {
        if (emx_llama_bench_run(o->llama, o->gguf, o->threads, o->on_gpu ? 99 : 0, n_prompt, n_gen, &fs, err,
                                sizeof err) != 0) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
    } else if (o->compare) {
        const EmxCompareRun cr = {.n_prompt = n_prompt, .n_gen = n_gen, .threads = o->threads,
                                  .device = o->device};
        fs.prefill_tps = 0;  // the command reports decode only
        if (emx_compare_cmd_run(o->compare, &cr, &fs.decode_tps, err, sizeof err) != 0) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
    } else {
        return 0;
    }
    theirs[0] = fs.prefill_tps;
    theirs[1] = fs.decode_tps;
    fprintf(stderr, "  round %d  other  pp%d %9.2f tok/s  tg%d %8.2f tok/s\n", k + 1, n_prompt,
            fs.prefill_tps, n_gen, fs.decode_tps);
    return 0;
}

// The bandwidth model of tgN's mean step (emx_bw_mean_pos).
static void print_bw_model(const EmxModel *model, int n_gen, int depth, int kv_elem_bytes, const EmxBwDevice *d) {
    EmxBwModel bm;
    const int pos = emx_bw_mean_pos(depth, n_gen);
    emx_bw_model(model, pos, kv_elem_bytes, &bm);
    char what[80] = "";
    if (n_gen > 0)
        snprintf(what, sizeof what, " (the mean of tg%d's %d..%d, rounded down)", n_gen, depth, depth + n_gen - 1);
    emx_bw_model_print(stdout, &bm, d, what);
}

// The model at path opened (*model_open set) and a state with so.ctx positions on so.device, or
// NULL after a one-line error.
static EmxState *speed_state(EmxModel *model, int *model_open, const char *path, EmxLoad load, EmxStateOptions so) {
    char err[512], file[4096];
    if (emx_gguf_model_path(path, NULL, "bench", file, sizeof file, err, sizeof err) ||
        emx_model_open_load(model, file, load, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        return NULL;
    }
    *model_open = 1;
    if (so.ctx > (int)model->cfg.max_seq_len) {
        fprintf(stderr, "bench: %d tokens exceed the model's context %u\n", so.ctx, model->cfg.max_seq_len);
        return NULL;
    }
    EmxState *st = emx_state_new(model, &so, err, sizeof err);
    if (!st) {
        fprintf(stderr, "bench: %s\n", err);
        return NULL;
    }
    char where[128];
    fprintf(stderr, "model: %s (%s weights), %.3f MB of weights read per decoded token\nweights: %s\n", path,
            emx_dtype_name(model->layers[0].wq.dtype), (double)emx_model_weight_bytes_per_token(model) / 1e6,
            emx_model_memory_text(model, where, sizeof where));
    return st;
}

// --model-device's device, or NULL after a one-line usage error that lists the names.
static const EmxBwDevice *bw_device_arg(const char *name) {
    const EmxBwDevice *d = emx_bw_device(name);
    char names[256];
    emx_bw_device_names(names, sizeof names);
    if (!d) fprintf(stderr, "bench: --model-device: unknown device '%s' (known: %s)\n", name, names);
    return d;
}

// --save's path, checked before the runs rather than after them (base/out_file.h): it may not
// name an input (the model, the GGUF, the baseline, llama-bench). 0, or 2 (said).
static int check_save(const SpeedArgs *a) {
    char err[512];
    const EmxRunPath in[] = {{"the model file", a->model_path}, {"--gguf", a->gguf}, {"--baseline", a->baseline},
                             {"--llama-bench", a->llama}};
    const EmxRunPath out[] = {{"--save", a->save}};
    const EmxOutKind kind[] = {EMX_OUT_REPLACE};
    if (!a->save || (emx_run_check_outputs(in, 4, out, 1, err, sizeof err) == 0 &&
                     emx_run_check_output_kinds(out, kind, 1, err, sizeof err) == 0))
        return 0;
    fprintf(stderr, "bench: %s\n", err);
    return 2;
}

static int bench_speed(int argc, char **argv) {
    SpeedArgs args;
    int exit_status;
    if (parse_speed_args(argc, argv, &args, &exit_status)) return exit_status;
    const char *model_path = args.model_path, *llama = args.llama, *gguf = args.gguf, *save = args.save, *baseline = args.baseline;
    const char *device = args.device, *compare = args.compare;
    const int threads = args.threads, n_prompt = args.n_prompt, n_gen = args.n_gen, runs = args.runs, depth = args.depth;
    EmxKvType cache_type;
    if (check_speed_args(&args, &cache_type)) return 2;
    double peak_flag = 0;
    if (parse_peak(args.peak_text, &peak_flag) != 0 || check_save(&args) != 0) return 2;
    const EmxBwDevice *bw_device = bw_device_arg(args.model_device);
    if (!bw_device) return 2;
    char err[512];
    EmxBenchResult base;
    if (baseline && emx_bench_result_load(baseline, &base, err, sizeof err) != 0) {
        fprintf(stderr, "bench: --baseline %s\n", err);
        return 2;
    }
    int status = 1;
    EmxModel model;
    int model_open = 0;
    EmxState *st = NULL;
    double *ours[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
    double *theirs[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
    double *reads = calloc((size_t)runs, sizeof(double));  // the read pass of each round (CPU)
    if (!ours[0] || !ours[1] || !theirs[0] || !theirs[1] || !reads) {
        fprintf(stderr, "bench: out of memory\n");
        goto done;
    }
    const EmxStateOptions so = {.n_threads = threads, .ctx = depth + (n_prompt > n_gen ? n_prompt : n_gen),
                                .device = device, .no_graphs = !args.graphs, .cache_type = cache_type};
    if (!(st = speed_state(&model, &model_open, model_path, emx_load_for_device(device, args.use_mmap), so))) goto done;
    EmxStateInfo info;
    emx_state_info(st, &info);
    const int on_gpu = strcmp(info.device, "cpu") != 0;
    if ((args.timeline || args.persistent) && !on_gpu) {  // --device auto without a GPU
        fprintf(stderr, "bench: --%s times a GPU's decode steps: %s has none\n", args.timeline ? "timeline" : "persistent",
                info.device);
        status = 2;
        goto done;
    }

    EmxBenchResult r;
    describe_machine(&r, model_path, &info, threads, n_prompt, n_gen, on_gpu);
    r.depth = depth;
    snprintf(r.cache_type, sizeof r.cache_type, "%s", emx_kv_type_name(info.cache_type));
    const uint64_t weight_bytes = emx_model_weight_bytes_per_token(&model);

    char other[600] = "";
    if (llama) snprintf(other, sizeof other, "llama.cpp llama-bench (%s, -ngl %d)", llama, on_gpu ? 99 : 0);
    if (compare) snprintf(other, sizeof other, "--compare-cmd %s", compare);
    const OtherRuntime o = {llama, gguf, compare, r.threads, on_gpu, info.device};
    for (int k = 0; k < runs; k++) {
        double ou[2], th[2] = {0, 0};
        if (speed_round(st, &model, n_prompt, n_gen, depth, &o, k, ou, th, on_gpu ? NULL : &reads[k]) != 0) goto done;
        ours[0][k] = ou[0], ours[1][k] = ou[1], theirs[0][k] = th[0], theirs[1][k] = th[1];
    }
    if (!on_gpu) r.read_gbs = median(reads, runs);
    r.prefill_tps = median(ours[0], runs);
    r.decode_tps = median(ours[1], runs);
    emx_state_info(st, &info);  // after the decode steps: the graph's node count is known
    const EmxSpeedReport rep = {
        .device = info.device, .device_desc = info.device_desc, .uses_graphs = info.uses_graphs,
        .model = model_path, .dtype = emx_dtype_name(model.layers[0].wq.dtype), .cfg = &model.cfg,
        .n_prompt = n_prompt, .n_gen = n_gen, .depth = depth, .kv_elem_bytes = info.cache_type == EMX_KV_F16 ? 2 : 4,
        .prefill_tps = r.prefill_tps, .decode_tps = r.decode_tps,
        .weight_bytes = weight_bytes, .peak_gbps = peak_flag > 0 ? peak_flag : info.peak_gbps,
        .launches_per_step = on_gpu && info.uses_graphs ? info.decode_graph_nodes : 0,
        .memcpy_gbs = r.memcpy_gbs, .read_gbs = r.read_gbs, .other = other[0] ? other : NULL,
        .other_prefill_tps = other[0] ? median(theirs[0], runs) : 0,
        .other_decode_tps = other[0] ? median(theirs[1], runs) : 0,
        .runs = runs, .ours_rounds = {ours[0], ours[1]}, .other_rounds = {theirs[0], theirs[1]},
    };
    emx_speed_report_print(stdout, &rep);
    // The emulator's timings say nothing about a GPU's: the model is what there is to read.
    if (args.bw_model || strstr(info.device_desc, "CUDA emulator")) print_bw_model(&model, n_gen, depth, info.cache_type == EMX_KV_F16 ? 2 : 4, bw_device);
    const EmxTimelineRun tr = {n_gen, depth, runs, rep.peak_gbps > 0 ? rep.peak_gbps : bw_device->peak_gbps,
                               peak_flag > 0 ? "--peak-gbps" : rep.peak_gbps > 0 ? "the GPU's properties" : bw_device->label};
    if (emx_bench_gpu_tables(args.timeline, args.persistent, &model, st, &so, &tr) != 0) goto done;
    if (baseline) emx_bench_result_compare(stdout, &r, &base);
    if (save && emx_bench_result_save(save, &r, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    status = 0;

done:
    for (int k = 0; k < 2; k++) {
        free(ours[k]);
        free(theirs[k]);
    }
    free(reads);
    if (st) emx_state_free(st);
    if (model_open) emx_model_close(&model);
    return status;
}

// The critic row's critic: the model judging itself on the pool's first device (GPU `gpu`, or the
// CPU for -1), its verdicts forced GOOD (margin FLT_MAX) so the row measures the judgments, not
// rollbacks.
static EmxCritic *bench_critic(const EmxModel *model, const EmxTokenizer *tk, int gpu, int threads, char *err,
                               size_t errlen) {
    char dev[16];
    snprintf(dev, sizeof dev, gpu >= 0 ? "cuda:%d" : "cpu", gpu);
    const EmxCriticOptions co = {.margin = FLT_MAX, .n_threads = threads, .device = dev};
    return emx_critic_new(model, tk, &co, err, errlen);
}

static int bench_agents(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Once upon a time, in a small village by the sea,";
    const char *device = "auto", *devices = NULL;
    int n = 128, threads = 0, runs = 3, n_agents = 8, workers = 1, lookahead = 4, check_every = 0;
    const ToolOpt opts[] = {
        {"-n", TOOL_INT, &n, 1, 1 << 20},         {"-t", TOOL_INT, &threads, 0, 4096},
        {"--runs", TOOL_INT, &runs, 1, 1000},     {"--agents", TOOL_INT, &n_agents, 1, EMX_POOL_MAX_AGENTS},
        {"--workers", TOOL_INT, &workers, 1, 64}, {"--lookahead", TOOL_INT, &lookahead, 2, EMX_POOL_MAX_LOOKAHEAD},
        {"--prompt", TOOL_STR, &prompt, 0, 0},    {"--device", TOOL_STR, &device, 0, 0},
        {"--devices", TOOL_STR, &devices, 0, 0},  {"--check-every", TOOL_INT, &check_every, 0, 1 << 20},
    };
    int rc = tool_parse_args("bench", argc, argv, opts, sizeof opts / sizeof opts[0], &model_path, 1);
    if (rc) return rc == 1 ? usage(stdout) : 2;
    if (!model_path) return usage(stderr);
    if (workers > n_agents) {
        fprintf(stderr, "bench: --workers %d is more than the %d agents\n", workers, n_agents);
        return 2;
    }
    char err[512];
    int status = 1, model_open = 0, n_ids = 0;
    EmxModel model;
    EmxTokenizer *tk = NULL;
    EmxState *st = NULL;
    EmxCritic *critic = NULL;
    int *ids = NULL;
    EmxAgentsRun *res = calloc((size_t)runs * EMX_AGENTS_ROWS, sizeof *res);  // [run][row]
    double *tps = calloc((size_t)runs, sizeof *tps), *shares = calloc((size_t)runs, sizeof *shares);
    if (!res || !tps || !shares) goto done;
    char file[4096];
    if (emx_gguf_model_path(model_path, NULL, "bench", file, sizeof file, err, sizeof err) ||
        emx_model_open(&model, file, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    model_open = 1;
    if (!(tk = emx_tokenizer_new(&model.tok, err, sizeof err)) ||
        emx_prompt_ids(&model, tk, &(EmxPromptSpec){.text = prompt, .len = strlen(prompt)}, &ids, &n_ids, err,
                       sizeof err) != 0) {
        fprintf(stderr, "bench: %s: %s\n", model_path, err);
        goto done;
    }
    const int ctx = n_ids + n + 1;
    if (ctx > (int)model.cfg.max_seq_len) {
        fprintf(stderr, "bench: prompt (%d) + -n %d exceeds the model's context %u\n", n_ids, n, model.cfg.max_seq_len);
        goto done;
    }
    if (!(st = emx_state_new(&model, &(EmxStateOptions){.n_threads = threads, .ctx = ctx, .device = device}, err,
                             sizeof err))) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    print_device(st);
    // The pool makes its own replicas: on the CPU (workers threads), or one worker per GPU of
    // --devices (default: the single stream's device). A build without the pool's GPU path
    // (no CUDA backend or NCCL group) runs the single stream only, with a note.
    char dev_list[32];
    snprintf(dev_list, sizeof dev_list, "%s", emx_state_device(st));
    if (!devices) devices = dev_list;
    int cuda_devices[EMX_POOL_MAX_AGENTS], n_devices = 0;
    int rows = emx_bench_pool_devices(devices, cuda_devices, &n_devices, &workers, n_agents, err, sizeof err);
    if (rows < 0) goto fail;
    if (rows > 1) printf("pool: %s, %d worker(s)\n", n_devices > 0 ? devices : "cpu", workers);
    if (rows > 1 && check_every <= 0) rows = EMX_AGENTS_CRITIC;  // no critic row
    if (rows > EMX_AGENTS_CRITIC &&
        !(critic = bench_critic(&model, tk, n_devices > 0 ? cuda_devices[0] : -1, threads / workers, err, sizeof err)))
        goto fail;
    EmxAgentParams agents[EMX_POOL_MAX_AGENTS];
    emx_pool_default_configs(agents, n_agents);
    fprintf(stderr, "bench agents: %s, prompt %d tokens, %d decoded per run, %d agents, %d worker(s), %d runs each\n",
            model_path, n_ids, n, n_agents, workers, runs);
    char names[EMX_AGENTS_ROWS][48];
    emx_bench_agents_names(names, n_agents, lookahead, check_every);
    const EmxPoolOptions pool = {.agents = agents, .n_agents = n_agents, .lookahead = lookahead,
                                 .n_workers = workers, .cuda_devices = n_devices > 0 ? cuda_devices : NULL,
                                 .n_threads = threads > 0 ? threads / workers : 0,
                                 .ctx = ctx, .n_predict = n, .ignore_stop = 1, .critic = critic,
                                 .check_every = check_every, .rollback = 5, .max_rollbacks = 3, .critic_window = 64};
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < rows; k++) {
            EmxAgentsRun *x = &res[r * EMX_AGENTS_ROWS + k];
            if (emx_bench_agents_run(st, &model, tk, ids, n_ids, n, k, r + 1, &pool, x, err, sizeof err) != 0)
                goto fail;
            fprintf(stderr, "  run %d %-38s decode %8.2f tok/s\n", r + 1, names[k], x->tok_s);
        }
    emx_bench_agents_table(res, runs, rows, (const char(*)[48])names, tps, shares);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "bench: %s\n", err);
done:
    free(res);
    free(tps);
    free(shares);
    free(ids);
    emx_critic_free(critic);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
        return usage(argc < 2 ? stderr : stdout);
    if (!strcmp(argv[1], "--version")) {
        emx_cli_version(stdout, "bench");
        return 0;
    }
    if (!strcmp(argv[1], "speed")) return bench_speed(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sampler")) return bench_sampler(argc - 2, argv + 2);
    if (!strcmp(argv[1], "agents")) return bench_agents(argc - 2, argv + 2);
    fprintf(stderr, "bench: unknown benchmark '%s' (speed, sampler, agents)\n", argv[1]);
    return 2;
}
