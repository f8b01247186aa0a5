// rng.h — the host side of the project's random numbers. The generator itself is Philox4x32-10
// in philox.h (header-only, shared with device code); draws are addressed by (seed, step, lane)
// rather than by advancing a state, so nothing here is mutable.
#ifndef ENTROPIX_RNG_H
#define ENTROPIX_RNG_H

#include <stdint.h>

#include "sampler/philox.h"

// A seed for runs that did not ask for one: wall-clock nanoseconds mixed with the process id,
// then through Philox, so two runs started in the same second still differ. Callers print it
// (./run does, on stderr) so that a run can be reproduced with -s.
uint64_t emx_rng_seed_from_time(void);

#endif
