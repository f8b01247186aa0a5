// forward.h — the forward pass: tokens in, logits and attention scores out.
//
// One interface, two backends: the CPU (runtime/cpu/forward_cpu.c), the reference every other
// backend is tested against, and CUDA (runtime/cuda/forward_cuda.c: weights, activations and KV cache
// on one GPU; builds without it refuse "cuda:N"). runtime/forward.c picks the backend when a
// state is made and forwards every call (runtime/forward_backend.h). An EmxState is one
// sequence: activations, its KV cache and scratch. Many states may share one EmxModel.
#ifndef ENTROPIX_FORWARD_H
#define ENTROPIX_FORWARD_H

#include "sampler/agents.h"
#include "sampler/entropix.h"
#include "sampler/metrics.h"
#include "runtime/model.h"
#include "sampler/sample.h"

typedef struct EmxState EmxState;

// The KV cache's element type. f16 halves the bytes the attention reads per key and the cache's
// memory; keys and values are rounded to f16 (round to nearest even) as they are written, and
// read back exactly, so the only change is that one rounding. Everything else stays f32.
typedef enum { EMX_CACHE_AUTO = 0, EMX_CACHE_F32, EMX_CACHE_F16 } EmxCacheType;
// "auto", "f32", "f16"
const char *emx_cache_type_name(EmxCacheType t);
// Parses one of those names; 0, or -1 for anything else.
int emx_cache_type_parse(const char *text, EmxCacheType *out);
// What AUTO means for model m on a backend: f16 on a GPU when the weights are 16-bit or
// quantised (on an H200 the f16 cache decodes and prefills no slower than f32 at depth 4096, in
// half the memory: docs/cuda.md), f32 otherwise: an f32 model keeps f32 throughout, and the CPU,
// the reference every backend is tested against, keeps the exact cache. F32 and F16 stay as is.
EmxCacheType emx_cache_type_resolve(EmxCacheType t, const EmxModel *m, int on_gpu);

typedef struct {
    int n_threads;     // CPU: <= 0: all cores
    int ctx;           // KV cache positions (<= cfg.max_seq_len; <= 0: min(max_seq_len, 4096))
    const char *device;// NULL, "" or "cpu": the CPU; "cuda:N": GPU N; "auto": GPU 0 when this
                       // build has the CUDA backend and the machine a GPU, else the CPU
    const EmxState *share_weights; // CUDA: a state of the same model on the same device whose
                       // uploaded weights this one uses instead of uploading its own (a critic,
                       // a second sequence); it must outlive this state. NULL: upload.
    int no_graphs;     // CUDA: decode steps as direct launches, not a replayed CUDA graph
    EmxCacheType cache_type; // the KV cache's elements; AUTO (0): emx_cache_type_resolve's choice
} EmxStateOptions;

// Returns NULL with a one-line reason: bad options, a device this build or machine lacks, a
// model that does not fit the device (said before allocating), out of memory with the amount.
EmxState *emx_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);
void emx_state_free(EmxState *s);
// Whether a state asked for on device (as emx_state_new reads it) runs on the CPU.
int emx_device_is_cpu(const char *device);
// How to load a model for states on device (as emx_state_new reads it: "cpu", "cuda:N", "auto"):
// mapped where the weights go to a GPU (a host copy would only double the memory) or mmap is
// set (--mmap), else EMX_LOAD_AUTO.
EmxLoad emx_load_for_device(const char *device, int mmap);
int emx_state_ctx(const EmxState *s);
// "cpu" or "cuda:N".
const char *emx_state_device(const EmxState *s);
// Why the latest call that failed did (a bad argument; on a GPU, the CUDA call and its error).
const char *emx_state_error(const EmxState *s);
// Where the values of the latest forward call first stopped being finite (NaN or Inf): "the
// embedding", "layer 3's output", "the classifier" (a NaN or Inf weight there, or an overflow);
// NULL when they did not, or the backend does not check (CUDA). The CPU checks the residual
// stream after each layer: a scan of [n][dim] per layer, nothing next to the matmuls.
const char *emx_state_nonfinite(const EmxState *s);
// What a benchmark reports about where a state runs.
typedef struct {
    const char *device;          // "cpu", "cuda:0"
    char device_desc[128];       // the GPU's name; the CPU's SIMD kernels
    double peak_gbps;            // GPU: peak memory bandwidth from the device's properties; CPU: 0
    int uses_graphs;             // GPU: decode steps replay a CUDA graph
    int decode_graph_nodes;      // GPU: nodes of that graph (kernel launches and copies: the
                                 // launches one decode step costs); 0 before the first step
    uint64_t weight_bytes_on_device; // GPU: bytes of weights uploaded (shared states count them once)
    EmxCacheType cache_type;     // the KV cache's elements (F32 or F16, never AUTO)
    int vocab;                   // the model's vocabulary: a row of logits
    int pair_graphs;             // GPU: emx_forward_pair's captured passes (one per row count)
} EmxStateInfo;
void emx_state_info(const EmxState *s, EmxStateInfo *info);

