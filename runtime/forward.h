// forward.h — the forward pass of one sequence: tokens in, logits and attention scores out.
//
// One interface, two backends: the CPU (runtime/cpu/forward_cpu.c), the reference every other
// backend is tested against, and CUDA (runtime/cuda/forward_cuda.c: weights, activations and KV cache
// on one GPU; builds without it refuse "cuda:N"). runtime/forward.c picks the backend when a
// state is made and forwards every call (runtime/forward_backend.h). An EmxState is one
// sequence: activations, its KV cache and scratch. Many states may share one EmxModel.
//
// What the agent pool and the branching decoder need beyond one sequence (proposals made where
// the logits are, branches, the critic's pair pass, KV row copies) is an extension a backend may
// provide: runtime/pool/pool_forward.h.
#ifndef ENTROPIX_FORWARD_H
#define ENTROPIX_FORWARD_H

#include "base/kv_type.h"
#include "sampler/entropix.h"
#include "sampler/metrics.h"
#include "runtime/model.h"
#include "sampler/sample.h"

typedef struct EmxState EmxState;

// What EMX_KV_AUTO (base/kv_type.h) means for model m on a backend: f16 on a GPU when the
// weights are 16-bit or quantised (on an H200 the f16 cache decodes and prefills no slower than
// f32 at depth 4096, in half the memory: docs/cuda.md), f32 otherwise: an f32 model keeps f32
// throughout, and the CPU, the reference every backend is tested against, keeps the exact cache.
// F32 and F16 stay as is. (runtime/forward_common.c)
EmxKvType emx_kv_type_resolve(EmxKvType t, const EmxModel *m, int on_gpu);

typedef struct {
    int n_threads;     // CPU: <= 0: all cores
    int ctx;           // KV cache positions (<= cfg.max_seq_len; <= 0: min(max_seq_len, 4096))
    const char *device;// NULL, "" or "cpu": the CPU; "cuda:N": GPU N; "auto": GPU 0 when this
                       // build has the CUDA backend and the machine a GPU, else the CPU
    const EmxState *share_weights; // CUDA: a state of the same model on the same device whose
                       // uploaded weights this one uses instead of uploading its own (a critic,
                       // a second sequence); it must outlive this state. NULL: upload.
    int no_graphs;     // CUDA: decode steps as direct launches, not a replayed CUDA graph
    EmxKvType cache_type; // the KV cache's elements; AUTO (0): emx_kv_type_resolve's choice
    int phase_timeline; // CUDA: time each decode step's phases (EmxStateInfo.phases): direct
                        // launches (no graph) with a CUDA event at the end of every phase
    int persistent;     // CUDA: decode steps as one persistent kernel (kernels/persistent/decode_persistent.h)
                        // where the model's shapes allow, else the graph path (EmxStateInfo.
                        // decode_path says which and why); EMX_CUDA_PERSISTENT=1 in the
                        // environment when the state is made asks the same. With phase_timeline
                        // its blocks' clocks split the launch between the phases.
} EmxStateOptions;

// Returns NULL with a one-line reason: bad options, a device this build or machine lacks, a
// model that does not fit the device (said before allocating), out of memory with the amount.
EmxState *emx_state_new(const EmxModel *m, const EmxStateOptions *opt, char *err, size_t errlen);
void emx_state_free(EmxState *s);
// Whether device is a name emx_state_new reads ("cpu", "cuda:N", "auto"; NULL or "": the CPU),
// whatever this build and machine have. 0, or -1 with "device 'x': expected cpu, cuda:N or auto".
int emx_device_check(const char *device, char *err, size_t errlen);
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
// The phases of a decode step, in the order a layer runs them (a timeline's rows: `bench speed
// --timeline`). Which kernels each holds depends on the path (fused or separate kernels): the
// phase is the work, wherever a kernel boundary falls, e.g. the FFN's input norm is FFN_IN's in
// the fused layer and ATTN_OUT's in the separate kernels, where one launch adds the residual and
// norms the sum.
typedef enum {
    EMX_PHASE_EMBED,      // the step's input copy and the embedding row
    EMX_PHASE_ATTN_IN,    // the attention's input norm and the q/k/v matvecs
    EMX_PHASE_ATTN,       // q/k norms, RoPE, the KV write, the attention (and its combine)
    EMX_PHASE_ATTN_OUT,   // the output projection and the residual add
    EMX_PHASE_FFN_IN,     // the FFN's input norm, the gate/up matvecs and the activation
    EMX_PHASE_FFN_OUT,    // the down projection and the residual add
    EMX_PHASE_CLASSIFIER, // the final norm and the classifier
    EMX_PHASE_TAIL,       // the step's end: logits copied out or the device's choice
    EMX_PHASES
} EmxPhase;
const char *emx_phase_name(EmxPhase p);  // "attention input (norm, q/k/v)", ...

