// generate_step.h — the generation loop as steps: one call, one token. The prefill, the choice,
// the streaming decoder and the stop rules live here once; emx_generate (generate.h) runs these
// steps to the end, printing or calling back, and the public step API (api/api_step.c) hands one
// token per call to a caller whose loop is its own (Python's iterator).
//
//   EmxGenStep g;
//   emx_gen_step_begin(&g, st, tk, prompt, n_prompt, sampler, &opt, NULL, NULL, err, errlen);
//   EmxGenToken t;
//   while ((rc = emx_gen_step_next(&g, &t, err, errlen)) == 1) use(t);   // rc 0: ended, -1: failed
//   emx_gen_step_end(&g);                                                  // g.stats: the run's
#ifndef ENTROPIX_GENERATE_STEP_H
#define ENTROPIX_GENERATE_STEP_H

#include <stddef.h>

#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

// One forward and one choice, the steps' own: feeds tokens[0..n) at pos.. and chooses the token for pos + n — on the
// state's device when the sampler describes itself (device_spec) and the backend chooses there
// (only the id comes back; ahead: the step that feeds it queued before it is read,
// emx_forward_decide_ahead), else here from the logits. Returns the id, -1 if the forward pass
// failed, -2 if the sampler found no token, -3 if it found none because the logits hold NaN or
// Inf (a broken model: see emx_state_nonfinite). sample_s: time of the host-side choice is added.
int emx_feed_and_choose(EmxState *st, EmxSampler *sm, const int *tokens, int n, int pos, int n_vocab, int ahead,
                        double *sample_s);
// The error of a step whose sampler found no token (emx_feed_and_choose's -2 or -3) at position
// pos, the step-th token of the generation.
void emx_no_token_error(EmxState *st, int id, int pos, int step, char *err, size_t errlen);

// One step's token, valid until the next call. index >= 0: the index-th token chosen (a stop
// token included: is_stop, no text). index -1: the decoder's final flush, bytes it held at the
// end (an incomplete UTF-8 character, as U+FFFD), with id and pos -1: the last record, if any.
typedef struct {
    int index, id, pos, is_stop;
    const char *text;  // what the streaming decoder released for this token (can be empty)
    size_t len;
} EmxGenToken;

// Called for each prompt token's text at the start (echo); returns 0, or -1 with err set.
typedef int (*EmxGenTextFn)(void *user, const char *text, size_t len, char *err, size_t errlen);

typedef struct {
    EmxState *st;
    const EmxTokenizer *tk;
    EmxSampler *sampler;
    const int *prompt;      // [n_prompt], the caller's: read by the first step, kept alive until then
    int n_prompt, n_cached, n_vocab, ctx;
    int n_predict, ignore_stop, steps_in_turn;
    EmxDecoder dec;
    char *buf;              // [cap] the text the decoder releases for one token
    size_t cap;
    int phase;              // internal (generate_step.c)
    int fed;                // the last token is still to be fed
    int id, pos;            // the token last chosen, the position it takes
    double t_decode0, first_choice_s;
    EmxGenerateStats stats; // so far; complete once a step returned 0
} EmxGenStep;

// Starts a generation of prompt[0..n_prompt) from position opt->n_cached of st's cache. Reads
// opt's n_predict, print_control, ignore_stop and n_cached (its output fields are emx_generate's).
// The prompt's tokens go through the decoder (its state, e.g. BOS for SentencePiece's leading
// space, must be the sequence's), their text to echo when set. Nothing runs on the model yet.
// Returns 0, or -1 with a one-line reason (empty prompt, n_cached outside it, longer than the
// context, out of memory, echo failing); g needs no end then.
int emx_gen_step_begin(EmxGenStep *g, EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                       EmxSampler *sampler, const EmxGenerateOptions *opt, EmxGenTextFn echo, void *echo_user,
                       char *err, size_t errlen);

// The next token: the first call runs the prefill and the first choice, each later one feeds the
// token before and chooses. Returns 1 with *tok, 0 when the generation has ended (g->stats.stop
// says why; the flush record, if any, came before), -1 with the reason in err (and again on
// every later call).
int emx_gen_step_next(EmxGenStep *g, EmxGenToken *tok, char *err, size_t errlen);

// Bytes the decoder still holds, for a caller that stops early (its own output failed, its
// callback stopped): *text, and their length (0: none). The generation is over after it.
size_t emx_gen_step_flush(EmxGenStep *g, const char **text);

void emx_gen_step_end(EmxGenStep *g);

#endif
