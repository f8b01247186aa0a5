// emu/launch.h — what a rewritten kernel launch calls.
//
// rewrite.py turns `kernel<<<grid, block, shmem, stream>>>(a, b, c);` into
//     ::emu::launch("kernel", kernel, ::emu::make_config(grid, block, shmem, stream))(a, b, c);
// The arguments are converted to the kernel's parameter types and copied into a tuple at the
// launch (as CUDA copies them into the parameter buffer), so a launch recorded by stream capture
// replays with the values it had. Before running, every pointer argument is checked to point
// into device memory (cudaMalloc or cudaMallocHost) or be null: a host pointer passed to a
// kernel is reported, not silently read. A template kernel must be launched with its template
// arguments written out (k<float, 4><<<...>>>), since the emulator takes the kernel's address.
//
// cudaLaunchKernelEx (with the Cooperative and ProgrammaticStreamSerialization attributes) and
// cudaLaunchCooperativeKernel are macros here that pass the call's text along, so the launch is
// named as written, like a <<<>>> launch: call them with the kernel itself (not a void *), and
// without a leading `::`. A cooperative launch whose grid exceeds what the device holds at once
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor x SMs) fails with cudaErrorCooperativeLaunchTooLarge.
// A programmatic launch (cudaLaunchAttributeProgrammaticStreamSerialization) is held back so that
// the next programmatic launch's blocks run up to their cudaGridDependencySynchronize before it
// ends (src/launch_ex.cpp's run_launch).
#ifndef EMU_LAUNCH_H
#define EMU_LAUNCH_H

#include <stddef.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../cuda_runtime.h"
#include "engine.h"

namespace emu {

struct LaunchConfig {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    bool cooperative = false, programmatic = false;
};
inline LaunchConfig make_config(dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0) {
    return LaunchConfig{grid, block, shmem, stream, false, false};
}

// Provided by src/runtime.cpp and src/memory.cpp.
// Runs `work` now, queues it on a deferred stream (src/deferred.cpp: its error comes when the
// host waits), or records it if `stream` is being captured; returns its error. A kernel
// launch held back for programmatic dependent launch (src/launch_ex.cpp) runs to its end first.
cudaError_t submit(cudaStream_t stream, const char *what, std::function<cudaError_t()> work);
// submit, never held by a deferred stream: the stream's queued work runs first, then this (the
// emulated NCCL calls, whose ranks meet on the host when they run).
cudaError_t submit_now(cudaStream_t stream, const char *what, std::function<cudaError_t()> work);
// The same for a kernel launch (`work` calls run_launch, which decides what runs first); a
// captured one records whether it carries the programmatic attribute.
cudaError_t submit_kernel(cudaStream_t stream, const char *what, bool programmatic, std::function<cudaError_t()> work);
// src/launch_ex.cpp: runs `run` (whose closure `keep` holds) on `stream`, a programmatic launch
// overlapping the one before it; runs a held-back launch to its end (its error, or cudaSuccess).
cudaError_t run_launch(cudaStream_t stream, std::shared_ptr<void> keep, const KernelRun &run);
cudaError_t flush_pending();
void set_last_error(cudaError_t err);
bool is_device_pointer(const void *p);
size_t shmem_limit(const void *kernel); // 48 KiB unless cudaFuncSetAttribute raised it
cudaError_t check_launch_config(const char *name, dim3 grid, dim3 block, size_t shmem, size_t limit);
cudaError_t launch_argument_fault(const char *name, const std::string &what);
int sm_count(); // EMU_SM_COUNT (default 4)
// cudaErrorCooperativeLaunchTooLarge (with a message) if a cooperative launch's blocks cannot all
// be resident at once.
cudaError_t check_cooperative(const char *name, const LaunchConfig &cfg);
// The kernel's name from the text of a cudaLaunchKernelEx / cudaLaunchCooperativeKernel call's
// arguments: the argument at `index` (counted at template depth 0), without a leading `&`. The
// string lives as long as the process.
const char *launch_name(const char *call_text, int index);
// Reads a cudaLaunchConfig_t's attributes into `cfg`; an attribute not emulated is an error.
cudaError_t apply_launch_attributes(const char *name, const cudaLaunchConfig_t *config, LaunchConfig &cfg);

template <class T> void check_pointer_arg(const T &v, size_t index, std::string &problem) {
    if constexpr (std::is_pointer<T>::value) {
        if (v != nullptr && problem.empty() && !is_device_pointer((const void *)v))
            problem = "argument " + std::to_string(index + 1) +
                      " points to no device allocation (a host pointer? copy the data with cudaMemcpy)";
    }
}

template <class... P> struct KernelClosure {
    void (*kernel)(P...);
    std::tuple<typename std::decay<P>::type...> args;

    static void thread_main(void *self) {
        KernelClosure *c = static_cast<KernelClosure *>(self);
        std::apply(c->kernel, c->args);
    }
    std::string check_pointers() const {
        std::string problem;
        check_each(problem, std::index_sequence_for<P...>{});
        return problem;
    }
    template <size_t... I> void check_each(std::string &problem, std::index_sequence<I...>) const {
        (check_pointer_arg(std::get<I>(args), I, problem), ...);
        (void)problem;
    }
};

template <class... P> struct Launcher {
    const char *name;
    void (*kernel)(P...);
    LaunchConfig cfg;

    template <class... A> cudaError_t operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launch: wrong number of arguments");
        return submit_args(std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...));
    }
    cudaError_t submit_args(std::tuple<typename std::decay<P>::type...> &&args) const {
        auto closure = std::make_shared<KernelClosure<P...>>(KernelClosure<P...>{kernel, std::move(args)});
        size_t limit = shmem_limit(reinterpret_cast<const void *>(kernel));
        cudaError_t err = check_launch_config(name, cfg.grid, cfg.block, cfg.shmem, limit);
        if (err == cudaSuccess && cfg.cooperative) err = check_cooperative(name, cfg);
        if (err == cudaSuccess) {
            const char *kname = name;
            LaunchConfig c = cfg;
            err = submit_kernel(cfg.stream, name, cfg.programmatic, [kname, c, limit, closure]() -> cudaError_t {
                std::string problem = closure->check_pointers();
                if (!problem.empty()) {
                    flush_pending();
                    return launch_argument_fault(kname, problem);
                }
                KernelRun run{kname,        c.grid,        c.block,       c.shmem, limit, &KernelClosure<P...>::thread_main,
                              closure.get(), c.cooperative, c.programmatic};
                return run_launch(c.stream, closure, run);
            });
        }
        if (err != cudaSuccess) set_last_error(err);
        return err;
    }
};

