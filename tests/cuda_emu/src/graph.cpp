// graph.cpp — stream capture and graph replay.
//
// While a stream is captured, every operation submitted to it (kernel launches with their
// arguments already copied by value, async copies and memsets, event records, cuBLAS and NCCL
// calls) is appended to the capture's graph instead of running. cudaGraphInstantiate copies the
// node list; cudaGraphLaunch runs it in order, so replaying twice has the effect twice and reads
// device memory as it is at replay time, as on a GPU. Only linear graphs (one stream) exist.
// Calls that would synchronise during a global-mode capture (cudaMemcpy, cudaMalloc, a launch on
// the legacy stream ...) fail with cudaErrorStreamCaptureUnsupported/Implicit and invalidate
// the capture, like CUDA.
#include <stdio.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "../include/emu/launch.h"
#include "runtime_internal.h"

namespace {

std::mutex capture_mutex;
std::vector<cudaStream_t> global_captures; // streams being captured in global mode

bool global_capture_active() {
    std::lock_guard<std::mutex> lock(capture_mutex);
    return !global_captures.empty();
}

void invalidate_global_captures() {
    std::lock_guard<std::mutex> lock(capture_mutex);
    for (cudaStream_t s : global_captures) s->capture_invalid = true;
}

} // namespace

namespace emu {

cudaError_t check_not_capturing(const char *call) {
    cudaError_t err = flush_pending(); // the synchronous calls wait for every kernel
    if (err != cudaSuccess) return err;
    if (!global_capture_active()) return cudaSuccess;
    invalidate_global_captures();
    return fail(cudaErrorStreamCaptureUnsupported, std::string(call) + " while a stream is being captured");
}

namespace {
cudaError_t submit_node(cudaStream_t stream, const char *what, bool kernel, bool programmatic,
                        std::function<cudaError_t()> work, bool may_defer = true) {
    if (stream && stream->capture) {
        stream->capture->nodes.push_back(EmuGraphNode{what, std::move(work), kernel, programmatic});
        return cudaSuccess;
    }
    if (!stream && global_capture_active()) {
        invalidate_global_captures();
        return fail(cudaErrorStreamCaptureImplicit,
                    std::string(what) + " on the legacy (null) stream while a stream is being captured");
    }
    if (may_defer && defer(stream, kernel, work)) return cudaSuccess;  // a deferred stream's (deferred.cpp)
    if (!may_defer && stream && deferred_streams()) {  // what the stream holds runs first
        cudaError_t err = drain(stream);
        if (err != cudaSuccess) return err;
    }
    cudaError_t err = work();
    set_last_error(err);
    return err;
}
} // namespace

cudaError_t submit(cudaStream_t stream, const char *what, std::function<cudaError_t()> work) {
    cudaError_t err = flush_pending();
    if (err != cudaSuccess) return err;
    return submit_node(stream, what, false, false, std::move(work));
}

cudaError_t submit_now(cudaStream_t stream, const char *what, std::function<cudaError_t()> work) {
    cudaError_t err = flush_pending();
    if (err != cudaSuccess) return err;
    return submit_node(stream, what, false, false, std::move(work), false);
}

cudaError_t submit_kernel(cudaStream_t stream, const char *what, bool programmatic, std::function<cudaError_t()> work) {
    return submit_node(stream, what, true, programmatic, std::move(work));
}

long graph_programmatic_edges(const CUgraph_st &g) {
    long n = 0;
    for (size_t i = 1; i < g.nodes.size(); i++) n += g.nodes[i].programmatic && g.nodes[i - 1].kernel;
    return n;
}

namespace {
std::atomic<long> instantiated_programmatic_edges{0};
}
long programmatic_edges_instantiated() { return instantiated_programmatic_edges.load(); }

} // namespace emu

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    if (!stream) return emu::fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture: the legacy stream cannot be captured");
    if (stream->capture) return emu::fail(cudaErrorIllegalState, "cudaStreamBeginCapture: already capturing");
    emu::drain(stream);  // a deferred stream's earlier work is not part of the graph
    stream->capture = new CUgraph_st;
    stream->capture_invalid = false;
    if (mode == cudaStreamCaptureModeGlobal) {
        std::lock_guard<std::mutex> lock(capture_mutex);
        global_captures.push_back(stream);
    }
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    if (!stream || !stream->capture) return emu::fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    if (!graph) return emu::fail(cudaErrorInvalidValue, "cudaStreamEndCapture: null graph pointer");
    {
        std::lock_guard<std::mutex> lock(capture_mutex);
        for (size_t i = 0; i < global_captures.size(); i++)
            if (global_captures[i] == stream) global_captures.erase(global_captures.begin() + (long)i);
    }
    CUgraph_st *g = stream->capture;
    stream->capture = nullptr;
    if (stream->capture_invalid) {
        delete g;
        *graph = nullptr;
        return emu::fail(cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture: the capture was invalidated by an earlier error");
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    if (!exec || !graph) return emu::fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null argument");
    *exec = new CUgraphExec_st{graph->nodes};
    emu::instantiated_programmatic_edges += emu::graph_programmatic_edges(*graph);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return emu::fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: null graph");
    // Captured into another graph: the whole replay becomes one node.
    return emu::submit(stream, "cudaGraphLaunch", [exec]() {
        for (EmuGraphNode &node : exec->nodes) {
            // a copy, memset ... waits for every kernel before it (src/launch_ex.cpp)
            cudaError_t err = node.kernel ? cudaSuccess : emu::flush_pending();
            if (err == cudaSuccess) err = node.work();
            if (err != cudaSuccess)
                return emu::fail(err, "cudaGraphLaunch: node " + node.what + " failed: " + cudaGetErrorString(err));
        }
        return cudaSuccess;
    });
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) {
    if (!graph || !numNodes) return emu::fail(cudaErrorInvalidValue, "cudaGraphGetNodes: null argument");
    if (nodes) return emu::fail(cudaErrorNotSupported, "cudaGraphGetNodes: only the count (nodes == NULL) is emulated");
    *numNodes = graph->nodes.size();
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

} // extern "C"
