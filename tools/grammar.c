// grammar — the constrained-decoding library (sampler/grammar*.h, sampler/json_schema.h) on its
// own, with a model's vocabulary and no forward pass: random walks through the mask, its cost.
//
//   build/tools/grammar (--json-schema FILE | --gbnf FILE | --json-object) [--model MODEL.bin]
//                       [--walk N] [--seed S] [--max-tokens T] [--print-gbnf] [--bench]
//
//   --print-gbnf   the GBNF of --json-schema (or the --gbnf text) on stdout
//   --walk N       N random walks, one JSON line each: {"walk": i, "done": bool, "tokens": n,
//                  "text": "..."}. Each step draws among the allowed tokens (Philox, seed S,
//                  step, walk) until a stop token is drawn or T tokens (default 300). After T/2
//                  tokens, 3 draws in 4 prefer tokens holding `"`, `}` or `]` (or a stop token)
//                  when any is allowed, so that most walks close their structures in the budget.
//   --bench        the mask's cost per step over the walks (or 4 walks of seed S): mean, p50,
//                  max, cache hits, and the trie's build time; one line on stderr
// Exit status: 0, 1 (a walk's step found no allowed token), 2 (bad arguments or input).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/read_file.h"
#include "runtime/model.h"
#include "sampler/grammar.h"
#include "sampler/grammar_mask.h"
#include "sampler/json_schema.h"
#include "sampler/philox.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const EmxTokenizer *tk;
    EmxGrammarMasker *masker;
    uint8_t *allowed;
    int32_t *pick;  // candidates of one draw
    double *times;  // seconds per mask call
    size_t n_times, cap_times;
} Walker;

static int is_closing(const EmxTokenizer *tk, int id) {
    size_t len = 0;
    const char *b = emx_token_bytes_ref(tk, id, &len);
    if (emx_is_stop(tk, id)) return 1;
    for (size_t i = 0; b && i < len; i++)
        if (b[i] == '"' || b[i] == '}' || b[i] == ']') return 1;
    return 0;
}

