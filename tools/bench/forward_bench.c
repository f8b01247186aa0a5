// forward_bench.c — prefill / decode timing of the forward pass (forward_bench.h).
#include "tools/bench/forward_bench.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/errmsg.h"

int emx_bench_forward_once(EmxState *st, const EmxModel *m, int n_prompt, int n_gen, int depth,
                           EmxForwardSpeed *out, char *err, size_t errlen) {
    int vocab = (int)m->cfg.vocab_size, n = depth + (n_prompt > n_gen ? n_prompt : n_gen);
    if (depth < 0 || n > emx_state_ctx(st)) {
        emx_seterr(err, errlen, "bench: %d tokens (depth %d) do not fit the context of %d", n, depth, emx_state_ctx(st));
        return -1;
    }
    int *ids = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!ids) {
        emx_seterr(err, errlen, "bench: out of memory");
        return -1;
    }
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {  // a fixed LCG stream of ids: the same work every run
        x = x * 1664525u + 1013904223u;
        ids[i] = (int)(x % (uint32_t)vocab);
    }
    out->prefill_tps = out->decode_tps = 0.0;
    // the context both tests start from; each then writes positions depth.. over the other's
    int rc = depth > 0 && !emx_forward(st, ids, depth, 0) ? -1 : 0;
    if (rc == 0 && n_prompt > 0) {
        double t0 = emx_now_s();
        rc = emx_forward(st, ids + depth, n_prompt, depth) ? 0 : -1;
        out->prefill_tps = n_prompt / (emx_now_s() - t0);
    }
    if (rc == 0 && n_gen > 0) {
        // One untimed step first, as llama-bench warms up: a GPU captures its decode graph on
        // its first step, which is set-up, not decoding (the timed steps overwrite its position).
        rc = emx_forward(st, &ids[depth], 1, depth) ? 0 : -1;
        double t0 = emx_now_s();
        for (int i = 0; i < n_gen && rc == 0; i++) rc = emx_forward(st, &ids[depth + i], 1, depth + i) ? 0 : -1;
        out->decode_tps = n_gen / (emx_now_s() - t0);
    }
    free(ids);
    if (rc != 0) emx_seterr(err, errlen, "bench: the forward pass failed");
    return rc;
}

int emx_bench_decode_us(EmxState *st, const EmxModel *m, int n_gen, int depth, double *us, char *err, size_t errlen) {
    EmxForwardSpeed fs;
    if (emx_bench_forward_once(st, m, 0, n_gen, depth, &fs, err, errlen) != 0) return -1;
    *us = 1e6 / fs.decode_tps;
    return 0;
}
