// test_branch_decode.c — the branching decoder (runtime/branch/branch_decode.h) against
// independent computations: with no fork it is greedy decoding, token for token; a branch's
// numbers are those of feeding its tokens one at a time to a fresh state, and the prefix's KV rows
// are untouched; a committed answer is an alphabet entry whose probability is recomputed here by
// sequential emx_forward calls and a plain softmax; each rule's choice is recomputed from the path
// records; runs repeat exactly; ./run's flags fail in one line; eval's branch configs.
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/branch/branch_decode.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "sampler/metrics.h"
#include "test_util.h"

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    int V;
} Loaded;

static void load(Loaded *l, const char *name) {
    char path[512], rel[128], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    cr_assert_eq(emx_model_open(&l->m, path, err, sizeof err), 0, "%s (make test-models)", err);
    l->tk = emx_tokenizer_new(&l->m.tok, err, sizeof err);
    cr_assert(l->tk, "%s", err);
    l->V = (int)l->m.cfg.vocab_size;
}

static void unload(Loaded *l) {
    emx_tokenizer_free(l->tk);
    emx_model_close(&l->m);
}

static EmxState *new_state(Loaded *l, int ctx) {
    char err[512];
    EmxStateOptions so = {.n_threads = 1, .ctx = ctx};
    EmxState *s = emx_state_new(&l->m, &so, err, sizeof err);
    cr_assert(s, "%s", err);
    return s;
}

static int *prompt_ids(Loaded *l, const char *text, int *n) {
    // "SYSTEM|USER": a chat prompt (the model's template), else raw text
    const char *bar = strchr(text, '|');
    char system[256] = "";
    if (bar) snprintf(system, sizeof system, "%.*s", (int)(bar - text), text);
    EmxPromptSpec ps = {.text = bar ? bar + 1 : text, .len = strlen(bar ? bar + 1 : text), .chat = bar != NULL,
                        .system = bar ? system : NULL};
    int *ids;
    char err[256];
    cr_assert_eq(emx_prompt_ids(&l->m, l->tk, &ps, &ids, n, err, sizeof err), 0, "%s", err);
    return ids;
}

// The decoder's text (printed) and result, on a fresh state.
static char *decode(Loaded *l, const int *ids, int n_ids, const EmxBranchParams *bp, int n_predict, EmxBranchResult *res,
                    EmxState **keep) {
    EmxState *st = new_state(l, 128);
    char *buf = NULL, err[512];
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    EmxGenerateOptions go = {.n_predict = n_predict, .out = out};
    EmxGenerateStats stats;
    const int rc = emx_branch_decode(st, l->tk, ids, n_ids, bp, &go, res, &stats, err, sizeof err);
    fclose(out);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(buf, res->text, "the printed text is the result's");
    cr_assert_eq(stats.n_generated, res->n_tokens);
    if (keep) *keep = st;
    else emx_state_free(st);
    return buf;
}

// ln Σ e^l in double, one plain pass after the max (not the library's vectorised one).
static double plain_lse(const float *l, int n) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++) s += exp((double)l[i] - mx);
    return mx + log(s);
}

static int plain_argmax(const float *l, int n) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[a]) a = i;
    return a;
}

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(1e-300, fmax(fabs(a), fabs(b))); }

// ---------------------------------------------------------------------------------------------
// (a) No fork: greedy's text and tokens

