// critic.h — the agent pool's in-process critic (docs/agents.md, "The critic").
//
// Every K committed tokens the generation loop hands the critic the last W tokens of text. The
// critic asks its model
//     Text: <text>
//     Question: Is this text coherent and not nonsense? Reply GOOD or BAD.
// and reads the verdict from the NEXT-TOKEN LOGITS of the two answers (no sampling):
//   chat model (cfg.chat_template != EMX_CHAT_NONE): the question is the user message of the
//     model's chat template with the generation prompt (Qwen3: enable_thinking=False, so the
//     answer comes right after the empty <think></think> block); answers "GOOD" and "BAD".
//   base model (no template): the raw question + "\nAnswer:"; answers " GOOD" and " BAD".
// Each answer's candidate token is the FIRST token of its encoding (SPM tokenizers that add a
// dummy-prefix space encode "GOOD" instead of " GOOD": the dummy prefix is that space).
//
// Prompt ids = head + body + tail: head and tail are the template's text around the user
// message, tokenized with special tokens parsed (<|im_start|>, <|eot_id|>, the template's BOS);
// body = "Text: " + text + "\n" + question is tokenized with NO special-token parsing, so a
// generated text that spells "<|im_end|>" cannot close the user turn early (it stays plain
// text). For ordinary text the ids equal emx_prompt_ids(chat = 1) of the same message (tested):
// the user message starts after a newline and ends at a special token, both pre-token bounds.
//
// Verdict: lp_good, lp_bad = log-softmax at the two candidate ids (natural log). BAD iff
// lp_bad - lp_good > margin, where the difference is taken as logit_bad - logit_good (the same
// number without the rounding of two log-sum-exp subtractions, so the margin moves the boundary
// exactly). A tie (difference == margin) is GOOD: the critic needs evidence to roll back.
//
// The critic owns an EmxState (its own KV cache and buffers) over a model it does not copy:
// the generation's own `const EmxModel *` (shared weights) or another model file
// (emx_critic_open). It never touches the generation's state. Between judgments it keeps the
// ids in its KV cache and runs only the suffix after the longest common prefix with the
// previous prompt (template head and "Text: " are the same every time; a sliding window of text
// often shares more); emx_forward at an earlier pos overwrites the cache, so nothing is undone.
// At least one token is always fed (the logits come from it).
#ifndef ENTROPIX_CRITIC_H
#define ENTROPIX_CRITIC_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/model.h"
#include "sampler/metrics.h"
#include "tokenizer/tokenizer.h"

#define EMX_CRITIC_QUESTION "Is this text coherent and not nonsense? Reply GOOD or BAD."

typedef struct {
    float margin;          // BAD iff logp_bad - logp_good > margin (default 0; finite)
    int ctx;               // critic KV cache positions; <= 0: min(max_seq_len, 2048)
    int n_threads;         // <= 0: all cores
    const char *question;  // NULL: EMX_CRITIC_QUESTION (the text after "Question: ")
    const char *device;    // where the critic's state runs (EmxStateOptions.device): NULL or
                           // "cpu", "cuda:N" (the agent pool's rank 0 GPU), "auto"
} EmxCriticOptions;

typedef struct {
    int bad;               // 1: BAD, 0: GOOD
    double logp_good;      // natural log-probabilities of the candidate tokens under softmax of
    double logp_bad;       // all logits; -INFINITY for a candidate whose logit is not finite
    double diff;           // logit_bad - logit_good (+-INFINITY when one side is -inf)
    // Filled by emx_critic_judge (0 from emx_critic_verdict alone):
    int n_prompt;          // tokens of the judged prompt
    int n_fed;             // of these, run through the forward pass (the rest reused the cache)
    size_t dropped_bytes;  // bytes cut from the FRONT of the text to fit the context (0: none)
    double seconds;        // wall time of the judgment (prompt + forward + verdict)
} EmxVerdict;

// The verdict rule on one logits row f32 [n_vocab] (pure: stubbed logits test it). Non-finite
// logits (NaN, +-inf) count as -inf everywhere: they get probability 0 and are left out of the
// softmax sum (max-subtracted, summed in double). Fills bad, logp_good, logp_bad, diff and zeroes
// the judge-only fields. Returns 0, or -1 when no verdict exists: ids out of range, n_vocab <= 0,
// margin NaN, or both candidates' logits non-finite (emx_critic_judge words the reason).
int emx_critic_verdict(const float *logits, int n_vocab, int good_id, int bad_id, float margin,
                       EmxVerdict *v);

// The same rule on the two candidates' logits and the row's max and sum (sampler/metrics.h's
// EmxLogitPair, a = GOOD, b = BAD), which is all a backend brings back (emx_forward_pair):
// emx_critic_verdict is emx_logit_pair then this. -1 as there (margin NaN, both non-finite).
int emx_critic_verdict_pair(const EmxLogitPair *p, float margin, EmxVerdict *v);

typedef struct EmxCritic EmxCritic;

// A critic over a model and tokenizer the caller keeps open for its lifetime (the generation's
// own, for shared weights). Fails with a one-line reason (both answers starting with the same
// token, with both encodings; a context too small; state allocation).
EmxCritic *emx_critic_new(const EmxModel *m, const EmxTokenizer *tk, const EmxCriticOptions *opt,
                          char *err, size_t errlen);
// A critic over another model file (--critic-model): opens it, with its own tokenizer, and owns
// both (closed by emx_critic_free).
EmxCritic *emx_critic_open(const char *path, const EmxCriticOptions *opt, char *err, size_t errlen);
void emx_critic_free(EmxCritic *c);

// Judges text[0..len) (UTF-8, NULs allowed; NULL with len 0 is the empty text). When the prompt
// does not fit the critic's context, whole UTF-8 characters are dropped from the front of the
// text until it does (v->dropped_bytes says how many bytes). Returns 0, or -1 with a one-line
// reason (the prompt frame alone does not fit, the forward pass refusing, a verdict error).
int emx_critic_judge(EmxCritic *c, const char *text, size_t len, EmxVerdict *v, char *err,
                     size_t errlen);

// The prompt ids emx_critic_judge would run for this text (after front truncation), malloc'd
// [*n_ids] (caller frees); *dropped_bytes as in EmxVerdict. For tests and logs. Returns 0 or -1.
int emx_critic_prompt_ids(const EmxCritic *c, const char *text, size_t len, int **ids, int *n_ids,
                          size_t *dropped_bytes, char *err, size_t errlen);

// The answer tokens the verdict compares (for the log).
void emx_critic_candidates(const EmxCritic *c, int *good_id, int *bad_id);
const EmxTokenizer *emx_critic_tokenizer(const EmxCritic *c);
int emx_critic_ctx(const EmxCritic *c);
// Tokens run through the critic's forward pass since it was created (KV reuse shows here).
uint64_t emx_critic_tokens_fed(const EmxCritic *c);
// The critic's state and the model it runs: a generation on the same model and device may
// share the state's uploaded weights (EmxStateOptions.share_weights) while the critic lives.
typedef struct EmxState EmxState;
const EmxState *emx_critic_state(const EmxCritic *c);
const EmxModel *emx_critic_model(const EmxCritic *c);

#endif
