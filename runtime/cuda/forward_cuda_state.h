// forward_cuda_state.h — what the CUDA backend's files share (not an API): the uploaded weights,
// the state (CudaState: activations, KV cache, graphs, the device side of the choice), the error
// helpers, and the pass's entry points (forward_cuda_step.c) that the backend table
// (forward_cuda.c) points to.
#ifndef EMX_FORWARD_CUDA_STATE_H
#define EMX_FORWARD_CUDA_STATE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/sampling/agent_pool.h"
#include "kernels/attention.h"
#include "kernels/attention_decode.h"
#include "kernels/attn_metrics.h"
#include "kernels/persistent/decode_persistent.h"
#include "kernels/gemm.h"
#include "kernels/matvec.h"
#include "kernels/sampling/sampling.h"
#include "kernels/weights.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"
#include "runtime/forward_common.h"
#include "runtime/kv_ring.h"
#include "runtime/cuda/phase_clock.h"
#include "runtime/pool/pool_forward.h"

#define CHUNK EMX_MATVEC_MAX_BATCH  // rows per batched pass: the batched matvec's limit
#define ATTN_KERNEL EMX_ATTN_SPLIT_GQA

// Long prompts: every projection through the GEMMs of kernels/gemm.h, in chunks of up to
// GEMM_ROWS rows. From GEMM_MIN_PROMPT + 1 rows on: one GEMM of a matrix costs about two 16-row
// batched matvecs whatever its rows, its fixed part being the pass that dequantises the matrix
// (H200, 3072x1024 q8: cuBLAS bf16 17.8 us for 128 rows, the batched matvec 9.8 us per 16 rows),
// so it wins from the third chunk. GEMM_ROWS: that pass runs once per chunk, so larger chunks
// amortise it; 256 rows of a 0.6B model's activations take ~16 MiB.
#define GEMM_MIN_PROMPT (2 * CHUNK)
#define GEMM_ROWS 256

// cuBLAS's own workspace, counted by the fit check: 32 MiB on Hopper, less on older GPUs (the
// cuBLAS documentation's defaults).
#define CUBLAS_WORKSPACE_BYTES (32u << 20)

// The GEMM variant for a matrix of this dtype. The CPU reads f32 activations for f32/bf16/f16
// weights: f32 GEMMs keep those models within f32 summation order of it. Quantised weights meet
// int8 activations on the CPU, which no GEMM reproduces anyway: bf16 tensor cores (bf16 keeps
// f32's range, so the down projection's large inputs cannot overflow as in f16).
static inline int gemm_variant(uint32_t dtype) {
    return dtype == EMX_F32 || dtype == EMX_BF16 || dtype == EMX_F16 ? EMX_GEMM_CUBLAS_F32 : EMX_GEMM_CUBLAS_BF16;
}

// The rows an emx_forward_multi graph was captured for: their count, and each row's state with
// the buffers the graph's last copies write (its logits on the device and on the host): all that
// a replay takes from the rows' states besides the tables it copies at each replay.
typedef struct {
    int n;
    const void *rows[CHUNK][3];
} MultiKey;

typedef struct {
    EmxCudaWeight wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm;  // [dim]
    float *q_norm, *k_norm;       // [head_dim] (Qwen3) or NULL
    float *bq, *bk, *bv;          // [q_dim], [kv_dim], [kv_dim] (Qwen2's biases) or NULL
    float *post_attn_norm, *post_ffn_norm;  // [dim] (Gemma 3's sandwich norms) or NULL
} CudaLayer;

// The uploaded model, shared by the states of one device that ask for it (share_weights).
typedef struct {
    atomic_int refs;
    int device;
    const EmxModel *m;
    EmxCudaWeight emb, out;  // out.data == emb.data when the classifier is tied
    float *norm;             // [dim]
    double *inv_freq;        // [head_dim/2] (the global layers' with a sliding window: / rope_linear_global)
    double *inv_freq_local;  // [head_dim/2] the local layers' (ext.sliding_window), else NULL
    CudaLayer *layers;       // [n_layers]
    uint64_t bytes;
} CudaWeights;