// 1 when this build has the CUDA backend and sees at least one GPU.
int emx_cuda_available(void);

// The backends this binary was linked with, for --version: "cpu", or "cpu, cuda sm_80 sm_90"
// when it has the CUDA backend (the GPU architectures its kernels were compiled for).
const char *emx_backend_names(void);

// Runs tokens[0..n) at positions pos..pos+n-1 as one batched pass (prefill when n > 1) and
// returns the logits of the last position, f32 [vocab]. Positions >= pos in the KV cache are
// overwritten, so calling again with an earlier pos is a rollback (nothing else to undo).
// Returns NULL if pos + n > ctx or a token id is out of range.
const float *emx_forward(EmxState *s, const int *tokens, int n, int pos);

// Attention scores of the last position of the latest emx_forward: the scaled pre-softmax
// scores q·k/sqrt(head_dim) for every layer and query head over keys 0..last_pos (inclusive,
// the token's own key included). Layout [n_layers][n_heads][ctx]; entries past last_pos are
// unspecified. Written by the attention itself, so reading them costs nothing extra.
const float *emx_attention_scores(const EmxState *s, int *last_pos);

// The KV cache itself, for tests and tools: key and value f32 [n_layers][ctx][kv_dim] each. An
// f16 cache's values widened exactly, and a CPU cache whose rows are padded (forward_cpu.c), come
// as copies the state owns, remade at each call: writes to them do not reach the cache (so on a
// GPU); emx_state_kv_rows_write does
// (kv_dim = n_kv_heads * head_dim). Positions past the last one fed hold stale values from an
// earlier, longer sequence (or zeros), which no computation for an earlier position may read:
// a test writes garbage there to prove it.
void emx_state_kv_cache(EmxState *s, float **key, float **value, int *kv_dim);

// Like emx_forward, but writes the logits of every position: logits [n][vocab] (caller's
// buffer). For perplexity and scoring; costs n classifier products instead of one. The state's
// own logits and attention scores afterwards are those of the last position. Returns 0, or -1
// on the same conditions under which emx_forward returns NULL.
int emx_forward_all_logits(EmxState *s, const int *tokens, int n, int pos, float *logits);

// Runs tokens[0..n) at pos.. as emx_forward does, but brings back only the logits of two ids
// of the last position and the row's max and sum (sampler/metrics.h's EmxLogitPair): all the
// agent pool's critic reads of a judgment (runtime/pool/critic.h). On a GPU the row never leaves
// the device and a short pass (n <= 32) is one captured graph per row count, replayed at any
// position; elsewhere it is emx_forward then emx_logit_pair. The state's attention scores and KV
// cache afterwards are emx_forward's; its logits are not kept (emx_state_propose refuses until
// the next emx_forward). Returns 0, or -1 on emx_forward's conditions (emx_state_error says why)
// or an id outside the vocabulary (checked before anything runs; a caller's precondition, which
// only a GPU's emx_state_error words).
int emx_forward_pair(EmxState *s, const int *tokens, int n, int pos, int id_a, int id_b, EmxLogitPair *out);

