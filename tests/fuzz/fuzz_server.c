// fuzz_server.c — the server's request parser (tools/server/request.c) on any bytes.
// Byte 0 picks the endpoint (chat or completions); the rest is the body. Asserted: a rejected
// body has a 4xx/5xx status and a one-line message; an accepted one has its ranges.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli_args.h"
#include "tools/server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int kind = data[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    SrvRequest r;
    SrvError e;
    if (srv_request_parse((const char *)data + 1, size - 1, kind, &r, &e) != 0) {
        if (e.status < 400 || e.status > 599 || strchr(e.message, '\n')) abort();
        return 0;
    }
    // model is optional (NULL when absent, as llama.cpp's server has it); a chat has messages,
    // a completion its prompt
    if (kind == SRV_CHAT ? r.n_messages < 1 : !r.prompt) abort();
    if (r.max_tokens == 0 || r.max_tokens > SRV_MAX_TOKENS || r.top_logprobs > SRV_MAX_LOGPROBS) abort();
    if ((r.has_temperature && !(r.temperature >= 0 && r.temperature <= 2)) || (r.has_top_p && !(r.top_p > 0 && r.top_p <= 1)))
        abort();
    if (r.n_stop > SRV_MAX_STOP) abort();
    // the branching decoder's parameters within ./run's ranges and the server's bounds, and no
    // per-token entries asked of it
    if (r.sampler == EMX_SAMPLER_BRANCH &&
        (emx_branch_params_check(&r.branch, e.message, sizeof e.message) != 0 || r.branch.max_forks > SRV_MAX_FORKS ||
         r.branch.n_alphabet > SRV_MAX_ALPHABET || (r.branch.cue && strlen(r.branch.cue) > SRV_MAX_CUE) || r.logprobs ||
         r.metrics))
        abort();
    srv_request_free(&r);
    return 0;
}
