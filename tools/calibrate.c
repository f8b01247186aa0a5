// calibrate.c — a profile for the entropix switch from a model's own metric distribution.
//
//   build/tools/calibrate MODEL.bin TEXT.txt [-o OUT.profile] [--base NAME|FILE]
//                         [--metric-layers last|all|N] [-n MAX_TOKENS] [-c CTX] [-t THREADS]
//
// Runs the model over the text teacher-forced, one position at a time (the attention metrics
// need each position's own score rows), in consecutive windows of CTX tokens each from an
// empty cache; the first SKIP positions of a window (attention over a handful of keys is not
// typical) are not sampled. From the metrics of the sampled positions it writes a profile
// whose thresholds are percentiles of them (sampler/calibrate.h lists which and why), and
// prints the metric percentiles and the fraction of positions each case takes under the base
// profile and under the calibrated one.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/calibrate.h"
#include "base/clock.h"
#include "base/out_file.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward.h"
#include "runtime/cli/run_io.h"
#include "runtime/model.h"
#include "sampler/profile.h"
#include "base/read_file.h"
#include "tokenizer/tokenizer.h"
#include "tools/tool_args.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: calibrate MODEL.bin TEXT.txt [options]\n"
            "Writes an entropix profile whose thresholds are percentiles of MODEL's metrics on TEXT.\n"
            "  -o FILE                 write the profile to FILE (default: stdout)\n"
            "  --base NAME|FILE        profile the calibrated one starts from (default measured)\n"
            "  --metric-layers L       attention metrics from last (default), all, or layer N\n"
            "  -n N                    at most N tokens of TEXT (default 2048)\n"
            "  -c N                    window length (default 512, at most the model's context)\n"
            "  --skip N                positions of each window not sampled (default 16)\n"
            "  -t N                    threads (default: all cores)\n");
    return f == stdout ? 0 : 2;
}

static void print_distribution(FILE *f, const char *prefix, const char *name, const double *frac) {
    fprintf(f, "%s%-12s", prefix, name);
    for (int c = 0; c < EMX_CASE_COUNT; c++) fprintf(f, " %s %5.1f%%", emx_case_name((EmxCase)c), 100.0 * frac[c]);
    fprintf(f, "\n");
}

// The profile is written whole (base/out_file.h): a temporary file beside OUT, renamed over it
// at the end, so a failed run leaves OUT as it was. OUT is checked before the long part (it may
// not be an input; a missing folder, a device, a FIFO, a symbolic link are refused) and opened
// only when the profile is ready, so an interrupted run leaves nothing behind. Without -o: stdout.
static int check_output(const char *out_path, const char *model_path, const char *text_path, const char *base_name) {
    char err[512];
    if (!out_path) return 0;
    const EmxRunPath in[] = {{"the model file", model_path}, {"the text", text_path}, {"--base", base_name}};
    const EmxRunPath out[] = {{"-o", out_path}};
    const EmxOutKind kind[] = {EMX_OUT_REPLACE};
    if (emx_run_check_outputs(in, 3, out, 1, err, sizeof err) == 0 &&
        emx_run_check_output_kinds(out, kind, 1, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "calibrate: %s\n", err);
    return -1;
}

// Teacher-forced: each window of ctx tokens from position 0, every position's metrics after
// the first skip added to samples (attention from base's layer); progress every 256 tokens.
static int sample_text(EmxState *st, const EmxConfig *cfg, const int *ids, size_t n_ids, int ctx, int skip,
                       const EmxProfile *base, double *scratch, EmxMetricSamples *samples, double t0) {
    int nl = (int)cfg->n_layers, nh = (int)cfg->n_heads, nv = (int)cfg->vocab_size;
    for (size_t w = 0; w < n_ids; w += (size_t)ctx) {
        int len = (int)(n_ids - w < (size_t)ctx ? n_ids - w : (size_t)ctx);
        for (int p = 0; p < len; p++) {
            const float *logits = emx_forward(st, &ids[w + (size_t)p], 1, p);
            if (!logits) {
                fprintf(stderr, "calibrate: forward pass failed at token %zu\n", w + (size_t)p);
                return -1;
            }
            if (p < skip) continue;
            EmxMetrics m;
            emx_step_metrics(st, logits, nv, nl, nh, ctx, base->attn_layer, scratch, &m);
            if (emx_metric_samples_add(samples, &m, base->attn_varentropy_def) != 0) {
                fprintf(stderr, "calibrate: out of memory\n");
                return -1;
            }
            size_t done_tokens = w + (size_t)p + 1;
            if (done_tokens % 256 == 0)
                fprintf(stderr, "calibrate: %zu/%zu tokens (%.1f tok/s)\n", done_tokens, n_ids,
                        (double)done_tokens / (emx_now_s() - t0));
        }
    }
    return 0;
}

// The model's own temperature: a case sampling hotter at a typical step is warned about.
#define HOT_TEMPERATURE 1.0

// What this run calibrates from, for the file's header and the messages.
typedef struct {
    const char *model_path, *text_path, *out_path, *base_name;
    int ctx, skip;  // window length, positions skipped at the start of each
} CalRun;

// The profile file's comment header: where the numbers came from, the metrics' percentiles and
// the case shares under the base and the calibrated profile (the profile reader skips it).
static void write_header(FILE *out, const CalRun *run, const EmxMetricSamples *samples, const double *frac_base,
                         const double *frac_cal, const double *temps) {
    fprintf(out, "# calibrated by tools/calibrate from %s on %s\n", run->model_path, run->text_path);
    fprintf(out, "# %zu positions (windows of %d tokens, first %d skipped), base profile %s\n",
            samples->n, run->ctx, run->skip, run->base_name);
    static const double qs[] = {10, 25, 30, 50, 70, 75, 85, 90};
    const char *names[] = {"logits entropy H (bits)", "logits varentropy V (bits²)",
                           "attention entropy (bits)", "attention varentropy (bits²)",
                           "interaction strength", "agreement"};
    const double *cols[] = {samples->h, samples->v, samples->ae, samples->av, samples->is, samples->agr};
    for (int c = 0; c < 6; c++) {
        fprintf(out, "# %s:", names[c]);
        for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++)
            fprintf(out, " P%.0f %.4g", qs[k], emx_percentile(cols[c], samples->n, qs[k]));
        fprintf(out, "\n");
    }
    fprintf(out, "# thresholds: LELV H<P30 V<P30, HELV H>P85 V<P30, LEHV H<P50 V>P70, HEHV H>P70 V>P70 (sampler/calibrate.h)\n");
    fprintf(out, "# case shares on these positions:\n");
    print_distribution(out, "#   ", run->base_name, frac_base);
    print_distribution(out, "#   ", "calibrated", frac_cal);
    fprintf(out, "# temperature of each case at the median metrics:");
    for (int c = 0; c < EMX_CASE_COUNT; c++) fprintf(out, " %s %.3g", emx_case_name((EmxCase)c), temps[c]);
    fprintf(out, "\n");
}