// What the host writes before each pass: one copy of it to the device per call.
typedef struct {
    int tokens[CHUNK];  // the rows' token ids
    int pos[CHUNK];     // their positions (RoPE angles)
    int rows[CHUNK];    // cache rows their k and v go to (branches: tail rows)
    int n_keys;         // keys the last row attends (decode graph: read on the device)
    uint64_t rng_step;  // emx_forward_decide: the position of the token being chosen;
                        // emx_forward_propose: the proposals' RNG step
    int ban;            // emx_forward_propose: the token to exclude, -1 none
    int tail_start;     // a lookahead round's branch passes: the first key in the tails
} StepInput;

// What ends a step (cuda_step_tail in forward_cuda_tail.c): the logits copied to the host
// (emx_forward), the choice made on the device (emx_forward_decide), the agents' proposals
// (emx_forward_propose), or those and a lookahead round's branch passes with their proposals
// (emx_forward_lookahead_propose), or two logits and the row's max and sum (emx_forward_pair).
// A decode step of each kind is captured into a graph of its own (emx_forward_pair's short
// passes: one per row count, forward_cuda_pair.c).
enum { TAIL_LOGITS, TAIL_DECIDE, TAIL_PROPOSE, TAIL_LOOKAHEAD, TAIL_PAIR, N_TAILS };

// emx_forward_pair's passes of up to PAIR_GRAPH_ROWS rows are captured (the chunked path's
// longest: beyond it a prompt goes through the GEMMs), in chunks of CHUNK rows.
#define PAIR_GRAPH_ROWS GEMM_MIN_PROMPT
#define PAIR_CHUNKS ((PAIR_GRAPH_ROWS + CHUNK - 1) / CHUNK)

// The decode step queued ahead (forward_cuda_ahead.c): on the stream, its result unread.
typedef struct {
    int queued;      // 1: a step feeding `token` at `pos` is queued, its result to come in out_h[slot]
    int token, pos;  // token: -1 until the host has read the token it feeds
    int slot;        // 1 or 2
} CudaAhead;

// What emx_forward_decide brings back: the token and decision first, so that without
// --metrics the copy stops before the metrics.
typedef struct {
    int token;
    EmxDecision decision;
    double score;
    EmxMetrics metrics;
} DecideOut;

