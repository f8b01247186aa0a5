// device_launch_parameters.h (CUDA emulator) — threadIdx & co. come from emu/cuda_emu.h, which
// every emulated file includes first; nothing else to declare.
#ifndef EMU_DEVICE_LAUNCH_PARAMETERS_H
#define EMU_DEVICE_LAUNCH_PARAMETERS_H
#include "vector_types.h"
#endif