// One line on stderr per case that samples hotter than the model's own temperature at the
// median metrics: those cases re-roll the tokens greedy keeps (sampler/calibrate.h).
static void warn_hot_cases(const double *temps) {
    for (int c = 0; c < EMX_CASE_COUNT; c++)
        if (temps[c] > HOT_TEMPERATURE)
            fprintf(stderr,
                    "calibrate: warning: %s samples at T = %.3g at the median metrics, hotter than the model's own "
                    "T = 1 (set temp_max = 1 to cap it)\n",
                    emx_case_name((EmxCase)c), temps[c]);
}

// The calibrated profile from the samples, written after its header to out (opened and closed
// here: the temporary file renamed to OUT), and the case shares on stderr.
static int finish_profile(EmxOut *out, const CalRun *run, const EmxProfile *base, const EmxMetricSamples *samples,
                          double t0) {
    EmxProfile cal_profile;
    EmxCalibration cal;
    if (emx_calibrate_profile(base, samples, &cal_profile, &cal) != 0) {
        fprintf(stderr, "calibrate: only %zu positions sampled\n", samples->n);
        return -1;
    }
    double frac_base[EMX_CASE_COUNT], frac_cal[EMX_CASE_COUNT], temps[EMX_CASE_COUNT];
    emx_case_distribution(base, samples, frac_base);
    emx_case_distribution(&cal_profile, samples, frac_cal);
    emx_case_temperatures_at_median(&cal_profile, &cal, HOT_TEMPERATURE, temps);

    char err[512];
    if (emx_out_open(out, run->out_path ? run->out_path : "-", EMX_OUT_REPLACE, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: -o %s\n", err);
        return -1;
    }
    write_header(out->f, run, samples, frac_base, frac_cal, temps);
    emx_profile_write(out->f, &cal_profile);
    if (emx_out_close(out, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: -o %s\n", err);
        return -1;
    }
    fprintf(stderr, "calibrate: %zu positions in %.1f s\n", samples->n, emx_now_s() - t0);
    fprintf(stderr, "case shares (teacher-forced positions of %s):\n", run->text_path);
    print_distribution(stderr, "  ", run->base_name, frac_base);
    print_distribution(stderr, "  ", "calibrated", frac_cal);
    warn_hot_cases(temps);
    return 0;
}

// The --base profile with --metric-layers applied, and --skip checked against the window.
static int load_base(EmxProfile *base, const char *base_name, const char *layer_arg, int skip, int ctx) {
    char err[512];
    if (emx_profile_load(base, base_name, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: --base: %s\n", err);
        return -1;
    }
    if (layer_arg && emx_profile_set(base, "attn_layer", layer_arg, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: --metric-layers: %s\n", err);
        return -1;
    }
    if (skip >= ctx - 1) {
        fprintf(stderr, "calibrate: --skip %d leaves nothing of a %d-token window\n", skip, ctx);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *out_path = NULL, *base_name = EMX_PROFILE_DEFAULT;
    const char *layer_arg = NULL;
    int max_tokens = 2048, ctx = 512, skip = 16, threads = 0;
    const ToolOpt opts[] = {
        {"-o", TOOL_STR, &out_path, 0, 0},      {"--base", TOOL_STR, &base_name, 0, 0},
        {"--metric-layers", TOOL_STR, &layer_arg, 0, 0},
        {"-n", TOOL_INT, &max_tokens, 1, 1 << 24}, {"-c", TOOL_INT, &ctx, 8, 1 << 20},
        {"--skip", TOOL_INT, &skip, 0, 1 << 20},   {"-t", TOOL_INT, &threads, 0, 4096},
    };
    const char *pos[2] = {NULL, NULL};
    int rc = tool_parse_args("calibrate", argc - 1, argv + 1, opts, sizeof opts / sizeof opts[0], pos, 2);
    if (rc) return rc == 1 ? usage(stdout) : 2;
    model_path = pos[0];
    text_path = pos[1];
    if (!model_path || !text_path) return usage(stderr);

    char err[512];
    EmxProfile base;
    if (check_output(out_path, model_path, text_path, base_name) != 0 ||
        load_base(&base, base_name, layer_arg, skip, ctx) != 0)
        return 2;

    int status = 1;
    EmxModel model;
    int model_open = 0;
    EmxTokenizer *tk = NULL;
    EmxState *st = NULL;
    char *text = NULL;
    int *ids = NULL;
    double *scratch = NULL;
    EmxMetricSamples samples = {0};
    EmxOut out = {0};

    size_t text_len = 0;
    text = emx_read_file(text_path, &text_len);
    if (!text) {
        fprintf(stderr, "calibrate: %s: %s\n", text_path, strerror(errno));
        goto done;
    }
    if (emx_model_open(&model, model_path, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: %s\n", err);
        goto done;
    }
    model_open = 1;
    const EmxConfig *cfg = &model.cfg;
    if (base.attn_layer >= (int)cfg->n_layers) {
        fprintf(stderr, "calibrate: attention layer %d: the model has %u layers\n", base.attn_layer,
                cfg->n_layers);
        goto done;
    }
    if (ctx > (int)cfg->max_seq_len) ctx = (int)cfg->max_seq_len;
    tk = emx_tokenizer_new(&model.tok, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "calibrate: %s: %s\n", model_path, err);
        goto done;
    }
    size_t n_ids = 0;
    if (emx_encode(tk, text, text_len, EMX_ENC_BOS, &ids, &n_ids, err, sizeof err) != 0) {
        fprintf(stderr, "calibrate: %s: %s\n", text_path, err);
        goto done;
    }
    if (n_ids > (size_t)max_tokens) n_ids = (size_t)max_tokens;
    if (n_ids < (size_t)skip + 2) {
        fprintf(stderr, "calibrate: %s: %zu tokens, too few to calibrate (need > %d)\n", text_path,
                n_ids, skip + 1);
        goto done;
    }
    st = emx_state_new(&model, &(EmxStateOptions){.n_threads = threads, .ctx = ctx}, err, sizeof err);
    scratch = malloc(sizeof(double) * (size_t)ctx);
    if (!st || !scratch) {
        fprintf(stderr, "calibrate: %s\n", st ? "out of memory" : err);
        goto done;
    }

    fprintf(stderr, "calibrate: %s on %s: %zu tokens, windows of %d, first %d of each skipped\n",
            model_path, text_path, n_ids, ctx, skip);
    double t0 = emx_now_s();
    if (sample_text(st, cfg, ids, n_ids, ctx, skip, &base, scratch, &samples, t0) != 0) goto done;

    const CalRun run = {model_path, text_path, out_path, base_name, ctx, skip};
    if (finish_profile(&out, &run, &base, &samples, t0) != 0) goto done;
    status = 0;

done:
    emx_out_discard(&out);  // after a failure: the temporary file removed, OUT as it was
    emx_metric_samples_free(&samples);
    free(scratch);
    free(ids);
    free(text);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    return status;
}
