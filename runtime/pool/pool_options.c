// pool_options.c — the agent pool's option parsing and stats line (pool_generate.h): the
// --agent-configs and --devices lists, the default agent spread, the stats block.
#include "runtime/pool/pool_generate.h"
#include "base/errmsg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Agent configurations

void emx_pool_default_configs(EmxAgentParams *agents, int n) {
    if (n == 1) {
        agents[0] = (EmxAgentParams){0.7f, 40};
        return;
    }
    for (int i = 0; i < n; i++) {
        double f = (double)i / (n - 1);
        agents[i].temperature = (float)(0.3 + 1.2 * f);
        agents[i].top_k = (int)lround(5.0 * pow(20.0, f));
    }
}

int emx_pool_parse_configs(const char *spec, EmxAgentParams *agents, int max, char *err, size_t errlen) {
    int n = 0;
    const char *s = spec;
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[64];
        if (len == 0 || len >= sizeof item) {
            emx_seterr(err, errlen, "--agent-configs: entry %d ('%.*s') is not T:k", n + 1, (int)(len < 40 ? len : 40), s);
            return -1;
        }
        memcpy(item, s, len);
        item[len] = 0;
        char *colon = strchr(item, ':'), *e1 = NULL, *e2 = NULL;
        double t = colon ? strtod(item, &e1) : NAN;
        long k = colon ? strtol(colon + 1, &e2, 10) : -1;
        if (!colon || e1 != colon || *e2 || colon[1] == 0 || !isfinite(t) || t < 0 || t > 100 || k < 0 || k > 1000000) {
            emx_seterr(err, errlen, "--agent-configs: entry %d ('%s') is not T:k (T >= 0, k >= 0; k 0 = no top-k)", n + 1,
                     item);
            return -1;
        }
        if (n == max) {
            emx_seterr(err, errlen, "--agent-configs: more than %d agents", max);
            return -1;
        }
        agents[n++] = (EmxAgentParams){(float)t, (int)k};
        s += len + (end ? 1 : 0);
        if (end && !*s) {
            emx_seterr(err, errlen, "--agent-configs: empty entry after the last ','");
            return -1;
        }
    }
    if (n == 0) emx_seterr(err, errlen, "--agent-configs: no agents given");
    return n ? n : -1;
}

int emx_pool_parse_devices(const char *list, int *devices, int max, char *err, size_t errlen) {
    if (!strcmp(list, "cpu")) return 0;
    int n = 0;
    for (const char *s = list;;) {
        const char *end = strchr(s, ',');
        const size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[32] = "";
        char *e = NULL;
        long d = -1;
        if (len < sizeof item) {
            memcpy(item, s, len);
            item[len] = 0;
            if (!strncmp(item, "cuda:", 5) && item[5] >= '0' && item[5] <= '9') d = strtol(item + 5, &e, 10);
        }
        if (d < 0 || !e || *e || d > 1024) {
            emx_seterr(err, errlen, "--devices: '%.*s' in '%s' is not cpu or cuda:N[,cuda:M...]", (int)(len < 40 ? len : 40), s,
                     list);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (devices[i] == d) {
                emx_seterr(err, errlen, "--devices %s: cuda:%ld is listed twice (one worker per GPU)", list, d);
                return -1;
            }
        if (n == max) {
            emx_seterr(err, errlen, "--devices %s: more than %d devices", list, max);
            return -1;
        }
        devices[n++] = (int)d;
        if (!end) break;
        s = end + 1;
    }
    return n;
}

void emx_pool_print_stats(FILE *f, const EmxPoolStats *s, int lookahead) {
    fprintf(f, "prompt: %d tokens, prefill %.2f ms (%.2f tok/s)\n", s->n_prompt, s->prefill_s * 1e3,
            s->prefill_s > 0 ? s->n_prompt / s->prefill_s : 0.0);
    const double per = s->n_generated > 0 ? s->decode_s * 1e3 / s->n_generated : 0.0;
    fprintf(f, "generated: %d tokens in %d rounds (lookahead %d), decode %.2f ms (%.2f tok/s, %.2f ms/token)\n",
            s->n_generated, s->n_rounds, lookahead, s->decode_s * 1e3, s->decode_s > 0 ? s->n_generated / s->decode_s : 0.0,
            per);
    fprintf(f, "passes per replica: %d single-token forwards (%d with the proposals in one device call), %d batched "
            "branch passes (%d with the proposals on the device, %d in the round's device call)\n",
            s->n_forward_tokens, s->n_fused_rounds, s->n_branch_passes, s->n_device_branch_passes,
            s->n_graph_branch_passes);
    if (s->n_checks)
        fprintf(f, "critic: %d checks, %d BAD, %d rollbacks (%d tokens), %d BAD accepted; %.2f ms (%.1f%% of decode)\n",
                s->n_checks, s->n_bad, s->n_rollbacks, s->n_rolled_back_tokens, s->n_bad_accepted, s->critic_s * 1e3,
                s->decode_s > 0 ? 100.0 * s->critic_s / s->decode_s : 0.0);
    if (s->stop == EMX_STOP_INTERRUPTED) fprintf(f, "interrupted\n");
}
