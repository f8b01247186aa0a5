// server.c — build/tools/server MODEL.bin [options]: an OpenAI-compatible HTTP server over one
// model (docs/server.md). POST /v1/chat/completions and /v1/completions (streaming or not),
// GET /v1/models, /health and /metrics.
//
//   build/tools/server weights/smollm2-135m-instruct.q8.bin --port 8080
//
// The sampler flags are ./run's (parsed by the same code, so a request with the same seed and
// settings gives ./run's text); the server's own flags are listed in usage(). Logs go to
// stderr: the listening address first ("server: listening on http://HOST:PORT"). SIGINT or
// SIGTERM: stop accepting, answer queued requests 503, let running generations finish, exit 0.
// Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_setup.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward_backend.h"
#include "tools/server/http.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: server MODEL.bin [options]\n"
            "An OpenAI-compatible HTTP server (docs/server.md).\n\n"
            "Server:\n"
            "  --host ADDR         IPv4 address to listen on (default 127.0.0.1; 0.0.0.0: every interface)\n"
            "  --port N            TCP port (default 8080; 0: any free port, printed on stderr)\n"
            "  --api-key KEY       require 'Authorization: Bearer KEY' (all but /health)\n"
            "  --parallel N        generation slots, each with its own KV cache (default 1)\n"
            "  --queue N           requests waiting for a slot at most; past that: 503 (default 16)\n"
            "  --max-body BYTES    request body size limit; past that: 413 (default 1048576)\n\n"
            "Model and sampler defaults (as ./run; a request's fields override them):\n"
            "  -c, --ctx-size N    context per slot (default min(model's, 4096))\n"
            "  -t, --threads N     threads per forward (default: all cores)\n"
            "  --device D          cpu | cuda:N | auto\n"
            "  -n N                max_tokens when a request gives none (default: what the context has room for)\n"
            "  -s SEED             seed when a request gives none (default: drawn per request)\n"
            "  --sampler S, --temp T, --top-k K, --top-p P, --min-p P, --profile NAME|FILE, --profile-set K=V,\n"
            "  --metric-layers L, --no-think, --mmap     as ./run (./run --help)\n"
            "  -h, --help          this text\n"
            "  --version           the version and the backends of this build\n");
}

typedef struct {
    SrvHttpOptions http;
    EmxCliArgs args;
    EmxProfile profile;  // --profile and --profile-set, read once here (never per request)
    int help, version;
} ServerArgs;

static int parse_num(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "server: %s: '%s' is not an integer in [%ld, %ld]\n", flag, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

// ./run flags that mean nothing to a server (each request brings its prompt and options).
static int refuse_run_flags(const EmxCliArgs *a) {
    const char *bad = a->prompt ? "-p" : a->prompt_file ? "-f" : a->system ? "--system" : a->metrics_path ? "--metrics"
                      : a->log_path ? "--log" : a->report_path ? "--report" : a->color ? "--color"
                      : a->logprobs >= 0 ? "--logprobs" : a->chat != EMX_CHAT_AUTO ? "--chat/--raw"
                      : a->sampler == EMX_SAMPLER_AGENTS ? "--sampler agents (and the agent pool's flags)" : NULL;
    if (!bad) return 0;
    fprintf(stderr, "server: %s is not a server option (requests carry the prompt and their options; server --help)\n",
            bad);
    return 2;
}

static int parse_args(int argc, char **argv, ServerArgs *sa) {
    sa->http = (SrvHttpOptions){.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 16, .max_body = 1 << 20};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int n = 0, rc = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc && !rc; i++) {
        const char *f = argv[i];
        long v = 0;
        const int server_flag = !strcmp(f, "--host") || !strcmp(f, "--port") || !strcmp(f, "--api-key") ||
                                !strcmp(f, "--parallel") || !strcmp(f, "--queue") || !strcmp(f, "--max-body");
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) sa->help = 1;
        if (!strcmp(f, "--version")) sa->version = 1;
        if (!server_flag) {
            rest[n++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "server: %s needs a value\n", f);
            rc = 2;
            break;
        }
        const char *val = argv[++i];
        if (!strcmp(f, "--host")) sa->http.host = val;
        else if (!strcmp(f, "--api-key")) {
            if (!*val) fprintf(stderr, "server: --api-key is empty\n"), rc = 2;
            sa->http.api_key = val;
        } else if (!strcmp(f, "--port")) rc = parse_num(f, val, 0, 65535, &v), sa->http.port = (int)v;
        else if (!strcmp(f, "--parallel")) rc = parse_num(f, val, 1, 64, &v), sa->http.parallel = (int)v;
        else if (!strcmp(f, "--queue")) rc = parse_num(f, val, 0, 4096, &v), sa->http.queue = (int)v;
        else rc = parse_num(f, val, 1024, 1L << 30, &v), sa->http.max_body = (size_t)v;
    }
    if (!rc && !sa->help && !sa->version) {
        char err[512];
        if (emx_cli_parse(n, rest, &sa->args, err, sizeof err) != 0) {
            fprintf(stderr, "server: %s\n", err);
            rc = 2;
        } else if (!sa->args.model_path) {
            fprintf(stderr, "server: no model file given (server MODEL.bin; server --help)\n");
            rc = 2;
        } else if (!(rc = refuse_run_flags(&sa->args)) && emx_run_load_profile(&sa->args, &sa->profile, err, sizeof err) != 0) {
            fprintf(stderr, "server: %s\n", err);  // ./run's message: a request may ask for entropix
            rc = 2;
        }
    }
    free(rest);
    return rc;
}