// ---------------------------------------------------------------------------------------------
// Several sequences in one step (continuous batching: a server's slots decoding together).
// Row i is states[i]'s token tokens[i] at position pos[i]: one batched pass over the n rows, each
// weight read once for all of them. Afterwards each state's logits (logits[i] points at them),
// attention scores and KV cache are bitwise what emx_forward(states[i], &tokens[i], 1, pos[i])
// would have left: a matmul row's result does not depend on its batch (runtime/cpu/cpu_matmul.h;
// CUDA: kernels/matvec.cu) and each row attends to its own state's cache. Every state is of one model and one backend,
// each appears once; the first state's scratch runs the batch (n <= its batch capacity, every
// pos[i] < its ctx). CUDA: every state on one device, sharing the first's uploaded weights
// (share_weights), n <= 16. Returns 0, or -1 with nothing run on a bad call
// (emx_state_error(states[0]) says why). A backend without a batched step runs the rows one after
// the other: same results, no batching (and there a bad row stops the loop after the rows before
// it ran).
int emx_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits);
// 1 when the state's backend runs emx_forward_multi as one batched pass (the CPU, CUDA), 0 when
// it runs the rows in turn.
int emx_forward_multi_batched(const EmxState *s);

// Changes the number of threads of later calls (<= 0: all cores), at most the count the state
// was created with (its per-thread scratch is sized for that).
void emx_forward_set_threads(EmxState *s, int n_threads);

// ---------------------------------------------------------------------------------------------
// Branches: several continuations of one sequence run as one batch (the agent pool's
// lookahead). Every branch starts after the same prefix — positions 0..prefix-1 of this state's
// cache, shared, never copied — and keeps the KV rows of its own tokens in a tail of its own.
// Branch b's token at step j sits at position prefix + j and attends to the prefix, then to its
// tail's steps 0..j. The n branches of a step are one batched pass: each weight is read once for
// all of them, so N branches cost about one decode step, not N.
//
// Exactness: a row's result does not depend on the batch it is in (runtime/cpu/cpu_matmul.h), and
// the attention reads the prefix and the tail in the order a contiguous cache would be read, so
// branch b's logits are bitwise those of feeding its tokens to the sequence one at a time.

// Makes room for max_branches tails of tail_cap positions (grow only). Returns 0, or -1 with a
// one-line reason (more branches than a batch holds, out of memory).
int emx_state_branches_reserve(EmxState *s, int max_branches, int tail_cap, char *err, size_t errlen);
// Frees the tails (a later reserve makes them again): what a server's slot gives back after one
// request's branches, since the tails otherwise stay as large as the largest reserve.
void emx_state_branches_release(EmxState *s);

// Step `step` of branches 0..n-1: tokens[b] at position prefix + step into branch b's tail;
// logits [n][vocab] (caller's buffer) receive every branch's next-token logits. Steps 0..step-1
// must have been run with the same prefix (branches past n keep stale rows). The sequence's own
// logits, attention scores and cache are untouched. Returns 0, or -1 on a bad call.
int emx_forward_branches(EmxState *s, const int *tokens, int n, int prefix, int step, float *logits);

// emx_forward_branches with the proposals made where the logits are: branch i's next token
// proposed by agents[i] from its logits row, as emx_agent_propose(row i, agents[i], seed,
// rng_step, lane first_lane + i) (on a GPU: kernels/sampling/agent_pool.cu, the n rows at once; only the
// proposals come back, not n rows of vocab floats). One agent per branch. Returns 1 with
// proposals[0..n) filled, 0 when the backend does not (the CPU: nothing was run; call
// emx_forward_branches and propose from its logits), -1 on error.
int emx_forward_branches_propose(EmxState *s, const int *tokens, int n, int prefix, int step,
                                 const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step, uint32_t first_lane,
                                 EmxProposal *proposals);

// Commits branch `branch`: copies its tail's steps 0..n_steps-1 into the cache at prefix.., as
// if its tokens had been fed to the sequence. Returns 0, or -1 on a bad call.
int emx_branch_commit(EmxState *s, int branch, int n_steps, int prefix);

// Cache rows pos..pos+n-1 of every layer packed into one buffer of emx_state_kv_rows_bytes(n)
// bytes (keys then values, each [n_layers][n][kv_dim] f32): how a committed branch's rows
// travel from the worker that ran it to the other replicas. Return 0, or -1 on a bad range.
size_t emx_state_kv_rows_bytes(const EmxState *s, int n);
int emx_state_kv_rows_read(EmxState *s, int pos, int n, void *buf);
int emx_state_kv_rows_write(EmxState *s, int pos, int n, const void *buf);

