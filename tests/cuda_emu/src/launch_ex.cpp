// launch_ex.cpp — what cudaLaunchKernelEx and cudaLaunchCooperativeKernel (emu/launch.h) need
// besides the launch itself: the kernel's name from the call's text, the launch attributes, and
// the cooperative launch's residency check.
#include <stdio.h>
#include <string.h>

#include <mutex>
#include <set>
#include <string>

#include "../include/emu/launch.h"
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

} // namespace emu
