// test_branch_hooks.c — what a server needs of the branching decoder (runtime/branch/
// branch_decode.h): the text through a callback equals the printed text, a hook's stop ends the
// run at once with what was made, the rows the result calls valid are bitwise those of feeding
// the prompt and the output's first n_valid tokens to a fresh state one at a time, the checks a
// request gets before it runs (emx_branch_check) at their boundaries, and the tails handed back
// (emx_state_branches_release) with the next run unchanged.
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/branch/branch_decode.h"
#include "runtime/generate.h"
#include "runtime/model.h"
#include "runtime/pool/pool_forward.h"
#include "test_util.h"

#define CTX 128

typedef struct {
    EmxModel m;
    EmxTokenizer *tk;
    int *ids, n_ids;
} Loaded;

static void load(Loaded *l, const char *name, const char *prompt) {
    char path[512], rel[128], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(path, sizeof path, rel);
    cr_assert_eq(emx_model_open(&l->m, path, err, sizeof err), 0, "%s (make test-models)", err);
    l->tk = emx_tokenizer_new(&l->m.tok, err, sizeof err);
    cr_assert(l->tk, "%s", err);
    EmxPromptSpec ps = {.text = prompt, .len = strlen(prompt)};
    cr_assert_eq(emx_prompt_ids(&l->m, l->tk, &ps, &l->ids, &l->n_ids, err, sizeof err), 0, "%s", err);
}

static void unload(Loaded *l) {
    free(l->ids);
    emx_tokenizer_free(l->tk);
    emx_model_close(&l->m);
}

static EmxState *new_state(Loaded *l) {
    char err[512];
    EmxStateOptions so = {.n_threads = 1, .ctx = CTX};
    EmxState *s = emx_state_new(&l->m, &so, err, sizeof err);
    cr_assert(s, "%s", err);
    return s;
}

// The hooks' record: every piece of text, the polls, and when to stop.
typedef struct {
    char text[8192];
    size_t len;
    int n_pieces, stop_at_piece;  // on_text returns 1 on this piece (1-based; 0: never)
    int polls, stop_at_poll;      // should_stop returns 1 from this poll on (0: never)
} Sink;

static int on_text(void *user, const char *text, size_t len) {
    Sink *k = user;
    cr_assert(k->len + len < sizeof k->text);
    cr_assert_gt(len, 0, "an empty piece");
    memcpy(k->text + k->len, text, len);
    k->len += len;
    k->text[k->len] = 0;
    return ++k->n_pieces == k->stop_at_piece;
}

static int should_stop(void *user) {
    Sink *k = user;
    return ++k->polls >= k->stop_at_poll && k->stop_at_poll > 0;
}

// A hooked run on st (nothing may reach opt->out, a memstream here). Returns decode's rc.
static int run_hooked(Loaded *l, EmxState *st, const EmxBranchParams *bp, int n_predict, Sink *k, EmxBranchResult *r) {
    char *printed = NULL, err[512] = "";
    size_t n_printed = 0;
    FILE *out = open_memstream(&printed, &n_printed);
    EmxGenerateOptions go = {.n_predict = n_predict, .out = out, .echo_prompt = 1};
    EmxBranchHooks h = {.on_text = on_text, .should_stop = should_stop, .user = k};
    EmxGenerateStats stats;
    const int rc = emx_branch_decode_hooked(st, l->tk, l->ids, l->n_ids, bp, &go, &h, r, &stats, err, sizeof err);
    fclose(out);
    cr_expect_eq(n_printed, 0, "the hooked run printed '%s'", printed);
    free(printed);
    cr_assert_eq(rc, 0, "%s", err);
    return rc;
}

// The printed text of an unhooked run on a fresh state (malloc'd).
static char *run_printed(Loaded *l, const EmxBranchParams *bp, int n_predict) {
    EmxState *st = new_state(l);
    char *buf = NULL, err[512];
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    EmxGenerateOptions go = {.n_predict = n_predict, .out = out};
    EmxBranchResult r;
    EmxGenerateStats stats;
    cr_assert_eq(emx_branch_decode(st, l->tk, l->ids, l->n_ids, bp, &go, &r, &stats, err, sizeof err), 0, "%s", err);
    fclose(out);
    emx_branch_result_free(&r);
    emx_state_free(st);
    return buf;
}