static void check_no_fork_is_greedy(const char *model, const char *prompt, int n_predict, EmxBranchParams bp) {
    Loaded l;
    load(&l, model);
    int n_ids;
    int *ids = prompt_ids(&l, prompt, &n_ids);
    EmxState *st = new_state(&l, 128);
    EmxBasicSampler bs;
    char err[256], *gbuf = NULL;
    size_t glen = 0;
    EmxSamplerParams greedy = {.temperature = 0};
    cr_assert_eq(emx_basic_sampler_init(&bs, &greedy, 1, l.V, err, sizeof err), 0);
    int gids[256];
    FILE *out = open_memstream(&gbuf, &glen);
    EmxGenerateOptions go = {.n_predict = n_predict, .out = out, .ids_out = gids, .ids_cap = 256};
    EmxGenerateStats gs;
    cr_assert_eq(emx_generate(st, l.tk, ids, n_ids, &bs.base, &go, &gs, err, sizeof err), 0, "%s", err);
    fclose(out);
    EmxBranchResult res;
    char *text = decode(&l, ids, n_ids, &bp, n_predict, &res, NULL);
    cr_expect_eq(res.n_forks, 0, "%s: no fork expected", model);
    cr_expect_str_eq(text, gbuf, "%s: the text differs from greedy's", model);
    cr_assert_eq(res.n_tokens, gs.n_generated, "%s", model);
    cr_expect(memcmp(res.tokens, gids, (size_t)gs.n_generated * sizeof(int)) == 0, "%s: tokens differ", model);
    cr_assert_eq(res.n_paths, 1);
    cr_expect(res.paths[0].fork == -1 && res.paths[0].output && res.paths[0].prob == 1.0);
    // the main line's numbers, against a plain log-softmax of a sequential run
    EmxState *seq = new_state(&l, 128);
    const float *lg = emx_forward(seq, ids, n_ids, 0);
    for (int j = 0; j < res.n_tokens; j++) {
        cr_assert(lg);
        cr_expect_eq(res.tokens[j], plain_argmax(lg, l.V), "%s: token %d is not the argmax", model, j);
        cr_expect(close_rel(res.paths[0].logp[j], lg[res.tokens[j]] - plain_lse(lg, l.V), 1e-9), "%s: logp %d", model, j);
        if (j + 1 < res.n_tokens) lg = emx_forward(seq, &res.tokens[j], 1, n_ids + j);
    }
    emx_state_free(seq);
    emx_branch_result_free(&res);
    free(text), free(gbuf), free(ids);
    emx_basic_sampler_free(&bs);
    emx_state_free(st);
    unload(&l);
}

Test(branch_decode, no_fork_is_greedy, .timeout = 300) {
    EmxBranchParams never = emx_branch_params_default();
    never.entropy_bits = 1000;  // no step is that uncertain
    EmxBranchParams none = emx_branch_params_default();
    none.max_forks = 0;
    check_no_fork_is_greedy("stories260K.f32.bin", "Once upon a time", 60, never);
    check_no_fork_is_greedy("stories260K.q8.bin", "Lily", 40, none);
    check_no_fork_is_greedy("qwen3-tiny.f32.bin", "Hello there", 8, never);
    check_no_fork_is_greedy("llama3-tiny.f32.bin", "Hello there", 8, none);
    check_no_fork_is_greedy("stories260K.f32.bin", "", 30, never);  // from BOS, to the stop token or the budget
}

// ---------------------------------------------------------------------------------------------
// (b) A path's numbers are those of its tokens fed one at a time; the prefix's rows untouched

static const EmxBranchPath *output_path(const EmxBranchResult *r) {
    for (int i = 0; i < r->n_paths; i++)
        if (r->paths[i].output) return &r->paths[i];
    return NULL;
}

