// run.c — ./run MODEL.bin [options]: generate text from a prompt with an entropix.c model.
//
//   ./run weights/smollm2-135m-instruct.bin -p "What is the capital of France?"
//   ./run build/models/stories260K.f32.bin --temp 0 -n 200
//
// Text goes to stdout as it is produced; the seed (when not given), warnings and the timing
// summary go to stderr. Exit status: 0 ok, 1 runtime error, 2 usage error. Flags: --help or
// docs/cli.md.
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer/chat_template.h"
#include "runtime/cli/cli_args.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/model_verify.h"
#include "sampler/profile.h"
#include "base/errmsg.h"
#include "base/read_file.h"
#include "runtime/forward_common.h"  // emx_state_resolve_ctx: the context a state will have
#include "base/mem_available.h"
#include "runtime/cli/run_io.h"
#include "runtime/cpu/cpu_state_size.h"
#include "runtime/cli/run_branch.h"
#include "runtime/cli/run_chat.h"
#include "runtime/cli/run_pool.h"
#include "runtime/cli/run_report.h"
#include "runtime/cli/run_setup.h"
#include "runtime/convert/gguf_cache.h"
#include "sampler/rng.h"
#include "runtime/token_log.h"
#include "tokenizer/tokenizer.h"

// What the per-token callback needs: where the text and the log go, and the sampler whose
// last step describes the token just chosen.
typedef struct {
    FILE *out;
    FILE *metrics;                 // --metrics, or NULL
    const char *metrics_path;
    int color;
    int out_errno;                 // the write to out that failed (0: none)
    int metrics_errno;             // the write to metrics that failed (-1: a failure without errno)
    const EmxTokenizer *tk;
    const char *sampler_name;
    const EmxRunSampler *rs;       // the sampler: the record of each token comes from it
    const EmxLogprobTap *lpt;      // --logprobs / --report: the step's top logprobs, or NULL
    int n_logprobs;                // --logprobs N for the --metrics lines (-1: no keys)
    EmxReport *report;             // --report, or NULL
    volatile sig_atomic_t *interrupt; // set by Ctrl-C: the loop stops after this token
    int interrupted;               // it did
} TokenSink;

// Returns -1 to stop the loop when a write failed (generating text nobody receives is wasted,
// and the run must end with the error, not with exit 0), or after Ctrl-C (the token is out).
static int on_token(void *user, int index, int id, int pos, const char *text, size_t len,
                    int is_stop) {
    TokenSink *ts = user;
    errno = 0;
    if (len) {
        if (ts->color && ts->rs->entropix) {
            const EmxDecision *d = &ts->rs->es.last_decision;
            fputs(emx_case_color(d->kase, d->action == EMX_ACTION_INSERT), ts->out);
            fwrite(text, 1, len, ts->out);
            fputs(EMX_COLOR_RESET, ts->out);
        } else {
            fwrite(text, 1, len, ts->out);
        }
        if (fflush(ts->out) != 0 || ferror(ts->out)) {
            ts->out_errno = errno ? errno : EIO;
            return -1;
        }
    }
    if (ts->metrics || ts->report) {
        EmxTokenRecord r = emx_run_sampler_record(ts->rs, ts->tk, ts->sampler_name, index, id, pos, is_stop);
        if (ts->lpt) r.logprobs = &ts->lpt->last, r.tk = ts->tk;
        if (ts->report) emx_report_add_token(ts->report, &r);  // out of memory: the page says it is incomplete
        r.n_logprobs = ts->n_logprobs;
        if (ts->n_logprobs < 0) r.logprobs = NULL;
        if (ts->metrics && (emx_token_log_json(ts->metrics, &r) != 0 || fflush(ts->metrics) != 0)) {
            ts->metrics_errno = errno ? errno : -1;
            return -1;
        }
    }
    if (ts->interrupt && *ts->interrupt) return ts->interrupted = 1, -1;
    return 0;
}