typedef struct {
    EmxState base;
    const EmxModel *m;
    int device;
    char device_name[24];
    char err[320];
    int ctx, q_dim, kv_dim, widest, vocab;
    int no_graphs;
    CudaPhaseClock *clock;  // phase_timeline: the decode steps' phases (phase_clock.h), else NULL
    int fused;              // the most rows a step through the fused layer takes
                            // (forward_cuda_fused.c); 0: the separate kernels always
                            // (EMX_CUDA_FUSED at the state's creation, forward_cuda.c)
    int pdl;                // the decode step's kernels with programmatic dependent launch
                            // (kernels/launch.cuh): compute capability >= 9 and not EMX_CUDA_PDL=0
                            // at the state's creation
    int pdl_now;            // pdl while the decode step's layers and classifier (decode_launches,
                            // forward_cuda_step.c) and any step's tail after its classifier
                            // (cuda_step_tail, forward_cuda_tail.c) are launched, else 0
    int persistent;         // decode steps' layers as one persistent kernel (forward_cuda_persistent.c)
    char decode_path[160];  // how decode steps run: "graph", "persistent kernel, N blocks", or why
                            // the persistent kernel was asked for and not taken
    EmxDecodeStep step;     // with persistent: the kernel's arguments
    EmxDecodeLayer *step_layers_d; // [n_layers] its layer table (device)
    unsigned *step_sync;    // [2] its barrier's counters (device; the kernel leaves them zero)
    int metrics_in_step;    // while a decode step is queued: the persistent kernel makes the
                            // decision's statistics (the tail does not make them again)
    int decision_in_step;   // ... and the choice itself, entropix's or a fixed draw's (the tail
                            // only copies it)
    long long *step_clocks, *step_clocks_h;  // a timed state's (clock): the kernel's timeline
                            // stamps, device and host, for the most phases a launch has
    EmxDecodeStep step_timed; // the timed step's launch (clocks NULL once its stamps are read)
    cudaStream_t stream;
    CudaWeights *w;
    // activations, device, one row per token of the chunk; R = max(CHUNK, gemm_rows)
    float *x, *xb;          // [R][dim]
    float *tmp;             // [R][dim] a block's output before its post-norm (sandwich norms), else
                            // [CHUNK][dim] unused
    float *q, *att;         // [R][q_dim]
    float *k, *v;           // [R][kv_dim] (rope_kv copies them into the cache)
    float *hb, *hb2;        // [R][hidden_dim]
    int8_t *xq;             // [CHUNK][widest] int8 activations
    float *xd;              // [CHUNK][widest/32] their scales
    int *xsum;              // [CHUNK][widest/32] their integer group sums
    StepInput *in_d, *in_h; // device / pinned host
    EmxAttnDecodeRow *rows_d, *rows_h; // [CHUNK] emx_forward_multi's rows: each row's state's cache,
                            // score rows, workspace, counters and position (device / pinned host)
    // long prompts (prefill_gemm in forward_cuda_step.c); gemm_rows 0: the context is too short
    // for one
    int gemm_rows;          // rows per GEMM chunk, min(GEMM_ROWS, ctx)
    int *gin_d, *gin_h;     // [2][gemm_rows] the chunk's token ids, then positions: device / pinned
    void *gemm_ws;          // emx_cuda_gemm's scratch for the largest matrix (forward_cuda.c's gemm_ws_bytes)
    cublasHandle_t blas;    // made by the first long prompt
    void *key, *value;      // [kv_rows][kv_dim] KV cache of kv_type (kv_at: element i), layer l's
                            // rows where layers[l] says: ctx of them, or a local layer's ring
    EmxKvLayer *layers;     // [n_layers] host (runtime/kv_ring.h's layout)
    EmxKvLayer *layers_d;   // the same on the device: the multi-state attention's, a commit's table
    int64_t kv_rows;        // rows of key (and of value): every layer's
    EmxKvRing ring;         // what the local layers' rings hold
    EmxKvType kv_type;      // EMX_KV_F32 or EMX_KV_F16 (base/kv_type.h): EmxStateOptions.cache_type resolved
    size_t kv_esize;        // bytes of one element of the cache and the tails: 4 or 2
    float *scores;          // [n_layers][n_heads][ctx] the last row's score rows
    EmxSoftmaxStats *head_stats; // [n_layers][n_heads]
    void *attn_ws;          // attention workspace (ctx keys)
    unsigned *attn_arrivals; // [n_kv_heads] the fused decode attention's counters (zero between launches)
    float *logits;          // [CHUNK][vocab] device
    float *logits_h;        // [vocab] pinned host: what emx_forward returns
    float *scores_h;        // [n_layers][n_heads][ctx] host copy, made when asked for
    float *key_h, *value_h; // host copies for emx_state_kv_cache
    int last_pos;
    int logits_fresh;       // logits row 0 holds the latest emx_forward's, unchanged (emx_state_propose)
    // branches: tails [n_layers][br_tail][br_max][kv_dim], as the CPU's
    int br_max, br_tail;
    void *br_key, *br_value; // of kv_type, as the cache (a commit is a plain copy)
    // the decode step's graphs, one per tail (captured on the first single-token call of each)
    cudaGraphExec_t step_graph[N_TAILS];
    int step_graph_nodes[N_TAILS];
    // emx_forward_decide: the spec the decide graph was captured with, the device side of the
    // choice (metrics, the entropix insert-once state, workspaces) and the result's copies
    EmxDecideSpec spec;
    int have_spec;
    DecideOut *out_d, *out_h;  // out_h: [3] pinned, [0] a step the host fed, [1] and [2] the steps
                               // queued ahead, in turn (the host reads one while the next is copied)
    int out_slot;              // where the decide tail being queued copies its result (0..2)
    EmxEntropixState *estate_d;
    // emx_forward_decide_ahead (forward_cuda_ahead.c): the step queued after the one returned,
    // which feeds the token that one chose; its graphs (one per result slot), the events after
    // each slot's copy, and the entropix state as the queued step found it (put back if dropped)
    CudaAhead ahead;
    cudaGraphExec_t fed_graph[2];
    cudaEvent_t out_ready[3];
    EmxEntropixState *estate_saved_d;
    void *lm_ws, *am_ws, *sample_ws;
    // emx_state_propose, emx_forward_propose: the agents, their proposals and the kernel's
    // workspace (grown on demand)
    int agents_cap, props_cap;
    EmxAgentParams *agents_d;
    EmxProposal *props_d, *props_h;  // [props_cap] device / pinned host: a lookahead round's
                                     // [steps][agents]
    int *pick_d;  // [2] the winner's token and index (the host picks among all workers' proposals)
    void *agents_ws;
    // emx_forward_propose's graph (step_graph[TAIL_PROPOSE]) bakes these in; the agents'
    // parameters, the token, position, RNG step and ban it reads on the device at each replay
    int round_agents;
    uint64_t round_seed;
    uint32_t round_lane;
    // emx_forward_lookahead_propose: its graph (step_graph[TAIL_LOOKAHEAD]) also bakes in the
    // round's steps; the branch passes' inputs, step j at bin[j - 1] (positions, key counts,
    // tail start and RNG step written by the host, tokens fed on the device)
    int round_steps;
    int bin_cap;
    StepInput *bin_d, *bin_h;  // [bin_cap] device / pinned host
    // emx_forward_pair (forward_cuda_pair.c): the two ids its tail reads (baked into its graphs,
    // which another pair drops), the result, and a graph per row count with its chunks' inputs
    int pair_ids[2];
    EmxLogitPair *pair_d, *pair_h;         // device / pinned host
    StepInput *pin_d, *pin_h;              // [PAIR_CHUNKS] device / pinned host
    cudaGraphExec_t pair_graph[PAIR_GRAPH_ROWS + 1];
    // emx_forward_multi's step as a graph (forward_cuda_multi.c), led by this state: the rows it
    // was captured for (key), the rows of the call before (last), its nodes and its captures
    MultiKey multi_key, multi_last;
    cudaGraphExec_t multi_graph;
    int multi_graph_nodes, multi_captures;
} CudaState;