// "weights/smollm2-135m-instruct.q8.bin" -> "smollm2-135m-instruct.q8": the API's model id.
static char *model_id(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *id = strdup(b);
    size_t n = id ? strlen(id) : 0;
    if (n > 4 && !strcmp(id + n - 4, ".bin")) id[n - 4] = 0;
    return id;
}

static int open_model(SrvModel *sm, const ServerArgs *sa, char *err, size_t errlen) {
    const EmxLoad load = emx_load_for_device(sa->args.device, sa->args.mmap);
    if (emx_model_open_load(&sm->model, sa->args.model_path, load, err, errlen) != 0) return -1;
    char why[256];
    if (!(sm->tk = emx_tokenizer_new(&sm->model.tok, why, sizeof why))) {
        emx_seterr(err, errlen, "%s: %s", sa->args.model_path, why);
        return emx_model_close(&sm->model), -1;
    }
    int ctx = sa->args.ctx;
    if (ctx > (int)sm->model.cfg.max_seq_len) ctx = (int)sm->model.cfg.max_seq_len;
    EmxStateOptions so = {.n_threads = sa->args.threads, .ctx = ctx, .device = sa->args.device};
    if ((sm->ctx = emx_state_resolve_ctx(&sm->model, &so, err, errlen)) < 0) {
        emx_tokenizer_free(sm->tk);
        return emx_model_close(&sm->model), -1;
    }
    sm->defaults = sa->args;
    sm->profile = sa->profile;
    if (!sa->args.n_predict_given) sm->defaults.n_predict = -1;  // a request without max_tokens: until the context is full
    return 0;
}

// The profile the flags give (--metric-layers included) against this model, as ./run's entropix
// sampler checks it (the attention layer, the pause token): said at startup, not to every client.
static int check_profile_model(const SrvModel *sm, char *err, size_t errlen) {
    EmxProfile p = sm->profile;
    emx_run_profile_flags(&sm->defaults, &p);
    EmxEntropixSampler es;
    if (emx_entropix_sampler_init(&es, &p, &sm->model, sm->tk, sm->ctx, 0, err, errlen) != 0) return -1;
    emx_entropix_sampler_free(&es);
    return 0;
}

int main(int argc, char **argv) {
    ServerArgs sa = {0};
    int rc = parse_args(argc, argv, &sa);
    if (rc) return rc;
    if (sa.help) {
        usage(stdout);
        return 0;
    }
    if (sa.version) {
        emx_cli_version(stdout, "server");
        return 0;
    }
    SrvModel sm = {0};
    char err[512] = {0};
    if (open_model(&sm, &sa, err, sizeof err) != 0) {
        fprintf(stderr, "server: %s\n", err);
        return 1;
    }
    if (check_profile_model(&sm, err, sizeof err) != 0) {
        fprintf(stderr, "server: %s\n", err);
        emx_tokenizer_free(sm.tk);
        emx_model_close(&sm.model);
        return 2;
    }
    char *id = model_id(sa.args.model_path);
    sm.id = id;
    sa.http.threads = sa.args.threads;
    sa.http.device = sa.args.device;
    // The signals are taken by sigwait below, in this thread only: every thread started from
    // here on inherits the mask. SIGPIPE (a client gone mid-write) is an error return instead.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    SrvServer *srv = id ? srv_http_start(&sm, &sa.http, err, sizeof err) : NULL;
    if (!srv) {
        fprintf(stderr, "server: %s\n", id ? err : "out of memory");
        rc = 1;
    } else {
        fprintf(stderr, "server: model %s, context %d, %d slot%s, listening on http://%s:%d\n", sm.id, sm.ctx,
                sa.http.parallel, sa.http.parallel > 1 ? "s" : "", sa.http.host, srv_http_port(srv));
        int sig = 0;
        sigwait(&set, &sig);
        fprintf(stderr, "server: %s: stopping (running generations finish)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        srv_http_stop(srv);
        fprintf(stderr, "server: stopped\n");
    }
    free(id);
    emx_tokenizer_free(sm.tk);
    emx_model_close(&sm.model);
    return rc;
}
