// tokbench — tokenizer throughput: encode and decode MB/s over a corpus, beside HF `tokenizers`.
//
//   build/tools/tokbench SOURCE CORPUS [--runs N] [--rounds R] [--special]
//                        [--no-hf] [--hf-json tokenizer.json] [--hf-script tools/tokbench_hf.py]
//
// SOURCE is one of: a HuggingFace directory (tokenizer.json), a .gguf file, one of our model
// files (.bin with a tokenizer section), or a llama2.c tokenizer.bin. CORPUS is any UTF-8 text;
// the fixed one is tests/data/tokbench/corpus.txt (docs/tokenizer-bench.md, `make bench-tokenizer`).
//
// Method (the HF side, tools/tokbench_hf.py, does the same work):
//   - the corpus is split after every '\n' into chunks (a chunk keeps its newline); each chunk
//     is encoded on its own (no BOS; added tokens only with --special, HF always matches them)
//     and decoded on its own with a fresh streaming decoder, control tokens kept;
//   - one thread, wall time (CLOCK_MONOTONIC), best of N runs per round;
//   - decode(encode(chunk)) must give the chunk back byte for byte, and with HF installed the
//     ids of every chunk must equal HF's; either failure makes the exit status 1;
//   - R rounds alternate ours and HF (the machine may be shared: alternating spreads the load
//     over both sides), and the figures are the medians over the rounds.
// HF runs when `python3 -c "import tokenizers"` works and a tokenizer.json is known (the SOURCE
// directory's, or --hf-json; for a .gguf SOURCE, tools/tokbench_hf.py rebuilds HF's tokenizer
// from the GGUF); otherwise one line says why and only our figures are printed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sampler/calibrate.h"
#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/convert/gguf.h"
#include "runtime/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/convert/tokenizer_build.h"

enum { MAX_ROUNDS = 64 };

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
        emx_seterr(err, errlen, "%s: cannot stat", path);
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
        emx_seterr(err, errlen, "%.200s: not a tokenizer directory, GGUF, model file (%.200s) or tokenizer.bin",
                 path, merr);
        return -1;
    }
    return 0;
}

// The corpus split after every '\n': chunk c is text[off[c] .. off[c+1]).
typedef struct {
    char *text;      // [n_bytes]
    size_t n_bytes;
    size_t *off;     // [n_chunks + 1]
    size_t n_chunks;
} Corpus;

static int corpus_read(Corpus *c, const char *path, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        emx_seterr(err, errlen, "%s: cannot open", path);
        return -1;
    }
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        emx_seterr(err, errlen, "%s: cannot get the size (not a regular file?)", path);
        fclose(f);
        return -1;
    }
    c->n_bytes = (size_t)n;
    c->text = malloc(c->n_bytes + 1);
    if (!c->text || fread(c->text, 1, c->n_bytes, f) != c->n_bytes) {
        emx_seterr(err, errlen, "%s: read error (%zu bytes)", path, c->n_bytes);
        fclose(f);
        return -1;
    }
    fclose(f);
    size_t lines = 0;
    for (size_t i = 0; i < c->n_bytes; i++) lines += c->text[i] == '\n';
    c->off = malloc((lines + 2) * sizeof *c->off);
    if (!c->off) {
        emx_seterr(err, errlen, "%s: out of memory for %zu chunks", path, lines + 1);
        return -1;
    }
    c->off[0] = 0;
    for (size_t i = 0; i < c->n_bytes; i++)
        if (c->text[i] == '\n') c->off[++c->n_chunks] = i + 1;
    if (c->off[c->n_chunks] != c->n_bytes) c->off[++c->n_chunks] = c->n_bytes;  // no final '\n'
    return 0;
}

static void corpus_free(Corpus *c) {
    free(c->text);
    free(c->off);
}

// The ids of one encode pass over all chunks: chunk c's are ids[id_off[c] .. id_off[c+1]).
typedef struct {
    int *ids;        // [n_ids], capacity cap
    size_t n_ids, cap;
    size_t *id_off;  // [n_chunks + 1]
} ChunkIds;

