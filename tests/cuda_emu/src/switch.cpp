// switch.cpp — the scheduler's per-switch paths: what runs for every emulated thread at every
// __syncthreads and warp op (record why the thread waits, complete a warp's rendezvous, pick the
// next runnable thread of the pass, switch to it), and between passes (release the lanes of the
// warp ops and the barrier that completed, and the waits on a grid counter that now holds its
// target). The loop around them is engine.cpp's.
//
// Built without AddressSanitizer and UBSan (emu.mk: EMU_LAYER_UNCHECKED), the one file of the
// layer that is: these paths run tens of millions of times in a test of a model with a real
// vocabulary, and a function the sanitizers skip (no_sanitize) cannot inline a checked one, so
// std::vector's data() and operator[] each cost a call there (a tenth of a whole-model test's
// perf samples, 2026-12-01). The kernels, the emulated runtime and memory, and everything else
// the emulated binaries run stay checked.
//
// A waiting call records where and why the thread waits (state, site, warp op and mask, the
// value it contributes), updates the engine's counters, and switches to the next thread of the
// pass (or the host), and returns once the barrier or rendezvous is complete and the thread's
// turn has come again.
#include <math.h>
#include <string.h>

#include <string>

#include "engine_internal.h"

namespace emu {

// The next runnable thread of the pass, or null at its end (or after a fault).
Thread *next_in_pass(Engine &e) {
    if (e.failed) return nullptr;
    const int n = (int)e.nthreads;
    Thread *const *threads = e.threads.data();
    while (++e.pos < n) {
        Thread *t = threads[e.reverse ? n - 1 - e.pos : e.pos];
        if (t->state == State::Runnable) return t;
    }
    return nullptr;
}

void switch_away(Engine &e, Thread &t) {
    Thread *next = next_in_pass(e);
    if (!next) {
        fiber_yield(t.fiber, e.host);
        return;
    }
    e.current = next;
    threadIdx = next->idx;
    fiber_switch(t.fiber, next->fiber);
}

// A warp reduction's five xor-shuffle steps over the 32 lanes' values (their bits as deposited),
// in place: after the step of offset o, lane l holds op(v[l], v[l ^ o]), its own value first as
// the kernel's `v = v OP __shfl_xor_sync(full, v, o)` has it.
template <class T, class Op> static void butterfly_as(uint64_t *v, Op op) {
    T a[32], next[32];
    for (unsigned l = 0; l < 32; l++) a[l] = __builtin_bit_cast(T, (uint32_t)v[l]);
    for (unsigned o = 16; o > 0; o >>= 1) {
        for (unsigned l = 0; l < 32; l++) next[l] = op(a[l], a[l ^ o]);
        memcpy(a, next, sizeof a);
    }
    for (unsigned l = 0; l < 32; l++) v[l] = __builtin_bit_cast(uint32_t, a[l]);
}

static bool is_reduction(WarpOp op) {
    return op == WarpOp::ReduceSum || op == WarpOp::ReduceMax || op == WarpOp::ReduceSumInt;
}

// Each lane's result of the whole warp's reduction; an int sum that overflows at any step marks
// every lane's result (bit 32: warp_reduce's fault).
static void reduce_warp(WarpOp op, uint64_t *v) {
    if (op == WarpOp::ReduceSum) {
        butterfly_as<float>(v, [](float a, float b) { return a + b; });
    } else if (op == WarpOp::ReduceMax) {
        butterfly_as<float>(v, [](float a, float b) { return fmaxf(a, b); });
    } else {
        bool overflow = false;
        butterfly_as<int>(v, [&](int a, int b) {
            int r;
            overflow |= __builtin_add_overflow(a, b, &r);
            return r;
        });
        if (overflow)
            for (unsigned l = 0; l < 32; l++) v[l] |= 1ull << 32;
    }
}

bool complete_warp(Engine &e, unsigned w) {
    bool progress = false;
    const unsigned present = warp_lanes_present(e, w);
    Thread *const *lanes = e.threads.data() + w * 32;
    const uint64_t *in = e.warp_in.data() + w * 32;
    uint64_t *out = e.warp_out.data() + w * 32;
    Warp &wp = e.warps.data()[w];
    if (wp.agree && wp.arrived == (wp.mask & present)) {
        // Every waiting lane called the same op with the same mask, and all of the mask came.
        for (uint32_t bits = wp.arrived; bits; bits &= bits - 1) {
            unsigned m = (unsigned)__builtin_ctz(bits);
            out[m] = in[m];
            lanes[m]->state = State::Released;
        }
        if (is_reduction(wp.op) && wp.arrived == 0xffffffffu) reduce_warp(wp.op, out);
        e.at_warp -= (unsigned)__builtin_popcount(wp.arrived);
        wp.released |= wp.arrived;
        wp.arrived = 0;
        e.any_released = true;
        return true;
    }
    // Lanes with different masks or ops: each group in turn, as the masks say.
    for (unsigned l = 0; l < 32; l++) {
        if (!(present >> l & 1u)) continue;
        Thread &lead = *lanes[l];
        if (lead.state != State::AtWarp) continue;
        unsigned need = lead.mask & present;
        bool all = (wp.arrived & need) == need;
        for (unsigned m = 0; m < 32 && all; m++) {
            if (!(need >> m & 1u)) continue;
            all = lanes[m]->mask == lead.mask;
        }
        if (!all) continue;
        for (unsigned m = 0; m < 32; m++) {
            if (!(need >> m & 1u)) continue;
            Thread &o = *lanes[m];
            if (o.op != lead.op) {
                report(e, where_str(e) + ": lanes of one warp rendezvous disagree: " + thread_str(lead) +
                              " calls " + warp_op_name(lead.op) + " at " + site(lead.file, lead.line) + ", " +
                              thread_str(o) + " calls " + warp_op_name(o.op) + " at " + site(o.file, o.line));
                return false;
            }
            out[m] = in[m];
            o.state = State::Released;
            e.at_warp--;
        }
        if (is_reduction(lead.op) && need == 0xffffffffu) reduce_warp(lead.op, out);
        wp.arrived &= ~need;
        wp.released |= need;
        e.any_released = true;
        progress = true;
    }
    return progress;
}

void syncthreads(const char *file, int line) {
    Engine &e = cur_engine();
    Thread &t = *e.current;
    t.state = State::AtBarrier;
    t.file = file;
    t.line = line;
    if (e.at_barrier++ == 0)
        e.barrier_first = &t;
    else if (line != e.barrier_first->line || (file != e.barrier_first->file && strcmp(file, e.barrier_first->file)))
        e.barrier_mismatch = true;
    switch_away(e, t);
}

WarpExchange warp_rendezvous(WarpOp op, unsigned mask, uint64_t value, const char *file, int line) {
    Engine &e = cur_engine();
    Thread &t = *e.current;
    unsigned lane = t.linear % 32;
    if (!(mask >> lane & 1u))
        device_fault(file, line, "%s with mask 0x%08x called by lane %u, which is not in the mask", warp_op_name(op),
                     mask, lane);
    t.state = State::AtWarp;
    e.at_warp++;
    t.op = op;
    t.mask = mask;
    t.file = file;
    t.line = line;
    e.warp_in.data()[t.linear] = value;
    // The last lane of the mask to arrive completes the rendezvous (complete_warp checks that
    // the lanes agree); the lanes run on in the next pass.
    const unsigned w = t.linear / 32, first = w * 32;
    const unsigned present = warp_lanes_present(e, w);
    Warp &wp = e.warps.data()[w];
    if (wp.arrived == 0) {
        wp.mask = mask;
        wp.op = op;
        wp.agree = true;
    } else if (mask != wp.mask || op != wp.op) {
        wp.agree = false;
    }
    wp.arrived |= 1u << lane;
    if ((wp.arrived & mask & present) == (mask & present)) complete_warp(e, w);
    switch_away(e, t);
    return WarpExchange{e.warp_out.data() + first, lane, present};
}

// The source lane of a shuffle by lane `lane` (CUDA's semantics), or -1: its own value.
static int shuffle_source(WarpOp op, unsigned lane, int arg, unsigned width) {
    const unsigned base = lane & ~(width - 1), in_segment = lane & (width - 1);
    switch (op) {
    case WarpOp::Shfl: return (int)(base + ((unsigned)arg & (width - 1)));
    case WarpOp::ShflUp: return in_segment < (unsigned)arg ? -1 : (int)(lane - (unsigned)arg);  // none below: own
    case WarpOp::ShflDown: return in_segment + (unsigned)arg >= width ? -1 : (int)(lane + (unsigned)arg);  // past it
    default: {  // ShflXor: a lane of a later segment gives the caller its own value
        const unsigned src = lane ^ (unsigned)arg;
        return src >= base + width ? -1 : (int)src;
    }
    }
}

uint64_t warp_shuffle(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line) {
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
        device_fault(file, line, "%s: width %d is not a power of two <= 32", warp_op_name(op), width);
    const WarpExchange x = warp_rendezvous(op, mask, value, file, line);
    const int src = shuffle_source(op, x.lane, arg, (unsigned)width);
    if (src < 0) return value;
    if (!(x.present >> src & 1u))
        device_fault(file, line, "%s reads lane %d, which does not exist (the block's last warp is partial)",
                     warp_op_name(op), src);
    if (!(mask >> src & 1u))
        device_fault(file, line, "%s reads lane %d, which is not in the mask 0x%08x", warp_op_name(op), src, mask);
    return x.values[src];
}

uint64_t warp_reduce(WarpOp op, uint64_t value, const char *file, int line) {
    const WarpExchange x = warp_rendezvous(op, 0xffffffffu, value, file, line);
    if (x.present != 0xffffffffu)
        device_fault(file, line, "%s reads lane %d, which does not exist (the block's last warp is partial)",
                     warp_op_name(op), __builtin_ctz(~x.present));
    const uint64_t r = x.values[x.lane];
    if (r >> 32) device_fault(file, line, "%s: signed integer overflow in the warp's sum", warp_op_name(op));
    return r;
}

// Host side, between passes (engine.cpp's run_block): the lanes whose warp op completed in the
// pass run again; every thread, waiting at one __syncthreads, runs again.
void release_warps(Engine &e) {
    Thread *const *threads = e.threads.data();
    Warp *warps = e.warps.data();
    for (size_t w = 0, n = e.warps.size(); w < n; w++) {
        for (uint32_t bits = warps[w].released; bits; bits &= bits - 1)
            threads[w * 32 + (unsigned)__builtin_ctz(bits)]->state = State::Runnable;
        warps[w].released = 0;
    }
    e.any_released = false;
}

void release_barrier(Engine &e) {
    Thread *const *threads = e.threads.data();
    for (unsigned i = 0; i < e.nthreads; i++) threads[i]->state = State::Runnable;
    e.at_barrier = 0;
    e.barrier_first = nullptr;
}

bool release_grid_waits(Engine &e) {
    Thread *const *threads = e.threads.data();
    bool any = false;
    for (unsigned i = 0; i < e.nthreads; i++) {
        Thread &t = *threads[i];
        if (t.state != State::AtGrid || !grid_wait_satisfied(t)) continue;
        t.state = State::Runnable;
        e.at_grid--;
        any = true;
    }
    return any;
}

} // namespace emu