// What a decision (emx_forward_decide's spec) reads besides the logits: the attention metrics
// (entropix's, or any decision's when its metrics are asked for), of this layer selection
// (emx_attn_layer_range's). The tail's kernels and the persistent kernel ask alike.
static inline int cuda_decide_attn_metrics(const EmxDecideSpec *sp) {
    return sp->kind == EMX_DECIDE_ENTROPIX || sp->want_metrics;
}
static inline int cuda_decide_attn_layer(const EmxDecideSpec *sp) {
    return sp->kind == EMX_DECIDE_ENTROPIX ? sp->profile.attn_layer : EMX_ATTN_LAYER_LAST;
}

// Element i of a buffer of the cache's type (the KV cache, the branch tails): f32 or f16.
static inline void *kv_at(const CudaState *s, void *base, size_t i) { return (char *)base + i * s->kv_esize; }
// Layer l's first row in base (s->key or s->value).
static inline void *cuda_layer_kv(const CudaState *s, void *base, int l) {
    return kv_at(s, base, (size_t)s->layers[l].row0 * s->kv_dim);
}
// Layer l's ring (the kernels' cache_rows): its rows when fewer than ctx, else 0.
static inline int cuda_layer_ring(const CudaState *s, int l) { return s->layers[l].rows < s->ctx ? s->layers[l].rows : 0; }

// ---------------------------------------------------------------------------------------------
// Errors: every CUDA call goes through cu(), which keeps a message naming the call.

