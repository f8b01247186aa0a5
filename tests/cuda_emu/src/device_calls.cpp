// device_calls.cpp — what kernel code calls inside its fiber besides barriers and warp ops
// (src/switch.cpp): __shared__ allocation, faults; plus the emulator's controls (emu/api.h).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <string>

#include "emu/kernel_runs.h"
#include "engine_internal.h"
#include "runtime_internal.h"

namespace emu {

namespace {
std::atomic<int> schedule_setting{-1}; // -1: not read from EMU_SCHEDULE yet
} // namespace

unsigned char shared_fill() { return schedule() == Schedule::Forward ? 0xff : 0x00; }

void *static_shared(const void *key, const char *file, int line, const char *name, size_t size, size_t align) {
    Engine &e = cur_engine();
    for (SharedVar &v : e.shared)
        if (v.key == key) return v.ptr;
    e.shared_bytes += size;
    if (e.shared_bytes > e.run->shmem_limit)
        device_fault(file, line, "__shared__ %s: the block uses %zu bytes of shared memory, over the limit of %zu", name,
                     e.shared_bytes, e.run->shmem_limit);
    void *p = nullptr;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) != 0) abort();
    memset(p, shared_fill(), size);
    e.shared.push_back(SharedVar{key, size, p});
    return p;
}

void *dynamic_shared() { return cur_engine().dynamic; }

namespace {
std::atomic<long long> prefetched{0};  // l2_prefetch_bulk's bytes, every thread's
} // namespace

void l2_prefetch_bulk(const void *p, unsigned n, const char *file, int line) {
    if ((uintptr_t)p % 16 != 0 || n % 16 != 0)
        device_fault(file, line, "cp.async.bulk.prefetch.L2: address %p or size %u not a multiple of 16", p, n);
    if (!device_range(p, n))
        device_fault(file, line, "cp.async.bulk.prefetch.L2: [%p, +%u) is not inside one device allocation", p, n);
    prefetched += n;
}

long long l2_prefetch_bytes() { return prefetched.load(); }

void device_fault(const char *file, int line, const char *fmt, ...) {
    Engine &e = cur_engine();
    Thread &t = *e.current;
    {
        char what[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        // A block, so the strings are freed before this fiber is parked for good.
        report(e, where_str(e) + ", " + thread_str(t) + ", at " + site(file, line) + ": " + what);
    }
    // FailureMode::Return: park this fiber for good; run_kernel restarts the fibers.
    t.state = State::Done;
    e.done++;
    switch_away(e, t);
    abort(); // never resumed
}

cudaError_t launch_argument_fault(const char *name, const std::string &what) {
    Engine &e = get_engine();
    FailureMode mode = e.mode;
    fprintf(stderr, "EMU FAULT: kernel %s: %s\n", name, what.c_str());
    fflush(stderr);
    if (mode == FailureMode::Abort) abort();
    e.fault = std::string("kernel ") + name + ": " + what;
    return cudaErrorInvalidValue;
}

// ---- controls (emu/api.h) ----

void set_schedule(Schedule s) { schedule_setting = (int)s; }

Schedule schedule() {
    int s = schedule_setting.load();
    if (s < 0) {
        const char *env = getenv("EMU_SCHEDULE");
        s = env && strcmp(env, "reverse") == 0 ? (int)Schedule::Reverse : (int)Schedule::Forward;
        if (env && strcmp(env, "reverse") != 0 && strcmp(env, "forward") != 0) {
            fprintf(stderr, "EMU: EMU_SCHEDULE=%s: expected forward or reverse\n", env);
            abort();
        }
        schedule_setting = s;
    }
    return (Schedule)s;
}

void set_failure_mode(FailureMode m) { get_engine().mode = m; }
FailureMode failure_mode() { return get_engine().mode; }
std::string last_fault() { return get_engine().fault; }
size_t fibers_made() { return get_engine().pool.size(); }
void clear_last_fault() { get_engine().fault.clear(); }

} // namespace emu
