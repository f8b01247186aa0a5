// branch_decode.h — the branching decoder (./run --sampler branch; docs/branch.md): greedy
// decoding that forks where the model is unsure, runs the branches side by side as one batched
// pass per step over the shared prefix (runtime/pool/pool_forward.h "Branches"), and chooses among them by the
// model's own probabilities; optionally each finished branch is made to commit to an answer from
// an alphabet ("The answer is" + the most probable entry). It samples nothing: the same prompt
// and parameters give the same text, and with no fork it is exactly greedy decoding.
//
// It uses only emx_forward and pool_forward.h's branch entries (emx_state_branches_reserve,
// emx_forward_branches, emx_branch_commit, emx_state_kv_rows_read/write), so it runs on every
// backend that provides them (the CPU, CUDA); on another it says so (emx_pool_require).
#ifndef ENTROPIX_BRANCH_DECODE_H
#define ENTROPIX_BRANCH_DECODE_H

#include <stddef.h>

#include "runtime/branch/branch_options.h"
#include "runtime/forward.h"
#include "runtime/pool/pool_forward.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

// How a path ended.
enum emx_branch_path_end {
    EMX_BRANCH_END_STOP = 1,  // a stop token (its last token)
    EMX_BRANCH_END_BUDGET,    // the token budget (-n) or the context was used up
    EMX_BRANCH_END_CUT,       // its fork was decided after L tokens and another branch won
};

// One path of the generation: a branch of a fork, or the main line when the generation did not
// end inside a fork. Every token's numbers are of the untempered softmax of the logits it was
// chosen from.
typedef struct {
    int fork;            // the fork that made it (0, 1, ...); -1: the main line
    int branch;          // its index in that fork (0: the fork step's argmax); 0 for the main line
    int start;           // generated tokens before its first one: the output's first `start`
                         // tokens, then this path's, follow the prompt
    int end;             // enum emx_branch_path_end
    int output;          // 1: the generation's output is this path
    int *tokens;         // [n_tokens] from the fork point on, the fork token first and a stop
    int n_tokens;        // token last if one ended it; the main line: every generated token
    double *logp;        // [n_tokens] ln p of each token
    double *entropy;     // [n_tokens] entropy of the logits it was chosen from, bits
    double *margin;      // [n_tokens] p(top1) - p(top2) of those logits
    double prob;         // P(path): exp(Σ logp) normalised over the branches its fork's decision
                         // compared (the stop token left out under answer commitment); 1 for
                         // the main line; 0 for a path the decision left out (cut short by the
                         // budget while another branch stopped)
    double score;        // the rule's value for it (prob: prob; margin: the mean margin;
                         // entropy: the mean entropy); NAN when it was no candidate
    char *text;          // the generated text up to the fork, then this path (and, with
                         // commitment, the cue and its answer); control tokens as printed
    int answer;          // its committed answer (an alphabet index), -1 without commitment
    double *answer_q;    // [n_alphabet] Π p(entry's tokens | path, cue) · p(end), raw
    double *answer_p;    // [n_alphabet] answer_q normalised over the alphabet
    double answer_margin;// mean p(top1) - p(top2) over its answer's tokens
} EmxBranchPath;

typedef struct {
    char *text;          // the output (what was printed, without an echoed prompt)
    int *tokens;         // [n_tokens] the output's ids: the generated ones (a final stop token
    int n_tokens;        // included when there is no commitment), then the cue's and answer's
    EmxBranchPath *paths;// every path, in the order they were made (forks in order, branches in
    int n_paths;         // order), the main line last when it is one
    int n_forks;         // forks made
    int n_branches;      // branches over all forks
    int n_branch_passes; // batched branch passes (one per step of a fork)
    int n_answer_passes; // passes that scored alphabet entries (cue prefills not counted)
    int answer;          // the output's committed answer (alphabet index), -1 without commitment
    double answer_score; // its score: Σ P(path)·p(answer | path) (prob), else its own p
    int stop;            // enum emx_stop_reason; 0 when a hook stopped the run
    int n_valid;         // the output's first n_valid tokens are what st's cache holds after the
                         // prompt's rows, as feeding them in turn leaves it (a prompt cache may
                         // keep prompt + these); the rows past them hold a branch's, an answer's
                         // or stale ones. The output path's `start` when the run ended in a fork;
                         // else every main-line token but the last (it is not fed)
    int interrupted;     // 1: a hook stopped the run; text, tokens and paths are what was made
                         // before (a fork being run, or a decision being made, is not recorded)
} EmxBranchResult;

// What a caller hooks into a run (emx_branch_decode_hooked). Each may be NULL.
typedef struct {
    // The output's text as it becomes final, in order: each main-line token's as it is chosen, a
    // fork's winner at once when the fork is decided, then the cue and the answer; what the
    // decoder would print to opt->out (which the hooked run leaves alone). Non-zero: stop.
    int (*on_text)(void *user, const char *text, size_t len);
    // Polled before every forward pass (a main-line step, a step of a fork's branches, an answer
    // pass). Non-zero: stop.
    int (*should_stop)(void *user);
    void *user;
} EmxBranchHooks;

// Generates from prompt[0..n_prompt) on st. opt: as emx_generate reads n_predict, out, out_name,
// echo_prompt, print_control and n_cached (on_token, ids_out and ignore_stop must be unset).
// The cue and the answer tokens of a commitment come after the budget (-n) and need room in the
// context; the budget shrinks to leave it. stats: as emx_generate fills it (n_generated: the
// output's tokens). Returns 0 (res filled: free with emx_branch_result_free), or -1 with a
// one-line reason (a parameter out of range, an alphabet entry too long in tokens, no room, the
// forward pass refusing, a failed write).
int emx_branch_decode(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                      const EmxBranchParams *bp, const EmxGenerateOptions *opt, EmxBranchResult *res,
                      EmxGenerateStats *stats, char *err, size_t errlen);
// emx_branch_decode with hooks (NULL: none): the text goes to hooks->on_text when it is set
// (opt->out then unused), and a hook's stop ends the run within one forward pass with 0 and
// res->interrupted set (res holds what was made: free it as always).
int emx_branch_decode_hooked(EmxState *st, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                             const EmxBranchParams *bp, const EmxGenerateOptions *opt, const EmxBranchHooks *hooks,
                             EmxBranchResult *res, EmxGenerateStats *stats, char *err, size_t errlen);
void emx_branch_result_free(EmxBranchResult *res);

// What a run of bp over a prompt of n_prompt tokens in a context of ctx would refuse before it
// starts, from the tokenizer alone: the parameters' ranges, an alphabet entry or cue with no
// tokens or an entry over EMX_BRANCH_MAX_ENTRY_TOKENS, no room for the answer. A server checks
// a request with it before it answers 200. *room: positions a commitment needs after the text
// (the cue and the longest entry; 0 without an alphabet). 0, or -1 with the run's own message.
int emx_branch_check(const EmxTokenizer *tk, const EmxBranchParams *bp, int n_prompt, int ctx, int *room, char *err,
                     size_t errlen);

// The stats line ./run prints on stderr:
//   branch: 1 fork (at most 1), 5 branches, 12 branch passes, 3 answer passes; output: fork 0 branch 2 (prob 0.412); answer 'B' (0.833)
void emx_branch_print_stats(FILE *f, const EmxBranchParams *bp, const EmxBranchResult *res);

#endif
