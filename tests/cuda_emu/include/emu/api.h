// emu/api.h — controls of the emulator for tests: thread schedule and failure mode.
//
// Schedules. Between two barriers the threads of a block run one after the other; FORWARD runs
// thread 0 first, REVERSE the last thread first (and the blocks of a grid in reverse order). A kernel whose result depends on that order
// has a race between the threads of a block (typically a missing __syncthreads), so a test runs
// the launch under both and compares: emu::same_under_both_schedules(run). The env var
// EMU_SCHEDULE=forward|reverse sets the default (so a whole suite can be re-run reversed).
// Shared memory starts filled with a pattern that also depends on the schedule (0xff bytes, a
// NaN for floats, under forward; zero bytes under reverse), which exposes reads of shared memory
// that no thread wrote.
//
// Failure modes. A fault the emulator detects (divergent barrier, incomplete shuffle, bad launch
// argument, blocks deadlocked in emx_grid_wait) prints "EMU FAULT: ..." to stderr and by default aborts (a test sees SIGABRT). In
// FailureMode::Return the launch instead fails with cudaErrorLaunchFailure and the message is
// kept for emu::last_fault(); the broken-kernel self-tests use that.
#ifndef EMU_API_H
#define EMU_API_H

#include <string.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace emu {

enum class Schedule { Forward, Reverse };
void set_schedule(Schedule s); // process-wide
Schedule schedule();

enum class FailureMode { Abort, Return };
void set_failure_mode(FailureMode m); // for the calling host thread
FailureMode failure_mode();
std::string last_fault(); // the last fault message on this host thread ("" if none)
void clear_last_fault();

// Calls of cudaGridDependencySynchronize / cudaTriggerProgrammaticLaunchCompletion by kernel
// threads so far, on every host thread (a PDL test sees its kernels reach them).
long grid_dependency_syncs();
long programmatic_triggers();

// Streams. By default a stream is synchronous: work runs when it is enqueued, the soonest a GPU
// could run it, which shows a result read before it was copied out. Deferred streams
// (set_deferred_streams(true), or EMU_STREAMS=deferred in the environment) hold each stream's
// work until the host waits for it (cudaStreamSynchronize, cudaEventSynchronize up to that
// event, cudaDeviceSynchronize, a synchronous copy for the blocking streams, cudaFree), the
// latest a GPU could run it: a pinned buffer the host rewrites before a queued copy has read it,
// or reads before the copy that fills it has run, then shows too. As on a GPU, an async copy
// from pageable host memory takes the bytes at once, and one to pageable memory waits. Process-wide.
void set_deferred_streams(bool on);
bool deferred_streams();

// Fibers (each with its own stack) the calling host thread's engine has made so far: launches
// reuse them, so repeating a launch must not raise it.
size_t fibers_made();

// Host threads now blocked in an emulated NCCL call, waiting for other ranks (for self-tests
// that must know a rank really waits).
int nccl_blocked_threads();

// Runs `run` (which launches kernels and returns their output copied to the host, e.g. a
// std::vector) under the forward and then the reverse schedule; returns both outputs.
template <class F>
auto run_both_schedules(F run) -> std::pair<decltype(run()), decltype(run())> {
    Schedule saved = schedule();
    set_schedule(Schedule::Forward);
    auto forward = run();
    set_schedule(Schedule::Reverse);
    auto reverse = run();
    set_schedule(saved);
    return {std::move(forward), std::move(reverse)};
}
// Equality of two outputs, bytewise for vectors of plain values (so NaN == NaN and -0 != 0:
// any difference between the schedules counts).
template <class T> bool same_output(const T &a, const T &b) { return a == b; }
template <class T> bool same_output(const std::vector<T> &a, const std::vector<T> &b) {
    static_assert(std::is_trivially_copyable<T>::value, "compare vectors of plain values");
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
// True if `run` gives equal outputs under both schedules (no order-dependent race was seen).
template <class F> bool same_under_both_schedules(F run) {
    auto outputs = run_both_schedules(run);
    return same_output(outputs.first, outputs.second);
}

} // namespace emu

#endif