// One timed encode pass. The copy into the shared array is part of the work (HF builds its
// Encoding objects too).
static int encode_all(const EmxTokenizer *tk, const Corpus *c, int flags, ChunkIds *out,
                      char *err, size_t errlen) {
    out->n_ids = 0;
    for (size_t k = 0; k < c->n_chunks; k++) {
        int *ids;
        size_t n;
        if (emx_encode(tk, c->text + c->off[k], c->off[k + 1] - c->off[k], flags, &ids, &n, err,
                       errlen) != 0)
            return -1;
        if (out->n_ids + n > out->cap) {
            size_t cap = 2 * (out->n_ids + n);
            int *grown = realloc(out->ids, cap * sizeof *grown);
            if (!grown) {
                free(ids);
                emx_seterr(err, errlen, "out of memory for %zu ids", cap);
                return -1;
            }
            out->ids = grown;
            out->cap = cap;
        }
        out->id_off[k] = out->n_ids;
        memcpy(out->ids + out->n_ids, ids, n * sizeof *ids);
        out->n_ids += n;
        free(ids);
    }
    out->id_off[c->n_chunks] = out->n_ids;
    return 0;
}

// One timed decode pass: each chunk with a fresh streaming decoder, appended to out[cap].
// Chunk k's output is out[out_off[k] .. out_off[k+1]). Returns the bytes written.
static size_t decode_all(const EmxTokenizer *tk, const Corpus *c, const ChunkIds *ids, char *out,
                         size_t cap, size_t *out_off) {
    size_t pos = 0;
    for (size_t k = 0; k < c->n_chunks; k++) {
        out_off[k] = pos;
        EmxDecoder d;
        emx_decoder_init(&d, tk, 0);
        for (size_t i = ids->id_off[k]; i < ids->id_off[k + 1]; i++)
            pos += emx_decoder_push(&d, ids->ids[i], out + pos, cap - pos);
        pos += emx_decoder_flush(&d, out + pos, cap - pos);
    }
    out_off[c->n_chunks] = pos;
    return pos;
}

// Chunks whose decoded output differs from the input; *first gets the first one's index.
// With space_prefix (SPM's dummy prefix: encode adds a space that decode without BOS keeps),
// the output is the chunk after one space.
static size_t count_roundtrip_bad(const Corpus *c, const char *out, const size_t *out_off,
                                  int space_prefix, size_t *first) {
    size_t bad = 0;
    for (size_t k = 0; k < c->n_chunks; k++) {
        size_t len = c->off[k + 1] - c->off[k], start = out_off[k];
        if (space_prefix && start < out_off[k + 1] && out[start] == ' ') start++;
        if (out_off[k + 1] - start != len || memcmp(out + start, c->text + c->off[k], len)) {
            if (bad++ == 0) *first = k;
        }
    }
    return bad;
}

// For tokbench_hf.py --ids: per chunk a uint32 count then the int32 ids (host order: x86 and
// ARM are little-endian, which the script assumes).
static int write_ids(const char *path, const Corpus *c, const ChunkIds *ids) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = 1;
    for (size_t k = 0; k < c->n_chunks && ok; k++) {
        uint32_t n = (uint32_t)(ids->id_off[k + 1] - ids->id_off[k]);
        ok = fwrite(&n, 4, 1, f) == 1 && fwrite(ids->ids + ids->id_off[k], 4, n, f) == n;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

typedef struct {
    char version[32];
    double enc_s, dec_s;
    long tokens, out_bytes, chunks, diff_chunks, roundtrip_bad;
} HFResult;

// Runs the HF script once; its human-readable lines are passed through, the last one parsed.
static int run_hf(const char *script, const char *json, const char *corpus, int runs,
                  const char *ids_path, HFResult *r) {
    char cmd[16384];
    if (snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' --runs %d%s%s%s", script, json, corpus,
                 runs, ids_path ? " --ids '" : "", ids_path ? ids_path : "",
                 ids_path ? "'" : "") >= (int)sizeof cmd)
        return -1;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024];
    int parsed = 0;
    while (fgets(line, sizeof line, p)) {
        if (strncmp(line, "tokbench_hf: ", 13) == 0)
            parsed = sscanf(line,
                            "tokbench_hf: version=%31s enc_s=%lf dec_s=%lf tokens=%ld out_bytes=%ld "
                            "chunks=%ld diff_chunks=%ld roundtrip_bad=%ld",
                            r->version, &r->enc_s, &r->dec_s, &r->tokens, &r->out_bytes, &r->chunks,
                            &r->diff_chunks, &r->roundtrip_bad) == 8;
        else
            printf("  %s", line);
    }
    int status = pclose(p);
    return status == 0 && parsed ? 0 : -1;
}

