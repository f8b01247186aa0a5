// test_streams.cpp — streams, events, async copies, and graph capture + replay: a captured
// launch runs only at cudaGraphLaunch, with the arguments it had at capture, once per replay.
#include <criterion/criterion.h>

#include <vector>

#include "emu_test.h"

__global__ void add_value(float *x, float v, int n) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += v;
}

Test(emu_streams, async_work_in_order_and_events) {
    const int n = 100;
    cudaStream_t s;
    cudaEvent_t start, stop;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&start), cudaSuccess);
    cr_assert_eq(cudaEventCreate(&stop), cudaSuccess);
    float *h;
    cr_assert_eq(cudaMallocHost((void **)&h, n * sizeof(float)), cudaSuccess);
    for (int i = 0; i < n; i++) h[i] = (float)i;
    DeviceBuffer<float> d(n);
    cr_assert_eq(cudaEventRecord(start, s), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(d.ptr, h, n * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
    add_value<<<(n + 31) / 32, 32, 0, s>>>(d.ptr, 1.5f, n);
    cr_assert_eq(cudaMemsetAsync(d.ptr, 0, 4, s), cudaSuccess); // x[0] = 0
    cr_assert_eq(cudaMemcpyAsync(h, d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    cr_assert_eq(cudaEventRecord(stop, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaEventSynchronize(stop), cudaSuccess);
    float ms = -1;
    cr_assert_eq(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
    cr_assert(ms >= 0.0f);
    cr_assert_eq(h[0], 0.0f);
    for (int i = 1; i < n; i++) cr_assert_eq(h[i], (float)i + 1.5f);
    cr_assert_eq(cudaFreeHost(h), cudaSuccess);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}

Test(emu_streams, graph_replay_repeats_the_captured_work) {
    const int n = 50;
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    DeviceBuffer<float> d(n), other(n);
    float v = 2.0f;
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    add_value<<<2, 32, 0, s>>>(d.ptr, v, n);
    v = 100.0f; // the launch copied v = 2 at capture
    cr_assert_eq(cudaMemcpyAsync(other.ptr, d.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice, s), cudaSuccess);
    cudaGraph_t graph;
    cr_assert_eq(cudaStreamEndCapture(s, &graph), cudaSuccess);
    for (float x : d.to_host()) cr_assert_eq(x, 0.0f, "capture must not run the work");
    cudaGraphExec_t exec;
    cr_assert_eq(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cr_assert_eq(cudaGraphDestroy(graph), cudaSuccess); // the instance keeps its own copy
    cr_assert_eq(cudaGraphLaunch(exec, s), cudaSuccess);
    cr_assert_eq(cudaGraphLaunch(exec, s), cudaSuccess);
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    for (float x : d.to_host()) cr_assert_eq(x, 4.0f, "two replays add twice");
    for (float x : other.to_host()) cr_assert_eq(x, 4.0f, "the copy reads memory at replay time");
    cr_assert_eq(cudaGraphExecDestroy(exec), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}

Test(emu_streams, synchronous_calls_during_capture_invalidate_it) {
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    DeviceBuffer<float> d(4);
    float h[4];
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaMemcpy(h, d.ptr, sizeof h, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
    add_value<<<1, 4>>>(d.ptr, 1.0f, 4); // the legacy stream while capturing
    cr_assert_eq(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
    cudaGraph_t graph;
    cr_assert_eq(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    cr_assert_null(graph);
    cr_assert_eq(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
}

Test(emu_streams, copies_check_their_pointers) {
    DeviceBuffer<float> d(8);
    float h[8] = {0};
    cr_assert_eq(cudaMemcpy(d.ptr, h, 9 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(h, d.ptr, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // kind swapped
    cr_assert_eq(cudaMemcpy(d.ptr, h, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemset(h, 0, sizeof h), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(h), cudaErrorInvalidValue);
    cr_assert_eq(cudaMemcpy(h, d.ptr, sizeof h, cudaMemcpyDefault), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue); // the errors above left it set
}

Test(emu_streams, devices_and_properties) {
    int count = 0, dev = -1, value = 0;
    cr_assert_eq(cudaGetDeviceCount(&count), cudaSuccess);
    cr_assert(count >= 3);
    cr_assert_eq(cudaSetDevice(2), cudaSuccess);
    cr_assert_eq(cudaGetDevice(&dev), cudaSuccess);
    cr_assert_eq(dev, 2);
    cr_assert_eq(cudaSetDevice(count), cudaErrorInvalidDevice);
    cudaDeviceProp prop;
    cr_assert_eq(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    cr_assert_eq(prop.warpSize, 32);
    cr_assert_eq(prop.sharedMemPerBlock, 48u * 1024);
    cr_assert_eq(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    cr_assert_eq(value, prop.multiProcessorCount);
    cr_assert_eq(cudaDeviceGetAttribute(&value, cudaDevAttrGlobalMemoryBusWidth, 0), cudaSuccess);
    cr_assert(value > 0);
    cr_assert_str_eq(cudaGetErrorString(cudaSuccess), "no error");
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
}

// Deferred streams (emu/api.h): a stream's work waits for the host to wait for it, in order; an
// event waits for the work before it and not the work after; a synchronous copy on the legacy
// stream does not wait for a non-blocking stream (as on a GPU), a blocking one it does.
Test(emu_streams, deferred_streams_run_work_when_the_host_waits) {
    emu::set_deferred_streams(true);
    const int n = 64;
    cudaStream_t s;
    cudaEvent_t first;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cr_assert_eq(cudaEventCreateWithFlags(&first, cudaEventDisableTiming), cudaSuccess);
    float *h;
    cr_assert_eq(cudaMallocHost((void **)&h, n * sizeof(float)), cudaSuccess);
    DeviceBuffer<float> d(std::vector<float>(n, 1.0f));
    add_value<<<2, 32, 0, s>>>(d.ptr, 1.0f, n);  // x = 2
    cr_assert_eq(cudaMemcpyAsync(h, d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    cr_assert_eq(cudaEventRecord(first, s), cudaSuccess);
    add_value<<<2, 32, 0, s>>>(d.ptr, 10.0f, n);  // x = 12, after the event
    h[0] = -1.0f;
    std::vector<float> now(n);
    cr_assert_eq(cudaMemcpy(now.data(), d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(now[0], 1.0f, "a non-blocking stream's kernel ran before anything waited for it");
    cr_assert_eq(h[0], -1.0f, "the queued copy ran before anything waited for it");
    cr_assert_eq(cudaEventSynchronize(first), cudaSuccess);
    cr_assert_eq(h[0], 2.0f);
    cr_assert_eq(cudaMemcpy(now.data(), d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(now[0], 2.0f, "the event waited for the work after it");
    cr_assert_eq(cudaStreamSynchronize(s), cudaSuccess);
    cr_assert_eq(cudaMemcpy(now.data(), d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(now[0], 12.0f);
    // a blocking stream's work runs before a synchronous copy on the legacy stream
    cudaStream_t b;
    cr_assert_eq(cudaStreamCreate(&b), cudaSuccess);
    add_value<<<2, 32, 0, b>>>(d.ptr, 1.0f, n);
    cr_assert_eq(cudaMemcpy(now.data(), d.ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cr_assert_eq(now[0], 13.0f);
    cudaStreamDestroy(b);
    cudaEventDestroy(first);
    cudaStreamDestroy(s);
    cr_assert_eq(cudaFreeHost(h), cudaSuccess);
    emu::set_deferred_streams(false);
}

// An async copy from pageable host memory takes its bytes when it is called, one to pageable
// memory returns when done; from pinned memory the bytes are read when the copy runs.
Test(emu_streams, deferred_streams_stage_pageable_copies_at_once) {
    emu::set_deferred_streams(true);
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    DeviceBuffer<int> d(2);
    int pageable = 5, *pinned, back = 0;
    cr_assert_eq(cudaMallocHost((void **)&pinned, sizeof(int)), cudaSuccess);
    *pinned = 7;
    cr_assert_eq(cudaMemcpyAsync(d.ptr, &pageable, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
    cr_assert_eq(cudaMemcpyAsync(d.ptr + 1, pinned, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
    pageable = 6, *pinned = 8;  // the host rewrites both before the stream has run
    cr_assert_eq(cudaMemcpyAsync(&back, d.ptr + 1, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    cr_assert_eq(back, 8, "a copy to pageable memory returned before the work before it ran");
    std::vector<int> got = d.to_host();
    cr_assert_eq(got[0], 5, "the pageable source was read late");
    cudaStreamDestroy(s);
    cr_assert_eq(cudaFreeHost(pinned), cudaSuccess);
    emu::set_deferred_streams(false);
}
