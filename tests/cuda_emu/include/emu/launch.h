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
};
inline LaunchConfig make_config(dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0) {
    return LaunchConfig{grid, block, shmem, stream};
}

// Provided by src/runtime.cpp and src/memory.cpp.
// Runs `work` now, or records it if `stream` is being captured; returns its error.
cudaError_t submit(cudaStream_t stream, const char *what, std::function<cudaError_t()> work);
void set_last_error(cudaError_t err);
bool is_device_pointer(const void *p);
size_t shmem_limit(const void *kernel); // 48 KiB unless cudaFuncSetAttribute raised it
cudaError_t check_launch_config(const char *name, dim3 grid, dim3 block, size_t shmem, size_t limit);
cudaError_t launch_argument_fault(const char *name, const std::string &what);

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

    template <class... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launch: wrong number of arguments");
        auto closure = std::make_shared<KernelClosure<P...>>(
            KernelClosure<P...>{kernel, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)});
        size_t limit = shmem_limit(reinterpret_cast<const void *>(kernel));
        cudaError_t err = check_launch_config(name, cfg.grid, cfg.block, cfg.shmem, limit);
        if (err == cudaSuccess) {
            const char *kname = name;
            LaunchConfig c = cfg;
            err = submit(cfg.stream, name, [kname, c, limit, closure]() -> cudaError_t {
                std::string problem = closure->check_pointers();
                if (!problem.empty()) return launch_argument_fault(kname, problem);
                KernelRun run{kname, c.grid, c.block, c.shmem, limit, &KernelClosure<P...>::thread_main, closure.get()};
                return run_kernel(run);
            });
        }
        if (err != cudaSuccess) set_last_error(err);
    }
};

template <class... P> Launcher<P...> launch(const char *name, void (*kernel)(P...), LaunchConfig cfg) {
    return Launcher<P...>{name, kernel, cfg};
}

} // namespace emu

#endif
