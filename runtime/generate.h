// generate.h — the single-stream generation loop: prompt -> token ids -> one batched prefill ->
// decode loop (choose a token, stream its text, feed it back) until a stop token, the token
// budget or the end of the context.
//
// How a token is chosen is behind EmxSampler, a one-function interface, so the same loop runs
// the basic samplers (below), the entropix strategy switch and the agent pool later: they get
// the state (for emx_attention_scores) and the logits, and return a token id.
#ifndef ENTROPIX_GENERATE_H
#define ENTROPIX_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/sample.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

// ---------------------------------------------------------------------------------------------
// The decision interface.

typedef struct EmxSampler EmxSampler;
struct EmxSampler {
    // Chooses the next token from logits f32 [n_vocab] of the last position fed to `st`.
    // `pos` is the position the chosen token will occupy (prompt length + tokens generated so
    // far): the RNG counter, so a replay from the same position draws the same numbers.
    // Returns a token id in [0, n_vocab), or -1 if no token can be chosen.
    int (*choose)(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos);
    // Optional (NULL: none). The sampler as a backend can run it on its side (forward.h
    // emx_forward_decide: on a GPU the choice runs in the decode step's graph and only the id
    // comes back), and the result handed back for the sampler's own records (last decision,
    // counts). The loop asks for the spec each step; it must stay the same object while the
    // sampler is unchanged.
    const EmxDecideSpec *(*device_spec)(EmxSampler *self);
    void (*device_result)(EmxSampler *self, const EmxDecideResult *r);
};

// The basic samplers of sample.h as an EmxSampler: u = Philox(seed, pos, lane 0).
typedef struct {
    EmxSampler base;          // first member: (EmxSampler *)&basic works
    EmxDecideSpec spec;       // the same sampler for a backend that chooses on its side
    EmxSamplerParams params;
    uint64_t seed;
    EmxCandidate *work;       // [n_vocab] scratch
    int n_vocab;
} EmxBasicSampler;

int emx_basic_sampler_init(EmxBasicSampler *bs, const EmxSamplerParams *params, uint64_t seed,
                           int n_vocab, char *err, size_t errlen);
void emx_basic_sampler_free(EmxBasicSampler *bs);

// ---------------------------------------------------------------------------------------------
// Prompt -> ids.

typedef struct {
    const char *text;        // the prompt (user message in chat mode); NULL = ""
    size_t len;              // bytes of text
    int chat;                // 1: render through the model's chat template (cfg.chat_template)
    const char *system;      // chat: system message or NULL
    const EmxChatMessage *history; // chat: the turns before text (user, assistant, ...), after
    int n_history;                 // the system message; NULL/0: text is the first message
    int enable_thinking;     // chat, Qwen3: 0 renders enable_thinking=False
    // Called once with a one-line warning when the vocabulary has no token for some prompt
    // bytes (they are left out, see EmxEncodeDrops); NULL: not told.
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
} EmxPromptSpec;

// Token ids of the prompt. Raw: the text with special-token texts parsed and BOS added if the
// tokenizer asks for it; an empty text becomes [BOS] (base models generate from BOS, as
// llama2.c does). Chat: the rendered conversation, parsed the same way, with no BOS of our
// own when the template carries one; a NUL byte in the text is refused there (a message is a C
// string to the renderer). *ids is malloc'd (caller frees). Returns 0, or -1 with
// a one-line reason ("empty prompt and the model has no BOS token to start from").
int emx_prompt_ids(const EmxModel *m, const EmxTokenizer *tk, const EmxPromptSpec *ps, int **ids,
                   int *n_ids, char *err, size_t errlen);

// ---------------------------------------------------------------------------------------------
// The loop.

enum emx_stop_reason {
    EMX_STOP_TOKEN = 1,     // a stop token (eos, <|im_end|>, <|eot_id|>) was chosen
    EMX_STOP_N_PREDICT,     // n_predict tokens were generated
    EMX_STOP_CONTEXT,       // the KV cache is full
};

// Called once per chosen token, right after the sampler chose it (so a sampler's "last step"
// fields describe this token). text[0..len) is what the streaming decoder released for it: it
// can be empty (bytes held until a UTF-8 character is complete, control tokens, the stop
// token) or hold earlier tokens' held bytes too. When set, the callback prints the text (to
// colour it, say) and `out` receives only the echoed prompt and the decoder's final flush.
// Returns 0 to go on; anything else stops the loop (emx_generate returns -1: the callback's
// owner knows why, e.g. its output failed).
typedef int (*EmxTokenFn)(void *user, int index, int id, int pos, const char *text, size_t len,
                          int is_stop);

typedef struct {
    int n_predict;       // tokens to generate; < 0: until a stop token or the context is full
    FILE *out;           // detokenised text, flushed per token; NULL: nothing printed
    const char *out_name;// for the message when a write to out fails ("stdout"); NULL: "the output"
    int echo_prompt;     // print the prompt's text before the generated text
    int print_control;   // print control tokens' text (default 0: skipped, as HF does)
    int ignore_stop;     // benchmarks: a stop token is fed back like any other (n_predict >= 0)
    int steps_in_turn;   // 1: each decode step's token is read before the next step is queued;
                         // 0: where the device chooses, the next step is queued first
                         // (emx_forward_decide_ahead), so the GPU does not wait for the host.
                         // The text is the same; for measuring what queuing ahead saves.
    int *ids_out;        // optional: generated ids (stop token included) up to ids_cap
    int ids_cap;
    EmxTokenFn on_token; // optional, see above
    void *on_token_user;
    // Prompt positions 0..n_cached-1 are already in st's cache, from an earlier forward of the
    // same prompt[0..n_cached) (e.g. prompt[0..n_prompt-1) run once, then several generations
    // from it): only prompt[n_cached..n_prompt) is run. 0..n_prompt-1; 0: the whole prompt. The
    // text is bitwise the same as with 0, since a row's result does not depend on its batch
    // (runtime/cpu/cpu_matmul.h) and the cached rows are those a full prefill writes.
    int n_cached;
} EmxGenerateOptions;

typedef struct {
    int n_prompt;        // tokens prefilled (n_prompt - opt->n_cached: what ran)
    int n_generated;     // tokens chosen (a final stop token included)
    double prefill_s;    // one batched forward over the prompt's uncached tokens
    double decode_s;     // from the end of the prefill's forward to the last token: the
                         // n_generated choices, printing and the n_generated - 1 single-token
                         // forwards
    double sample_s;     // the part of decode_s spent in the sampler's choose()
    int stop;            // enum emx_stop_reason
} EmxGenerateStats;

// Runs the prompt from position opt->n_cached of `st` (0: from the start), then generates. A stop token ends generation and is
// not printed. Returns 0, or -1 with a one-line reason (prompt longer than the context, the
// forward pass refusing, the sampler finding no token, a failed write to out, the callback
// stopping it).
int emx_generate(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                 EmxSampler *sampler, const EmxGenerateOptions *opt, EmxGenerateStats *stats,
                 char *err, size_t errlen);

// Prints the stats block ./run writes at the end (to stderr there):
//   prompt: 12 tokens, prefill 35.20 ms (340.91 tok/s)
//   generated: 200 tokens, decode 812.00 ms (246.31 tok/s, 4.06 ms/token)
//   sampler: entropix, 0.05 ms/token (1.2% of decode)
// (sampler: the name of the one that chose the tokens).
void emx_generate_print_stats(FILE *f, const EmxGenerateStats *stats, const char *sampler);

#endif
