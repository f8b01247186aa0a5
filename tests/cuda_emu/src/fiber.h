// fiber.h — user-space stacks for the emulated CUDA threads, and the switch between them.
//
// On x86-64 a switch is a dozen instructions (src/fiber.cpp: push the callee-saved registers on
// the old stack, swap stack pointers, pop them from the new one), many times
// cheaper than swapcontext, which makes a sigprocmask system call per switch (and under
// AddressSanitizer also clears the shadow of the whole target stack). Elsewhere, or with
// -DEMU_FIBER_UCONTEXT, ucontext is used. Stacks are mmap'd with a guard page below each, so a
// stack overflow faults instead of corrupting a neighbour.
//
// AddressSanitizer must be told which stack is live (__sanitizer_start/finish_switch_fiber), so
// that its reports find the frames of a fiber. That bookkeeping cost more than the switch itself
// (about a third of the emulated suite's time: the runtime looks its thread up twice per switch),
// so stacks are carved from regions of a few hundred (each under the 64 MiB that ASan's cleanup
// on a noreturn call accepts), and ASan is told the *region* is the stack: a switch between two
// fibers of one region, nearly every switch, needs no annotation; one between regions, or to or
// from the host, has it. Within a region ASan's reports still find the faulting frame (it lies
// inside the bounds it knows). Not supported: ASAN_OPTIONS=detect_stack_use_after_return=1 (its
// fake stack would be shared by the fibers of a region).
#ifndef EMU_FIBER_H
#define EMU_FIBER_H

#include <stddef.h>

#if !defined(__x86_64__) && !defined(EMU_FIBER_UCONTEXT)
#define EMU_FIBER_UCONTEXT 1
#endif
#ifdef EMU_FIBER_UCONTEXT
#include <ucontext.h>
#endif

namespace emu {

struct Fiber {
    char *stack = nullptr; // lowest usable address (the guard page lies below it)
    size_t size = 0;
    size_t color = 0; // bytes left unused at the top: see fiber_create
    // The region of stacks this one was carved from, as AddressSanitizer is told of it.
    char *region = nullptr;
    size_t region_size = 0;
    bool asan_pending = false; // the switch that resumes this fiber was annotated: finish it
#ifdef EMU_FIBER_UCONTEXT
    ucontext_t ctx;
#else
    void *sp = nullptr; // saved stack pointer while switched out
#endif
    void *asan_fake_stack = nullptr;
};

// The host thread's own context while it runs fibers.
struct FiberHost {
#ifdef EMU_FIBER_UCONTEXT
    ucontext_t ctx;
#else
    void *sp = nullptr;
#endif
    void *asan_fake_stack = nullptr;
    const void *stack_bottom = nullptr; // learnt from AddressSanitizer at the first switch
    size_t stack_size = 0;
};

// Allocates the stack and prepares the fiber to start in `entry` (which must never return).
void fiber_create(Fiber &f, size_t stack_size, void (*entry)());
// Prepares an existing fiber to start over in `entry` (its old frames are abandoned).
void fiber_reset(Fiber &f, void (*entry)());
void fiber_destroy(Fiber &f);
// Host -> fiber, returning when the fiber switches back.
void fiber_resume(FiberHost &host, Fiber &f);
// Fiber -> host, returning when this fiber is resumed (by the host or by another fiber).
void fiber_yield(Fiber &f, FiberHost &host);
// Fiber -> fiber, returning when `from` is resumed (by the host or by another fiber).
void fiber_switch(Fiber &from, Fiber &to);
// Must be the first call of `entry`, for the fiber `self` it runs on: completes the switch that
// started it (from the host, which the first start of a host thread's fibers always is, or from
// another fiber).
void fiber_started(FiberHost &host, Fiber &self);

} // namespace emu

#endif