// Path p fed to a fresh state after the prompt and the output's first p->start tokens: each
// token's logp, entropy and margin are bitwise those of the fresh logits (the library's metrics
// of the same bytes: the rows are bitwise equal), and every token after the fork token is greedy.
static void check_path_sequential(Loaded *l, const int *ids, int n_ids, const EmxBranchResult *r, const EmxBranchPath *p,
                                  const EmxBranchParams *bp) {
    EmxState *s = new_state(l, 128);
    int *seq = malloc((size_t)(n_ids + r->n_tokens + p->n_tokens) * sizeof *seq);
    memcpy(seq, ids, (size_t)n_ids * sizeof *seq);
    memcpy(seq + n_ids, r->tokens, (size_t)p->start * sizeof *seq);
    const int at = n_ids + p->start;
    const float *lg = emx_forward(s, seq, n_ids, 0);
    for (int i = n_ids; i < at; i++) lg = emx_forward(s, &seq[i], 1, i);
    for (int j = 0; j < p->n_tokens; j++) {
        cr_assert(lg);
        EmxMetrics mm;
        emx_logits_metrics(lg, l->V, &mm);
        const int t = p->tokens[j];
        cr_expect_eq(p->logp[j], (double)lg[t] - mm.logits_lse_nats, "fork %d branch %d token %d: logp", p->fork, p->branch, j);
        cr_expect_eq(p->entropy[j], mm.logits_entropy_bits, "fork %d branch %d token %d: entropy", p->fork, p->branch, j);
        cr_expect(close_rel(p->logp[j], lg[t] - plain_lse(lg, l->V), 1e-9));
        if (p->fork < 0) {  // the main line: greedy, but for the tokens a fork committed (not checked here)
        } else if (j > 0) cr_expect_eq(t, plain_argmax(lg, l->V), "fork %d branch %d token %d: not greedy", p->fork, p->branch, j);
        if (p->fork >= 0 && j == 0) {  // the fork token: p >= gate * p(top), and fewer than k tokens rank above it
            const int top = plain_argmax(lg, l->V);
            cr_expect(exp((double)lg[t] - lg[top]) >= bp->gate, "fork token below the gate");
            int above = 0;
            for (int i = 0; i < l->V; i++) above += lg[i] > lg[t] || (lg[i] == lg[t] && i < t);
            cr_expect(above < bp->k && above == p->branch, "fork token %d ranks %d, branch %d", t, above, p->branch);
            cr_expect(mm.logits_entropy_bits > bp->entropy_bits && exp((double)lg[top] - plain_lse(lg, l->V)) < 0.5);
        }
        if (j + 1 < p->n_tokens) lg = emx_forward(s, &t, 1, at + j);
    }
    free(seq);
    emx_state_free(s);
}

// Rows [0, n) of the KV caches of a and b are bitwise equal.
static void expect_same_rows(Loaded *l, EmxState *a, EmxState *b, int n, int ctx) {
    float *ka, *va, *kb, *vb;
    int kv;
    emx_state_kv_cache(a, &ka, &va, &kv);
    emx_state_kv_cache(b, &kb, &vb, NULL);
    for (int layer = 0; layer < (int)l->m.cfg.n_layers; layer++) {
        const size_t off = (size_t)layer * ctx * kv, len = (size_t)n * kv * sizeof(float);
        cr_expect(memcmp(ka + off, kb + off, len) == 0 && memcmp(va + off, vb + off, len) == 0, "layer %d rows", layer);
    }
}

static void check_fork_paths(const char *model, const char *prompt, EmxBranchParams bp, int n_predict, int want_forks) {
    Loaded l;
    load(&l, model);
    int n_ids;
    int *ids = prompt_ids(&l, prompt, &n_ids);
    EmxBranchResult r;
    EmxState *st;
    free(decode(&l, ids, n_ids, &bp, n_predict, &r, &st));
    cr_assert_eq(r.n_forks, want_forks, "%s: %d forks", model, r.n_forks);
    cr_assert_gt(r.n_paths, want_forks, "%s", model);
    for (int i = 0; i < r.n_paths; i++) check_path_sequential(&l, ids, n_ids, &r, &r.paths[i], &bp);
    // the output: its first tokens are the main line's, the path that is the output ends it
    const EmxBranchPath *o = output_path(&r);
    cr_assert(o);
    cr_expect_eq(o->start + o->n_tokens, r.n_tokens);
    cr_expect(memcmp(r.tokens + o->start, o->tokens, (size_t)o->n_tokens * sizeof(int)) == 0);
    // the decoder's cache holds the prompt and every token committed before the last fork as a
    // sequential run leaves them: the prefix shared, never written by a branch
    EmxState *seq = new_state(&l, 128);
    int *all = malloc((size_t)(n_ids + r.n_tokens) * sizeof *all);
    memcpy(all, ids, (size_t)n_ids * sizeof *all);
    memcpy(all + n_ids, r.tokens, (size_t)r.n_tokens * sizeof *all);
    cr_assert(emx_forward(seq, all, n_ids, 0));
    for (int i = n_ids; i < n_ids + o->start; i++) cr_assert(emx_forward(seq, &all[i], 1, i));
    expect_same_rows(&l, st, seq, n_ids + o->start, 128);
    free(all);
    emx_state_free(seq);
    emx_state_free(st);
    emx_branch_result_free(&r);
    free(ids);
    unload(&l);
}