// ---------------------------------------------------------------------------------------------
// Choosing where the logits are. On a GPU the whole step — the forward pass of the fed tokens
// and the choice of the next token — runs on the device (for a decode step: inside its CUDA
// graph), so the host receives a token id, not vocab floats. The sampler describes itself
// with an EmxDecideSpec; the choice is the one the CPU makes from the same logits (the same
// metrics, emx_entropix_decide, the same Philox draws: sampler/*.h is compiled for both).

enum emx_decide_kind {
    EMX_DECIDE_GREEDY = 0,   // argmax
    EMX_DECIDE_SAMPLE = 1,   // emx_sample with params, u = Philox(seed, step, lane 0)
    EMX_DECIDE_ENTROPIX = 2, // emx_entropix_decide + execute with profile (attention metrics
                             // from profile.attn_layer), the insert-once state kept on the device
};

typedef struct {
    int kind;                // enum emx_decide_kind
    EmxSamplerParams params; // SAMPLE
    EmxProfile profile;      // ENTROPIX
    int pause_token;         // ENTROPIX: -1 none
    uint64_t seed;
    int want_metrics;        // copy the step's metrics to the host too (--metrics logs); else
                             // only the token, the decision and the score come back
} EmxDecideSpec;

typedef struct {
    int token;               // the chosen id
    EmxDecision decision;    // ENTROPIX: what the switch decided
    double score;            // ENTROPIX best-of-N: the chosen token's score; NAN otherwise
    EmxMetrics metrics;      // when spec->want_metrics (zeros otherwise)
} EmxDecideResult;

// Runs tokens[0..n) at pos.. as emx_forward does, then chooses the next token (it will sit at
// pos + n: the RNG step) by spec. Returns 1 with *out filled when the backend chose on its side,
// 0 when it cannot (the CPU backend, or a state in a forward group, whose steps go through
// emx_forward: call emx_forward and choose from the logits; nothing was run), -1 on error (emx_state_error says why). A state keeps one spec: calling with another
// re-captures the decode graph, and restarts the entropix insert-once state.
int emx_forward_decide(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                       EmxDecideResult *out);

// The agent pool's proposals from the logits of the latest emx_forward, made where the logits
// are (on a GPU: kernels/sampling/agent_pool.cu; only the proposals come back): proposals[i] is
// emx_agent_propose(logits with `ban` at -inf, agents[i], seed, step, lane first_lane + i).
// ban: a token id to exclude, or -1. Returns 1 with proposals[0..n_agents) filled, 0 when the
// backend does not (the CPU: the caller proposes from the logits it has), -1 on error.
int emx_state_propose(EmxState *s, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                      uint32_t first_lane, int ban, EmxProposal *proposals);

// A round of the agent pool in one call: token at pos run as emx_forward runs it, then the
// proposals emx_state_propose would make from its logits (the same ban, seed, step and lanes).
// On a GPU the decode step, the ban and the proposals are one captured CUDA graph: one launch
// and one synchronisation a round, and no logits cross to the host (so emx_forward's host
// logits are not updated, and emx_state_propose waits for the next emx_forward). Returns 1 with
// proposals[0..n_agents) filled, 0 when the backend does not (the CPU, or a state in a forward
// group: nothing was run; call emx_forward, then propose), -1 on error.
int emx_forward_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                        uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals);

// A lookahead round of n_steps in one call: emx_forward_propose's step 0 (token at pos, the ban,
// proposals[0..n_agents) from its logits), then for j = 1..n_steps-1 the branch pass of
// emx_forward_branches_propose(tokens, n_agents, pos + 1, j - 1, agents, seed, step + j,
// first_lane) into proposals[j * n_agents ..], where tokens[i] is branch i's latest proposal
// (step j-1's token when it is >= 0, else what branch i was fed at step j-1; 0 when it has none).
// A branch keeps being fed after a stop token like any other: rows are independent, so its later
// proposals change nothing else and the caller drops them. Needs emx_state_branches_reserve for
// n_agents branches of n_steps - 1 steps. On a GPU the whole round is one captured CUDA graph:
// one launch and one synchronisation. Returns 1 with proposals[0 .. n_steps * n_agents) filled,
// 0 when the backend does not (the CPU, or a state in a forward group: nothing was run), -1 on
// error.
int emx_forward_lookahead_propose(EmxState *s, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                  uint64_t seed, uint64_t step, uint32_t first_lane, int ban, int n_steps,
                                  EmxProposal *proposals);

#endif