// --logprobs / --report: the logprob tap goes outermost, so it sees the logits every sampler
// gets; the report is made (sink->report NULL when that failed, said on stderr).
static EmxSampler *attach_report(const EmxCliArgs *a, TokenSink *ts, EmxLogprobTap *lpt, EmxSampler *sampler,
                                 const EmxProfile *profile, const int *ids, int n_ids) {
    ts->n_logprobs = a->logprobs;
    const int n = emx_run_logprobs_wanted(a);
    if (n >= 0) {
        emx_logprob_tap_init(lpt, sampler, n);
        sampler = &lpt->base, ts->lpt = lpt;
    }
    ts->report = emx_run_report_new(a, profile, ts->tk, ids, n_ids, a->seed, NULL, 0);
    return sampler;
}

// "run: --metrics m.jsonl: No space left on device" (e < 0: no errno, "write failed").
static void report_write_error(const char *what, const char *path, int e) {
    fprintf(stderr, "run: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", e > 0 ? strerror(e) : "write failed");
}

// The files this run reads and the ones it writes: an output may not be an input, nor another
// output (run_io.h). Checked before any input is opened, so nothing is truncated by a mistake.
static int check_paths(const EmxCliArgs *a, int entropix, char *err, size_t errlen) {
    EmxProfile scratch;
    const int profile_file = entropix && emx_profile_builtin(&scratch, a->profile) != 0;
    const EmxRunPath in[] = {{"the model file", a->model_path},
                             {"the critic model file", a->critic_model},
                             {"the prompt file (-f)", a->prompt_file},
                             {"the profile file", profile_file ? a->profile : NULL},
                             {"the grammar file", a->grammar_file},
                             {"the JSON schema file", a->json_schema_file}};
    const EmxRunPath out[] = {{"--metrics", a->metrics_path}, {"--log", a->log_path}, {"--report", a->report_path}};
    const EmxOutKind kinds[] = {EMX_OUT_STREAM, EMX_OUT_STREAM, EMX_OUT_REPLACE};  // the page is written whole
    if (emx_run_check_outputs(in, 6, out, 3, err, errlen) != 0) return -1;
    return emx_run_check_output_kinds(out, kinds, 3, err, errlen);
}

// -f's text, read no further than a context of ctx tokens can hold (run_io.h's bound), so
// /dev/zero or a 10 GB file costs a bounded read and a one-line error. NULL: said on stderr.
static char *read_prompt_file(const char *path, const EmxTokenizer *tk, int ctx, size_t *len) {
    size_t max_piece = 0;
    for (int i = 0; i < emx_tokenizer_n_vocab(tk); i++) {
        size_t n = 0;
        emx_token_bytes_ref(tk, i, &n);
        if (n > max_piece) max_piece = n;
    }
    const size_t bound = emx_prompt_byte_bound(ctx, max_piece);
    const int from_stdin = strcmp(path, "-") == 0;  // as llama.cpp's -f and the shell's convention
    char *text = from_stdin ? emx_read_stream_max(stdin, bound, len) : emx_read_file_max(path, bound, len);
    if (!text && errno == EFBIG)
        fprintf(stderr, "run: -f %s: the prompt is longer than %zu bytes, more than the context of %d tokens can hold\n",
                path, bound, ctx);
    else if (!text)
        fprintf(stderr, "run: -f %s: %s\n", path, strerror(errno));
    return text;
}

// The model's load: mapped for GPUs (the agents' --devices included) or with --mmap.
static EmxLoad run_load(const EmxCliArgs *a) {
    const int gpu_agents = a->devices && strcmp(a->devices, "cpu") != 0;
    return emx_load_for_device(a->device, a->mmap || gpu_agents);
}