Test(branch_decode, paths_equal_sequential_runs, .timeout = 300) {
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0;  // random weights: every step is unsure; fork at the first one
    bp.k = 4;
    bp.gate = 0.5;
    check_fork_paths("qwen3-tiny.f32.bin", "Hello there", bp, 6, 1);
    // two forks decided after 2 tokens each, greedy between them and after
    bp.max_forks = 2, bp.lookahead = 2;
    check_fork_paths("qwen3-tiny.f32.bin", "Hello there", bp, 8, 2);
    bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.gate = 0.05, bp.max_forks = 3, bp.lookahead = 3;
    check_fork_paths("stories260K.f32.bin", "Once upon a time", bp, 40, 3);
    bp.rule = EMX_BRANCH_RULE_ENTROPY;
    check_fork_paths("llama3-tiny.q8.bin", "Hello", bp, 10, 3);
}

// ---------------------------------------------------------------------------------------------
// (c) Answer commitment: recomputed by sequential emx_forward calls

// The text of ids decoded after the prompt (control tokens and a stop token not printed).
static char *decode_text(Loaded *l, const int *prompt, int n_prompt, const int *ids, int n) {
    EmxDecoder dec;
    emx_decoder_init(&dec, l->tk, 1);
    const size_t cap = emx_decoder_max_out(l->tk);
    char *buf = malloc(cap), *s = calloc(1, 1);
    size_t len = 0;
    for (int i = 0; i < n_prompt + n; i++) {
        const int id = i < n_prompt ? prompt[i] : ids[i - n_prompt];
        if (i >= n_prompt && emx_is_stop(l->tk, id)) continue;
        size_t k = emx_decoder_push(&dec, id, buf, cap);
        if (i < n_prompt || !k) continue;
        s = realloc(s, len + k + 1);
        memcpy(s + len, buf, k), len += k, s[len] = 0;
    }
    size_t k = emx_decoder_flush(&dec, buf, cap);
    s = realloc(s, len + k + 1);
    memcpy(s + len, buf, k), len += k, s[len] = 0;
    free(buf);
    return s;
}

// text's tokens after other text, as docs/branch.md says: after one space when `space` (an SPM
// vocabulary with a dummy prefix makes that space itself), no BOS, no special tokens.
static int *piece_tokens(Loaded *l, const char *text, int space, int *n) {
    const int spm = (emx_tokenizer_data(l->tk)->flags & EMX_TOKF_ADD_SPACE_PREFIX) != 0;
    char s[256], err[128];
    snprintf(s, sizeof s, "%s%s", space && !spm ? " " : "", text);
    int *ids;
    size_t nn;
    cr_assert_eq(emx_encode(l->tk, s, strlen(s), 0, &ids, &nn, err, sizeof err), 0);
    *n = (int)nn;
    return ids;
}

// A token ends an entry: control or stop, an empty piece, or a first byte that is ASCII and no
// letter or digit.
static int ends_entry(Loaded *l, int id) {
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)emx_token_bytes_ref(l->tk, id, &n);
    if (emx_is_control(l->tk, id) || emx_is_stop(l->tk, id) || !p || n == 0) return 1;
    const int c = p[0];
    return c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
}

// p(top1) - p(top2) of a row, plainly.
static double plain_margin(const float *lg, int n) {
    const double lse = plain_lse(lg, n);
    int a = plain_argmax(lg, n), b = a == 0 ? 1 : 0;
    for (int i = 0; i < n; i++)
        if (i != a && lg[i] > lg[b]) b = i;
    return exp(lg[a] - lse) - exp(lg[b] - lse);
}

