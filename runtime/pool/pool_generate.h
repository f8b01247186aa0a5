// pool_generate.h — the second decoding mode: a pool of sampling agents proposes every next
// token, the lowest entropy wins, and a critic reading the text rolls back stretches it judges
// incoherent (docs/agents.md; the proposal rule is sampler/agents.h).
//
// A round, on every worker (SPMD: each worker owns a model replica and a slice of the agents):
//   1. each agent proposes a token from the shared next-token logits (its temperature, top-k);
//   2. lookahead L > 1: each agent extends its own branch to L tokens; the branches of a worker
//      run as one batched pass per step over the shared prefix (forward.h "Branches");
//   3. the records are all-gathered; the branch of lowest mean entropy wins (ties: lower agent);
//   4. its tokens are committed: its KV rows move from the worker that ran it into every
//      replica (comm.h broadcast), and one forward of its last token gives the next logits.
// Rank 0 prints, logs and, every `check_every` committed tokens, asks the critic about the
// last `critic_window` tokens of text; on BAD every replica rolls back to the kept text (a
// forward at an earlier position: nothing else to undo). L = 1 is the original design: one
// forward per token, shared by every agent.
//
// Determinism: agent a draws from Philox(seed, counter, lane a) with counter = position of the
// token | (rollback epoch << 32), and every worker computes bitwise the same logits (a row's
// result does not depend on its batch or the thread count), so the text for a seed does not
// depend on the number of workers. After a rollback the epoch changes (fresh draws) and the
// first rejected token is banned at its position, so even a greedy agent cannot repeat it.
//
// Devices: on the CPU the workers are threads with a replica each (weights shared, mmapped
// once) and talk through comm.h's threads group. With cuda_devices, worker r's replica (its
// EmxState: uploaded weights, KV cache) lives on GPU cuda_devices[r], its calls are made from
// its own thread, and the workers are the ranks of an NCCL group (runtime/cuda/comm_nccl.h) whose
// host-buffer handles move the records and KV rows (host memory on both ends) through the GPUs.
// The critic runs on rank 0's thread; a critic over the same model on rank 0's device lends its
// uploaded weights to worker 0 (EmxStateOptions.share_weights: one upload for both; the critic
// outlives the pool). The text is the CPU's for the same seed as long as the backends' logits
// agree bitwise (f32 weights: see tests/test_pool_cuda.c).
//
// Output that a rollback could still take back is held: text is printed once a verdict has
// accepted it (with no critic: at once). Rollbacks never go below the last accepted point, and
// after max_rollbacks consecutive rollbacks the next BAD is accepted, so the text always grows.
#ifndef ENTROPIX_POOL_GENERATE_H
#define ENTROPIX_POOL_GENERATE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "sampler/agents.h"
#include "runtime/pool/critic.h"
#include "runtime/model.h"
#include "runtime/token_log.h"
#include "tokenizer/tokenizer.h"

#define EMX_POOL_MAX_AGENTS 64
#define EMX_POOL_MAX_LOOKAHEAD 16

// --agent-configs "T:k,T:k,..." -> agents[] (at most max). Returns the count, or -1 with a
// one-line reason naming the bad entry.
int emx_pool_parse_configs(const char *spec, EmxAgentParams *agents, int max, char *err, size_t errlen);

// The default spread of n agents: temperatures 0.3 .. 1.5 evenly, top-k 5 .. 100 geometrically
// (one agent: T 0.7, k 40). Conservative to adventurous, so entropy has something to choose.
void emx_pool_default_configs(EmxAgentParams *agents, int n);

// What the pool tells an observer (EmxPoolOptions.on_event, e.g. the --report writer), on rank 0,
// in the order it happens. Pointers are valid during the call only.
enum emx_pool_event_kind {
    EMX_POOL_EVENT_ROUND = 1,  // a round committed tokens[0..n_tokens) at pos..
    EMX_POOL_EVENT_VERDICT,    // the critic judged the text up to pos (exclusive)
    EMX_POOL_EVENT_ROLLBACK,   // positions pos.. were dropped (n_dropped tokens); ban is banned at pos
};
#define EMX_POOL_EVENT_TOP 5  // logprobs kept per committed token when on_event is set

typedef struct {
    int kind;                      // enum emx_pool_event_kind
    int round;                     // rounds so far (1-based: the round this event belongs to)
    int pos;                       // see the kinds
    // ROUND
    int winner;                    // the winning agent
    int n_agents;
    const double *agent_score;     // [n_agents] each agent's mean proposal entropy (bits); NAN: no token
    const int *agent_token;        // [n_agents] each agent's first proposed token; -1: none
    int n_tokens;
    const int *tokens;             // [n_tokens] the winner's tokens, now committed
    const double *entropy;         // [n_tokens] their proposal entropies (bits)
    const double *logits_entropy;  // [n_tokens] H and V of the logits each was drawn from
    const double *logits_varentropy;
    const EmxLogprobs *logprobs;   // [n_tokens] their top logprobs and own logprob
    // VERDICT
    int bad, accepted;             // accepted: a BAD let through (--max-rollbacks) or GOOD
    double logp_good, logp_bad;
    // ROLLBACK
    int n_dropped, ban;
} EmxPoolEvent;