// Does one CPU state at ctx fit the memory there is? (The CUDA backend checks its own.)
static int check_cpu_memory(const EmxModel *m, const EmxCliArgs *a, int ctx, char *err, size_t errlen) {
    if (!emx_device_is_cpu(a->device)) return 0;
    const int threads = a->threads > 0 ? a->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t kv = 0, need = emx_cpu_state_bytes(&m->cfg, ctx, threads, a->cache_type, &kv);
    return emx_mem_check(need, kv, emx_mem_available(), ctx, "1 state", err, errlen);
}

// The entropix run's case counts, one line on stderr.
static void print_case_summary(const EmxEntropixSampler *es) {
    long total = 0;
    for (int c = 0; c < EMX_CASE_COUNT; c++) total += es->case_counts[c];
    if (total == 0) return;
    fprintf(stderr, "entropix cases:");
    for (int c = 0; c < EMX_CASE_COUNT; c++)
        fprintf(stderr, " %s %.1f%% (%ld)%s", emx_case_name((EmxCase)c),
                100.0 * (double)es->case_counts[c] / (double)total, es->case_counts[c],
                c + 1 < EMX_CASE_COUNT ? "," : "");
    fprintf(stderr, "; pauses inserted: %ld\n", es->n_inserted);
}

// A sliding-window model's KV cache: the local layers' rings (runtime/kv_ring.h) against every
// layer at ctx rows. st: the run's state (its own figures, any device), or NULL (the agent pool:
// one CPU state's, computed; nothing for a GPU).
static void print_kv_rings(const EmxModel *m, const EmxCliArgs *a, const EmxState *st, int ctx) {
    uint64_t bytes = 0, full = 0;
    int rows = ctx;
    if (st) {
        EmxStateInfo info;
        emx_state_info(st, &info);
        rows = info.kv_ring_rows ? info.kv_ring_rows : ctx;
        uint64_t held = 0;  // rows of all layers, each row's bytes as the backend lays it out
        for (uint32_t l = 0; l < m->cfg.n_layers; l++) held += emx_layer_is_local(&m->ext, l) ? (uint64_t)rows : (uint64_t)ctx;
        bytes = info.kv_cache_bytes;
        full = held ? bytes / held * m->cfg.n_layers * (uint64_t)ctx : 0;
    } else if (emx_device_is_cpu(a->device)) {
        emx_cpu_state_bytes(&m->cfg, ctx, 1, a->cache_type, &full);
        bytes = emx_cpu_kv_cache_bytes(m, ctx, a->cache_type);
        for (uint32_t l = 0; l < m->cfg.n_layers; l++)
            rows = emx_cpu_layer_rows(&m->ext, l, ctx) < rows ? emx_cpu_layer_rows(&m->ext, l, ctx) : rows;
    } else {
        return;
    }
    fprintf(stderr, "kv cache: %.1f MiB (sliding window %u: local layers keep rings of %d rows; %.1f MiB with "
            "every layer at %d rows)\n", (double)bytes / (1 << 20), m->ext.sliding_window, rows,
            (double)full / (1 << 20), ctx);
}

