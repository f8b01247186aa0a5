// fuzz_http.c — raw connection bytes through the HTTP server's whole request path: a server
// (tools/server/http.c with libmicrohttpd, stories260K from $FUZZ_MODELS) runs in this process on
// a loopback port, and each input is sent on a connection of its own, which is then half-closed
// and read to its end. The routing, the guards (origin, key, media type), the connection limits
// and deadlines, the body handling and the request parser all see the bytes; a request the
// server would generate for is stopped by its client's half-close (the departed-client path).
// Asserted: the server answers or closes within 20 s; an answer of the server's own (JSON) is
// valid UTF-8 JSON, an error one an OpenAI error object; the server still answers /health.
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cli/run_setup.h"
#include "runtime/forward_backend.h"
#include "tokenizer/tok_utf8.h"
#include "tools/server/http.h"

// The one server of this process, started by LLVMFuzzerInitialize (a harness's state, as the
// fuzzing engine holds it between inputs).
static SrvModel fuzz_model;
static SrvServer *fuzz_server;

static void fail(const char *what) {
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const char *dir = getenv("FUZZ_MODELS");
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/stories260K.f32.bin", dir && *dir ? dir : "build/models");
    char *args[] = {"server", path, "-n", "8", "-t", "1", NULL};
    SrvModel *sm = &fuzz_model;
    if (emx_cli_parse(6, args, &sm->defaults, err, sizeof err) != 0 || emx_run_load_profile(&sm->defaults, &sm->profile,
                                                                                           err, sizeof err) != 0)
        fail(err);
    if (emx_model_open_load(&sm->model, path, EMX_LOAD_MMAP, err, sizeof err) != 0) fail(err);
    if (!(sm->tk = emx_tokenizer_new(&sm->model.tok, err, sizeof err))) fail(err);
    sm->ctx = (int)sm->model.cfg.max_seq_len;
    sm->id = "stories260K.f32";
    SrvHttpOptions o = {.host = "127.0.0.1", .port = 0, .api_key = NULL, .parallel = 1, .queue = 2, .max_body = 4096,
                        .max_conn = 64, .max_conn_per_addr = 64, .header_timeout = 5, .body_timeout = 5,
                        .idle_timeout = 10, .threads = 1, .device = "cpu"};
    if (!(fuzz_server = srv_http_start(sm, &o, err, sizeof err))) fail(err);
    return 0;
}

// Sends data on a new connection, half-closes it, reads the answer to its end into out (NUL
// terminated, *n its length). -1: no connection (the server is gone).
// A connection to the server. A refused or unroutable connect is retried for up to 2 s: on a
// loaded machine thousands of short connections a second can meet a full accept queue or no free
// ephemeral port for a moment (seen once in CI); a server that stops accepting still fails.
static int connect_server(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)srv_http_port(fuzz_server))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int attempt = 0; attempt < 200; attempt++) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        if (fd >= 0) close(fd);
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return -1;
}

static int exchange(const uint8_t *data, size_t size, char *out, size_t cap, size_t *n) {
    const int fd = connect_server();
    if (fd < 0) return -1;
    for (size_t at = 0; at < size;) {
        const ssize_t k = send(fd, data + at, size - at, MSG_NOSIGNAL);
        if (k <= 0) break;  // the server closed early (a refusal): read what it said
        at += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    *n = 0;
    for (int waited = 0;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) == 0) {
            if (++waited == 20) fail("no answer and no close within 20 s");
            continue;
        }
        const ssize_t k = recv(fd, out + *n, cap - 1 - *n, 0);
        if (k <= 0) break;
        *n += (size_t)k;
        if (*n == cap - 1) break;  // enough to check
    }
    out[*n] = 0;
    close(fd);
    return 0;
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const int k = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

// Each answer on the connection (keep-alive may give several): a JSON one is checked.
static void check_answers(const char *out, size_t n) {
    const char *at = out, *end = out + n;
    while (at < end && !strncmp(at, "HTTP/1.1 ", 9)) {
        const int status = atoi(at + 9);
        const char *body = strstr(at, "\r\n\r\n");
        if (!body) return;  // cut by the buffer
        body += 4;
        const char *json = strstr(at, "Content-Type: application/json");
        const char *len = strstr(at, "Content-Length: ");
        if (!json || json > body || !len || len > body) return;  // not one of ours, or chunked
        const size_t k = strtoul(len + 16, NULL, 10);
        if (body + k > end) return;
        if (!valid_utf8(body, k)) fail("a JSON answer is not valid UTF-8");
        cJSON *o = cJSON_ParseWithLength(body, k);
        if (!o) fail("a JSON answer does not parse");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
        if (status >= 400 && !(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")) &&
                               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type"))))
            fail("an error answer is not an OpenAI error object");
        if (status >= 400 && strchr(cJSON_GetObjectItemCaseSensitive(e, "message")->valuestring, '\n'))
            fail("an error message is not one line");
        cJSON_Delete(o);
        at = body + k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char out[1 << 16];
    size_t n = 0;
    if (exchange(data, size, out, sizeof out, &n) != 0) fail("cannot connect to the server");
    check_answers(out, n);
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (exchange((const uint8_t *)health, sizeof health - 1, out, sizeof out, &n) != 0 ||
        strncmp(out, "HTTP/1.1 200", 12) != 0)
        fail("the server no longer answers /health");
    return 0;
}
