// perplexity.c — perplexity of a model on a text, to measure what quantisation costs.
//
//   build/tools/perplexity model.bin|model.gguf text.txt [-c ctx] [-t threads] [-b batch]
//
// Same protocol as llama.cpp's `llama-perplexity`, so figures can be compared: the token
// stream is cut into consecutive windows of ctx tokens; the first token of each window is
// replaced by BOS when the tokenizer adds BOS to prompts (Llama; not SmolLM2/Qwen); every window runs from an empty cache (prefill
// in batches of -b tokens, logits for every position) and only the second half of each window
// is scored (positions ctx/2 .. ctx-2 predicting the next token), so every scored token sees
// at least ctx/2 tokens of context. perplexity = exp(mean negative log-likelihood).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "runtime/cpu/cpu_matmul.h"
#include "base/dtype.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/convert/gguf_cache.h"
#include "base/read_file.h"
#include "tokenizer/tokenizer.h"
#include "tools/tool_args.h"

// -log softmax(logits)[target], in double.
static double nll(const float *logits, int vocab, int target) {
    float max = logits[0];
    for (int i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - max);
    return log(sum) - ((double)logits[target] - max);
}

static int usage(FILE *f) {
    fprintf(f, "usage: perplexity model.bin|model.gguf text.txt [-c ctx (512)] [-t threads (all)] [-b batch (64)]\n");
    return f == stdout ? 0 : 2;
}

// The model file, or a GGUF through its converted cache file (gguf_cache.h). 0, or -1 (said).
static int open_model(EmxModel *m, const char *path) {
    char err[512], file[4096];
    if (emx_gguf_model_path(path, NULL, "perplexity", file, sizeof file, err, sizeof err) ||
        emx_model_open(m, file, err, sizeof err)) {
        fprintf(stderr, "perplexity: %s\n", err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int ctx = 512, threads = 0, batch = 64;
    const ToolOpt opts[] = {
        {"-c", TOOL_INT, &ctx, 4, 1 << 20}, {"-t", TOOL_INT, &threads, 0, 4096}, {"-b", TOOL_INT, &batch, 1, 1 << 20}};
    const char *pos[2] = {NULL, NULL};
    int prc = tool_parse_args("perplexity", argc - 1, argv + 1, opts, sizeof opts / sizeof opts[0], pos, 2);
    if (prc) return prc == 1 ? usage(stdout) : 2;
    const char *model_path = pos[0], *text_path = pos[1];
    if (!model_path || !text_path) return usage(stderr);

    char err[512];
    EmxModel m;
    if (open_model(&m, model_path)) return 1;
    int rc = 1;
    EmxTokenizer *tk = NULL;
    EmxState *s = NULL;
    int *ids = NULL;
    float *logits = NULL;
    size_t len = 0, n_ids = 0;
    char *text = emx_read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "perplexity: %s: %s\n", text_path, strerror(errno));
        goto done;
    }
    if (!(tk = emx_tokenizer_new(&m.tok, err, sizeof(err)))) {
        fprintf(stderr, "perplexity: %s: %s\n", model_path, err);
        goto done;
    }
    if (emx_encode(tk, text, len, 0, &ids, &n_ids, err, sizeof(err))) {
        fprintf(stderr, "perplexity: %s\n", err);
        goto done;
    }
    EmxStateOptions opt = {.n_threads = threads, .ctx = ctx};
    if (!(s = emx_state_new(&m, &opt, err, sizeof(err)))) {
        fprintf(stderr, "perplexity: %s\n", err);
        goto done;
    }
    const int vocab = (int)m.cfg.vocab_size, n_windows = (int)(n_ids / (size_t)ctx);
    if (n_windows < 1) {
        fprintf(stderr, "perplexity: %s has %zu tokens, fewer than one window of %d\n", text_path, n_ids, ctx);
        goto done;
    }
    if (batch > ctx) batch = ctx;
    logits = malloc((size_t)batch * vocab * sizeof(float));  // [batch][vocab]
    if (!logits) {
        fprintf(stderr, "perplexity: out of memory\n");
        goto done;
    }
    const int bos = (m.tok.flags & EMX_TOKF_ADD_BOS) ? emx_tokenizer_bos(tk) : -1;
    printf("model %s (%s weights), %s kernels, text %s: %zu tokens, %d windows of %d\n", model_path,
           emx_dtype_name(m.layers[0].wq.dtype), emx_cpu_simd_name(), text_path, n_ids, n_windows, ctx);

    double sum_nll = 0, t0 = emx_now_s();
    long scored = 0;
    for (int w = 0; w < n_windows; w++) {
        int *win = ids + (size_t)w * ctx;  // [ctx]
        int first_tok = win[0];
        if (bos >= 0) win[0] = bos;
        for (int p = 0; p < ctx; p += batch) {
            int nb = ctx - p < batch ? ctx - p : batch;
            if (emx_forward_all_logits(s, win + p, nb, p, logits)) {
                fprintf(stderr, "perplexity: forward failed at window %d position %d\n", w, p);
                goto done;
            }
            for (int i = 0; i < nb; i++) {
                int pos = p + i;  // logits of pos predict win[pos + 1]
                if (pos < ctx / 2 || pos >= ctx - 1) continue;
                sum_nll += nll(logits + (size_t)i * vocab, vocab, win[pos + 1]);
                scored++;
            }
        }
        win[0] = first_tok;
        printf("[%d] %.4f\n", w + 1, exp(sum_nll / scored));
        fflush(stdout);
    }
    double secs = emx_now_s() - t0;
    char tbuf[16] = "all";
    if (threads > 0) snprintf(tbuf, sizeof(tbuf), "%d", threads);
    printf("perplexity %.4f over %ld scored tokens; %d tokens run in %.2f s (%.1f tok/s, threads %s)\n",
           exp(sum_nll / scored), scored, n_windows * ctx, secs, n_windows * ctx / secs,
           tbuf);
    rc = 0;
done:
    free(logits);
    free(ids);
    free(text);
    emx_state_free(s);
    if (tk) emx_tokenizer_free(tk);
    emx_model_close(&m);
    return rc;
}