static void print_verbose(const EmxModel *m, const EmxCliArgs *a, const EmxState *st, const EmxSamplerParams *sp,
                          int chat, int ctx, const int *ids, int n_ids) {
    const EmxConfig *c = &m->cfg;
    fprintf(stderr,
            "model: %s: arch %u, dim %u, hidden %u, layers %u, heads %u/%u (kv), head_dim %u, "
            "vocab %u, max_seq_len %u, chat template %s\n",
            a->model_path, c->arch, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
            c->head_dim, c->vocab_size, c->max_seq_len,
            emx_chat_template_name(c->chat_template) ? emx_chat_template_name(c->chat_template) : "?");
    char where[128];
    fprintf(stderr, "weights: %s\n", emx_model_memory_text(m, where, sizeof where));
    if (m->ext.sliding_window) print_kv_rings(m, a, st, ctx);
    EmxStateInfo info;
    if (st) emx_state_info(st, &info);
    if (st && info.decode_path) fprintf(stderr, "decode: %s\n", info.decode_path);
    if (a->threads > 0)
        fprintf(stderr, "mode: %s, context %d, threads %d\n", chat ? "chat" : "raw", ctx, a->threads);
    else
        fprintf(stderr, "mode: %s, context %d, threads: all cores\n", chat ? "chat" : "raw", ctx);
    fprintf(stderr, "sampler: %s (temp %g, top-k %d, top-p %g, min-p %g), seed %" PRIu64 "\n",
            emx_sampler_kind_name(a->sampler), (double)sp->temperature, sp->top_k,
            (double)sp->top_p, (double)sp->min_p, a->seed);
    fprintf(stderr, "prompt ids (%d):", n_ids);
    for (int i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

// -v with --sampler entropix: the profile, where the attention metrics come from, the pause token.
static void print_entropix_setup(const EmxCliArgs *a, const EmxProfile *profile, const EmxEntropixSampler *es,
                                 const EmxTokenizer *tk) {
    fprintf(stderr, "entropix: profile %s, attention metrics from %s, pause token %d", a->profile,
            profile->attn_layer == EMX_ATTN_LAYER_LAST ? "the last layer"
            : profile->attn_layer == EMX_ATTN_LAYERS_ALL ? "all layers" : "one layer",
            es->pause_token);
    if (es->pause_token >= 0) {
        size_t plen = 0;
        const char *piece = emx_token_bytes_ref(tk, es->pause_token, &plen);
        fprintf(stderr, " ('%.*s')", (int)plen, piece ? piece : "");
    }
    fprintf(stderr, "\n");
}

// The library's warnings (EmxPromptSpec.warn), one line each.
static void warn_stderr(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "run: warning: %s\n", msg);
}

// Ctrl-C: a single stream stops after the token it is choosing, the agent pool finishes its
// round; either prints, logs and reports what there is, and exits 130. A second Ctrl-C kills
// (the handler restores the default). Signal handlers can take no context, hence the one
// file-level flag; it belongs to this program, not to the library.
static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    interrupted = 1;
    signal(sig, SIG_DFL);
}

