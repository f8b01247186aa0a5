// launch_ex.cpp — what cudaLaunchKernelEx and cudaLaunchCooperativeKernel (emu/launch.h) need
// besides the launch itself: the kernel's name from the call's text, the launch attributes, the
// cooperative launch's residency check, and (run_launch, which every launch goes through) the
// overlap of a programmatic launch with the kernel before it.
//
// Programmatic dependent launch, emulated so that a kernel that reads before it waits
// fails: a launch with cudaLaunchAttributeProgrammaticStreamSerialization runs its blocks up to
// their cudaGridDependencySynchronize BEFORE the kernel launched before it on the stream finishes.
//
// On a GPU such a launch may start once the previous kernel's blocks have all triggered
// (cudaTriggerProgrammaticLaunchCompletion) or exited, and cudaGridDependencySynchronize returns
// once that kernel has completed and its writes are visible. What a kernel does before its wait
// may therefore run at any time during the previous kernel. The emulator takes the earliest:
//
//   - a programmatic launch is held back (pending) instead of run at once, so that the kernel
//     launched after it can still overlap it;
//   - when the next launch on the same stream is programmatic too, its blocks run first, each up
//     to its cudaGridDependencySynchronize (as many as are resident at once: they hold their SMs
//     while waiting; the rest start after), then the pending kernel runs to its end, and the new
//     launch, its dependency now complete, becomes the pending one;
//   - anything else (another kind of launch, a copy, a memset, a synchronisation, an error query,
//     a launch on another stream, a graph launch) first runs the pending kernel to its end.
//
// So the part of a kernel before its wait sees memory as it was before the previous kernel ran
// (a read of that kernel's output gets stale data, and the bitwise tests fail), and what it
// writes there the previous kernel may still read or overwrite. A programmatic launch that never
// waits is reported (end_launch): the kernel after it could overtake the one before it. The
// trigger is counted but changes nothing: starting the dependent kernel earlier than a GPU would
// is always allowed. A plain launch is not held back (it runs at once, as before), and so the
// first kernel of a programmatic pair must be launched with the attribute too for the overlap
// to show (the decode step's fused kernels follow one another so). Per host thread: two
// engines, the pending launch's and the new one's (src/engine.cpp).
#include <stdio.h>
#include <string.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "../include/emu/launch.h"
#include "engine_internal.h"
#include "runtime_internal.h"

namespace emu {

namespace {
std::mutex names_mu;
std::set<std::string> names; // launch names, kept for the process (KernelRun holds a const char *)
} // namespace

const char *launch_name(const char *call_text, int index) {
    // Split at commas outside <>, () and []: "&cfg, k<float, 4>, a, b" -> "k<float, 4>".
    std::string arg;
    int depth = 0, at = 0;
    for (const char *p = call_text; *p; p++) {
        char c = *p;
        if (c == '<' || c == '(' || c == '[') depth++;
        if ((c == '>' || c == ')' || c == ']') && depth > 0) depth--;
        if (c == ',' && depth == 0) {
            if (at++ == index) break;
            continue;
        }
        if (at == index) arg += c;
    }
    size_t first = arg.find_first_not_of(" &"), last = arg.find_last_not_of(' ');
    arg = first == std::string::npos ? std::string("kernel") : arg.substr(first, last - first + 1);
    std::lock_guard<std::mutex> lock(names_mu);
    return names.insert(arg).first->c_str();
}

cudaError_t apply_launch_attributes(const char *name, const cudaLaunchConfig_t *config, LaunchConfig &cfg) {
    if (config->numAttrs && !config->attrs)
        return fail(cudaErrorInvalidValue, std::string("cudaLaunchKernelEx of ") + name + ": " +
                                               std::to_string(config->numAttrs) + " attributes but a null array");
    for (unsigned i = 0; i < config->numAttrs; i++) {
        const cudaLaunchAttribute &a = config->attrs[i];
        switch (a.id) {
        case cudaLaunchAttributeIgnore: break;
        case cudaLaunchAttributeCooperative: cfg.cooperative = a.val.cooperative != 0; break;
        case cudaLaunchAttributeProgrammaticStreamSerialization:
            cfg.programmatic = a.val.programmaticStreamSerializationAllowed != 0;
            break;
        default:
            return fail(cudaErrorInvalidValue, std::string("cudaLaunchKernelEx of ") + name + ": launch attribute " +
                                                   std::to_string((int)a.id) + " is not emulated");
        }
    }
    return cudaSuccess;
}

cudaError_t check_cooperative(const char *name, const LaunchConfig &cfg) {
    unsigned long long blocks = (unsigned long long)cfg.grid.x * cfg.grid.y * cfg.grid.z;
    unsigned threads = cfg.block.x * cfg.block.y * cfg.block.z;
    int per_sm = blocks_per_sm(threads, cfg.shmem);
    unsigned long long fit = (unsigned long long)sm_count() * (unsigned long long)per_sm;
    if (blocks <= fit) return cudaSuccess;
    return fail(cudaErrorCooperativeLaunchTooLarge,
                std::string("cooperative launch of ") + name + ": " + std::to_string(blocks) +
                    " blocks, but at most " + std::to_string(fit) + " can be resident at once (" +
                    std::to_string(sm_count()) + " SMs x " + std::to_string(per_sm) + " blocks of " +
                    std::to_string(threads) + " threads; cudaOccupancyMaxActiveBlocksPerMultiprocessor)");
}

// ---- programmatic dependent launch (see the top) ----


namespace {

struct Held {
    std::shared_ptr<void> keep; // the kernel's closure (its arguments), which run.arg points into
    KernelRun run;
    cudaStream_t stream;
    Engine *engine = nullptr; // where its blocks wait, once some have run
};

thread_local std::unique_ptr<Held> pending;

// Runs what is left of a held launch (all of it if none has run) to its end.
cudaError_t complete(Held &h) {
    Engine *e = h.engine;
    if (!e) {
        e = &idle_engine();
        begin_launch(*e, h.run, true);
    }
    e->dependency_done = 1;
    continue_launch(*e);
    return end_launch(*e);
}

} // namespace

cudaError_t flush_pending() {
    if (!pending) return cudaSuccess;
    std::unique_ptr<Held> h = std::move(pending);
    cudaError_t err = complete(*h);
    if (err != cudaSuccess) set_last_error(err);
    return err;
}

cudaError_t run_launch(cudaStream_t stream, std::shared_ptr<void> keep, const KernelRun &run) {
    cudaError_t err = check_launch_config(run.name, run.grid, run.block, run.dynamic_shmem, run.shmem_limit);
    if (err != cudaSuccess) return err;
    std::unique_ptr<Held> before = std::move(pending);
    if (before && (!run.programmatic || before->stream != stream)) {
        err = complete(*before);
        before.reset();
        if (err != cudaSuccess) return err;
    }
    if (!run.programmatic) return run_kernel(run);
    auto h = std::make_unique<Held>(Held{std::move(keep), run, stream});
    if (!before) { // nothing to overlap: held until the next operation
        pending = std::move(h);
        return cudaSuccess;
    }
    // This launch's blocks up to their waits, then the kernel before it to its end.
    Engine &e = idle_engine();
    h->engine = &e;
    begin_launch(e, h->run, false);
    const bool finished = continue_launch(e);
    cudaError_t before_err = complete(*before);
    if (finished) { // every block ended without waiting (end_launch reports it)
        err = end_launch(e);
        return before_err != cudaSuccess ? before_err : err;
    }
    e.dependency_done = 1;
    pending = std::move(h);
    return before_err;
}

} // namespace emu