// Path p's answer_q, answer_p, answer and answer_margin, recomputed: the prompt, the output's
// first p->start tokens, p's tokens without a stop token, the cue and each entry, fed one token at
// a time to a fresh state.
static void check_answers(Loaded *l, const int *ids, int n_ids, const EmxBranchResult *r, const EmxBranchPath *p,
                          const EmxBranchParams *bp) {
    const int n_own = p->n_tokens - (p->end == EMX_BRANCH_END_STOP);
    int *seq = malloc((size_t)(n_ids + p->start + n_own + 64) * sizeof *seq), n = 0;
    memcpy(seq, ids, (size_t)n_ids * sizeof *seq), n = n_ids;
    memcpy(seq + n, r->tokens, (size_t)p->start * sizeof *seq), n += p->start;
    memcpy(seq + n, p->tokens, (size_t)n_own * sizeof *seq), n += n_own;
    char *text = decode_text(l, ids, n_ids, seq + n_ids, n - n_ids);
    const size_t tl = strlen(text);
    const char *cue = bp->cue ? bp->cue : "The answer is";
    int n_cue;
    int *cue_ids = piece_tokens(l, cue, tl > 0 && !strchr(" \n\t\r", text[tl - 1]), &n_cue);
    memcpy(seq + n, cue_ids, (size_t)n_cue * sizeof *seq), n += n_cue;
    EmxState *s = new_state(l, 128);
    const float *lg = emx_forward(s, seq, n_ids, 0);
    for (int i = n_ids; i < n; i++) lg = emx_forward(s, &seq[i], 1, i);
    cr_assert(lg);
    float *l0 = malloc((size_t)l->V * sizeof *l0);
    memcpy(l0, lg, (size_t)l->V * sizeof *l0);
    double q[16], z = 0, mar[16];
    int best = 0;
    for (int a = 0; a < bp->n_alphabet; a++) {
        int ne;
        int *e = piece_tokens(l, bp->alphabet[a], cue[strlen(cue) - 1] != ' ', &ne);
        const float *row = l0;
        q[a] = 1, mar[a] = 0;
        for (int j = 0; j < ne; j++) {
            q[a] *= exp(row[e[j]] - plain_lse(row, l->V));
            mar[a] += plain_margin(row, l->V);
            row = emx_forward(s, &e[j], 1, n + j);
        }
        double end = 0;
        const double lse = plain_lse(row, l->V);
        for (int i = 0; i < l->V; i++) end += ends_entry(l, i) ? exp(row[i] - lse) : 0;
        q[a] *= end, mar[a] /= ne;
        z += q[a];
        if (q[a] > q[best]) best = a;
        cr_expect(close_rel(p->answer_q[a], q[a], 1e-9), "entry '%s': q %.17g, recomputed %.17g", bp->alphabet[a],
                  p->answer_q[a], q[a]);
        free(e);
    }
    cr_expect_eq(p->answer, best, "path's answer %d, recomputed %d", p->answer, best);
    cr_expect(close_rel(p->answer_margin, mar[best], 1e-9));
    for (int a = 0; a < bp->n_alphabet; a++) cr_expect(close_rel(p->answer_p[a], q[a] / z, 1e-9));
    // its text: the path, the cue, its answer (the output's: the output's answer)
    const int shown = p->output ? r->answer : p->answer;
    char want[512];
    snprintf(want, sizeof want, "%s%s%s", cue, cue[strlen(cue) - 1] == ' ' ? "" : " ", bp->alphabet[shown]);
    const size_t pl = strlen(p->text), wl = strlen(want);
    cr_expect(pl >= wl && strcmp(p->text + pl - wl, want) == 0, "path text '%s' does not end with '%s'", p->text, want);
    cr_expect(strncmp(p->text, text, tl) == 0, "path text '%s' does not start with its tokens' '%s'", p->text, text);
    free(l0), free(cue_ids), free(text), free(seq);
    emx_state_free(s);
}

// ---------------------------------------------------------------------------------------------
// (d) The rules' choice, recomputed from the path records

static double mean(const double *x, int from, int to) {
    double s = 0;
    for (int i = from; i < to; i++) s += x[i];
    return s / (to - from);
}