// SA_RESTART: a write to a stdout that is blocked (a pipe to a pager) goes on after the flag is
// set, instead of failing with EINTR and ending the run as an output error.
static void catch_sigint(void) {
    struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

// Everything one run of ./run holds; run_close frees whatever was made.
typedef struct {
    EmxCliArgs a;
    int entropix, chat, ctx;
    EmxProfile profile;          // --sampler entropix only
    EmxModel model;
    int model_open;
    char model_file[4096];  // the file opened: the model path, or a GGUF's converted cache file
    EmxTokenizer *tk;
    EmxState *st;
    EmxRunSampler rs;
    FILE *metrics;               // --metrics (metrics_out.f), or NULL
    EmxOut metrics_out;
    char *file_prompt;           // -f's text, or NULL
    char *escaped_prompt, *escaped_system;  // -e's copies of -p and --system, or NULL
    const char *prompt;          // -p's or -f's text (-e's escapes replaced)
    size_t prompt_len;
    const char *system;          // --system's text (-e's escapes replaced), or NULL
    int *ids, n_ids;             // the prompt's token ids (chat template applied)
    EmxReport *report;           // --report, or NULL
} Run;

static void run_close(Run *r) {
    emx_report_free(r->report);
    emx_out_discard(&r->metrics_out);
    emx_run_sampler_free(&r->rs);
    free(r->ids);
    if (r->st) emx_state_free(r->st);
    if (r->tk) emx_tokenizer_free(r->tk);
    if (r->model_open) emx_model_close(&r->model);
    free(r->file_prompt);
    free(r->escaped_prompt);
    free(r->escaped_system);
}

// -p and --system as the run reads them: with -e, their escapes replaced (a \x00 in -p is a
// byte of the prompt, which raw mode feeds and chat mode refuses). 0, or -1 with err set.
static int unescape_args(Run *r, char *err, size_t errlen) {
    const EmxCliArgs *a = &r->a;
    r->prompt = a->prompt, r->prompt_len = a->prompt ? strlen(a->prompt) : 0, r->system = a->system;
    if (!a->escape) return 0;
    size_t n = 0;
    if ((a->prompt && !(r->prompt = r->escaped_prompt = emx_cli_unescape(a->prompt, &r->prompt_len))) ||
        (a->system && !(r->system = r->escaped_system = emx_cli_unescape(a->system, &n))))
        return emx_seterr(err, errlen, "-e: out of memory");
    if (r->system && strlen(r->system) != n)
        return emx_seterr(err, errlen, "--system: -e made a NUL byte of \\x00, which a chat message cannot hold");
    return 0;
}

// The flags and everything checkable before a file is opened. Returns the exit status when the
// run ends here (usage error 2, --help/--version 0, stdout unusable 1), -1 to go on.
static int read_args(Run *r, int argc, char **argv) {
    char err[512] = {0};
    EmxCliArgs *a = &r->a;
    if (emx_cli_parse(argc, argv, a, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return 2;
    }
    if (a->help) {
        emx_cli_usage(stdout, argv[0]);
        return 0;
    }
    if (a->version) {
        emx_cli_version(stdout, "run");
        return 0;
    }
    r->entropix = a->sampler == EMX_SAMPLER_ENTROPIX;
    int out_errno = emx_run_check_stdio();
    if (out_errno) {
        report_write_error("writing the generated text to stdout", NULL, out_errno);
        return 1;
    }
    if (check_paths(a, r->entropix, err, sizeof err) != 0 || unescape_args(r, err, sizeof err) != 0 ||
        emx_device_check(a->device, err, sizeof err) != 0 || emx_run_grammar_check(a, err, sizeof err) != 0 ||
        (r->entropix && emx_run_build_profile(a, &r->profile, err, sizeof err) != 0)) {
        fprintf(stderr, "run: %s\n", err);
        return 2;
    }
    if (!r->entropix && (strcmp(a->profile, EMX_PROFILE_DEFAULT) != 0 || a->n_profile_sets > 0))
        fprintf(stderr, "run: warning: --profile/--profile-set only apply to --sampler entropix; ignored\n");
    if (!r->entropix && a->color)
        fprintf(stderr, "run: warning: --color shows entropix cases; with --sampler %s it is ignored\n",
                emx_sampler_kind_name(a->sampler));
    return -1;
}

// --verify, the model, its context (-c clamped to it) and its tokenizer. 0, or -1 (said why).
static int open_model(Run *r) {
    char err[512] = {0};
    const EmxCliArgs *a = &r->a;
    if (emx_gguf_model_path(a->model_path, a->gguf_cache, "run", r->model_file, sizeof r->model_file, err, sizeof err)) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    if (a->verify) {  // a corrupted file is told apart from a bad model before anything runs
        int v = emx_model_verify(r->model_file, err, sizeof err);
        if (v == 0) fprintf(stderr, "run: %s: ok (%s)\n", r->model_file, err);
        else fprintf(stderr, "run: %s\n", err);  // no checksum recorded (v == 1), or the error
        if (v < 0) return -1;
    }
    if (emx_model_open_load(&r->model, r->model_file, run_load(a), err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    r->model_open = 1;
    const EmxConfig *cfg = &r->model.cfg;
    r->ctx = a->ctx;
    if (r->ctx > (int)cfg->max_seq_len) {
        fprintf(stderr, "run: warning: -c %d exceeds the model's context %u; using %u\n", r->ctx,
                cfg->max_seq_len, cfg->max_seq_len);
        r->ctx = (int)cfg->max_seq_len;
    }
    r->tk = emx_tokenizer_new(&r->model.tok, err, sizeof err);
    if (!r->tk) {
        fprintf(stderr, "run: %s: %s\n", a->model_path, err);
        return -1;
    }
    if (emx_tokenizer_n_vocab(r->tk) != (int)cfg->vocab_size) {
        fprintf(stderr, "run: %s: tokenizer has %d tokens, model vocab_size is %u\n", a->model_path,
                emx_tokenizer_n_vocab(r->tk), cfg->vocab_size);
        return -1;
    }
    return 0;
}

// The prompt (-p or -f), chat or raw, and its token ids. 0, or -1 (said why).
static int read_prompt(Run *r) {
    char err[512] = {0};
    const EmxCliArgs *a = &r->a;
    const EmxConfig *cfg = &r->model.cfg;
    if (a->prompt_file) {
        int max_ctx = cfg->max_seq_len < 4096 ? (int)cfg->max_seq_len : 4096;  // -c 0's context
        r->file_prompt = read_prompt_file(a->prompt_file, r->tk, r->ctx > 0 ? r->ctx : max_ctx, &r->prompt_len);
        if (!r->file_prompt) return -1;
        r->prompt = r->file_prompt;
    }
    int has_template = cfg->chat_template != EMX_CHAT_NONE;
    r->chat = a->chat == EMX_CHAT_AUTO ? has_template : a->chat == EMX_CHAT_ON;
    if (a->conversation && !has_template) {
        fprintf(stderr, "run: -cnv: %s has no chat template\n", a->model_path);
        return -1;
    }
    if (a->conversation) return 0;  // each turn renders the whole chat (run_chat.c)
    if (r->chat && !has_template) {
        fprintf(stderr, "run: --chat: %s has no chat template (use --raw)\n", a->model_path);
        return -1;
    }
    if (!r->chat && r->system) fprintf(stderr, "run: warning: --system is ignored in raw mode\n");
    if (a->no_think && !(r->chat && cfg->chat_template == EMX_CHAT_QWEN3))
        fprintf(stderr, "run: warning: --no-think only applies to Qwen3 chat; ignored\n");
    EmxPromptSpec ps = {.text = r->prompt, .len = r->prompt_len, .chat = r->chat, .system = r->system,
                        .enable_thinking = !a->no_think, .warn = warn_stderr};
    if (emx_prompt_ids(&r->model, r->tk, &ps, &r->ids, &r->n_ids, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    return 0;
}

// --sampler agents: the pool generates (runtime/cli/run_pool.c). Returns the exit status.
static int run_agents(Run *r) {
    const EmxConfig *cfg = &r->model.cfg;
    int ctx = r->ctx > 0 ? r->ctx : (int)(cfg->max_seq_len < 4096 ? cfg->max_seq_len : 4096);
    if (r->n_ids >= ctx) {
        fprintf(stderr, "run: prompt is %d tokens, context is %d (-c)\n", r->n_ids, ctx);
        return 1;
    }
    if (r->a.verbose) print_verbose(&r->model, &r->a, NULL, &r->a.sampling, r->chat, ctx, r->ids, r->n_ids);
    errno = 0;
    if (!r->chat && r->prompt_len &&  // raw mode echoes the prompt, as a single stream does
        (fwrite(r->prompt, 1, r->prompt_len, stdout) != r->prompt_len || fflush(stdout) != 0)) {
        report_write_error("writing the generated text to stdout", NULL, errno ? errno : EIO);
        return 1;
    }
    catch_sigint();
    return emx_run_pool(&r->a, &r->model, r->tk, r->ids, r->n_ids, ctx, &interrupted);
}

// --sampler branch: the branching decoder on the single stream's state (runtime/cli/run_branch.c).
// Returns the exit status.
static int run_branch(Run *r) {
    if (r->a.verbose) print_verbose(&r->model, &r->a, r->st, &r->a.sampling, r->chat, r->ctx, r->ids, r->n_ids);
    return emx_run_branch(&r->a, r->st, r->tk, r->ids, r->n_ids, r->chat);
}

// -cnv: the conversation on the single stream's state (runtime/cli/run_chat.c). Returns the
// exit status.
static int run_conversation(Run *r) {
    EmxCliArgs *a = &r->a;
    if (!a->seed_given) a->seed = emx_rng_seed_from_time();
    EmxChatRun c = {.a = a, .model = &r->model, .tk = r->tk, .st = r->st, .profile = r->entropix ? &r->profile : NULL,
                    .first = r->prompt, .first_len = r->prompt_len, .system = r->system, .interrupt = &interrupted,
                    .catch_interrupt = catch_sigint};
    return emx_run_chat(&c, stdin);
}

// The single stream's state (its context decides how many tokens -n may ask for). 0, or -1
// (said why).
static int open_state(Run *r) {
    char err[512] = {0};
    EmxCliArgs *a = &r->a;
    EmxStateOptions so = {.n_threads = a->threads, .ctx = r->ctx, .device = a->device, .cache_type = a->cache_type};
    int state_ctx = emx_state_resolve_ctx(&r->model, &so, err, sizeof err);
    if (state_ctx > 0 && check_cpu_memory(&r->model, a, state_ctx, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    r->st = emx_state_new(&r->model, &so, err, sizeof err);
    if (!r->st) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    r->ctx = emx_state_ctx(r->st);
    if (r->n_ids > r->ctx) {
        fprintf(stderr, "run: prompt is %d tokens, context is %d (-c)\n", r->n_ids, r->ctx);
        return -1;
    }
    // Every chosen token but the last is fed back, so ctx - n_ids + 1 tokens fit.
    int room = r->ctx - r->n_ids + 1;
    if (a->n_predict > room && !a->n_predict_given) a->n_predict = room;  // the default fits itself
    if (a->n_predict > room) {  // asking for more than fits is a mistake worth stopping for
        fprintf(stderr, "run: -n %d is more than the %d tokens the context has room for (-c %d, prompt %d "
                        "tokens); -n -1 generates until the context is full\n", a->n_predict, room, r->ctx, r->n_ids);
        return -1;
    }
    return 0;
}

// The sampler of the run (runtime/cli/run_setup.c), and what -v and a time-based seed say
// about it. 0, or -1 (said why).
static int start_sampler(Run *r) {
    char err[512] = {0};
    EmxCliArgs *a = &r->a;
    if (!a->seed_given) a->seed = emx_rng_seed_from_time();
    if (emx_run_sampler_init(&r->rs, a, &r->profile, &r->model, r->tk, r->ctx, a->seed,
                             a->metrics_path != NULL || a->report_path != NULL, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return -1;
    }
    emx_run_sampler_prompt(&r->rs, r->ids, r->n_ids);
    const EmxSamplerParams *sp = &r->rs.params;
    if (a->verbose) {
        print_verbose(&r->model, a, r->st, sp, r->chat, r->ctx, r->ids, r->n_ids);
        if (r->entropix) print_entropix_setup(a, &r->profile, &r->rs.es, r->tk);
    }
    // Greedy draws nothing: no seed to report. Entropix draws in most of its cases.
    if (!a->seed_given && (r->entropix || (sp->temperature > 0.0f && sp->top_k != 1)))
        fprintf(stderr, "seed: %" PRIu64 " (time-based; -s %" PRIu64 " reproduces this run)\n", a->seed, a->seed);
    if (a->color && r->entropix) emx_color_legend(stderr);
    return 0;
}

// The --metrics file, opened only now that every input has been read: the sampler's grammar,
// schema and logit bias too, so a run refused for one of them leaves the file as it was.
// 0, or -1 (said why).
static int open_metrics(Run *r) {
    char err[512] = {0};
    if (!r->a.metrics_path) return 0;
    // A stream, followed while it grows (base/out_file.h).
    if (emx_out_open(&r->metrics_out, r->a.metrics_path, EMX_OUT_STREAM, err, sizeof err) != 0) {
        fprintf(stderr, "run: --metrics %s\n", err);
        return -1;
    }
    r->metrics = r->metrics_out.f;
    return 0;
}

// Closes --metrics, reporting a failed write. 0, or -1 (said why).
static int close_metrics(Run *r) {
    if (!r->metrics) return 0;
    char err[512];
    r->metrics = NULL;
    if (emx_out_close(&r->metrics_out, err, sizeof err) == 0) return 0;
    fprintf(stderr, "run: --metrics %s\n", err);
    return -1;
}

// Generates the text, then the files and the summary. Returns the exit status.
static int generate_text(Run *r) {
    char err[512] = {0};
    const EmxCliArgs *a = &r->a;
    // Raw mode echoes the prompt as llama2.c and llama.cpp do; chat mode shows only the answer.
    TokenSink sink = {.out = stdout, .metrics = r->metrics, .metrics_path = a->metrics_path, .color = a->color,
                      .tk = r->tk, .sampler_name = emx_sampler_kind_name(a->sampler), .rs = &r->rs,
                      .interrupt = &interrupted};
    EmxLogprobTap lpt;
    EmxSampler *sampler = attach_report(a, &sink, &lpt, r->rs.sampler, r->entropix ? &r->profile : NULL, r->ids, r->n_ids);
    if (a->report_path && !(r->report = sink.report)) return 1;
    EmxGenerateOptions go = {.n_predict = a->n_predict, .out = stdout, .out_name = "stdout", .echo_prompt = !r->chat,
                             .ignore_stop = a->ignore_eos, .on_token = on_token, .on_token_user = &sink};
    EmxGenerateStats stats;
    catch_sigint();
    int rc = emx_generate(r->st, r->tk, r->ids, r->n_ids, sampler, &go, &stats, err, sizeof err);
    errno = 0;
    if (!sink.out_errno && (printf("\n") < 0 || fflush(stdout) != 0 || ferror(stdout)))
        sink.out_errno = errno ? errno : EIO;
    if (sink.out_errno) {  // the callback stopped the loop, or the last newline failed
        report_write_error("writing the generated text to stdout", NULL, sink.out_errno);
        return 1;
    }
    if (sink.metrics_errno) {
        report_write_error("--metrics", a->metrics_path, sink.metrics_errno);
        return 1;
    }
    if (rc != 0 && !sink.interrupted) {
        fprintf(stderr, "run: %s\n", err);
        return 1;
    }
    // Interrupted: what was generated is kept (text, metrics, report) and the timings printed,
    // as a finished run's; the status says it did not finish.
    if (close_metrics(r) != 0 || emx_run_report_finish(&r->report, a->report_path) != 0) return 1;
    if (sink.interrupted) fprintf(stderr, "run: interrupted (Ctrl-C) after %d tokens\n", stats.n_generated);
    if (stats.stop == EMX_STOP_CONTEXT)
        fprintf(stderr, "run: stopped at the end of the context (%d tokens; -c)\n", r->ctx);
    emx_generate_print_stats(stderr, &stats, emx_sampler_kind_name(a->sampler));
    if (r->entropix) print_case_summary(&r->rs.es);
    return sink.interrupted ? 128 + SIGINT : 0;
}

int main(int argc, char **argv) {
    Run r;
    memset(&r, 0, sizeof r);
    int status = read_args(&r, argc, argv);
    if (status >= 0) {  // the end already (-e's copies may be made)
        run_close(&r);
        return status;
    }
    status = 1;
    if (open_model(&r) == 0 && read_prompt(&r) == 0) {
        if (r.a.sampler == EMX_SAMPLER_AGENTS) status = run_agents(&r);
        else if (r.a.sampler == EMX_SAMPLER_BRANCH) status = open_state(&r) == 0 ? run_branch(&r) : 1;
        else if (r.a.conversation) status = open_state(&r) == 0 ? run_conversation(&r) : 1;
        else if (open_state(&r) == 0 && start_sampler(&r) == 0 && open_metrics(&r) == 0) status = generate_text(&r);
    }
    run_close(&r);
    return status;
}
