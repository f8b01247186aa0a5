// bench.c — benchmarks of the CPU runtime, reported as ratios of runs on the same machine.
//
//   build/tools/bench speed MODEL.bin [-t threads] [-p 512] [-n 128] [--runs 3]
//                                     [--llama-bench BIN --gguf MODEL.gguf]
//                                     [--save FILE] [--baseline FILE]
//   build/tools/bench sampler MODEL.bin [-n 128] [-t threads] [--runs 5] [--prompt TEXT]
//                                       [--profile NAME|FILE]
//   build/tools/bench agents MODEL.bin [-n 128] [-t threads] [--runs 3] [--agents 8]
//                                      [--workers 1] [--lookahead 4]
//
// `speed`: prefill (pp: one batched pass over -p tokens) and decode (tg: -n single-token
// passes) tok/s of the forward pass, as llama.cpp's llama-bench measures pp512/tg128, with the
// GB/s a decode step streams (the weight bytes each token reads × tok/s) next to the machine's
// measured copy bandwidth. With --llama-bench, llama.cpp's llama-bench runs alternately with
// ours on the GGUF of the same model (-r 1 per round) and the ratios are reported. --save
// writes the result as JSON; --baseline compares with a saved one (the regression guard).
// Medians over --runs rounds.
//
// `agents`: what the agent pool costs (no critic): decode tok/s of the single stream (greedy),
// of N agents at lookahead 1 (one forward per token, N proposals) and of N agents at lookahead
// L (one batched pass of N branches per step), runs alternated, n tokens each, stop tokens fed
// back.
//
// `sampler`: what the entropix sampler costs. Decodes n tokens after the same prompt with the
// greedy sampler and with entropix, alternating (greedy, entropix, greedy, ...) so that drift
// in the machine's load hits both alike; stop tokens are fed back like any other token so both
// decode exactly n tokens. Reports per sampler the median decode tok/s and the median time
// per token spent choosing it (metrics + decision + draw for entropix, an argmax for greedy),
// and the overhead: how much slower entropix decodes, from both figures.
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "cpu_matmul.h"
#include "dtype.h"
#include "entropix_sampler.h"
#include "forward.h"
#include "forward_bench.h"
#include "llama_bench.h"
#include "machine.h"
#include "result.h"
#include "tool_args.h"
#include "generate.h"
#include "model.h"
#include "pool_generate.h"
#include "profile.h"
#include "tokenizer.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: bench speed MODEL.bin [options]\n"
            "  Prefill and decode tok/s of the forward pass (llama-bench's pp/tg), GB/s vs memcpy.\n"
            "  -t N                threads (default: all cores)\n"
            "  -p N                prompt tokens for the prefill test (default 512; 0 = skip)\n"
            "  -n N                tokens for the decode test (default 128; 0 = skip)\n"
            "  --runs N            rounds; medians are reported (default 3)\n"
            "  --llama-bench BIN   also run llama.cpp's llama-bench, alternating with ours\n"
            "  --gguf FILE         the GGUF of the same model for llama-bench\n"
            "  --save FILE         write the result as JSON\n"
            "  --baseline FILE     compare with a result saved earlier\n"
            "usage: bench sampler MODEL.bin [options]\n"
            "  Decode tok/s and sampler time per token, greedy vs entropix, runs alternated.\n"
            "  -n N                tokens to decode per run (default 128)\n"
            "  -t N                threads (default: all cores)\n"
            "  --runs N            runs per sampler (default 5; medians are reported)\n"
            "  --prompt TEXT       prompt (default: a short story opening)\n"
            "  --profile P         entropix profile (default classic)\n"
            "usage: bench agents MODEL.bin [options]\n"
            "  Decode tok/s: single stream vs the agent pool at lookahead 1 and L, runs alternated.\n"
            "  -n N                tokens to decode per run (default 128)\n"
            "  -t N                threads (default: all cores)\n"
            "  --runs N            runs per configuration (default 3; medians are reported)\n"
            "  --agents N          agents (default 8)\n"
            "  --workers N         CPU workers of the pool (default 1)\n"
            "  --lookahead L       the branch length of the third configuration (default 4)\n");
    return f == stdout ? 0 : 2;
}

// The median, numpy's rule (the mean of the middle two for an even count).
static double median(const double *x, int n) { return emx_percentile(x, (size_t)n, 50.0); }

