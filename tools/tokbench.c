// tokbench — tokenizer throughput: encode and streaming-decode MB/s over a corpus.
//
//   build/tools/tokbench MODEL_OR_TOKENIZER corpus.txt [--special] [--min-seconds S]
//
// MODEL_OR_TOKENIZER is one of: a HuggingFace directory (tokenizer.json), a .gguf file, one of
// our model files (.bin with a tokenizer section), or a llama2.c tokenizer.bin.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf.h"
#include "model.h"
#include "tokenizer.h"
#include "tokenizer_build.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// Tokens in a llama2.c tokenizer.bin (it does not record its own count).
static uint32_t llama2c_count(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint32_t n = 0;
    int32_t maxlen, len;
    float score;
    if (fread(&maxlen, 4, 1, f) == 1)
        while (fread(&score, 4, 1, f) == 1 && fread(&len, 4, 1, f) == 1 && len >= 0 &&
               fseek(f, len, SEEK_CUR) == 0)
            n++;
    fclose(f);
    return n;
}

// Fills *data from whatever `path` is; *model is opened (and must stay open) for model files.
static int load(const char *path, TokenizerData *data, EmxModel *model, int *have_model,
                char *err, size_t errlen) {
    struct stat st;
    *have_model = 0;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat", path);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return tokdata_from_hf_dir(path, 0, data, err, errlen);
    if (ends_with(path, ".gguf")) {
        GGUFFile g;
        if (gguf_open(&g, path, err, errlen) != 0) return -1;
        int rc = tokdata_from_gguf(&g, 0, data, err, errlen);
        gguf_close(&g);
        return rc;
    }
    char merr[512];
    if (emx_model_open(model, path, merr, sizeof merr) == 0) {
        *have_model = 1;
        *data = model->tok;  // a view into the model file
        return 0;
    }
    uint32_t n = llama2c_count(path);
    if (n == 0 || tokdata_from_llama2c(path, n, data, err, errlen) != 0) {
        snprintf(err, errlen, "%.200s: not a tokenizer directory, GGUF, model file (%.200s) or tokenizer.bin",
                 path, merr);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_OR_TOKENIZER corpus.txt [--special] [--min-seconds S]\n", argv[0]);
        return 2;
    }
    int flags = 0;
    double min_s = 1.0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--special") == 0) flags |= EMX_ENC_SPECIAL;
        else if (strcmp(argv[i], "--min-seconds") == 0 && i + 1 < argc) min_s = atof(argv[++i]);
        else {
            fprintf(stderr, "tokbench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    char err[512];
    TokenizerData data = {0};
    EmxModel model;
    int have_model = 0;
    if (load(argv[1], &data, &model, &have_model, err, sizeof err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "tokbench: %s: cannot open\n", argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n > 0 ? (size_t)n : 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "tokbench: %s: read error\n", argv[2]);
        return 1;
    }
    fclose(f);

    double t0 = now();
    EmxTokenizer *tk = emx_tokenizer_new(&data, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "tokbench: %s\n", err);
        return 1;
    }
    printf("tokenizer: %s, %d tokens, tables built in %.1f ms\n", argv[1],
           emx_tokenizer_n_vocab(tk), (now() - t0) * 1e3);
    static const char *const pre_names[] = {"none", "gpt2", "llama3", "qwen2", "smollm"};
    printf("kind %s, pre %s, flags%s%s%s%s, %u merges, bos %d, eos %d, stop ids",
           data.kind == EMX_TOK_SPM ? "spm" : "bpe-bytelevel",
           data.pre <= EMX_PRE_SMOLLM ? pre_names[data.pre] : "?",
           data.flags & EMX_TOKF_NFC ? " nfc" : "", data.flags & EMX_TOKF_ADD_BOS ? " add-bos" : "",
           data.flags & EMX_TOKF_ADD_SPACE_PREFIX ? " space-prefix" : "",
           data.flags & EMX_TOKF_IGNORE_MERGES ? " ignore-merges" : "", data.n_merges, data.bos_id,
           data.eos_id);
    for (uint32_t i = 0; i < data.n_stop; i++) {
        char piece[64];
        size_t l = emx_token_bytes(tk, data.stop_ids[i], piece, sizeof piece - 1);
        piece[l < sizeof piece - 1 ? l : sizeof piece - 1] = 0;
        printf(" %d %s", data.stop_ids[i], piece);
    }
    printf("\n");

    int *ids = NULL;
    size_t n_ids = 0;
    int reps = 0;
    t0 = now();
    do {
        free(ids);
        if (emx_encode(tk, text, (size_t)n, flags, &ids, &n_ids, err, sizeof err) != 0) {
            fprintf(stderr, "tokbench: encode: %s\n", err);
            return 1;
        }
        reps++;
    } while (now() - t0 < min_s);
    double enc_s = (now() - t0) / reps;

    size_t cap = emx_decoder_max_out(tk), out_bytes = 0;
    char *buf = malloc(cap);
    int dreps = 0;
    t0 = now();
    do {
        EmxDecoder d;
        emx_decoder_init(&d, tk, 0);
        out_bytes = 0;
        for (size_t i = 0; i < n_ids; i++) out_bytes += emx_decoder_push(&d, ids[i], buf, cap);
        out_bytes += emx_decoder_flush(&d, buf, cap);
        dreps++;
    } while (now() - t0 < min_s);
    double dec_s = (now() - t0) / dreps;

    printf("corpus: %s, %ld bytes -> %zu tokens (%.2f bytes/token)\n", argv[2], n, n_ids,
           n_ids ? (double)n / (double)n_ids : 0.0);
    printf("encode: %.2f MB/s, %.2f M tokens/s (%d runs)\n", (double)n / enc_s / 1e6,
           (double)n_ids / enc_s / 1e6, reps);
    printf("decode: %.2f MB/s, %.2f M tokens/s (%d runs, %zu bytes out)\n",
           (double)out_bytes / dec_s / 1e6, (double)n_ids / dec_s / 1e6, dreps, out_bytes);
    free(buf);
    free(ids);
    free(text);
    emx_tokenizer_free(tk);
    if (have_model) emx_model_close(&model);
    else tokdata_free(&data);
    return 0;
}