// Rows [0, n_ids + r->n_valid) of st are bitwise those of feeding the prompt and the output's
// first n_valid tokens to a fresh state one at a time.
static void expect_valid_rows(Loaded *l, EmxState *st, const EmxBranchResult *r) {
    cr_assert(r->n_valid >= 0 && r->n_valid <= r->n_tokens, "n_valid %d of %d tokens", r->n_valid, r->n_tokens);
    EmxState *seq = new_state(l);
    cr_assert(emx_forward(seq, l->ids, l->n_ids, 0));
    for (int i = 0; i < r->n_valid; i++) cr_assert(emx_forward(seq, &r->tokens[i], 1, l->n_ids + i));
    float *ka, *va, *kb, *vb;
    int kv;
    emx_state_kv_cache(st, &ka, &va, &kv);
    emx_state_kv_cache(seq, &kb, &vb, NULL);
    const size_t len = (size_t)(l->n_ids + r->n_valid) * kv * sizeof(float);
    for (int layer = 0; layer < (int)l->m.cfg.n_layers; layer++) {
        const size_t off = (size_t)layer * CTX * kv;
        cr_expect(memcmp(ka + off, kb + off, len) == 0 && memcmp(va + off, vb + off, len) == 0, "layer %d: rows differ",
                  layer);
    }
    emx_state_free(seq);
}

static const EmxBranchPath *output_path(const EmxBranchResult *r) {
    for (int i = 0; i < r->n_paths; i++)
        if (r->paths[i].output) return &r->paths[i];
    return NULL;
}

// The callback gets the printed text, in pieces; the valid rows are the sequential ones: the
// output's start when the run ends in a fork, every main-line token but the last otherwise.
static void check_text_and_rows(const char *model, const char *prompt, EmxBranchParams bp, int n_predict) {
    Loaded l;
    load(&l, model, prompt);
    char *want = run_printed(&l, &bp, n_predict);
    EmxState *st = new_state(&l);
    Sink k = {0};
    EmxBranchResult r;
    run_hooked(&l, st, &bp, n_predict, &k, &r);
    cr_expect_str_eq(k.text, want, "%s: the callback's text", model);
    cr_expect_str_eq(r.text, want);
    cr_expect(!r.interrupted && r.stop != 0);
    const EmxBranchPath *o = output_path(&r);
    cr_assert(o);
    const int final_fork = o->fork >= 0;
    cr_expect_eq(r.n_valid, final_fork ? o->start : r.n_tokens - 1, "%s: n_valid %d (output %s, start %d, %d tokens)", model, r.n_valid, final_fork ? "a fork's" : "the main line",
                 o->start, r.n_tokens);
    expect_valid_rows(&l, st, &r);
    cr_expect_geq(k.polls, r.n_branch_passes + r.n_answer_passes + r.n_valid, "a poll before every pass");
    emx_branch_result_free(&r);
    emx_state_free(st);
    free(want);
    unload(&l);
}

Test(branch_hooks, text_and_valid_rows, .timeout = 300) {
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.k = 4, bp.gate = 0.5;  // random weights: fork at the first step, to the end
    check_text_and_rows("qwen3-tiny.f32.bin", "Hello there", bp, 6);
    bp.max_forks = 2, bp.lookahead = 2;  // decided after 2 tokens, greedy from the winner on
    check_text_and_rows("qwen3-tiny.f32.bin", "Hello there", bp, 8);
    bp = emx_branch_params_default();  // the default τ: one fork 16 tokens in, final
    check_text_and_rows("stories260K.f32.bin", "Once upon a time", bp, 24);
    bp.max_forks = 0;  // the main line: greedy
    check_text_and_rows("stories260K.f32.bin", "Once upon a time", bp, 24);
}