static int bench_sampler(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Once upon a time, in a small village by the sea,";
    const char *profile_name = "classic";
    int n = 128, threads = 0, runs = 5;
    const ToolOpt opts[] = {
        {"-n", TOOL_INT, &n, 1, 1 << 20},      {"-t", TOOL_INT, &threads, 0, 4096},
        {"--runs", TOOL_INT, &runs, 1, 1000},  {"--prompt", TOOL_STR, &prompt, 0, 0},
        {"--profile", TOOL_STR, &profile_name, 0, 0},
    };
    int rc = tool_parse_args("bench", argc, argv, opts, sizeof opts / sizeof opts[0], &model_path, 1);
    if (rc) return rc == 1 ? usage(stdout) : 2;
    if (!model_path) return usage(stderr);

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
    double *tps[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
    double *spt[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
    if (!tps[0] || !tps[1] || !spt[0] || !spt[1]) {
        fprintf(stderr, "bench: out of memory\n");
        goto done;
    }
    if (emx_model_open(&model, model_path, err, sizeof err) != 0) {
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
    st = emx_state_new(&model, &(EmxStateOptions){.n_threads = threads, .ctx = ctx}, err, sizeof err);
    if (!st) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    fprintf(stderr, "bench sampler: %s, prompt %d tokens, %d decoded per run, %d runs each, profile %s\n",
            model_path, n_ids, n, runs, profile_name);

    const char *names[2] = {"greedy", "entropix"};
    for (int r = 0; r < runs; r++) {
        for (int k = 0; k < 2; k++) {
            EmxBasicSampler greedy = {0};
            EmxEntropixSampler es = {0};
            EmxSampler *s;
            EmxSamplerParams gp = {.temperature = 0.0f};
            rc = k == 0 ? emx_basic_sampler_init(&greedy, &gp, 1, (int)model.cfg.vocab_size, err, sizeof err)
                        : emx_entropix_sampler_init(&es, &profile, &model, tk, emx_state_ctx(st),
                                                    (uint64_t)(r + 1), err, sizeof err);
            if (rc != 0) {
                fprintf(stderr, "bench: %s\n", err);
                goto done;
            }
            s = k == 0 ? &greedy.base : &es.base;
            EmxGenerateOptions go = {.n_predict = n, .ignore_stop = 1};
            EmxGenerateStats gs;
            rc = emx_generate(st, tk, ids, n_ids, s, &go, &gs, err, sizeof err);
            emx_basic_sampler_free(&greedy);
            emx_entropix_sampler_free(&es);
            if (rc != 0) {
                fprintf(stderr, "bench: %s\n", err);
                goto done;
            }
            tps[k][r] = gs.n_generated / gs.decode_s;
            spt[k][r] = 1e3 * gs.sample_s / gs.n_generated;
            fprintf(stderr, "  run %d %-8s decode %7.2f tok/s, sampler %.3f ms/token\n", r + 1,
                    names[k], tps[k][r], spt[k][r]);
        }
    }
    double tg = median(tps[0], runs), te = median(tps[1], runs);
    double sg = median(spt[0], runs), se = median(spt[1], runs);
    double ms_per_tok_g = 1e3 / tg;
    printf("sampler    decode tok/s (median)   sampler ms/token (median)\n");
    printf("greedy     %10.2f              %10.3f\n", tg, sg);
    printf("entropix   %10.2f              %10.3f\n", te, se);
    printf("overhead: decode %.1f%% slower (tok/s ratio %.3f); sampler cost +%.3f ms/token = %.1f%% "
           "of a greedy decode step (%.2f ms)\n",
           100.0 * (tg / te - 1.0), te / tg, se - sg, 100.0 * (se - sg) / ms_per_tok_g, ms_per_tok_g);
    status = 0;

done:
    for (int k = 0; k < 2; k++) {
        free(tps[k]);
        free(spt[k]);
    }
    free(ids);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    return status;
}

static int bench_speed(int argc, char **argv) {
    const char *model_path = NULL, *llama = NULL, *gguf = NULL, *save = NULL, *baseline = NULL;
    int threads = 0, n_prompt = 512, n_gen = 128, runs = 3;
    const ToolOpt opts[] = {
        {"-t", TOOL_INT, &threads, 0, 4096},        {"-p", TOOL_INT, &n_prompt, 0, 1 << 20},
        {"-n", TOOL_INT, &n_gen, 0, 1 << 20},       {"--runs", TOOL_INT, &runs, 1, 1000},
        {"--llama-bench", TOOL_STR, &llama, 0, 0},  {"--gguf", TOOL_STR, &gguf, 0, 0},
        {"--save", TOOL_STR, &save, 0, 0},          {"--baseline", TOOL_STR, &baseline, 0, 0},
    };
    int rc = tool_parse_args("bench", argc, argv, opts, sizeof opts / sizeof opts[0], &model_path, 1);
    if (rc) return rc == 1 ? usage(stdout) : 2;
    if (!model_path) return usage(stderr);
    if (!llama != !gguf) {
        fprintf(stderr, "bench: --llama-bench and --gguf go together\n");
        return 2;
    }
    if (n_prompt == 0 && n_gen == 0) {
        fprintf(stderr, "bench: -p 0 and -n 0: nothing to measure\n");
        return 2;
    }
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
    if (!ours[0] || !ours[1] || !theirs[0] || !theirs[1]) {
        fprintf(stderr, "bench: out of memory\n");
        goto done;
    }
    if (emx_model_open(&model, model_path, err, sizeof err) != 0) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    model_open = 1;
    int need = n_prompt > n_gen ? n_prompt : n_gen;
    if (need > (int)model.cfg.max_seq_len) {
        fprintf(stderr, "bench: %d tokens exceed the model's context %u\n", need, model.cfg.max_seq_len);
        goto done;
    }
    st = emx_state_new(&model, &(EmxStateOptions){.n_threads = threads, .ctx = need}, err, sizeof err);
    if (!st) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }

    EmxBenchResult r = {.threads = threads > 0 ? threads : omp_get_num_procs(),
                        .n_prompt = n_prompt, .n_gen = n_gen};
    snprintf(r.model, sizeof r.model, "%s", model_path);
    snprintf(r.simd, sizeof r.simd, "%s", emx_cpu_simd_name());
    emx_bench_cpu_name(r.cpu, sizeof r.cpu);
    r.memcpy_gbs = emx_bench_memcpy_gbs((size_t)256 << 20, r.threads, 5);
    double weight_gb = (double)emx_model_weight_bytes_per_token(&model) / 1e9;
    fprintf(stderr, "machine: %s, %s, %d threads, memcpy %.1f GB/s (read + write)\n", r.cpu, r.simd,
            r.threads, r.memcpy_gbs);
    fprintf(stderr, "model: %s (%s weights), %.1f MB read per decoded token\n", model_path,
            emx_dtype_name(model.layers[0].wq.dtype), 1e3 * weight_gb);

    for (int k = 0; k < runs; k++) {
        EmxForwardSpeed fs;
        if (emx_bench_forward_once(st, &model, n_prompt, n_gen, &fs, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            goto done;
        }
        ours[0][k] = fs.prefill_tps;
        ours[1][k] = fs.decode_tps;
        fprintf(stderr, "  round %d  ours      pp%d %9.2f tok/s  tg%d %8.2f tok/s\n", k + 1, n_prompt,
                fs.prefill_tps, n_gen, fs.decode_tps);
        if (!llama) continue;
        if (emx_llama_bench_run(llama, gguf, r.threads, n_prompt, n_gen, &fs, err, sizeof err) != 0) {
            fprintf(stderr, "bench: %s\n", err);
            goto done;
        }
        theirs[0][k] = fs.prefill_tps;
        theirs[1][k] = fs.decode_tps;
        fprintf(stderr, "  round %d  llama.cpp pp%d %9.2f tok/s  tg%d %8.2f tok/s\n", k + 1, n_prompt,
                fs.prefill_tps, n_gen, fs.decode_tps);
    }
    r.prefill_tps = median(ours[0], runs);
    r.decode_tps = median(ours[1], runs);
    double lp = llama ? median(theirs[0], runs) : 0, ld = llama ? median(theirs[1], runs) : 0;
    printf("test      ours tok/s   weights GB/s  of memcpy%s\n", llama ? "   llama.cpp tok/s   ours/llama.cpp" : "");
    if (n_prompt > 0) {
        printf("pp%-6d %11.2f            -          -", n_prompt, r.prefill_tps);
        if (llama) printf("   %15.2f   %14.3f", lp, lp > 0 ? r.prefill_tps / lp : 0.0);
        printf("\n");
    }
    if (n_gen > 0) {
        double gbs = weight_gb * r.decode_tps;
        printf("tg%-6d %11.2f   %12.2f     %5.1f%%", n_gen, r.decode_tps, gbs, 100.0 * gbs / r.memcpy_gbs);
        if (llama) printf("   %15.2f   %14.3f", ld, ld > 0 ? r.decode_tps / ld : 0.0);
        printf("\n");
    }
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
    if (st) emx_state_free(st);
    if (model_open) emx_model_close(&model);
    return status;
}

static int bench_agents(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Once upon a time, in a small village by the sea,";
    int n = 128, threads = 0, runs = 3, n_agents = 8, workers = 1, lookahead = 4;
    const ToolOpt opts[] = {
        {"-n", TOOL_INT, &n, 1, 1 << 20},         {"-t", TOOL_INT, &threads, 0, 4096},
        {"--runs", TOOL_INT, &runs, 1, 1000},     {"--agents", TOOL_INT, &n_agents, 1, EMX_POOL_MAX_AGENTS},
        {"--workers", TOOL_INT, &workers, 1, 64}, {"--lookahead", TOOL_INT, &lookahead, 2, EMX_POOL_MAX_LOOKAHEAD},
        {"--prompt", TOOL_STR, &prompt, 0, 0},
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
    int *ids = NULL;
    double *tps[3] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double)),
                      calloc((size_t)runs, sizeof(double))};
    if (!tps[0] || !tps[1] || !tps[2]) goto done;
    if (emx_model_open(&model, model_path, err, sizeof err) != 0) {
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
    if (!(st = emx_state_new(&model, &(EmxStateOptions){.n_threads = threads, .ctx = ctx}, err, sizeof err))) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    EmxAgentParams agents[EMX_POOL_MAX_AGENTS];
    emx_pool_default_configs(agents, n_agents);
    fprintf(stderr, "bench agents: %s, prompt %d tokens, %d decoded per run, %d agents, %d worker(s), %d runs each\n",
            model_path, n_ids, n, n_agents, workers, runs);
    char names[3][48];
    snprintf(names[0], sizeof names[0], "single stream (greedy)");
    snprintf(names[1], sizeof names[1], "%d agents, lookahead 1", n_agents);
    snprintf(names[2], sizeof names[2], "%d agents, lookahead %d", n_agents, lookahead);
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < 3; k++) {
            double decode_s = 0;
            int generated = 0;
            if (k == 0) {
                EmxBasicSampler greedy = {0};
                EmxSamplerParams gp = {.temperature = 0.0f};
                if (emx_basic_sampler_init(&greedy, &gp, 1, (int)model.cfg.vocab_size, err, sizeof err) != 0) goto fail;
                EmxGenerateOptions go = {.n_predict = n, .ignore_stop = 1};
                EmxGenerateStats gs;
                rc = emx_generate(st, tk, ids, n_ids, &greedy.base, &go, &gs, err, sizeof err);
                emx_basic_sampler_free(&greedy);
                decode_s = gs.decode_s;
                generated = gs.n_generated;
            } else {
                EmxPoolOptions po = {.agents = agents, .n_agents = n_agents, .lookahead = k == 1 ? 1 : lookahead,
                                     .n_workers = workers, .n_threads = threads > 0 ? threads / workers : 0,
                                     .ctx = ctx, .seed = (uint64_t)(r + 1), .n_predict = n, .ignore_stop = 1};
                EmxPoolStats ps;
                rc = emx_pool_generate(&model, tk, ids, n_ids, &po, &ps, NULL, NULL, err, sizeof err);
                decode_s = ps.decode_s;
                generated = ps.n_generated;
            }
            if (rc != 0) goto fail;
            // the first token comes from the prefill's logits: n - 1 decode steps, as emx_generate counts
            tps[k][r] = generated / decode_s;
            fprintf(stderr, "  run %d %-26s decode %8.2f tok/s\n", r + 1, names[k], tps[k][r]);
        }
    const double t0 = median(tps[0], runs);
    printf("configuration                decode tok/s (median)   vs single stream\n");
    for (int k = 0; k < 3; k++) {
        const double t = median(tps[k], runs);
        printf("%-26s   %10.2f              %.3f (%+.1f%% time per token)\n", names[k], t, t / t0,
               100.0 * (t0 / t - 1.0));
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "bench: %s\n", err);
done:
    for (int k = 0; k < 3; k++) free(tps[k]);
    free(ids);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))
        return usage(argc < 2 ? stderr : stdout);
    if (!strcmp(argv[1], "speed")) return bench_speed(argc - 2, argv + 2);
    if (!strcmp(argv[1], "sampler")) return bench_sampler(argc - 2, argv + 2);
    if (!strcmp(argv[1], "agents")) return bench_agents(argc - 2, argv + 2);
    fprintf(stderr, "bench: unknown benchmark '%s' (speed, sampler, agents)\n", argv[1]);
    return 2;
}
