// server.c — build/tools/server MODEL.bin [options]: an OpenAI-compatible HTTP server over one
// model (docs/server.md). POST /v1/chat/completions and /v1/completions (streaming or not),
// GET /v1/models, /health and /metrics.
//
//   build/tools/server weights/smollm2-135m-instruct.q8.bin --port 8080
//
// The sampler flags are ./run's (parsed by the same code, so a request with the same seed and
// settings gives ./run's text); the server's own flags are listed in usage(). Logs go to
// stderr: the listening address first ("server: listening on http://HOST:PORT"). SIGINT or
// SIGTERM: the drain (stop accepting, answer queued requests 503, let running generations finish
// for up to --drain-timeout seconds, then stop them with a final event), exit 0; a second
// signal exits at once. Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "base/read_file.h"
#include "runtime/cli/cli_args.h"
#include "runtime/cli/run_setup.h"
#include "runtime/entropix_sampler.h"
#include "runtime/forward_common.h"
#include "runtime/model_verify.h"
#include "runtime/convert/gguf_cache.h"
#include "tools/server/http.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: server MODEL.bin [options]\n"
            "An OpenAI-compatible HTTP server (docs/server.md).\n\n"
            "Server:\n"
            "  --host ADDR         IPv4 address to listen on (default 127.0.0.1; 0.0.0.0: every interface)\n"
            "  --port N            TCP port (default 8080; 0: any free port, printed on stderr)\n"
            "  --api-key-file FILE require 'Authorization: Bearer KEY' (all but /health and /), KEY the\n"
            "                      file's first line; or the environment's ENTROPIX_API_KEY; or\n"
            "  --api-key KEY       the same, KEY given here (visible to other users in ps)\n"
            "  --cors ORIGIN       a web page of ORIGIN (e.g. http://localhost:3000; '*': any) may call\n"
            "                      the API; repeatable (default: only the server's own page)\n"
            "  --parallel N        generation slots, each with its own KV cache (default 1)\n"
            "  --queue N           requests waiting for a slot at most; past that: 503 (default 16)\n"
            "  --max-body BYTES    request body size limit; past that: 413 (default 1048576)\n"
            "  --max-conn N        connections at most, 4 more for /health and /metrics only\n"
            "                      (default max(64, parallel + queue + 16))\n"
            "  --max-conn-per-addr N  connections from one client address at most (default 32)\n"
            "  --header-timeout S  a request's line and headers must arrive within S seconds (default 10)\n"
            "  --body-timeout S    and its body within S more (default 60); else it is closed unanswered\n"
            "  --drain-timeout S   on SIGTERM/SIGINT, running generations have S seconds to finish,\n"
            "                      then stop with a final event (default 30); a second signal exits at once\n"
            "  --no-verify         serve the model without checking its tensor data's recorded checksum\n"
            "                      at startup (the header, directory and tokenizer are checked on every load)\n\n"
            "Model and sampler defaults (as ./run; a request's fields override them):\n"
            "  -c, --ctx-size N    context per slot (default min(model's, 4096))\n"
            "  -t, --threads N     threads per forward (default: all cores)\n"
            "  --device D          cpu | cuda:N | auto\n"
            "  --cache-type T      the KV cache's elements: f32, f16 or auto (default: f16 on a GPU for\n"
            "                      16-bit or quantised weights, else f32), as ./run\n"
            "  -n N                max_tokens when a request gives none (default: what the context has room for)\n"
            "  -s SEED             seed when a request gives none (default: drawn per request)\n"
            "  --sampler S         the sampler of a request that names none (default: combined, the one\n"
            "                      temperature, top_p, top_k and min_p mean to OpenAI clients; a request\n"
            "                      runs entropix by naming it or the model MODEL:entropix)\n"
            "  --temp T, --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N,\n"
            "  --presence-penalty P, --frequency-penalty F, --logit-bias ID+B, --profile NAME|FILE,\n"
            "  --profile-set K=V, --metric-layers L, --no-think, --mmap, --gguf-cache DIR\n"
            "                      as ./run (./run --help; MODEL may be a GGUF, converted once)\n"
            "  -h, --help          this text\n"
            "  --version           the version and the backends of this build\n");
}

typedef struct {
    SrvHttpOptions http;
    EmxCliArgs args;
    EmxProfile profile;  // --profile and --profile-set, read once here (never per request)
    char api_key[1024];  // --api-key, --api-key-file's first line, or $ENTROPIX_API_KEY
    const char *api_key_file;
    int drain_timeout;   // seconds
    int no_verify;       // --no-verify: the tensor data's checksum not checked at startup
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
                      : a->grammar || a->grammar_file || a->json_schema || a->json_schema_file
                          ? "a grammar flag (a request's response_format or grammar)"
                      : a->sampler == EMX_SAMPLER_AGENTS ? "--sampler agents (and the agent pool's flags)"
                      : a->sampler == EMX_SAMPLER_BRANCH ? "--sampler branch (and the branching decoder's flags)" : NULL;
    if (!bad) return 0;
    fprintf(stderr, "server: %s is not a server option (requests carry the prompt and their options; server --help)\n",
            bad);
    return 2;
}