// With commitment the main line's last token and the cue are fed after the valid rows, and a
// fork's candidates are written back at the fork: neither may reach below n_valid.
Test(branch_hooks, valid_rows_with_commitment, .timeout = 300) {
    char *names[] = {"Lily", "Tom", "Ben"};
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.gate = 0.05, bp.alphabet = names, bp.n_alphabet = 3;
    for (int forks = 0; forks <= 1; forks++) {
        bp.max_forks = forks;
        Loaded l;
        load(&l, "stories260K.f32.bin", "One day");
        char *want = run_printed(&l, &bp, 10);
        EmxState *st = new_state(&l);
        Sink k = {0};
        EmxBranchResult r;
        run_hooked(&l, st, &bp, 10, &k, &r);
        cr_expect_str_eq(k.text, want);
        cr_expect(r.answer >= 0 && r.answer < 3);
        const EmxBranchPath *o = output_path(&r);
        cr_assert(o);
        // a fork's output: its start; the main line: its tokens but the last one chosen (a stop
        // token, replaced by the cue, or the budget's last, fed with the cue)
        if (forks) cr_expect_eq(r.n_valid, o->start);
        else cr_expect_eq(r.n_valid, o->n_tokens - 1);
        expect_valid_rows(&l, st, &r);
        emx_branch_result_free(&r);
        emx_state_free(st);
        free(want);
        unload(&l);
    }
}

// A stop from either hook: 0, interrupted, no stop reason, the text made so far (a prefix of the
// whole), no pass after the poll that said stop, and the rows it calls valid still exact.
Test(branch_hooks, a_hook_stops_at_once, .timeout = 300) {
    Loaded l;
    load(&l, "stories260K.f32.bin", "Once upon a time");
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.max_forks = 3, bp.lookahead = 3, bp.gate = 0.05;
    char *whole = run_printed(&l, &bp, 30);
    Sink full = {0};
    EmxBranchResult r;
    EmxState *st = new_state(&l);
    run_hooked(&l, st, &bp, 30, &full, &r);
    cr_assert_gt(r.n_forks, 1);
    cr_assert_gt(full.n_pieces, 3);
    emx_branch_result_free(&r);
    emx_state_free(st);
    for (int piece = 1; piece <= 3; piece++) {  // on_text says stop on its piece-th call
        Sink k = {.stop_at_piece = piece};
        st = new_state(&l);
        run_hooked(&l, st, &bp, 30, &k, &r);
        cr_expect(r.interrupted && r.stop == 0, "piece %d", piece);
        cr_expect_eq(k.n_pieces, piece, "text after the stop");
        cr_expect(strncmp(whole, k.text, k.len) == 0 && k.len < strlen(whole));
        cr_expect_str_eq(r.text, k.text);
        expect_valid_rows(&l, st, &r);
        emx_branch_result_free(&r);
        emx_state_free(st);
    }
    for (int poll = 1; poll <= full.polls; poll += 4) {  // should_stop from its poll-th call on
        Sink k = {.stop_at_poll = poll};
        st = new_state(&l);
        run_hooked(&l, st, &bp, 30, &k, &r);
        cr_expect(r.interrupted, "poll %d", poll);
        cr_expect_eq(k.polls, poll, "polled again after a stop");
        cr_expect_leq(r.n_branch_passes + r.n_answer_passes, poll - 1, "a pass after the stop (poll %d)", poll);
        cr_expect(strncmp(whole, r.text, strlen(r.text)) == 0);
        expect_valid_rows(&l, st, &r);
        emx_branch_result_free(&r);
        emx_state_free(st);
    }
    free(whole);
    unload(&l);
}

