// test_page.c — the server's chat page (GET /, tools/server/page.html): served without a key,
// then driven in headless chromium (tests/server/page_driver.py waits for the page's own "done"
// signal, so nothing depends on timing) and its DOM checked against the plain API's answer to the
// same request: the text, one token element per completion token, each token's case class and the
// count per case. A model without a chat template goes through /v1/completions; a server with
// --api-key answers the page's calls only with the key. Chromium is found on PATH; without it the
// browser tests skip and say why, unless EMX_REQUIRE_BROWSER=1 (make check), where they fail.
#define _GNU_SOURCE  // asprintf
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "browser_util.h"
#include "run_util.h"
#include "test_util.h"
#include "runtime/report/report.h"
#include "tools/server/page.h"

static const char *const CASES[] = {"LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE"};

// ---------------------------------------------------------------------------------------------
// The server as a child process.

typedef struct {
    pid_t pid;
    int port;
    char err_path[64];
} Server;

// The running server, for stop_server_left: a failed assertion ends the test before its
// server_stop, and the server must not outlive it (nor hold the runner's output open).
static Server running;

static void stop_server_left(void) {
    if (running.pid <= 0) return;
    kill(running.pid, SIGKILL);
    waitpid(running.pid, NULL, 0);
    unlink(running.err_path);
    running.pid = 0;
}

// build/tools/server MODEL --port 0 [extra...]; returns once stderr names the port.
static Server server_start(const char *model_name, const char *const *extra) {
    Server s = {0};
    char prog[512], model[512], rel[256];
    test_build_path(prog, sizeof prog, "cpu/tools/server");
    snprintf(rel, sizeof rel, "models/%s", model_name);
    test_build_path(model, sizeof model, rel);
    const char *argv[16] = {prog, model, "--port", "0", "-t", "1", "-c", "1024"};
    int argc = 8;
    for (int i = 0; extra && extra[i]; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    snprintf(s.err_path, sizeof s.err_path, "/tmp/emx_page_srv_XXXXXX");
    int fd = mkstemp(s.err_path);
    cr_assert(fd >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    cr_assert_eq(posix_spawn(&s.pid, prog, &fa, NULL, (char *const *)argv, environ), 0, "cannot start %s", prog);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    running = s;
    // The line "... listening on http://127.0.0.1:PORT" comes once the socket is bound (or the
    // server exits). The bound is a safety net for a hung start, not a measured threshold.
    for (int tries = 0; tries < 1200 && !s.port; tries++) {
        char *err = test_read_file(s.err_path, NULL);
        const char *p = err ? strstr(err, "listening on http://127.0.0.1:") : NULL;
        if (p) s.port = atoi(p + strlen("listening on http://127.0.0.1:"));
        int status;
        if (!s.port && waitpid(s.pid, &status, WNOHANG) == s.pid)
            cr_assert_fail("the server exited before listening: %s", err ? err : "");
        free(err);
        if (!s.port) usleep(100 * 1000);
    }
    cr_assert(s.port > 0, "the server did not say its port in 120 s");
    return s;
}

static void server_stop(Server *s) {
    kill(s->pid, SIGTERM);
    int status = 0;
    waitpid(s->pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the server did not exit 0 on SIGTERM");
    unlink(s->err_path);
    running.pid = 0;
}

// ---------------------------------------------------------------------------------------------
// A plain HTTP/1.0 request (the connection closes after the answer: read to the end).

typedef struct {
    int status;
    char *head, *body;  // the header block, the body (NUL-terminated)
} Http;

static Http http(int port, const char *method, const char *path, const char *auth, const char *body) {
    Http h = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "cannot connect to port %d", port);
    char *req = NULL;
    int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s%s%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, auth ? "Authorization: Bearer " : "", auth ? auth : "", auth ? "\r\n" : "",
                     body ? strlen(body) : 0, body ? body : "");
    cr_assert(n > 0 && write(fd, req, (size_t)n) == n);
    free(req);
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    for (ssize_t k; (k = read(fd, buf + len, cap - len - 1)) > 0;) {
        len += (size_t)k;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[len] = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    cr_assert(sep && sscanf(buf, "HTTP/1.%*d %d", &h.status) == 1, "not an HTTP answer: %.200s", buf);
    *sep = 0;
    h.head = buf;
    h.body = strdup(sep + 4);
    return h;
}

static void http_free(Http *h) { free(h->head), free(h->body); }

// ---------------------------------------------------------------------------------------------
// The API's answer and the page's DOM.

typedef struct {
    char *text;
    int completion_tokens;
    int per_case[6];  // CASES, then "none"; the stop token not counted (it is no completion token)
} Answer;

static int case_index(const char *c) {
    for (int k = 0; k < 5; k++)
        if (c && strcmp(c, CASES[k]) == 0) return k;
    return 5;
}

// The non-streamed answer to body at path, as the API gives it.
static Answer api_answer(int port, const char *auth, const char *path, const char *body) {
    Http h = http(port, "POST", path, auth, body);
    cr_assert_eq(h.status, 200, "%s: %d %s", path, h.status, h.body);
    cJSON *o = cJSON_Parse(h.body), *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    cr_assert(c, "%s", h.body);
    const cJSON *msg = cJSON_GetObjectItem(c, "message");
    Answer a = {.text = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(msg ? msg : c, msg ? "content" : "text")))};
    a.completion_tokens = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "completion_tokens"));
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(cJSON_GetObjectItem(c, "entropix"), "tokens"))
        if (!cJSON_IsTrue(cJSON_GetObjectItem(t, "stop"))) a.per_case[case_index(cJSON_GetStringValue(cJSON_GetObjectItem(t, "case")))]++;
    cJSON_Delete(o);
    http_free(&h);
    return a;
}

