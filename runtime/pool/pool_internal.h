// pool_internal.h — what the agent pool's files share (not an API): the branches the workers
// exchange, rank 0's decision, the worker and pool state (pool_generate.c), and rank 0's
// output (pool_output.c: the text, the log, --metrics, the observer's events).
#ifndef EMX_POOL_INTERNAL_H
#define EMX_POOL_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/forward.h"
#include "runtime/pool/comm.h"
#include "runtime/pool/pool_generate.h"
#include "sampler/metrics.h"

// ---------------------------------------------------------------------------------------------
// What the workers exchange

// One agent's branch, as every worker sees it after the all-gather.
typedef struct {
    int32_t agent;                                      // global index; -1: padding
    int32_t len;                                        // tokens (0: none could be proposed;
                                                        // < L: it ended with a stop token)
    double score;                                       // mean proposal entropy, bits
    int32_t tokens[EMX_POOL_MAX_LOOKAHEAD];
    double entropy[EMX_POOL_MAX_LOOKAHEAD];             // each proposal's entropy, bits
    double logits_entropy[EMX_POOL_MAX_LOOKAHEAD];      // --metrics: H and V of the logits the
    double logits_varentropy[EMX_POOL_MAX_LOOKAHEAD];   // proposal was sampled from
    EmxLogprobs lp[EMX_POOL_MAX_LOOKAHEAD];             // --logprobs / on_event: their top logprobs
} Branch;

// Rank 0's decision after a round, broadcast to every worker.
typedef struct {
    int32_t stop;  // 1: the generation is over (end reached, interrupted, rank 0 failed)
    int32_t keep;  // roll back to this sequence length; -1: no rollback
    int32_t ban;   // token banned at position `keep` (the first rejected one)
    int32_t pad;
} Control;

// What rank 0 remembers of a committed token until it is final (printed, --metrics).
typedef struct {
    int agent;
    double entropy, score, logits_entropy, logits_varentropy;
    EmxLogprobs lp;
} TokenInfo;

typedef struct Pool Pool;

typedef struct {
    Pool *pool;
    int rank;
    EmxComm *comm;
    EmxState *st;
    int a0, n_mine;         // this worker's agents: a0 .. a0 + n_mine - 1
    int *seq;               // [ctx] prompt + committed tokens (the same on every worker)
    int n_seq;
    const float *logits;    // next-token logits of seq[0..n_seq) (when pending is 0)
    int pending;            // seq[n_seq - 1] is not run yet: the next round runs it first
                            // (with its proposals, in one device call where the backend can)
    float *masked;          // [vocab] the logits with the banned token removed
    float *blogits;         // [n_mine][vocab] branch logits
    EmxCandidate *work;     // [n_mine][vocab] each agent's sampling scratch
    int n_threads;          // OpenMP threads of this worker
    Branch *mine;           // [per_rank]
    Branch *all;            // [size][per_rank]
    int *btok;              // [n_mine] tokens of a branch pass
    EmxProposal *props;     // [lookahead][n_mine] a round's proposals made on the device
    void *kvbuf;            // KV rows of a committed branch, in transit
    uint32_t epoch;         // rollbacks so far: part of the RNG counter
    int ban_pos, ban_token; // after a rollback: the rejected token, banned at its position
    int failed;
    int init_failed;        // failed making its replica (err is then the whole message)
    char err[512];
} Worker;

struct Pool {
    const EmxModel *m;
    const EmxState *share0;  // GPU: the critic's state whose uploaded weights worker 0 uses, or NULL
    const EmxTokenizer *tk;
    const EmxPoolOptions *opt;
    const int *prompt;
    int n_prompt, ctx, vocab, per_rank, budget;
    int n_threads;          // OpenMP threads of each worker
    // rank 0 only
    EmxPoolStats *stats;
    TokenInfo *info;        // [ctx] by position
    int final_len;          // positions < final_len are accepted: printed, never rolled back
    int printed;            // positions printed so far
    EmxDecoder dec;
    char *decbuf;           // [emx_decoder_max_out]
    int bad_count;          // consecutive BAD verdicts: rollbacks since text was last accepted
    int n_rounds;
    int metrics_failed;
    int out_errno, log_errno, metrics_errno;  // the first failed write of each (0: none); it stops the run
    int interrupted;        // the run stopped because *opt->interrupted was set
    int n_lp;               // logprobs kept per proposal (0: none)
    int host_logits;        // the host reads each round's logits (logprobs, --metrics, events)
};

// Rank 0's output (pool_output.c).
void pool_notify(const Pool *p, EmxPoolEvent ev);
// Flushes f (NULL: nothing to do); the first failure's errno goes to *slot.
void pool_flush_checked(FILE *f, int *slot);
// The --log lines of a round won by all[win] (n branches) at sequence position pos.
void pool_log_round(Pool *p, const Branch *all, int n, int win, int pos);
// The observer's ROUND event for the same round.
void pool_notify_round(const Pool *p, const Branch *all, int n, int win, int pos);
// Prints (and writes --metrics lines for) the positions that became final: [printed, upto).
void pool_emit_final(Pool *p, const int *seq, int upto);
// The generated text of seq[from..to), decoded (control tokens skipped). malloc'd.
char *pool_decode_text(const Pool *p, const int *seq, int from, int to, size_t *len);
// At the end: the rest of seq printed, the decoder flushed, the final text in the log.
void pool_write_final(Pool *p, Worker *w, int interrupted);

#endif