// The candidates of the final decision: the output path's fork's paths that were not cut (the
// main line alone when the output is the main line). Checks each one's prob and score and that
// the output is the rule's choice.
static void check_decision(const EmxBranchResult *r, const EmxBranchParams *bp) {
    const EmxBranchPath *o = output_path(r), *c[16];
    cr_assert(o);
    int n = 0, stopped = 0;
    for (int i = 0; i < r->n_paths; i++)  // complete paths decide when there are any
        stopped += r->paths[i].fork == o->fork && r->paths[i].end == EMX_BRANCH_END_STOP;
    for (int i = 0; i < r->n_paths; i++) {
        const EmxBranchPath *p = &r->paths[i];
        if (p->fork != o->fork || p->end == EMX_BRANCH_END_CUT) continue;
        if (stopped && p->end != EMX_BRANCH_END_STOP) {
            cr_expect(p->prob == 0 && isnan(p->score) && p->answer < 0, "a path cut short by the budget decided");
            continue;
        }
        c[n++] = p;
    }
    const int commit = bp->n_alphabet > 0;
    double lp[16], P[16], z = 0, mx = -INFINITY, score[16];
    for (int i = 0; i < n; i++) {
        lp[i] = 0;
        for (int j = 0; j < c[i]->n_tokens - (commit && c[i]->end == EMX_BRANCH_END_STOP); j++) lp[i] += c[i]->logp[j];
        mx = fmax(mx, lp[i]);
    }
    for (int i = 0; i < n; i++) z += exp(lp[i] - mx);
    int want = 0, want_answer = -1;
    for (int i = 0; i < n; i++) {
        P[i] = exp(lp[i] - mx) / z;
        const EmxBranchPath *p = c[i];
        const int stop = p->end == EMX_BRANCH_END_STOP, last = p->n_tokens - stop;
        const int first = last - 8 > 1 ? last - 8 : 1;
        score[i] = bp->rule == EMX_BRANCH_RULE_PROB      ? P[i]
                   : bp->rule == EMX_BRANCH_RULE_ENTROPY ? (p->n_tokens > 1 ? mean(p->entropy, 1, p->n_tokens) : p->entropy[0])
                   : commit                              ? p->answer_margin
                   : last > 1                            ? mean(p->margin, first, last)
                                                         : p->margin[0];
        cr_expect(close_rel(p->prob, P[i], 1e-12), "path %d/%d: prob %.17g, recomputed %.17g", p->fork, p->branch, p->prob, P[i]);
        cr_expect(close_rel(p->score, score[i], 1e-12), "path %d/%d: score", p->fork, p->branch);
        if (bp->rule == EMX_BRANCH_RULE_ENTROPY ? score[i] < score[want] : score[i] > score[want]) want = i;
    }
    if (commit && bp->rule == EMX_BRANCH_RULE_PROB) {  // Σ_b P(b)·p(a | b): the answer; then its best branch
        double best = -1;
        for (int a = 0; a < bp->n_alphabet; a++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += P[i] * c[i]->answer_p[a];
            if (s > best) best = s, want_answer = a;
        }
        cr_expect(close_rel(r->answer_score, best, 1e-12));
        int any = 0;
        for (int i = 0; i < n; i++) any |= c[i]->answer == want_answer;
        double bv = -1;
        for (int i = 0; i < n; i++)
            if ((!any || c[i]->answer == want_answer) && P[i] * c[i]->answer_p[want_answer] > bv)
                bv = P[i] * c[i]->answer_p[want_answer], want = i;
    } else if (commit) {
        want_answer = c[want]->answer;
    }
    cr_expect_eq(o, c[want], "the output is path %d/%d, the rule chooses %d/%d", o->fork, o->branch, c[want]->fork,
                 c[want]->branch);
    cr_expect_eq(r->answer, want_answer);
}

static void check_commit(const char *model, const char *prompt, EmxBranchParams bp, int n_predict, int want_fork) {
    Loaded l;
    char path[512], rel[128];
    snprintf(rel, sizeof rel, "models/%s", model);
    if (access(test_build_path(path, sizeof path, rel), R_OK) != 0)
        cr_skip_test("%s missing (make test-models converts it when weights/download has the GGUF)", path);
    load(&l, model);
    int n_ids;
    int *ids = prompt_ids(&l, prompt, &n_ids);
    EmxBranchResult r;
    char *text = decode(&l, ids, n_ids, &bp, n_predict, &r, NULL);
    cr_assert_eq(r.n_forks > 0, want_fork, "%s: %d forks", model, r.n_forks);
    check_decision(&r, &bp);
    int n_answered = 0;
    for (int i = 0; i < r.n_paths; i++) {
        const EmxBranchPath *p = &r.paths[i];
        if (p->answer < 0) continue;
        cr_assert(p->answer < bp.n_alphabet);
        check_answers(&l, ids, n_ids, &r, p, &bp);
        n_answered++;
    }
    if (bp.n_alphabet) {
        cr_expect(n_answered >= 1 + want_fork, "%s: %d paths with an answer", model, n_answered);
        cr_expect(r.answer >= 0 && r.answer < bp.n_alphabet);
        cr_expect_str_eq(output_path(&r)->text, text, "the output path's text is the output");
    } else {
        cr_expect_eq(n_answered, 0);
    }
    emx_branch_result_free(&r);
    free(text), free(ids);
    unload(&l);
}