// Text of serialized HTML: tags dropped, the entities an HTML serializer writes in text decoded.
static char *dom_text(const char *html, size_t n) {
    static const char *const ent[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&nbsp;", "\xc2\xa0"}};
    char *out = malloc(n + 1), *o = out;
    for (size_t i = 0; i < n;) {
        if (html[i] == '<') {
            const char *e = memchr(html + i, '>', n - i);
            cr_assert(e);
            i = (size_t)(e - html) + 1;
            continue;
        }
        int hit = 0;
        for (size_t k = 0; k < 5 && !hit; k++)
            if (!strncmp(html + i, ent[k][0], strlen(ent[k][0]))) {
                o = stpcpy(o, ent[k][1]);
                i += strlen(ent[k][0]), hit = 1;
            }
        if (!hit) *o++ = html[i++];
    }
    *o = 0;
    return out;
}

// The page's answer number `which` (0: first): the text and the token elements, checked to be
// complete and free of errors.
static Answer page_answer(const char *dom, int which) {
    const char *m = dom;
    for (int i = 0; i <= which; i++) {
        m = strstr(m + (i ? 1 : 0), "<div class=\"msg assistant");  // "msg assistant done" once finished
        cr_assert(m, "the page has no answer %d", which);
    }
    const char *tag_end = strchr(m, '>');
    cr_assert(memmem(m, (size_t)(tag_end - m), "data-done=\"1\"", 13), "answer %d not finished: %.300s", which, m);
    cr_assert(!memmem(m, (size_t)(tag_end - m), "data-error", 10), "answer %d failed: %.600s", which, m);
    const char *body = strstr(m, "<div class=\"body\">");
    cr_assert(body);
    body += strlen("<div class=\"body\">");
    const char *end = strstr(body, "</div>");  // the body holds spans and text only
    Answer a = {.text = dom_text(body, (size_t)(end - body))};
    // The text is the tokens' text: none of it outside a token element.
    char *in_tokens = calloc(1, strlen(a.text) + 1);
    for (const char *p = body; (p = strstr(p, "<span class=\"tok ")) && p < end; p++) {
        const char *open = strchr(p, '>') + 1, *close = strstr(open, "</span>");
        char *t = dom_text(open, (size_t)(close - open));
        cr_assert(strlen(in_tokens) + strlen(t) <= strlen(a.text), "token text past the answer's");
        strcat(in_tokens, t);
        free(t);
    }
    cr_expect_str_eq(in_tokens, a.text, "answer %d: text outside the token elements", which);
    free(in_tokens);
    for (const char *p = body; (p = strstr(p, "<span class=\"tok c-")) && p < end; p++) {
        const char *c = p + strlen("<span class=\"tok c-");
        const size_t len = strcspn(c, " \"");
        char name[16] = {0};
        cr_assert(len < sizeof name);
        memcpy(name, c, len);
        a.per_case[case_index(name)]++;
        cr_expect(case_index(name) < 5 || !strcmp(name, "none"), "token class c-%s", name);
        a.completion_tokens++;
    }
    return a;
}

static void answer_free(Answer *a) { free(a->text); }

static void expect_same(const Answer *page, const Answer *api, int need_cases) {
    cr_expect_str_eq(page->text, api->text, "the page's text differs from the API's");
    cr_expect_eq(page->completion_tokens, api->completion_tokens, "%d token elements, usage.completion_tokens %d",
                 page->completion_tokens, api->completion_tokens);
    int seen = 0;
    for (int k = 0; k < 6; k++) {
        cr_expect_eq(page->per_case[k], api->per_case[k], "%s: page %d, API %d", k < 5 ? CASES[k] : "none",
                     page->per_case[k], api->per_case[k]);
        seen += k < 5 && api->per_case[k] > 0;
    }
    if (need_cases) cr_expect_geq(seen, 2, "an answer with one case tests little: pick another seed");
}

// The page at /QUERY driven to its end in a viewport `width` CSS pixels wide; its DOM (free it).
// Screenshot: $EMX_BUILD/page-shots/NAME.png.
static char *drive_at(int port, const char *query, const char *name, int width) {
    char bin[512], url[1024], dir[512], shot[700];
    find_browser(bin, sizeof bin);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/%s", port, query);
    mkdir(test_build_path(dir, sizeof dir, "page-shots"), 0755);
    snprintf(shot, sizeof shot, "%s/%s.png", dir, name);
    char py[512];
    cr_assert(find_on_path(py, sizeof py, (const char *const[]){"python3"}, 1), "no python3 on PATH");
    char w[16];
    snprintf(w, sizeof w, "%d", width);
    const char *args[] = {"tests/server/page_driver.py", bin, url, shot, w, NULL};
    RunResult r = run_prog(py, args);
    cr_assert_eq(r.code, 0, "page_driver exit %d: %s", r.code, r.err);
    struct stat st;
    cr_expect(stat(shot, &st) == 0 && st.st_size > 1000, "no screenshot at %s", shot);
    char *dom = r.out;
    r.out = NULL;
    run_free(&r);
    cr_assert(strstr(dom, "data-ready=\"1\""), "the page did not finish: %.300s", dom);
    return dom;
}

static char *drive(int port, const char *query, const char *name) { return drive_at(port, query, name, 1200); }

// <html data-scroll-width="N">: the page's laid-out width (page_driver.py).
static int scroll_width(const char *dom) {
    const char *w = strstr(dom, "data-scroll-width=\"");
    cr_assert(w, "no data-scroll-width in the DOM");
    return atoi(w + strlen("data-scroll-width=\""));
}

// ---------------------------------------------------------------------------------------------

Test(page, served_without_key_and_palette_is_the_reports, .timeout = 120, .fini = stop_server_left) {
    Server s = server_start("qwen3-tiny.q8.bin", (const char *[]){"--api-key", "sekret", NULL});
    Http h = http(s.port, "GET", "/", NULL, NULL);
    cr_expect_eq(h.status, 200);
    cr_expect(strcasestr(h.head, "\r\nContent-Type: text/html; charset=utf-8"), "%s", h.head);
    cr_expect_str_eq(h.body, srv_page_html, "GET / is not the built-in page");
    cr_expect_lt(strlen(srv_page_html), 25000u, "the page is meant to stay small");
    http_free(&h);
    h = http(s.port, "GET", "/v1/models", NULL, NULL);
    cr_expect_eq(h.status, 401, "the API still needs the key");
    http_free(&h);
    h = http(s.port, "POST", "/", "sekret", "{}");
    cr_expect_eq(h.status, 405);
    http_free(&h);
    h = http(s.port, "GET", "/v1/models", "sekret", NULL);
    cr_expect(strstr(h.body, "\"chat_template\":true"), "%s", h.body);
    http_free(&h);
    server_stop(&s);
    // One palette: each case's colour is the --report page's.
    const char *const vars[] = {"--LELV:", "--HELV:", "--LEHV:", "--HEHV:", "--ADAPTIVE:", "--inserted:", "--none:"};
    for (int k = 0; k < 7; k++) {
        const char *a = strstr(srv_page_html, vars[k]), *b = strstr(emx_report_template, vars[k]);
        cr_assert(a && b, "%s missing", vars[k]);
        cr_expect_eq(strcspn(a, ";"), strcspn(b, ";"));
        cr_expect(!strncmp(a, b, strcspn(b, ";")), "%s: page %.20s, report %.20s", vars[k], a, b);
    }
}

Test(page, chat_streams_tokens_as_the_api_answers, .timeout = 600, .fini = stop_server_left) {
    char bin[512];
    find_browser(bin, sizeof bin);  // skip before starting anything
    Server s = server_start("qwen3-tiny.q8.bin", NULL);
    const char *ext = "\"seed\":7,\"max_tokens\":24,\"entropix\":{\"sampler\":\"entropix\",\"metrics\":true}}";
    char *b1 = NULL, *b2 = NULL;
    cr_assert(asprintf(&b1, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],%s", ext) > 0);
    Answer api1 = api_answer(s.port, NULL, "/v1/chat/completions", b1);
    // The second turn carries the whole conversation: the first answer included.
    cJSON *t = cJSON_CreateString(api1.text);
    char *a1 = cJSON_PrintUnformatted(t);
    cJSON_Delete(t);
    cr_assert(asprintf(&b2, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"},{\"role\":\"assistant\",\"content\":%s},"
                            "{\"role\":\"user\",\"content\":\"And then?\"}],%s", a1, ext) > 0);
    Answer api2 = api_answer(s.port, NULL, "/v1/chat/completions", b2);
    char *dom = drive(s.port, "?prompt=Hello&prompt=And%20then%3F&seed=7&max_tokens=24&sampler=entropix", "qwen3-tiny-chat");
    Answer p1 = page_answer(dom, 0), p2 = page_answer(dom, 1);
    expect_same(&p1, &api1, 1);
    expect_same(&p2, &api2, 0);
    cr_expect(strstr(dom, "<td>entropy (bits)</td>") && strstr(dom, "<td>attention agreement</td>"),
              "hovering a token shows no metrics");
    answer_free(&p1), answer_free(&p2), answer_free(&api1), answer_free(&api2);
    free(dom), free(a1), free(b1), free(b2);
    server_stop(&s);
}

Test(page, model_without_template_uses_completions, .timeout = 600, .fini = stop_server_left) {
    char bin[512];
    find_browser(bin, sizeof bin);
    Server s = server_start("stories260K.f32.bin", NULL);
    Http h = http(s.port, "GET", "/v1/models", NULL, NULL);
    cr_expect(strstr(h.body, "\"chat_template\":false"), "%s", h.body);
    http_free(&h);
    Answer api = api_answer(s.port, NULL, "/v1/completions",
                            "{\"prompt\":\"Once upon a time\",\"seed\":3,\"max_tokens\":40,"
                            "\"entropix\":{\"sampler\":\"entropix\",\"metrics\":true}}");
    char *dom = drive(s.port, "?prompt=Once%20upon%20a%20time&seed=3&max_tokens=40&sampler=entropix", "stories260K-raw");
    Answer p = page_answer(dom, 0);
    expect_same(&p, &api, 1);
    answer_free(&p), answer_free(&api);
    free(dom);
    server_stop(&s);
}

Test(page, api_key_asked_and_sent, .timeout = 600, .fini = stop_server_left) {
    char bin[512];
    find_browser(bin, sizeof bin);
    Server s = server_start("qwen3-tiny.q8.bin", (const char *[]){"--api-key", "sekret", NULL});
    // Without the key the page shows the server's 401, and has the field to enter it.
    char *dom = drive(s.port, "?prompt=Hello&max_tokens=4", "qwen3-tiny-no-key");
    cr_expect(strstr(dom, "id=\"api_key\" type=\"password\""), "no key field");
    cr_expect(strstr(dom, "data-error=\"1\"") && strstr(dom, "HTTP 401: missing or wrong API key"),
              "the 401 is not shown: %.2000s", strstr(dom, "<div id=\"log\">"));
    free(dom);
    // With the key; the message is markup, which the page must show as text, not run.
    Answer api = api_answer(s.port, "sekret", "/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"<img src=x onerror=\\\"document.title='pwned'\\\">Hi\"}],"
                            "\"seed\":5,\"max_tokens\":12,\"entropix\":{\"sampler\":\"greedy\",\"metrics\":true}}");
    dom = drive(s.port, "?prompt=%3Cimg%20src%3Dx%20onerror%3D%22document.title%3D'pwned'%22%3EHi&seed=5&max_tokens=12&sampler=greedy"
                "#api_key=sekret", "qwen3-tiny-key");
    cr_expect(!strstr(dom, "<img") && !strstr(dom, "<title>pwned"), "the message became markup");
    cr_expect(strstr(dom, "&lt;img src=x onerror=\"document.title='pwned'\"&gt;Hi"), "the message is not shown as text");
    Answer p = page_answer(dom, 0);
    expect_same(&p, &api, 0);
    cr_expect_eq(p.per_case[5], p.completion_tokens, "greedy: every token is c-none");
    answer_free(&p), answer_free(&api);
    free(dom);
    server_stop(&s);
}

// At 420 px (a phone) nothing overflows sideways; with the colouring off a finished answer shows
// as Markdown, built from elements: the model's markup stays text.
Test(page, narrow_markdown_view_is_safe, .timeout = 300, .fini = stop_server_left) {
    char bin[512];
    find_browser(bin, sizeof bin);
    Server s = server_start("qwen3-tiny.q8.bin", NULL);
    // "# Title\n**bold** and `x < y`\n- one\n- two\n```\n<script>alert(1)</script>\n```\n<img src=x onerror=alert(2)> [a](http://e.x)"
    const char *md = "%23%20Title%0A**bold**%20and%20%60x%20%3C%20y%60%0A-%20one%0A-%20two%0A%60%60%60%0A%3Cscript%3Ealert(1)"
                     "%3C%2Fscript%3E%0A%60%60%60%0A%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E%20%5Ba%5D(http%3A%2F%2Fe.x)";
    char *q = NULL;
    cr_assert(asprintf(&q, "?colors=0&md=%s", md) > 0);
    char *dom = drive_at(s.port, q, "md-narrow", 420);
    cr_expect_leq(scroll_width(dom), 420, "the page is %d px wide at 420", scroll_width(dom));
    cr_expect(strstr(dom, "<div id=\"log\" class=\"plain\">"), "the colouring is not off");
    const char *want[] = {"<h1>Title</h1>", "<strong>bold</strong>", "<code>x &lt; y</code>", "<li>one</li><li>two</li>",
                          "<pre><code>&lt;script&gt;alert(1)&lt;/script&gt;</code></pre>", "&lt;img src=x onerror=alert(2)&gt;",
                          "<a href=\"http://e.x\" rel=\"noopener noreferrer\" target=\"_blank\">a</a>"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_expect(strstr(dom, want[i]), "no %s in the Markdown view", want[i]);
    cr_expect(!strstr(dom, "<script>alert") && !strstr(dom, "<img"), "the model's markup became HTML");
    free(dom);
    // The chat itself at 420 px: the answer streamed in, nothing wider than the screen.
    dom = drive_at(s.port, "?prompt=Hello&seed=7&max_tokens=24&sampler=entropix", "chat-narrow", 420);
    cr_expect_leq(scroll_width(dom), 420, "the chat is %d px wide at 420", scroll_width(dom));
    free(dom), free(q);
    server_stop(&s);
}

// Regenerate replaces the last answer: the same request again (with the seed set, the same text),
// the conversation one user turn and one answer long; Copy and Regenerate under the answer.
Test(page, regenerate_replaces_the_last_answer, .timeout = 600, .fini = stop_server_left) {
    char bin[512];
    find_browser(bin, sizeof bin);
    Server s = server_start("qwen3-tiny.q8.bin", NULL);
    Answer api = api_answer(s.port, NULL, "/v1/chat/completions",
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"seed\":7,\"max_tokens\":16,"
                            "\"entropix\":{\"sampler\":\"entropix\",\"metrics\":true}}");
    char *dom = drive(s.port, "?prompt=Hello&seed=7&max_tokens=16&sampler=entropix&regenerate=1", "regenerate");
    int users = 0, answers = 0;
    for (const char *p = dom; (p = strstr(p, "<div class=\"msg user\"")); p++) users++;
    for (const char *p = dom; (p = strstr(p, "<div class=\"msg assistant")); p++) answers++;
    cr_expect(users == 1 && answers == 1, "%d user turns, %d answers after a regenerate", users, answers);
    Answer p = page_answer(dom, 0);
    expect_same(&p, &api, 0);
    cr_expect(strstr(dom, ">Copy</button>") && strstr(dom, ">Regenerate</button>"), "no Copy and Regenerate buttons");
    answer_free(&p), answer_free(&api);
    free(dom);
    server_stop(&s);
}