// emx_branch_check: the run's own messages, and the room for the answer at its boundary (a
// prompt of ctx - room tokens fits an empty answer; one more does not).
Test(branch_hooks, check_before_the_run, .timeout = 60) {
    Loaded l;
    load(&l, "stories260K.f32.bin", "Once");
    char err[512];
    int room = -1;
    EmxBranchParams bp = emx_branch_params_default();
    cr_expect_eq(emx_branch_check(l.tk, &bp, 10, CTX, &room, err, sizeof err), 0, "%s", err);
    cr_expect_eq(room, 0);
    bp.k = 20;
    cr_expect_eq(emx_branch_check(l.tk, &bp, 10, CTX, &room, err, sizeof err), -1);
    cr_expect(strstr(err, "--branch-k: 20 is out of range"), "%s", err);
    bp = emx_branch_params_default();
    char long_entry[65];
    memset(long_entry, 'x', 64);  // 64 bytes (the byte limit) but, on a 512-token vocabulary, over 16 tokens
    long_entry[64] = 0;
    char *one[] = {"Lily", long_entry};
    bp.alphabet = one, bp.n_alphabet = 2;
    cr_expect_eq(emx_branch_check(l.tk, &bp, 10, CTX, &room, err, sizeof err), -1);
    cr_expect(strstr(err, "--answer-alphabet: entry 'xxxx") && strstr(err, "tokens (at most 16)"), "%s", err);
    char *names[] = {"Lily", "Tom"};
    bp.alphabet = names;
    cr_expect_eq(emx_branch_check(l.tk, &bp, 10, CTX, &room, err, sizeof err), 0, "%s", err);
    cr_expect_geq(room, 2, "the cue and an entry: %d positions", room);
    int again = -1;
    cr_expect_eq(emx_branch_check(l.tk, &bp, CTX - room, CTX, &again, err, sizeof err), 0, "%s", err);
    cr_expect_eq(again, room);
    cr_expect_eq(emx_branch_check(l.tk, &bp, CTX - room + 1, CTX, &again, err, sizeof err), -1);
    cr_expect(strstr(err, "no room for the answer"), "%s", err);
    // the run itself refuses the same prompt with the same words
    int *ids = calloc(CTX - room + 1, sizeof *ids);
    for (int i = 0; i < CTX - room + 1; i++) ids[i] = l.ids[0];
    EmxState *st = new_state(&l);
    EmxGenerateOptions go = {.n_predict = 4};
    EmxBranchResult r;
    EmxGenerateStats stats;
    char run_err[512];
    cr_expect_eq(emx_branch_decode(st, l.tk, ids, CTX - room + 1, &bp, &go, &r, &stats, run_err, sizeof run_err), -1);
    cr_expect_str_eq(run_err, err);
    emx_state_free(st);
    free(ids);
    unload(&l);
}

// The tails handed back: a branch pass needs them reserved again, and a second run on the state
// gives the first one's text and paths.
Test(branch_hooks, release_the_tails, .timeout = 120) {
    Loaded l;
    load(&l, "qwen3-tiny.f32.bin", "Hello there");
    EmxBranchParams bp = emx_branch_params_default();
    bp.entropy_bits = 0, bp.k = 3, bp.gate = 0.5;
    EmxState *st = new_state(&l);
    EmxBranchResult a, b;
    Sink ka = {0}, kb = {0};
    run_hooked(&l, st, &bp, 5, &ka, &a);
    cr_assert_eq(a.n_forks, 1);
    emx_state_branches_release(st);
    float *logits = malloc((size_t)3 * l.m.cfg.vocab_size * sizeof(float));
    cr_expect_eq(emx_forward_branches(st, (int[]){1, 2, 3}, 3, l.n_ids, 0, logits), -1, "a pass without tails ran");
    emx_state_branches_release(st);  // twice: nothing to free
    run_hooked(&l, st, &bp, 5, &kb, &b);
    cr_expect_str_eq(ka.text, kb.text);
    cr_assert_eq(a.n_paths, b.n_paths);
    for (int i = 0; i < a.n_paths; i++) cr_expect(a.paths[i].prob == b.paths[i].prob && a.paths[i].end == b.paths[i].end);
    emx_branch_result_free(&a), emx_branch_result_free(&b);
    free(logits);
    emx_state_free(st);
    unload(&l);
}