Test(branch_decode, answers_and_rules, .timeout = 600) {
    char *names[] = {"Lily", "Tom", "Ben", "a big dog", "the"};
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.gate = 0.05;
    for (int rule = 0; rule < 3; rule++) {  // stories260K: SPM, every entry a word or two
        bp.rule = rule;
        bp.alphabet = NULL, bp.n_alphabet = 0;
        check_commit("stories260K.f32.bin", "Lily", bp, 10, 1);
        bp.alphabet = names, bp.n_alphabet = 5;
        check_commit("stories260K.f32.bin", "One day", bp, 10, 1);
        check_commit("stories260K.f32.bin", "Tom and Lily", bp, 14, 1);
    }
    // with no fork (B = 0): greedy, then the answer; a cue of its own
    bp.rule = EMX_BRANCH_RULE_PROB, bp.max_forks = 0, bp.cue = "So the name is";
    check_commit("stories260K.f32.bin", "Once upon a time", bp, 10, 0);
    // qwen3-tiny (byte-level BPE, 151,936 tokens, flat logits): letters, and an entry that
    // begins another
    char *letters[] = {"A", "B", "C", "AB"};
    bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.gate = 0.5, bp.k = 3, bp.alphabet = letters, bp.n_alphabet = 4;
    check_commit("qwen3-tiny.f32.bin", "Hello there", bp, 4, 1);
    bp.rule = EMX_BRANCH_RULE_MARGIN, bp.cue = "Answer: ";  // a cue ending in a space: entries without one
    check_commit("qwen3-tiny.f32.bin", "Hello there", bp, 3, 1);
}

// SmolLM2-135M-Instruct (q8; optional test data): a chat answer of 4 tokens, forked at its first
// token. Some branches stop ("A) Friday"), others are cut by the budget ("The correct answer is"):
// only the complete ones decide (check_decision checks that the others were left out).
Test(branch_decode, smollm2_complete_paths_decide, .timeout = 300) {
    const char *q = "Be brief.|Which day is 14 days after Friday? A) Friday B) Saturday C) Thursday Reply with the letter "
                    "only.";
    char *abc[] = {"A", "B", "C"};
    EmxBranchParams bp = emx_branch_params_default();
    for (int rule = 0; rule < 3; rule++) {
        bp.rule = rule, bp.alphabet = NULL, bp.n_alphabet = 0;
        check_commit("smollm2.q8.bin", q, bp, 4, 1);
        bp.alphabet = abc, bp.n_alphabet = 3, bp.cue = "Answer:";
        check_commit("smollm2.q8.bin", q, bp, 4, 1);
    }
}

// ---------------------------------------------------------------------------------------------
// (e) The same text every time

Test(branch_decode, deterministic, .timeout = 300) {
    Loaded l;
    load(&l, "stories260K.f32.bin");
    int n_ids;
    int *ids = prompt_ids(&l, "Once upon a time", &n_ids);
    char *names[] = {"Lily", "Tom"};
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.max_forks = 3, bp.lookahead = 4, bp.alphabet = names, bp.n_alphabet = 2;
    EmxBranchResult a, b;
    char *ta = decode(&l, ids, n_ids, &bp, 30, &a, NULL), *tb = decode(&l, ids, n_ids, &bp, 30, &b, NULL);
    cr_expect_gt(a.n_forks, 1);
    cr_expect_str_eq(ta, tb);
    cr_assert_eq(a.n_paths, b.n_paths);
    for (int i = 0; i < a.n_paths; i++) {
        cr_expect_str_eq(a.paths[i].text, b.paths[i].text);
        cr_expect(a.paths[i].prob == b.paths[i].prob);
    }
    emx_branch_result_free(&a), emx_branch_result_free(&b);
    free(ta), free(tb), free(ids);
    unload(&l);
}