template <class... P> Launcher<P...> launch(const char *name, void (*kernel)(P...), LaunchConfig cfg) {
    return Launcher<P...>{name, kernel, cfg};
}

// cudaLaunchKernelEx(config, kernel, args...): the arguments converted to the kernel's parameter
// types, as the real template does.
template <class... P, class... A>
cudaError_t launch_ex(const char *call_text, const cudaLaunchConfig_t *config, void (*kernel)(P...), A &&...a) {
    static_assert(sizeof...(A) == sizeof...(P), "cudaLaunchKernelEx: wrong number of kernel arguments");
    const char *name = launch_name(call_text, 1);
    if (!config) {
        set_last_error(cudaErrorInvalidValue);
        return launch_argument_fault(name, "cudaLaunchKernelEx: null configuration");
    }
    LaunchConfig cfg = make_config(config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream);
    cudaError_t err = apply_launch_attributes(name, config, cfg);
    if (err != cudaSuccess) return err;
    return Launcher<P...>{name, kernel, cfg}(std::forward<A>(a)...);
}

// cudaLaunchCooperativeKernel(kernel, grid, block, args, shmem, stream): args[i] points to the
// i-th argument, of the kernel's i-th parameter type (as CUDA reads it).
template <class... P, size_t... I>
std::tuple<typename std::decay<P>::type...> args_from_pointers(void **args, std::index_sequence<I...>) {
    return std::tuple<typename std::decay<P>::type...>(*static_cast<typename std::decay<P>::type *>(args[I])...);
}
template <class... P>
cudaError_t launch_cooperative(const char *call_text, void (*kernel)(P...), dim3 grid, dim3 block, void **args,
                               size_t shmem = 0, cudaStream_t stream = 0) {
    const char *name = launch_name(call_text, 0);
    (void)args; // unused by a kernel without parameters
    if (!args && sizeof...(P) > 0) {
        set_last_error(cudaErrorInvalidValue);
        return launch_argument_fault(name, "cudaLaunchCooperativeKernel: null argument array");
    }
    LaunchConfig cfg = make_config(grid, block, shmem, stream);
    cfg.cooperative = true;
    return Launcher<P...>{name, kernel, cfg}.submit_args(args_from_pointers<P...>(args, std::index_sequence_for<P...>{}));
}

// The C API's form, a kernel as `const void *`, loses the parameter types the emulator needs to
// read `args` or convert the arguments: a compile error that says so.
template <class...> struct untyped_kernel { static constexpr bool value = false; };
template <class... A> cudaError_t launch_cooperative(const char *, const void *, A...) {
    static_assert(untyped_kernel<A...>::value,
                  "cudaLaunchCooperativeKernel: pass the kernel itself, not a void * (the CUDA emulator needs its parameter types)");
    return cudaErrorInvalidValue;
}
template <class... A> cudaError_t launch_ex(const char *, const cudaLaunchConfig_t *, const void *, A...) {
    static_assert(untyped_kernel<A...>::value,
                  "cudaLaunchKernelEx: pass the kernel itself, not a void * (the CUDA emulator needs its parameter types)");
    return cudaErrorInvalidValue;
}

} // namespace emu

#define cudaLaunchKernelEx(...) ::emu::launch_ex(#__VA_ARGS__, __VA_ARGS__)
#define cudaLaunchCooperativeKernel(...) ::emu::launch_cooperative(#__VA_ARGS__, __VA_ARGS__)

#endif