// The median, numpy's rule (the mean of the middle two for an even count).
static double median(const double *v, int n) { return emx_percentile(v, (size_t)n, 50.0); }

static void print_loadavg(const char *when) {
    double l[3];
    if (getloadavg(l, 3) == 3) printf("load average %s: %.2f %.2f %.2f\n", when, l[0], l[1], l[2]);
}

// Where the HF side can run, or NULL with the reason in why[].
static const char *hf_json_for(const char *source, const char *hf_json, char *buf, size_t cap,
                               char *why, size_t whylen) {
    struct stat st;
    if (system("python3 -c 'import tokenizers' >/dev/null 2>&1") != 0) {
        snprintf(why, whylen, "not installed (python3 -c 'import tokenizers' failed)");
        return NULL;
    }
    if (!hf_json && stat(source, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(buf, cap, "%s/tokenizer.json", source);
        hf_json = buf;
    }
    // The script rebuilds an HF Tokenizer from a GGUF's vocabulary (with the gguf package; for
    // vocabularies other than SmolLM2's, transformers' converter too).
    if (!hf_json && ends_with(source, ".gguf")) {
        if (system("python3 -c 'import gguf' >/dev/null 2>&1") != 0) {
            snprintf(why, whylen, "a .gguf source needs the gguf package (pip install gguf) or --hf-json");
            return NULL;
        }
        hf_json = source;
    }
    if (!hf_json)
        snprintf(why, whylen, "no tokenizer.json for this source (pass --hf-json)");
    return hf_json;
}

static const char *hf_script_path(const char *argv0, char *buf, size_t cap) {
    if (access("tools/tokbench_hf.py", R_OK) == 0) return "tools/tokbench_hf.py";
    // build/tools/tokbench -> <repo>/tools/tokbench_hf.py
    const char *slash = strrchr(argv0, '/');
    snprintf(buf, cap, "%.*s/../../tools/tokbench_hf.py", slash ? (int)(slash - argv0) : 1,
             slash ? argv0 : ".");
    return buf;
}

static void print_tokenizer(const char *source, const EmxTokenizer *tk, const TokenizerData *data,
                            double build_ms) {
    printf("tokenizer: %s, %d tokens, tables built in %.1f ms\n", source,
           emx_tokenizer_n_vocab(tk), build_ms);
    static const char *const pre_names[] = {"none", "gpt2", "llama3", "qwen2", "smollm"};
    printf("kind %s, pre %s, flags%s%s%s%s, %u merges, bos %d, eos %d, stop ids",
           data->kind == EMX_TOK_SPM ? "spm" : "bpe-bytelevel",
           data->pre <= EMX_PRE_SMOLLM ? pre_names[data->pre] : "?",
           data->flags & EMX_TOKF_NFC ? " nfc" : "", data->flags & EMX_TOKF_ADD_BOS ? " add-bos" : "",
           data->flags & EMX_TOKF_ADD_SPACE_PREFIX ? " space-prefix" : "",
           data->flags & EMX_TOKF_IGNORE_MERGES ? " ignore-merges" : "", data->n_merges,
           data->bos_id, data->eos_id);
    for (uint32_t i = 0; i < data->n_stop; i++) {
        char piece[64];
        size_t l = emx_token_bytes(tk, data->stop_ids[i], piece, sizeof piece - 1);
        piece[l < sizeof piece - 1 ? l : sizeof piece - 1] = 0;
        printf(" %d %s", data->stop_ids[i], piece);
    }
    printf("\n");
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s SOURCE CORPUS [--runs N] [--rounds R] [--special] [--no-hf]\n"
            "       [--hf-json tokenizer.json] [--hf-script tools/tokbench_hf.py]\n"
            "SOURCE: HF tokenizer directory, .gguf, model .bin, or llama2.c tokenizer.bin\n",
            argv0);
    return 2;
}