static int is_server_flag(const char *f) {
    static const char *const flags[] = {"--host", "--port", "--api-key", "--api-key-file", "--cors", "--parallel",
                                        "--queue", "--max-body", "--max-conn", "--max-conn-per-addr", "--header-timeout",
                                        "--body-timeout", "--drain-timeout"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(f, flags[i])) return 1;
    return 0;
}

// One server flag's value. 0, or 2 (said).
static int server_flag_value(ServerArgs *sa, const char *f, const char *val) {
    SrvHttpOptions *h = &sa->http;
    long v = 0;
    int rc = 0;
    if (!strcmp(f, "--host")) h->host = val;
    else if (!strcmp(f, "--api-key-file")) sa->api_key_file = val;
    else if (!strcmp(f, "--api-key")) {
        if (!*val) fprintf(stderr, "server: --api-key is empty\n"), rc = 2;
        snprintf(sa->api_key, sizeof sa->api_key, "%s", val);
    } else if (!strcmp(f, "--cors")) {
        if (h->n_cors == (int)(sizeof h->cors / sizeof h->cors[0]))
            fprintf(stderr, "server: --cors: at most %d origins\n", h->n_cors), rc = 2;
        else if (strcmp(val, "*") && strncmp(val, "http://", 7) && strncmp(val, "https://", 8))
            fprintf(stderr, "server: --cors '%s' is not an origin (http://HOST[:PORT], https://..., or *)\n", val), rc = 2;
        else h->cors[h->n_cors++] = val;
    } else if (!strcmp(f, "--port")) rc = parse_num(f, val, 0, 65535, &v), h->port = (int)v;
    else if (!strcmp(f, "--parallel")) rc = parse_num(f, val, 1, 64, &v), h->parallel = (int)v;
    else if (!strcmp(f, "--queue")) rc = parse_num(f, val, 0, 4096, &v), h->queue = (int)v;
    else if (!strcmp(f, "--max-conn")) rc = parse_num(f, val, 1, 4096, &v), h->max_conn = (int)v;
    else if (!strcmp(f, "--max-conn-per-addr")) rc = parse_num(f, val, 1, 4096, &v), h->max_conn_per_addr = (int)v;
    else if (!strcmp(f, "--header-timeout")) rc = parse_num(f, val, 1, 3600, &v), h->header_timeout = (double)v;
    else if (!strcmp(f, "--body-timeout")) rc = parse_num(f, val, 1, 3600, &v), h->body_timeout = (double)v;
    else if (!strcmp(f, "--drain-timeout")) rc = parse_num(f, val, 0, 3600, &v), sa->drain_timeout = (int)v;
    else rc = parse_num(f, val, 1024, 1L << 30, &v), h->max_body = (size_t)v;
    return rc;
}

// The API key: --api-key, else --api-key-file's first line, else $ENTROPIX_API_KEY (none: no key
// needed). A key is printable ASCII without spaces (what fits a header). 0, or 2 (said).
static int resolve_key(ServerArgs *sa) {
    const char *from = "--api-key";
    if (!sa->api_key[0] && sa->api_key_file) {
        from = "--api-key-file";
        size_t len = 0;
        char *text = emx_read_file_max(sa->api_key_file, sizeof sa->api_key * 4, &len);
        if (!text) {
            fprintf(stderr, "server: --api-key-file %s: %s\n", sa->api_key_file,
                    errno == EFBIG ? "longer than a key can be" : strerror(errno));
            return 2;
        }
        size_t n = strcspn(text, "\r\n");
        snprintf(sa->api_key, sizeof sa->api_key, "%.*s", (int)(n < sizeof sa->api_key ? n : sizeof sa->api_key - 1), text);
        free(text);
    } else if (!sa->api_key[0] && getenv("ENTROPIX_API_KEY")) {
        from = "ENTROPIX_API_KEY";
        snprintf(sa->api_key, sizeof sa->api_key, "%s", getenv("ENTROPIX_API_KEY"));
    }
    if (sa->api_key_file && !strcmp(from, "--api-key")) return fprintf(stderr, "server: --api-key and --api-key-file: give one\n"), 2;
    if (!sa->api_key[0]) {
        if (strcmp(from, "--api-key")) return fprintf(stderr, "server: %s: the key is empty\n", from), 2;
        return 0;  // no key
    }
    for (const char *c = sa->api_key; *c; c++)
        if (*c <= ' ' || *c == 0x7f)
            return fprintf(stderr, "server: %s: the key holds a space or a control byte (printable ASCII only)\n", from), 2;
    sa->http.api_key = sa->api_key;
    return 0;
}

