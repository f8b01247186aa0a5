// fiber.cpp — stack allocation and context switch for the emulated threads (see fiber.h).
#include "fiber.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#ifndef EMU_FIBER_UCONTEXT
// emu_fiber_switch(save, next): pushes the callee-saved registers on the current stack, stores
// the stack pointer in *save, loads `next` and pops the same frame from it. A new fiber's stack
// is prepared with such a frame whose return address is its entry. The floating-point control
// state (MXCSR, x87 control word) is not switched: all fibers of a host thread share it, as no
// kernel changes rounding modes (saving it made each switch about twice as slow).
extern "C" void emu_fiber_switch(void **save, void *next);
asm(R"(
    .text
    .globl emu_fiber_switch
    .type emu_fiber_switch, @function
emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_fiber_switch, .-emu_fiber_switch
)");
#endif

namespace emu {

static size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

namespace {

// Free stacks of each size, carved from regions of kRegionBytes at most (fiber.h: AddressSanitizer
// is told the region is the stack, and its cleanup on a noreturn call accepts at most 64 MiB).
// Regions are never unmapped; a destroyed fiber's stack returns here, its pages released.
// Several host threads create fibers (one per emulated device in the NCCL tests): hence the lock.
struct Slot {
    char *stack;
    char *region;
    size_t region_size;
};
constexpr size_t kRegionBytes = (size_t)60 << 20;
std::mutex slots_mu;
std::map<size_t, std::vector<Slot>> free_slots; // by stack size

Slot take_slot(size_t stack_size) {
    std::lock_guard<std::mutex> lock(slots_mu);
    std::vector<Slot> &free = free_slots[stack_size];
    if (free.empty()) {
        const size_t page = page_size(), slot = stack_size + page, n = std::max<size_t>(1, kRegionBytes / slot);
        char *region = (char *)mmap(nullptr, n * slot, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (region == MAP_FAILED) {
            perror("EMU: mmap of a region of fiber stacks");
            abort();
        }
        for (size_t i = n; i-- > 0;) {
            char *guard = region + i * slot;
            mprotect(guard, page, PROT_NONE); // guard page: an overflow faults
            free.push_back(Slot{guard + page, region, n * slot});
        }
    }
    Slot s = free.back();
    free.pop_back();
    return s;
}

} // namespace

void fiber_create(Fiber &f, size_t stack_size, void (*entry)()) {
    size_t page = page_size();
    stack_size = (stack_size + page - 1) / page * page;
    Slot s = take_slot(stack_size);
    f.stack = s.stack;
    f.size = stack_size;
    f.region = s.region;
    f.region_size = s.region_size;
    // Stacks are page aligned and equally spaced, so their tops would all fall in the same cache
    // sets; starting each one a different number of cache lines below its top spreads them.
    static std::atomic<unsigned> created{0};
    f.color = (size_t)(created++ % 512) * 64;
    fiber_reset(f, entry);
}

void fiber_reset(Fiber &f, void (*entry)()) {
#ifdef EMU_ASAN
    // Frames abandoned on this stack may have left their redzones poisoned.
    __asan_unpoison_memory_region(f.stack, f.size);
#endif
    f.asan_fake_stack = nullptr;
    f.asan_pending = false;
#ifdef EMU_FIBER_UCONTEXT
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = f.size - f.color;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
#else
    // Initial frame, from the saved stack pointer up: r15 r14 r13 r12 rbx rbp, then the return
    // address (entry), then a zero "return address" of entry itself. The stack pointer at entry
    // must be 8 mod 16, as after a call: top - 8.
    char *top = f.stack + f.size - f.color; // 16-byte aligned
    void **sp = (void **)(top - 64);
    for (int i = 0; i < 6; i++) sp[i] = nullptr; // r15..rbp
    sp[6] = (void *)entry;
    sp[7] = nullptr;
    f.sp = sp;
#endif
}

void fiber_destroy(Fiber &f) {
    if (!f.stack) return;
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(f.stack, f.size); // the next fiber here must start clean
#endif
    madvise(f.stack, f.size, MADV_DONTNEED); // its pages go back; the next use reads zeros
    {
        std::lock_guard<std::mutex> lock(slots_mu);
        free_slots[f.size].push_back(Slot{f.stack, f.region, f.region_size});
    }
    f.stack = nullptr;
}

// Annotated switches (fiber.h): start_switch names the stack that runs next (the target's
// region, or the host's stack) and the target, once running, finishes it; a switch within a
// region is a plain one. `asan_pending` tells the side that resumes whether to finish.
void fiber_resume(FiberHost &host, Fiber &f) {
#ifdef EMU_ASAN
    f.asan_pending = true;
    __sanitizer_start_switch_fiber(&host.asan_fake_stack, f.region, f.region_size);
#endif
#ifdef EMU_FIBER_UCONTEXT
    swapcontext(&host.ctx, &f.ctx);
#else
    emu_fiber_switch(&host.sp, f.sp);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(host.asan_fake_stack, nullptr, nullptr); // fiber_yield annotates always
#endif
}

void fiber_yield(Fiber &f, FiberHost &host) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&f.asan_fake_stack, host.stack_bottom, host.stack_size);
#endif
#ifdef EMU_FIBER_UCONTEXT
    swapcontext(&f.ctx, &host.ctx);
#else
    emu_fiber_switch(&f.sp, host.sp);
#endif
#ifdef EMU_ASAN
    if (f.asan_pending) {
        f.asan_pending = false;
        __sanitizer_finish_switch_fiber(f.asan_fake_stack, nullptr, nullptr);
    }
#endif
}

void fiber_switch(Fiber &from, Fiber &to) {
#ifdef EMU_ASAN
    if (from.region != to.region) {
        to.asan_pending = true;
        __sanitizer_start_switch_fiber(&from.asan_fake_stack, to.region, to.region_size);
    }
#endif
#ifdef EMU_FIBER_UCONTEXT
    swapcontext(&from.ctx, &to.ctx);
#else
    emu_fiber_switch(&from.sp, to.sp);
#endif
#ifdef EMU_ASAN
    if (from.asan_pending) {
        from.asan_pending = false;
        __sanitizer_finish_switch_fiber(from.asan_fake_stack, nullptr, nullptr);
    }
#endif
}

void fiber_started(FiberHost &host, Fiber &self) {
#ifdef EMU_ASAN
    // The host's stack, which fiber_yield switches back to, is learnt at the first start: the
    // host starts the first fiber. Later starts may come from another fiber (annotated or not).
    if (self.asan_pending) {
        self.asan_pending = false;
        if (host.stack_bottom)
            __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
        else
            __sanitizer_finish_switch_fiber(nullptr, &host.stack_bottom, &host.stack_size);
    }
#else
    (void)host;
    (void)self;
#endif
}

} // namespace emu