// The command line; 0, or the exit status to leave with.
typedef struct {
    const char *source, *corpus_path, *hf_json, *hf_script;
    int flags, runs, rounds, want_hf;
} TbOpts;

static int parse_args(int argc, char **argv, TbOpts *o) {
    *o = (TbOpts){.source = argv[1], .corpus_path = argv[2], .runs = 5, .rounds = 1, .want_hf = 1};
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--special") == 0) o->flags |= EMX_ENC_SPECIAL;
        else if (strcmp(argv[i], "--no-hf") == 0) o->want_hf = 0;
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) o->runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) o->rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hf-json") == 0 && i + 1 < argc) o->hf_json = argv[++i];
        else if (strcmp(argv[i], "--hf-script") == 0 && i + 1 < argc) o->hf_script = argv[++i];
        else {
            fprintf(stderr, "tokbench: unknown option or missing value: %s\n", argv[i]);
            return usage(argv[0]);
        }
    }
    if (o->runs < 1 || o->rounds < 1 || o->rounds > MAX_ROUNDS) {
        fprintf(stderr, "tokbench: --runs must be >= 1 and --rounds in 1..%d (got %d, %d)\n",
                MAX_ROUNDS, o->runs, o->rounds);
        return 2;
    }
    const char *const paths[] = {o->source, o->corpus_path, o->hf_json, o->hf_script};
    for (int i = 0; i < 4; i++) {
        if (paths[i] && strchr(paths[i], '\'')) {  // the HF command line quotes paths with '...'
            fprintf(stderr, "tokbench: %s: paths with a single quote are not supported\n", paths[i]);
            return 2;
        }
    }
    return 0;
}

// What the rounds measured.
typedef struct {
    double enc_s[MAX_ROUNDS], dec_s[MAX_ROUNDS];        // ours, best of the runs, per round
    double hf_enc_s[MAX_ROUNDS], hf_dec_s[MAX_ROUNDS];  // HF's, likewise
    size_t out_bytes, rt_bad, rt_first;  // bytes decoded; round-trip failures (round 1), the first
    HFResult hf;                         // HF's first round: version, ids comparison, counts
    int hf_ok;                           // HF ran in every round
} Results;

// Round r of ours: best of runs encodes of every chunk, then best of runs decodes into out.
static int time_ours(const EmxTokenizer *tk, const Corpus *c, const TbOpts *o, ChunkIds *ids, char *out,
                     size_t out_cap, size_t *out_off, int r, Results *res) {
    char err[512];
    res->enc_s[r] = res->dec_s[r] = 1e300;
    for (int i = 0; i < o->runs; i++) {
        double t0 = emx_now_s();
        if (encode_all(tk, c, o->flags, ids, err, sizeof err) != 0) {
            fprintf(stderr, "tokbench: encode: %s\n", err);
            return -1;
        }
        double t = emx_now_s() - t0;
        res->enc_s[r] = t < res->enc_s[r] ? t : res->enc_s[r];
    }
    for (int i = 0; i < o->runs; i++) {
        double t0 = emx_now_s();
        res->out_bytes = decode_all(tk, c, ids, out, out_cap, out_off);
        double t = emx_now_s() - t0;
        res->dec_s[r] = t < res->dec_s[r] ? t : res->dec_s[r];
    }
    return 0;
}