// Sums over the decode steps a state has timed (EmxStateOptions.phase_timeline): µs per phase
// from the CUDA events that close each phase (the first opens the step), and the steps counted.
// With the persistent kernel its launch's time is split between the phases it runs by its blocks'
// clocks, and wait_us holds, of each phase's us, the time from its slowest block's arrival at the
// phase's grid barrier to the grid's departure (0 on the graph path). A reader subtracts two
// readings to time a stretch of steps.
typedef struct {
    double us[EMX_PHASES];
    double wait_us[EMX_PHASES];
    long steps;
} EmxPhaseTimes;

// What a benchmark reports about where a state runs.
typedef struct {
    const char *device;          // "cpu", "cuda:0"
    char device_desc[128];       // the GPU's name; the CPU's SIMD kernels
    double peak_gbps;            // GPU: peak memory bandwidth from the device's properties; CPU: 0
    int uses_graphs;             // GPU: decode steps replay a CUDA graph
    int decode_graph_nodes;      // GPU: nodes of that graph (kernel launches and copies: the
                                 // launches one decode step costs); 0 before the first step
    uint64_t weight_bytes_on_device; // GPU: bytes of weights uploaded (shared states count them once)
    EmxKvType cache_type;     // the KV cache's elements (F32 or F16, never AUTO)
    uint64_t kv_cache_bytes;     // the KV cache's keys and values as allocated: a sliding-window
                                 // model's local layers hold rings (runtime/kv_ring.h)
    int kv_ring_rows;            // rows of those rings (0: none, every layer holds ctx rows)
    int vocab;                   // the model's vocabulary: a row of logits
    int pair_graphs;             // GPU: emx_forward_pair's captured passes (one per row count)
    int multi_graph_nodes;       // GPU: nodes of the emx_forward_multi step this state leads as a
                                 // graph (replayed while the same rows come again); 0: none
    int multi_captures;          // GPU: how many times such a step was captured (a new set of rows)
    EmxPhaseTimes phases;        // GPU with phase_timeline: the decode steps' phases; else zeros
    const char *decode_path;     // GPU: how a decode step runs: "graph", "persistent kernel, N
                                 // blocks" (", the embedding apart": in a launch of its own, its
                                 // dtype not the layers'; the classifier likewise), or why the
                                 // persistent kernel asked for was not taken; CPU: NULL
    int persistent_blocks;       // GPU: the persistent kernel's grid when decode steps run as one
                                 // launch; 0: they do not (the graph path, the CPU)
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
// The first key a query at last_pos sees in `layer`: 0, or for a local layer of a model with a
// sliding window (EmxConfigExt) last_pos - window + 1 once that is positive. The scores of the
// keys before it are -inf (no probability); the attention metrics are taken over the keys from it.
int emx_attention_first_key(const EmxState *s, int layer, int last_pos);

// The KV cache itself, for tests and tools: key and value f32 [n_layers][ctx][kv_dim] each. An
// f16 cache's values widened exactly, and a CPU cache whose rows are padded (forward_cpu.c), come
// as copies the state owns, remade at each call: writes to them do not reach the cache (so on a
// GPU); emx_state_kv_rows_write (runtime/pool/pool_forward.h) does
// (kv_dim = n_kv_heads * head_dim). Positions past the last one fed hold stale values from an
// earlier, longer sequence (or zeros), which no computation for an earlier position may read:
// a test writes garbage there to prove it.
void emx_state_kv_cache(EmxState *s, float **key, float **value, int *kv_dim);

// Like emx_forward, but writes the logits of every position: logits [n][vocab] (caller's
// buffer). For perplexity and scoring; costs n classifier products instead of one. The state's
// own logits and attention scores afterwards are those of the last position. Returns 0, or -1
// on the same conditions under which emx_forward returns NULL.
int emx_forward_all_logits(EmxState *s, const int *tokens, int n, int pos, float *logits);

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

// emx_forward_decide, and before it returns, the next step queued on the device: the one that
// feeds the token just chosen at pos + n, the device writing that token into the step's input
// itself. A generation loop then keeps the GPU busy: while the host prints a token and checks its
// stop rules, the next step runs. The
// next call that feeds that token at that position (this function again, or emx_forward_decide)
// takes the queued step's result instead of running it; every other call on the state first
// waits for the queued step and drops it (the entropix insert-once state is put back, the KV
// row it wrote lies past the sequence), so a generation that stops after this token loses the
// queued step's time and nothing else. The caller reads nothing of the state between the two
// calls: the logits and score rows are the queued step's once it has run. The result is the
// one emx_forward_decide gives, bit for bit. Runs the step alone where nothing can be queued: a
// backend that decides on the host (returns 0 as emx_forward_decide), a state without decode
// graphs, or pos + n == ctx.
int emx_forward_decide_ahead(EmxState *s, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                             EmxDecideResult *out);

#endif
