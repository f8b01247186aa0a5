// cub/cub.cuh (CUDA emulator) — not modelled: including it is an error, so a kernel that needs it keeps
// a portable twin (tests/cuda_emu/README.md) instead of silently picking up the real header.
#error "cub/cub.cuh is not supported by the CUDA emulator (tests/cuda_emu/README.md)"
