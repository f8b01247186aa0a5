// engine_internal.h — the paths srv_generate (engine.c) dispatches to besides its own single
// stream: the agent pool (engine_pool.c) and the branching decoder (engine_branch.c); and
// ./run's flags for a request (engine.c, also read by http.c). What the paths share, the
// generation's text and entries, is engine_output.h.
#ifndef ENTROPIX_SERVER_ENGINE_INTERNAL_H
#define ENTROPIX_SERVER_ENGINE_INTERNAL_H

#include "runtime/cli/run_setup.h"
#include "tools/server/engine.h"
#include "tools/server/engine_output.h"

// ./run's flags for this request: the server's, then the request's settings on top.
void srv_request_args(const SrvModel *sm, const SrvRequest *r, EmxCliArgs *a);

// srv_generate for sampler "agents" (engine_pool.c): the agent pool from the request's options
// as ./run builds it; the slot's state and cache are not touched (the pool has its replicas).
int srv_generate_pool(const SrvModel *sm, const EmxCliArgs *a, const SrvRequest *r, const int *ids, int n_ids,
                      atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res, SrvError *e);

// srv_generate for sampler "branch" (engine_branch.c): the branching decoder with the request's
// parameters on the slot's state, from row n_cached (srv_cache_match); `cache` then holds the
// prompt and the output's valid rows.
int srv_generate_branch(const SrvModel *sm, EmxState *st, SrvCache *cache, int n_cached, const SrvRequest *r,
                        const int *ids, int n_ids, atomic_int *cancel, SrvEmit emit, void *emit_user, SrvGenResult *res,
                        SrvError *e);

#endif
