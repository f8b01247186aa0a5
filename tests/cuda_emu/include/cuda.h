// cuda.h (CUDA emulator) — not modelled: including it is an error, so a kernel that needs it keeps
// a portable twin (tests/cuda_emu/README.md) instead of silently picking up the real header.
#error "cuda.h is not supported by the CUDA emulator (tests/cuda_emu/README.md)"