// The summary lines after the rounds; 1 when the ids differ from HF's or a round trip failed.
static int print_summary(const TbOpts *o, const Corpus *c, const ChunkIds *ids, const Results *res,
                         const char *why) {
    int status = 0, runs = o->runs, rounds = o->rounds;
    const HFResult hf = res->hf;
    double enc = median(res->enc_s, rounds), dec = median(res->dec_s, rounds);
    double enc_mbs = (double)c->n_bytes / enc / 1e6, dec_mbs = (double)res->out_bytes / dec / 1e6;
    printf("corpus: %s, %zu bytes, %zu chunks -> %zu tokens (%.3f tokens/byte, %.2f bytes/token)\n",
           o->corpus_path, c->n_bytes, c->n_chunks, ids->n_ids, (double)ids->n_ids / (double)c->n_bytes,
           ids->n_ids ? (double)c->n_bytes / (double)ids->n_ids : 0.0);
    printf("method: 1 thread, wall time, best of %d runs, median of %d round%s\n", runs, rounds,
           rounds > 1 ? "s (ours and HF alternating)" : "");
    if (res->hf_ok) {
        double he = median(res->hf_enc_s, rounds), hd = median(res->hf_dec_s, rounds);
        double he_mbs = (double)c->n_bytes / he / 1e6, hd_mbs = (double)hf.out_bytes / hd / 1e6;
        printf("encode: entropix.c %.2f MB/s, HF tokenizers %s %.2f MB/s, ratio %.2fx\n", enc_mbs,
               hf.version, he_mbs, enc_mbs / he_mbs);
        printf("decode: entropix.c %.2f MB/s, HF tokenizers %s %.2f MB/s, ratio %.2fx\n", dec_mbs,
               hf.version, hd_mbs, dec_mbs / hd_mbs);
        printf("tokens/s: entropix.c %.2f M encode, %.2f M decode; HF %.2f M encode, %.2f M decode\n",
               (double)ids->n_ids / enc / 1e6, (double)ids->n_ids / dec / 1e6,
               (double)hf.tokens / he / 1e6, (double)hf.tokens / hd / 1e6);
        if (hf.diff_chunks == 0 && hf.tokens == (long)ids->n_ids)
            printf("ids vs HF: identical in all %zu chunks\n", c->n_chunks);
        else {
            printf("ids vs HF: FAILED, %ld of %zu chunks differ (%ld tokens HF, %zu ours)\n",
                   hf.diff_chunks, c->n_chunks, hf.tokens, ids->n_ids);
            status = 1;
        }
        if (hf.roundtrip_bad) printf("HF round trip: %ld chunks differ\n", hf.roundtrip_bad);
    } else {
        printf("encode: entropix.c %.2f MB/s, %.2f M tokens/s\n", enc_mbs, (double)ids->n_ids / enc / 1e6);
        printf("decode: entropix.c %.2f MB/s, %.2f M tokens/s\n", dec_mbs, (double)ids->n_ids / dec / 1e6);
        printf("HF tokenizers: %s\n", why);
    }
    if (res->rt_bad == 0)
        printf("round trip: decode(encode(chunk)) == chunk for all %zu chunks\n", c->n_chunks);
    else {
        printf("round trip: FAILED in %zu of %zu chunks (first: chunk %zu at byte offset %zu)\n",
               res->rt_bad, c->n_chunks, res->rt_first, c->off[res->rt_first]);
        status = 1;
    }
    return status;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // progress shows round by round when piped to a file
    if (argc < 3) return usage(argv[0]);
    TbOpts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    const char *source = o.source, *corpus_path = o.corpus_path, *hf_script = o.hf_script;
    char err[512];
    TokenizerData data = {0};
    EmxModel model;
    int have_model = 0;
    Corpus c;
    if (load(source, &data, &model, &have_model, err, sizeof err) != 0 ||
        corpus_read(&c, corpus_path, err, sizeof err) != 0) {
        fprintf(stderr, "tokbench: %s\n", err);
        return 1;
    }
    double t0 = emx_now_s();
    EmxTokenizer *tk = emx_tokenizer_new(&data, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "tokbench: %s\n", err);
        return 1;
    }
    print_tokenizer(source, tk, &data, (emx_now_s() - t0) * 1e3);
    print_loadavg("at start");

    char json_buf[4096], why[256], script_buf[4096];
    const char *json = o.want_hf ? hf_json_for(source, o.hf_json, json_buf, sizeof json_buf, why, sizeof why) : NULL;
    if (!o.want_hf) snprintf(why, sizeof why, "skipped (--no-hf)");
    if (json && !hf_script) hf_script = hf_script_path(argv[0], script_buf, sizeof script_buf);

    ChunkIds ids = {0};
    ids.id_off = malloc((c.n_chunks + 1) * sizeof *ids.id_off);
    size_t *out_off = malloc((c.n_chunks + 1) * sizeof *out_off);
    // Worst case: every input byte invalid (-> 3-byte U+FFFD), an SPM dummy-prefix space per
    // chunk, and one push's worth of slack.
    size_t out_cap = 3 * c.n_bytes + c.n_chunks + emx_decoder_max_out(tk);
    char *out = malloc(out_cap);
    if (!ids.id_off || !out_off || !out) {
        fprintf(stderr, "tokbench: out of memory for %zu chunks\n", c.n_chunks);
        return 1;
    }

    Results res = {.hf_ok = json != NULL};
    int status = 0;
    char ids_path[] = "/tmp/tokbench-ids-XXXXXX";
    for (int r = 0; r < o.rounds; r++) {
        if (time_ours(tk, &c, &o, &ids, out, out_cap, out_off, r, &res) != 0) return 1;
        if (r == 0)
            res.rt_bad = count_roundtrip_bad(&c, out, out_off, (data.flags & EMX_TOKF_ADD_SPACE_PREFIX) != 0,
                                             &res.rt_first);
        printf("round %d: entropix.c encode %.2f MB/s, decode %.2f MB/s\n", r + 1,
               (double)c.n_bytes / res.enc_s[r] / 1e6, (double)res.out_bytes / res.dec_s[r] / 1e6);
        if (!res.hf_ok) continue;
        // HF's ids are compared with ours once, in the first round.
        int fd = r == 0 ? mkstemp(ids_path) : -1;
        if (r == 0 && (fd < 0 || close(fd) != 0 || write_ids(ids_path, &c, &ids) != 0)) {
            fprintf(stderr, "tokbench: %s: cannot write the ids for the HF comparison\n", ids_path);
            return 1;
        }
        HFResult h = {0};
        if (run_hf(hf_script, json, corpus_path, o.runs, r == 0 ? ids_path : NULL, &h) != 0) {
            snprintf(why, sizeof why, "%.200s failed (its messages are above)", hf_script);
            res.hf_ok = 0;
            status = 1;  // installed but broken: the comparison asked for did not happen
        } else {
            if (r == 0) res.hf = h;
            res.hf_enc_s[r] = h.enc_s;
            res.hf_dec_s[r] = h.dec_s;
            printf("round %d: HF tokenizers encode %.2f MB/s, decode %.2f MB/s\n", r + 1,
                   (double)c.n_bytes / h.enc_s / 1e6, (double)h.out_bytes / h.dec_s / 1e6);
        }
        if (r == 0) unlink(ids_path);
    }
    status |= print_summary(&o, &c, &ids, &res, why);
    print_loadavg("at end");

    free(out);
    free(out_off);
    free(ids.ids);
    free(ids.id_off);
    corpus_free(&c);
    emx_tokenizer_free(tk);
    if (have_model) emx_model_close(&model);
    else tokdata_free(&data);
    return status;
}