// One walk; its text (malloc'd) and whether it ended on a stop token. -1: no token was allowed.
static int walk_once(Walker *w, const EmxGrammar *g, uint64_t seed, uint32_t lane, int max_tokens, char **text,
                     int *n_tokens, int *done) {
    EmxGrammarState *s = emx_grammar_state_new(g);
    int n_vocab = emx_tokenizer_n_vocab(w->tk), rc = 0;
    size_t cap = 256, n = 0;
    char *out = malloc(cap);
    *done = 0;
    for (*n_tokens = 0; *n_tokens < max_tokens && s && out; ++*n_tokens) {
        double t0 = emx_now_s();
        int count = emx_grammar_mask(w->masker, s, w->allowed);
        if (w->n_times == w->cap_times) {
            w->cap_times = w->cap_times ? 2 * w->cap_times : 1024;
            w->times = realloc(w->times, w->cap_times * sizeof *w->times);
        }
        w->times[w->n_times++] = emx_now_s() - t0;
        if (count <= 0) {
            rc = -1;
            break;
        }
        int n_pick = 0, n_close = 0, prefer = *n_tokens >= max_tokens / 2 &&
                                                 emx_uniform_f64(seed, 2 * (uint64_t)*n_tokens + 1, lane) < 0.75;
        for (int id = 0; id < n_vocab; id++)
            if (w->allowed[id] && prefer && is_closing(w->tk, id)) w->pick[n_close++] = id;
        if (n_close == 0)
            for (int id = 0; id < n_vocab; id++)
                if (w->allowed[id]) w->pick[n_pick++] = id;
        int m = n_close ? n_close : n_pick;
        int id = w->pick[(int)(emx_uniform_f64(seed, 2 * (uint64_t)*n_tokens, lane) * m) % m];
        if (emx_is_stop(w->tk, id)) {
            *done = 1;
            break;
        }
        if (emx_grammar_accept_token(s, w->tk, id) != 0) {
            rc = -1;
            break;
        }
        size_t len = 0;
        const char *b = emx_token_bytes_ref(w->tk, id, &len);
        while (n + len + 1 > cap) out = realloc(out, cap *= 2);
        if (!out) break;
        memcpy(out + n, b, len);
        n += len;
    }
    if (out) out[n] = 0;
    *text = out;
    emx_grammar_state_free(s);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_report(Walker *w, const char *model, double trie_s) {
    EmxGrammarMaskStats st;
    emx_grammar_masker_stats(w->masker, &st);
    if (!w->n_times) return;
    double sum = 0;
    for (size_t i = 0; i < w->n_times; i++) sum += w->times[i];
    qsort(w->times, w->n_times, sizeof *w->times, cmp_double);
    fprintf(stderr, "grammar: bench %s: n_vocab %d, %zu masks: mean %.3f ms, p50 %.3f ms, p90 %.3f ms, max %.3f ms; "
            "cache hits %llu (%.0f%%), automaton states %llu, resets %llu; trie built in %.0f ms\n", model, emx_tokenizer_n_vocab(w->tk), w->n_times,
            1e3 * sum / (double)w->n_times, 1e3 * w->times[w->n_times / 2], 1e3 * w->times[w->n_times * 9 / 10],
            1e3 * w->times[w->n_times - 1], (unsigned long long)st.cache_hits,
            100.0 * (double)st.cache_hits / (double)st.masks, (unsigned long long)st.dfa_states,
            (unsigned long long)st.resets, 1e3 * trie_s);
}

static int usage(void) {
    fprintf(stderr, "usage: grammar (--json-schema FILE | --gbnf FILE | --json-object) [--model MODEL.bin] "
                    "[--walk N] [--seed S] [--max-tokens T] [--print-gbnf] [--bench]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *schema_path = NULL, *gbnf_path = NULL, *model_path = NULL;
    int json_object = 0, print = 0, bench = 0, n_walks = 0, max_tokens = 300;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json-object")) json_object = 1;
        else if (!strcmp(a, "--print-gbnf")) print = 1;
        else if (!strcmp(a, "--bench")) bench = 1;
        else if (!v) return usage();
        else if (!strcmp(a, "--json-schema")) schema_path = v, i++;
        else if (!strcmp(a, "--gbnf")) gbnf_path = v, i++;
        else if (!strcmp(a, "--model")) model_path = v, i++;
        else if (!strcmp(a, "--walk")) n_walks = atoi(v), i++;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v), i++;
        else return usage();
    }
    if (!!schema_path + !!gbnf_path + json_object != 1 || max_tokens < 2) return usage();
    char err[512];
    size_t len = 0;
    char *text = NULL, *gbnf = NULL;
    EmxGrammar *g = NULL;
    if (schema_path || gbnf_path) {
        if (!(text = emx_read_file(schema_path ? schema_path : gbnf_path, &len))) {
            fprintf(stderr, "grammar: cannot read %s\n", schema_path ? schema_path : gbnf_path);
            return 2;
        }
    }
    static const char object_schema[] = "{\"type\": \"object\"}";  // --print-gbnf of --json-object: the same rules
    if (json_object && print && emx_json_schema_to_gbnf(object_schema, sizeof object_schema - 1, &gbnf, err, sizeof err)) {
        fprintf(stderr, "grammar: %s\n", err);
        return 2;
    }
    if (schema_path && emx_json_schema_to_gbnf(text, len, &gbnf, err, sizeof err)) {
        fprintf(stderr, "grammar: %s: %s\n", schema_path, err);
        return 2;
    }
    if (print) fputs(gbnf ? gbnf : text ? text : "", stdout);
    int rc = json_object ? emx_grammar_json_object(&g, err, sizeof err)
                         : emx_grammar_parse(gbnf ? gbnf : text, gbnf ? strlen(gbnf) : len, &g, err, sizeof err);
    free(text);
    free(gbnf);
    if (rc) {
        fprintf(stderr, "grammar: %s\n", err);
        return 2;
    }
    if (!model_path || (!n_walks && !bench)) {
        emx_grammar_free(g);
        return model_path || (!n_walks && !bench) ? 0 : usage();
    }
    EmxModel m;
    if (emx_model_open(&m, model_path, err, sizeof err)) {
        fprintf(stderr, "grammar: %s: %s\n", model_path, err);
        return 2;
    }
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    double t_trie = emx_now_s();
    EmxTokenTrie *trie = tk ? emx_token_trie_new(tk, err, sizeof err) : NULL;
    t_trie = emx_now_s() - t_trie;
    Walker w = {.tk = tk};
    if (trie) w.masker = emx_grammar_masker_new(trie, g, err, sizeof err);
    if (!w.masker) {
        fprintf(stderr, "grammar: %s: %s\n", model_path, err);
        return 2;
    }
    w.allowed = malloc((size_t)emx_tokenizer_n_vocab(tk));
    w.pick = malloc((size_t)emx_tokenizer_n_vocab(tk) * sizeof *w.pick);
    int status = 0;
    for (int i = 0; i < (n_walks ? n_walks : 4); i++) {
        char *out = NULL;
        int n_tok = 0, done = 0;
        if (walk_once(&w, g, seed, (uint32_t)i, max_tokens, &out, &n_tok, &done)) status = 1;
        if (n_walks) {
            cJSON *line = cJSON_CreateObject();
            cJSON_AddNumberToObject(line, "walk", i);
            cJSON_AddBoolToObject(line, "done", done);
            cJSON_AddNumberToObject(line, "tokens", n_tok);
            cJSON_AddStringToObject(line, "text", out ? out : "");
            char *s = cJSON_PrintUnformatted(line);
            if (s) puts(s);
            free(s);
            cJSON_Delete(line);
        }
        free(out);
    }
    if (bench) bench_report(&w, model_path, t_trie);
    free(w.allowed);
    free(w.pick);
    free(w.times);
    emx_grammar_masker_free(w.masker);
    emx_token_trie_free(trie);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
    emx_grammar_free(g);
    return status;
}