static inline int cu(CudaState *s, cudaError_t e, const char *call) {
    if (e == cudaSuccess) return 0;
    snprintf(s->err, sizeof s->err, "%s: %s: %s", s->device_name, call, cudaGetErrorString(e));
    return -1;
}
#define CU(call)                                       \
    do {                                               \
        if (cu(s, (call), #call)) return -1;           \
    } while (0)

// The step queued ahead (emx_forward_decide_ahead, forward_cuda_ahead.c), if any, waited for and
// dropped: the entropix state put back as it found it; the state's logits, scores and the KV
// row at its position are that step's (forward.h). Every entry point but a decision that takes
// the step calls it first. 0, or -1 with err set.
static inline int cuda_settle(CudaState *s) {
    if (!s->ahead.queued) return 0;
    s->ahead.queued = 0;
    CU(cudaSetDevice(s->device));
    CU(cudaMemcpyAsync(s->estate_d, s->estate_saved_d, sizeof(EmxEntropixState), cudaMemcpyDeviceToDevice,
                       s->stream));
    CU(cudaStreamSynchronize(s->stream));
    s->last_pos = s->ahead.pos;  // the score rows are the dropped step's
    return 0;
}
// cuda_settle for a call that returns no error code: the reason goes to stderr.
static inline void cuda_settle_quiet(CudaState *s) {
    if (cuda_settle(s)) fprintf(stderr, "%s\n", s->err);
}

// Closes phase p of a timed decode step (phase_clock.h); nothing when no step is timed.
static inline int cuda_phase(CudaState *s, EmxPhase p) {
    return cu(s, cuda_phase_end(s->clock, p, s->stream), "cudaEventRecord (phase timeline)");
}

static inline int dev_alloc(CudaState *s, void **p, size_t bytes, const char *what) {
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess) return 0;
    *p = NULL;
    snprintf(s->err, sizeof s->err, "%s: cudaMalloc of %.1f MiB for %s: %s", s->device_name,
             (double)bytes / (1 << 20), what, cudaGetErrorString(e));
    return -1;
}

// Within the backend (forward_cuda_step.c): the call's checks (positions within the context,
// token ids within the vocabulary, keys the rings still hold; -1 with err set; on success the
// rings count the call's rows as written), and tokens at pos.. run through the
// pass, ending with the tail (TAIL_*); the stream is synchronised on return.
// The persistent decode kernel (forward_cuda_persistent.c). init, when the state is made: asked
// (EmxStateOptions.persistent or EMX_CUDA_PERSISTENT=1) and the model's shapes allow it, sets
// s->persistent and builds the kernel's layer table; decode_path says what decodes (-1 with err
// set: out of memory). step: one decode step's embedding, layers and classifier (in_d holds its
// input), queued; with the tail TAIL_DECIDE and the classifier in the launch, the statistics the
// decision reads too (s->metrics_in_step); in a timed step its launch closes a CUDA_PHASE_SPLIT
// mark.
int cuda_persistent_init(CudaState *s, int asked);
int cuda_persistent_step(CudaState *s, int tail, int graph);
// After a timed persistent step has synchronised: its launch's time split between the phases by
// its blocks' clocks (the clock's cuda_phase_split); nothing for other steps.
int cuda_persistent_timeline(CudaState *s);
int cuda_step_check(CudaState *s, const int *tokens, int n, int pos);
// A decode step's launches after its input is on the device (forward_cuda_step.c): the layers
// and the classifier (or the persistent kernel), then the tail; graph: positions read on the device.
int cuda_decode_launches(CudaState *s, int pos, int tail, int graph);
// cuda_step_run without its end: the checks and the pass queued on the stream, not synchronised.
int cuda_step_queue(CudaState *s, const int *tokens, int n, int pos, int tail);

// Whether a pass whose first query is at pos can run on the rings (-1 with err set: a rollback
// further back than they hold; runtime/kv_ring.h).
int cuda_ring_check(CudaState *s, int pos);
int cuda_step_run(CudaState *s, const int *tokens, int n, int pos, int tail);
// A lookahead branch pass (emx_forward_branches) up to its logits [n][vocab] on the device,
// queued, not synchronised; its checks as there (-1 with err set).
int cuda_branch_pass(CudaState *s, const int *tokens, int n, int prefix, int step);
// One chunk of a sequence (n <= CHUNK rows) whose input is `in` (device), queued: the layers;
// then, when tail >= 0 (the last chunk), the classifier on row n - 1 and the tail. graph: the
// positions and key count are read from `in` on the device (a captured pass, replayed anywhere).
int cuda_chunk_pass(CudaState *s, int n, int pos, const StepInput *in, int graph, int tail);
// Rows of a sequence at pos.. (same_pos: all at pos, the branches) into a StepInput: tokens,
// positions, cache rows 0..n-1 and the last row's key count (pos + n); other fields untouched.
void cuda_fill_rows(StepInput *in, const int *tokens, int n, int pos, int same_pos);
// Ends the capture begun on s->stream: when `bad` (a call inside failed, err set) drops it and
// returns -1; else instantiates it into *exec, its node count to *nodes when not NULL (0, or -1
// with err set).
int cuda_capture_end(CudaState *s, int bad, cudaGraphExec_t *exec, int *nodes);
// emx_forward_pair (forward_cuda_pair.c) and what it keeps, freed with the state.
int emx_cuda_state_forward_pair(EmxState *st, const int *tokens, int n, int pos, int id_a, int id_b,
                                EmxLogitPair *out);
void cuda_pair_free(CudaState *s);

// The backend functions of forward_backend.h (the pass: forward_cuda_step.c, forward_cuda_multi.c) and of
// runtime/pool/pool_backend.h (the agents, branches and KV rows: forward_cuda_agents.c; the
// pair pass: forward_cuda_pair.c), whose table is emx_cuda_pool_backend (forward_cuda_agents.c).
const float *emx_cuda_state_forward(EmxState *st, const int *tokens, int n, int pos);
int emx_cuda_state_forward_decide(EmxState *st, const int *tokens, int n, int pos, const EmxDecideSpec *spec,
                                  int ahead, EmxDecideResult *out);
int emx_cuda_state_propose(EmxState *st, const EmxAgentParams *agents, int n_agents, uint64_t seed, uint64_t step,
                           uint32_t first_lane, int ban, EmxProposal *proposals);
int emx_cuda_state_forward_propose(EmxState *st, int token, int pos, const EmxAgentParams *agents, int n_agents,
                                   uint64_t seed, uint64_t step, uint32_t first_lane, int ban, EmxProposal *proposals);
int emx_cuda_state_forward_branches_propose(EmxState *st, const int *tokens, int n, int prefix, int step,
                                            const EmxAgentParams *agents, uint64_t seed, uint64_t rng_step,
                                            uint32_t first_lane, EmxProposal *proposals);
int emx_cuda_state_forward_lookahead_propose(EmxState *st, int token, int pos, const EmxAgentParams *agents,
                                             int n_agents, uint64_t seed, uint64_t step, uint32_t first_lane, int ban,
                                             int n_steps, EmxProposal *proposals);
int emx_cuda_state_forward_multi(EmxState *const *states, const int *tokens, const int *pos, int n,
                                 const float **logits);
int emx_cuda_state_forward_all_logits(EmxState *st, const int *tokens, int n, int pos, float *logits);
const float *emx_cuda_state_attention_scores(const EmxState *cst, int *last_pos);
void emx_cuda_state_kv_cache(EmxState *st, float **key, float **value, int *kv_dim);
int emx_cuda_state_branches_reserve(EmxState *st, int max_branches, int tail_cap, char *err, size_t errlen);
void emx_cuda_state_branches_release(EmxState *st);
int emx_cuda_state_forward_branches(EmxState *st, const int *tokens, int n, int prefix, int step, float *logits);
int emx_cuda_state_branch_commit(EmxState *st, int branch, int n_steps, int prefix);
extern const struct EmxPoolBackend emx_cuda_pool_backend;

#endif
