// run.c — ./run MODEL.bin [options]: generate text from a prompt with an entropix.c model.
//
//   ./run weights/smollm2-135m-instruct.bin -p "What is the capital of France?"
//   ./run build/models/stories260K.f32.bin --temp 0 -n 200
//
// Text goes to stdout as it is produced; the seed (when not given), warnings and the timing
// summary go to stderr. Exit status: 0 ok, 1 runtime error, 2 usage error. Flags: --help or
// docs/run-cli.md.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "cli_args.h"
#include "forward.h"
#include "generate.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"

// Whole file into memory (the prompt of -f). NULL with errno set on failure.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;  // end of file (or an error, checked below)
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (!buf) errno = ENOMEM;
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    fclose(f);
    if (buf) *len = n;
    return buf;
}

static void print_verbose(const EmxModel *m, const EmxCliArgs *a, const EmxSamplerParams *sp,
                          int chat, int ctx, const int *ids, int n_ids) {
    const EmxConfig *c = &m->cfg;
    fprintf(stderr,
            "model: %s: arch %u, dim %u, hidden %u, layers %u, heads %u/%u (kv), head_dim %u, "
            "vocab %u, max_seq_len %u, chat template %s\n",
            a->model_path, c->arch, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
            c->head_dim, c->vocab_size, c->max_seq_len,
            emx_chat_template_name(c->chat_template) ? emx_chat_template_name(c->chat_template) : "?");
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

int main(int argc, char **argv) {
    char err[512] = {0};
    EmxCliArgs a;
    if (emx_cli_parse(argc, argv, &a, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        return 2;
    }
    if (a.help) {
        emx_cli_usage(stdout, argv[0]);
        return 0;
    }
    if (a.version) {
        printf("entropix.c run %s\n", EMX_VERSION_STRING);
        return 0;
    }
    if (a.sampler == EMX_SAMPLER_ENTROPIX) {
        // The strategy switch (docs: sampler-spec) plugs in here as another EmxSampler.
        fprintf(stderr, "run: --sampler entropix: not available in this build yet\n");
        return 2;
    }

    int status = 1;
    EmxModel model;
    int model_open = 0;
    EmxTokenizer *tk = NULL;
    EmxState *st = NULL;
    EmxBasicSampler sampler = {0};
    char *file_prompt = NULL;
    int *ids = NULL;

    size_t prompt_len = a.prompt ? strlen(a.prompt) : 0;
    const char *prompt = a.prompt;
    if (a.prompt_file) {
        file_prompt = read_file(a.prompt_file, &prompt_len);
        if (!file_prompt) {
            fprintf(stderr, "run: -f %s: %s\n", a.prompt_file, strerror(errno));
            goto out;
        }
        prompt = file_prompt;
    }

    if (emx_model_open(&model, a.model_path, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    model_open = 1;
    const EmxConfig *cfg = &model.cfg;

    int ctx = a.ctx;
    if (ctx > (int)cfg->max_seq_len) {
        fprintf(stderr, "run: warning: -c %d exceeds the model's context %u; using %u\n", ctx,
                cfg->max_seq_len, cfg->max_seq_len);
        ctx = (int)cfg->max_seq_len;
    }

    tk = emx_tokenizer_new(&model.tok, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "run: %s: %s\n", a.model_path, err);
        goto out;
    }
    if (emx_tokenizer_n_vocab(tk) != (int)cfg->vocab_size) {
        fprintf(stderr, "run: %s: tokenizer has %d tokens, model vocab_size is %u\n", a.model_path,
                emx_tokenizer_n_vocab(tk), cfg->vocab_size);
        goto out;
    }

    int has_template = cfg->chat_template != EMX_CHAT_NONE;
    int chat = a.chat == EMX_CHAT_AUTO ? has_template : a.chat == EMX_CHAT_ON;
    if (chat && !has_template) {
        fprintf(stderr, "run: --chat: %s has no chat template (use --raw)\n", a.model_path);
        goto out;
    }
    if (!chat && a.system) fprintf(stderr, "run: warning: --system is ignored in raw mode\n");
    if (a.no_think && !(chat && cfg->chat_template == EMX_CHAT_QWEN3))
        fprintf(stderr, "run: warning: --no-think only applies to Qwen3 chat; ignored\n");

    EmxPromptSpec ps = {.text = prompt, .len = prompt_len, .chat = chat, .system = a.system,
                        .enable_thinking = !a.no_think};
    int n_ids = 0;
    if (emx_prompt_ids(&model, tk, &ps, &ids, &n_ids, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }

    EmxStateOptions so = {.n_threads = a.threads, .ctx = ctx};
    st = emx_state_new(&model, &so, err, sizeof err);
    if (!st) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    ctx = emx_state_ctx(st);
    if (n_ids > ctx) {
        fprintf(stderr, "run: prompt is %d tokens, context is %d (-c)\n", n_ids, ctx);
        goto out;
    }
    // Every chosen token but the last is fed back, so ctx - n_ids + 1 tokens fit.
    int room = ctx - n_ids + 1;
    if (a.n_predict > room && !a.n_predict_given) a.n_predict = room;  // the default fits itself
    if (a.n_predict > room) {  // asking for more than fits is a mistake worth stopping for
        fprintf(stderr, "run: -n %d is more than the %d tokens the context has room for (-c %d, prompt %d "
                        "tokens); -n -1 generates until the context is full\n", a.n_predict, room, ctx, n_ids);
        goto out;
    }

    EmxSamplerParams sp = emx_cli_effective_sampling(&a);
    if (!a.seed_given) {
        a.seed = emx_rng_seed_from_time();
        if (sp.temperature > 0.0f && sp.top_k != 1)  // greedy draws nothing: no seed to report
            fprintf(stderr, "seed: %" PRIu64 " (time-based; -s %" PRIu64 " reproduces this run)\n",
                    a.seed, a.seed);
    }
    if (emx_basic_sampler_init(&sampler, &sp, a.seed, (int)cfg->vocab_size, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    if (a.verbose) print_verbose(&model, &a, &sp, chat, ctx, ids, n_ids);

    // Raw mode echoes the prompt as llama2.c and llama.cpp do; chat mode shows only the answer.
    EmxGenerateOptions go = {.n_predict = a.n_predict, .out = stdout, .echo_prompt = !chat};
    EmxGenerateStats stats;
    int rc = emx_generate(st, tk, ids, n_ids, &sampler.base, &go, &stats, err, sizeof err);
    printf("\n");
    fflush(stdout);
    if (rc != 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    if (stats.stop == EMX_STOP_CONTEXT)
        fprintf(stderr, "run: stopped at the end of the context (%d tokens; -c)\n", ctx);
    emx_generate_print_stats(stderr, &stats);
    status = 0;

out:
    emx_basic_sampler_free(&sampler);
    free(ids);
    if (st) emx_state_free(st);
    if (tk) emx_tokenizer_free(tk);
    if (model_open) emx_model_close(&model);
    free(file_prompt);
    return status;
}