typedef void (*EmxPoolEventFn)(void *user, const EmxPoolEvent *ev);

typedef struct {
    const EmxAgentParams *agents;  // [n_agents]
    int n_agents;                  // 1 .. EMX_POOL_MAX_AGENTS
    int lookahead;                 // L: tokens per branch before the choice, 1 .. EMX_POOL_MAX_LOOKAHEAD
    int n_workers;                 // workers (threads with a replica each), 1 .. n_agents
    const int *cuda_devices;       // [n_workers] the GPU of each worker (distinct); NULL: the CPU
    int n_threads;                 // OpenMP threads of each worker's forward pass (<= 0: all cores / n_workers)
    int ctx;                       // KV positions per replica (<= 0: min(max_seq_len, 4096))
    EmxKvType cache_type;       // the replicas' KV caches (EmxStateOptions.cache_type)
    uint64_t seed;
    int n_predict;                 // committed tokens at most (< 0: until a stop token or the context is full)
    // critic (NULL: none)
    EmxCritic *critic;
    int check_every;               // K: judge after every K committed tokens (<= 0: never)
    int rollback;                  // R: tokens dropped on BAD
    int max_rollbacks;             // consecutive BAD verdicts rolled back before one is accepted
                                   // (with R <= K they all fall at the same position)
    int critic_window;             // W: tokens of generated text the critic reads
    // output
    FILE *out;                     // the text, as it becomes final (NULL: nothing)
    FILE *log;                     // generation log (NULL: none), flushed line by line
    FILE *metrics;                 // --metrics JSON lines, one per committed token (NULL: none)
    volatile sig_atomic_t *interrupted;  // set asynchronously (SIGINT): stop after the current round
    int ignore_stop;               // benchmarks: stop tokens are committed like any other
    int want_logprobs;             // --logprobs: --metrics lines get top_logprobs and logprob
    int n_logprobs;                // top_logprobs entries (0 .. EMX_MAX_LOGPROBS)
    EmxPoolEventFn on_event;       // optional observer (rank 0's thread), see EmxPoolEvent
    void *on_event_user;
} EmxPoolOptions;

enum { EMX_STOP_INTERRUPTED = 16 };  // beside generate.h's emx_stop_reason

typedef struct {
    int n_prompt;
    int n_generated;         // committed tokens in the final text (a final stop token included)
    int n_rounds;            // choices made (a round commits up to L tokens)
    int n_forward_tokens;    // tokens run by single-stream forwards (prefill excluded), per replica
    int n_fused_rounds;      // of them, run with the round's proposals in one device call (a GPU's
                             // captured graph: emx_forward_propose)
    int n_branch_passes;     // batched branch passes, per replica
    int n_device_branch_passes;  // of them, with the proposals made on the device beside the logits
    int n_graph_branch_passes;   // of those, fed on the device inside a round's captured graph
                                 // (emx_forward_lookahead_propose)
    int n_checks, n_bad, n_rollbacks, n_rolled_back_tokens, n_bad_accepted;
    double prefill_s, decode_s, critic_s;  // critic_s is part of decode_s
    int stop;                // enum emx_stop_reason or EMX_STOP_INTERRUPTED
    int out_errno, log_errno, metrics_errno;  // a write to out / log / metrics failed (0: none):
                                              // the run stopped there and returned -1
} EmxPoolStats;

// Runs prompt[0..n_prompt) on every replica, then generates. *ids_out (optional, malloc'd)
// receives the final generated ids. Returns 0 (also when interrupted), or -1 with a one-line
// reason.
int emx_pool_generate(const EmxModel *m, const EmxTokenizer *tk, const int *prompt, int n_prompt,
                      const EmxPoolOptions *opt, EmxPoolStats *stats, int **ids_out, int *n_ids_out, char *err,
                      size_t errlen);

// --devices "cpu" -> 0; "cuda:0,cuda:1,..." -> the GPU numbers in devices[] (at most max) and
// their count. Returns -1 with a one-line reason: not cpu or cuda:N entries, a device listed
// twice, more than max.
int emx_pool_parse_devices(const char *list, int *devices, int max, char *err, size_t errlen);

// The GPUs the pool can use: -1 when this build cannot run it on GPUs (it lacks the CUDA
// backend or the NCCL group: the CPU build), else the machine's GPU count (0: none).
int emx_pool_gpu_count(void);

// The stats block ./run prints at the end.
void emx_pool_print_stats(FILE *f, const EmxPoolStats *s, int lookahead);

#endif
