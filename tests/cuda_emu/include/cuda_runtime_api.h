// cuda_runtime_api.h (CUDA emulator) — everything it would declare is in the emulator's cuda_runtime.h.
#include "cuda_runtime.h"
