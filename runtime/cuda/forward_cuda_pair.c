// forward_cuda_pair.c — emx_forward_pair on the GPU: a pass whose tail is two logits and the row's
// max and sum (kernels/logits_metrics.h's emx_cuda_logit_pair), so the agent pool's critic reads a
// 24-byte record instead of the vocabulary's row, and a short pass (up to PAIR_GRAPH_ROWS rows:
// the critic's suffix of new text, question and template tail, while its text is shorter than its
// window) runs as one captured CUDA graph instead of ~12 launches per layer. One graph per row
// count, captured on its first use: its first node copies the chunks' inputs (tokens, positions,
// key counts) from pinned memory, so it replays at any position; the chunks run in turn, as
// emx_forward's chunked pass runs them (rows of CHUNK, then the rest), so the result is
// emx_forward's row, bit for bit. The two ids are kernel arguments: other ids drop the graphs.
#include <string.h>

#include "kernels/logits_metrics.h"
#include "runtime/cuda/forward_cuda_state.h"

static void drop_pair_graphs(CudaState *s) {
    for (int n = 0; n <= PAIR_GRAPH_ROWS; n++) {
        if (s->pair_graph[n]) cudaGraphExecDestroy(s->pair_graph[n]);
        s->pair_graph[n] = NULL;
    }
}

void cuda_pair_free(CudaState *s) {
    drop_pair_graphs(s);
    cudaFree(s->pair_d);
    cudaFree(s->pin_d);
    cudaFreeHost(s->pair_h);
    cudaFreeHost(s->pin_h);
}

// The result and the chunks' inputs, made on the first call.
static int pair_alloc(CudaState *s) {
    if (s->pair_d) return 0;
    if (dev_alloc(s, (void **)&s->pair_d, sizeof(EmxLogitPair), "the critic's verdict") ||
        dev_alloc(s, (void **)&s->pin_d, PAIR_CHUNKS * sizeof(StepInput), "the critic's inputs"))
        return -1;
    CU(cudaMallocHost((void **)&s->pair_h, sizeof(EmxLogitPair)));
    CU(cudaMallocHost((void **)&s->pin_h, PAIR_CHUNKS * sizeof(StepInput)));
    return 0;
}

// Chunk k's rows of tokens[0..n) at pos.. into pin_h[k]; returns the number of chunks.
static int fill_chunks(CudaState *s, const int *tokens, int n, int pos) {
    int k = 0;
    for (int done = 0; done < n; done += CHUNK, k++) {
        memset(&s->pin_h[k], 0, sizeof(StepInput));
        cuda_fill_rows(&s->pin_h[k], tokens + done, n - done < CHUNK ? n - done : CHUNK, pos + done, 0);
    }
    return k;
}

// The chunks of an n-row pass, queued: with graph, as the capture records them (positions read
// on the device; the host's pos only sizes nothing then).
static int queue_chunks(CudaState *s, int n, int pos, int n_chunks, int graph) {
    CU(cudaMemcpyAsync(s->pin_d, s->pin_h, (size_t)n_chunks * sizeof(StepInput), cudaMemcpyHostToDevice, s->stream));
    for (int k = 0, done = 0; k < n_chunks; k++, done += CHUNK) {
        const int rows = n - done < CHUNK ? n - done : CHUNK;
        if (cuda_chunk_pass(s, rows, pos + done, &s->pin_d[k], graph, k == n_chunks - 1 ? TAIL_PAIR : -1)) return -1;
    }
    return 0;
}

// The n-row graph, captured on first use.
static int pair_graph(CudaState *s, int n, int pos, int n_chunks) {
    cudaGraphExec_t *exec = &s->pair_graph[n];
    if (*exec) return 0;
    CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    return cuda_capture_end(s, queue_chunks(s, n, pos, n_chunks, 1), exec, NULL);
}

int emx_cuda_state_forward_pair(EmxState *st, const int *tokens, int n, int pos, int id_a, int id_b,
                                EmxLogitPair *out) {
    CudaState *s = (CudaState *)st;
    if (cuda_step_check(s, tokens, n, pos)) return -1;
    if (id_a < 0 || id_a >= s->vocab || id_b < 0 || id_b >= s->vocab) {
        snprintf(s->err, sizeof s->err, "%s: forward_pair: ids %d, %d outside the vocabulary of %d", s->device_name,
                 id_a, id_b, s->vocab);
        return -1;
    }
    CU(cudaSetDevice(s->device));
    if (pair_alloc(s)) return -1;
    if (s->pair_ids[0] != id_a || s->pair_ids[1] != id_b) drop_pair_graphs(s);
    s->pair_ids[0] = id_a, s->pair_ids[1] = id_b;
    if (n > PAIR_GRAPH_ROWS || s->no_graphs) {  // the GEMM prefill, or direct launches
        if (cuda_step_run(s, tokens, n, pos, TAIL_PAIR)) return -1;
    } else {
        const int n_chunks = fill_chunks(s, tokens, n, pos);
        if (pair_graph(s, n, pos, n_chunks)) return -1;
        CU(cudaGraphLaunch(s->pair_graph[n], s->stream));
        CU(cudaStreamSynchronize(s->stream));
        s->last_pos = pos + n - 1;
        s->logits_fresh = 0;
    }
    *out = *s->pair_h;
    return 0;
}