static int parse_args(int argc, char **argv, ServerArgs *sa) {
    sa->http = (SrvHttpOptions){.host = "127.0.0.1", .port = 8080, .parallel = 1, .queue = 16, .max_body = 1 << 20,
                                .max_conn_per_addr = 32, .header_timeout = 10, .body_timeout = 60, .idle_timeout = 120};
    sa->drain_timeout = 30;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int n = 0, rc = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc && !rc; i++) {
        const char *f = argv[i];
        const int server_flag = is_server_flag(f);
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) sa->help = 1;
        if (!strcmp(f, "--version")) sa->version = 1;
        if (!strcmp(f, "--no-verify")) {
            sa->no_verify = 1;
            continue;
        }
        if (!server_flag) {
            rest[n++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "server: %s needs a value\n", f);
            rc = 2;
            break;
        }
        rc = server_flag_value(sa, f, argv[++i]);
    }
    if (!rc && !sa->help && !sa->version) rc = resolve_key(sa);
    const int busy_bound = sa->http.parallel + sa->http.queue + 16;
    if (!sa->http.max_conn) sa->http.max_conn = busy_bound > 64 ? busy_bound : 64;
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
    char file[4096];  // the model path, or a GGUF's converted cache file
    if (emx_gguf_model_path(sa->args.model_path, sa->args.gguf_cache, "server", file, sizeof file, err, errlen) ||
        emx_model_open_load(&sm->model, file, load, err, errlen) != 0)
        return -1;
    // The weights as loaded against their recorded checksum: once, before any client is served
    // (SmolLM2-135M: 0.2 s, about the load's own time; docs/server.md). No record: served as is.
    char bad[512];
    if (!sa->no_verify && emx_verify_image(sm->model.map, sm->model.map_size, 1, file, bad, sizeof bad) < 0) {
        emx_seterr(err, errlen, "%s (--no-verify serves it anyway)", bad);
        return emx_model_close(&sm->model), -1;
    }
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
    // The OpenAI endpoints' sampler is the one clients mean by temperature, top_p, top_k and
    // min_p (llama-server's and vLLM's): combined. Entropix runs when a request or --sampler
    // names it, or a request names the model's alias (engine.h).
    if (!sa->args.sampler_given && sa->args.sampler == EMX_SAMPLER_ENTROPIX) sm->defaults.sampler = EMX_SAMPLER_COMBINED;
    sm->profile = sa->profile;
    if (!sa->args.n_predict_given) sm->defaults.n_predict = -1;  // a request without max_tokens: until the context is full
    struct stat f;  // /v1/models' "created": the file's time, else the server's start
    sm->created = stat(sa->args.model_path, &f) == 0 ? (long)f.st_mtime : (long)time(NULL);
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
    // the logit rules of the flags (--logit-bias's ids) against the vocabulary, once
    return emx_logit_rules_check(&sm->defaults.rules, (int)sm->model.cfg.vocab_size, err, errlen);
}

// After a cut, what its final events may take to reach their clients, at most (a client that
// does not read is not waited for longer).
#define SRV_FLUSH_S 5.0

// The first SIGTERM or SIGINT: the drain (http.h), up to drain_s seconds before the cut. A
// second signal exits at once, by that signal.
static void drain(SrvServer *srv, const sigset_t *set, int drain_s) {
    int sig = 0;
    sigwait(set, &sig);
    fprintf(stderr, "server: %s: draining: no new connections, queued requests answered 503, running generations have "
                    "%d s (--drain-timeout; a second signal exits at once)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", drain_s);
    srv_http_drain(srv);
    const double t0 = emx_now_s();
    double cut = 0;
    while (!srv_http_settled(srv)) {
        const struct timespec tick = {0, 50 * 1000 * 1000};
        const int again = sigtimedwait(set, NULL, &tick);
        if (again > 0) {
            fprintf(stderr, "server: %s again: exiting now\n", again == SIGINT ? "SIGINT" : "SIGTERM");
            signal(again, SIG_DFL);
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, again);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
            raise(again);
            _exit(128 + again);
        }
        const double now = emx_now_s();
        if (!cut && now - t0 >= drain_s) {
            fprintf(stderr, "server: drain deadline: stopping the running generations with a final event\n");
            srv_http_cut(srv);
            cut = now;
        }
        if (cut && now - cut >= SRV_FLUSH_S) break;  // what a client has not read by now is cut
    }
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
    EmxTokenTrie *trie = emx_token_trie_new(sm.tk, err, sizeof err);  // for response_format and grammar
    char *id = trie ? model_id(sa.args.model_path) : NULL;
    sm.id = id;
    sm.trie = trie;
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
        fprintf(stderr, "server: %s\n", id || !trie ? err : "out of memory");
        rc = 1;
    } else {
        fprintf(stderr, "server: model %s, context %d, %d slot%s, listening on http://%s:%d\n", sm.id, sm.ctx,
                sa.http.parallel, sa.http.parallel > 1 ? "s" : "", sa.http.host, srv_http_port(srv));
        drain(srv, &set, sa.drain_timeout);
        srv_http_stop(srv);
        fprintf(stderr, "server: stopped\n");
    }
    free(id);
    if (trie) emx_token_trie_free(trie);
    emx_tokenizer_free(sm.tk);
    emx_model_close(&sm.model);
    return rc;
}
