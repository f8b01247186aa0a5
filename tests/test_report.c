// test_report.c — ./run --report FILE.html (runtime/report/report.h), rendered by headless
// chromium and checked against the same run's --metrics: one token element per generated token,
// each case's count, one plot point per token per series, the agent pool's rollbacks struck out
// and marked. Then the writer alone with hostile token pieces (quotes, </script>, invalid UTF-8,
// control bytes, NUL): the embedded JSON stays valid and the page shows the text without running
// it. Chromium is found on PATH; without it the browser tests skip and say why, unless
// EMX_REQUIRE_BROWSER=1 (make check), where they fail.
#define _XOPEN_SOURCE 700  // nftw
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "browser_util.h"
#include "run_util.h"
#include "test_util.h"
#include "runtime/model.h"
#include "runtime/report/report.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

// The DOM of file `html` after its scripts ran (--dump-dom), and a screenshot saved as
// $EMX_BUILD/report-shots/NAME.png. Each call has its own profile folder: tests run in parallel.
static char *render(const char *html, const char *name) {
    char bin[512], profile[] = "/tmp/emx_chromium_XXXXXX", url[600], udd[600], shot[600], dir[512];
    find_browser(bin, sizeof bin);
    cr_assert(mkdtemp(profile));
    snprintf(url, sizeof url, "file://%s", html);
    snprintf(udd, sizeof udd, "--user-data-dir=%s", profile);
    const char *common[] = {"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage", udd};
    const char *dump[] = {common[0], common[1], common[2], common[3], common[4], common[5], "--dump-dom", url, NULL};
    RunResult r = run_prog(bin, dump);
    cr_assert_eq(r.code, 0, "chromium --dump-dom exit %d: %s", r.code, r.err);
    char *dom = r.out;
    r.out = NULL;
    run_free(&r);
    mkdir(test_build_path(dir, sizeof dir, "report-shots"), 0755);
    snprintf(shot, sizeof shot, "--screenshot=%s/%s.png", dir, name);
    const char *snap[] = {common[0], common[1], common[2], common[3], common[4], common[5], "--window-size=1300,1600", shot, url, NULL};
    r = run_prog(bin, snap);
    cr_expect_eq(r.code, 0, "chromium --screenshot exit %d: %s", r.code, r.err);
    struct stat st;
    cr_expect(stat(shot + strlen("--screenshot="), &st) == 0 && st.st_size > 1000, "no screenshot at %s", shot);
    run_free(&r);
    nftw(profile, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    cr_assert(strstr(dom, "data-ready=\"1\""), "the page's script did not finish: %.300s", dom);
    return dom;
}

// The page's laid-out width at a 420 px viewport (a phone), through tests/server/page_driver.py
// (its DevTools session measures what --dump-dom cannot); screenshot report-shots/NAME-420.png.
static int width_at_420(const char *html, const char *name) {
    char bin[512], url[600], shot[600], dir[512], py[512];
    find_browser(bin, sizeof bin);
    cr_assert(find_on_path(py, sizeof py, (const char *const[]){"python3"}, 1), "no python3 on PATH");
    snprintf(url, sizeof url, "file://%s", html);
    snprintf(shot, sizeof shot, "%s/%s-420.png", test_build_path(dir, sizeof dir, "report-shots"), name);
    RunResult r = run_prog(py, (const char *[]){"tests/server/page_driver.py", bin, url, shot, "420", "static", NULL});
    cr_assert_eq(r.code, 0, "page_driver exit %d: %s", r.code, r.err);
    const char *w = strstr(r.out, "data-scroll-width=\"");
    cr_assert(w, "no data-scroll-width");
    const int px = atoi(w + strlen("data-scroll-width=\""));
    run_free(&r);
    return px;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// Token elements: all, and those struck out (class "rb").
static void count_tokens(const char *dom, int *all, int *rolled) {
    *all = *rolled = 0;
    for (const char *p = dom; (p = strstr(p, "class=\"tok ")); p++) {
        const char *end = strchr(p + 7, '"');
        (*all)++;
        for (const char *q = p + 7; q + 3 <= end; q++)
            if (q[0] == ' ' && q[1] == 'r' && q[2] == 'b' && (q[3] == ' ' || q[3] == '"')) (*rolled)++;
    }
}

// The legend's count for case c ("LELV", "none", "agents", ...), -1 when absent.
static int case_count(const char *dom, const char *c) {
    char key[64];
    snprintf(key, sizeof key, "data-case=\"%s\">", c);
    const char *p = strstr(dom, key);
    return p ? atoi(p + strlen(key)) : -1;
}

// Points of plot `series`: the M/L commands of its one path (-1: no plot).
static int plot_points(const char *dom, const char *series) {
    char key[96];
    snprintf(key, sizeof key, "data-series=\"%s\"", series);
    const char *p = strstr(dom, key);
    if (!p) return -1;
    const char *path = strstr(p, "<path class=\"series\" d=\"");
    cr_assert(path, "plot %s has no path", series);
    path += strlen("<path class=\"series\" d=\"");
    int n = 0;
    for (; *path && *path != '"'; path++) n += *path == 'M' || *path == 'L';
    cr_expect_eq(count(p, "<path class=\"series\"") - count(strstr(p, "</svg>"), "<path class=\"series\""), 1,
                 "plot %s: more than one path", series);
    return n;
}

// The --metrics lines: how many, and per case (entropix case name; "none" for null).
typedef struct {
    int n, per_case[8];
} MetricsCounts;
static const char *const CASES[] = {"LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE", "inserted", "none", "agents"};

static MetricsCounts read_metrics(const char *path) {
    MetricsCounts mc = {0};
    char *text = test_read_file(path, NULL);
    cr_assert(text, "no --metrics at %s", path);
    for (char *s = strtok(text, "\n"); s; s = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(s);
        cr_assert(o, "bad --metrics line %s", s);
        const cJSON *c = cJSON_GetObjectItem(o, "case");
        const char *name = cJSON_IsTrue(cJSON_GetObjectItem(o, "inserted")) ? "inserted"
                           : cJSON_IsString(c)                                  ? c->valuestring
                           : strcmp(cJSON_GetObjectItem(o, "sampler")->valuestring, "agents") == 0 ? "agents" : "none";
        for (int k = 0; k < 8; k++) mc.per_case[k] += strcmp(name, CASES[k]) == 0;
        mc.n++;
        cJSON_Delete(o);
    }
    free(text);
    return mc;
}

static void tmp_name(char *buf, const char *suffix) {
    sprintf(buf, "/tmp/emx_report_XXXXXX");
    int fd = mkstemp(buf);
    cr_assert(fd >= 0);
    close(fd);
    unlink(buf);
    strcat(buf, suffix);
}

static const char *model(char *buf, size_t cap, const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    return test_build_path(buf, cap, rel);
}

static const char *const SERIES[] = {"logits_entropy_bits", "logits_varentropy_bits2", "attn_entropy_bits",
                                     "attn_varentropy_heads_bits2", "attn_varentropy_true_bits2", "attn_agreement",
                                     "attn_interaction_strength"};

Test(report, single_stream_entropix_stories, .timeout = 300) {
    char bin[512], mp[512], html[64], metrics[64];
    find_browser(bin, sizeof bin);  // skip before running anything
    tmp_name(html, ".html"), tmp_name(metrics, ".jsonl");
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once upon a time", "-n", "120", "-s", "7",
                          "-t", "1", "--metrics", metrics, "--report", html, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    MetricsCounts mc = read_metrics(metrics);
    char *dom = render(html, "stories260K-entropix");
    int all, rolled;
    count_tokens(dom, &all, &rolled);
    cr_expect_eq(all, mc.n, "%d token elements for %d generated tokens", all, mc.n);
    cr_expect_eq(rolled, 0);
    int cases_seen = 0;
    for (int k = 0; k < 5; k++) {
        cr_expect_eq(case_count(dom, CASES[k]), mc.per_case[k], "%s: page %d, --metrics %d", CASES[k],
                     case_count(dom, CASES[k]), mc.per_case[k]);
        cases_seen += mc.per_case[k] > 0;
    }
    cr_expect_geq(cases_seen, 2, "a run with one case tests little: pick another seed");
    for (int s = 0; s < 7; s++)
        cr_expect_eq(plot_points(dom, SERIES[s]), mc.n, "plot %s: %d points for %d tokens", SERIES[s],
                     plot_points(dom, SERIES[s]), mc.n);
    // the classic profile's thresholds, one dashed line per distinct value on each of the two plots
    EmxProfile p;
    emx_profile_builtin(&p, "classic");
    const double h[4] = {p.lelv_entropy_below, p.helv_entropy_above, p.lehv_entropy_below, p.hehv_entropy_above};
    const double v[4] = {p.lelv_varentropy_below, p.helv_varentropy_below, p.lehv_varentropy_above, p.hehv_varentropy_above};
    int distinct = 0;
    for (int i = 0; i < 4; i++) {
        int seen_h = 0, seen_v = 0;
        for (int j = 0; j < i; j++) seen_h |= h[j] == h[i], seen_v |= v[j] == v[i];
        distinct += !seen_h + !seen_v;
    }
    cr_expect_eq(count(dom, "<line class=\"thr\""), distinct, "threshold lines: %d, want %d", count(dom, "<line class=\"thr\""), distinct);
    cr_expect(!strstr(dom, "<div class=\"note\">Sampler"), "entropix chose these tokens");
    free(dom);
    unlink(html), unlink(metrics);
}

Test(report, basic_sampler_says_metrics_unused, .timeout = 300) {
    char bin[512], mp[512], html[64], metrics[64];
    find_browser(bin, sizeof bin);
    tmp_name(html, ".html"), tmp_name(metrics, ".jsonl");
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once", "-n", "30", "-s", "1", "-t", "1",
                          "--sampler", "topk", "--metrics", metrics, "--report", html, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    MetricsCounts mc = read_metrics(metrics);
    char *dom = render(html, "stories260K-topk");
    int all, rolled;
    count_tokens(dom, &all, &rolled);
    cr_expect_eq(all, mc.n);
    cr_expect_eq(case_count(dom, "none"), mc.n);
    cr_expect(strstr(dom, "<div class=\"note\">Sampler topk: the entropix metrics were measured beside it, not used"),
              "the page must say the metrics were not used");
    cr_expect_eq(plot_points(dom, "attn_entropy_bits"), mc.n, "measured beside the sampler");
    free(dom);
    unlink(html), unlink(metrics);
}

Test(report, agents_rollbacks_qwen3, .timeout = 300) {
    char bin[512], mp[512], html[64], metrics[64];
    find_browser(bin, sizeof bin);
    tmp_name(html, ".html"), tmp_name(metrics, ".jsonl");
    // margin -1000: every verdict BAD, so rollbacks (and, after 2, an accepted BAD) happen
    const char *args[] = {model(mp, sizeof mp, "qwen3-tiny.f32.bin"), "-p", "Hello", "-n", "24", "-s", "2", "-t", "1",
                          "-c", "128", "--agents", "4", "--check-every", "4", "--critic-margin", "-1000",
                          "--max-rollbacks", "2", "--metrics", metrics, "--report", html, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    int checks = 0, bad = 0, rollbacks = 0, dropped = 0, accepted = 0;
    const char *c = strstr(r.err, "critic: ");
    cr_assert(c && sscanf(c, "critic: %d checks, %d BAD, %d rollbacks (%d tokens), %d BAD accepted", &checks, &bad,
                          &rollbacks, &dropped, &accepted) == 5, "%s", r.err);
    cr_assert(rollbacks > 0 && dropped > 0, "no rollback happened: %s", r.err);
    run_free(&r);
    MetricsCounts mc = read_metrics(metrics);
    char *dom = render(html, "qwen3-tiny-agents");
    int all, rolled;
    count_tokens(dom, &all, &rolled);
    cr_expect_eq(all - rolled, mc.n, "%d kept token elements for %d --metrics lines", all - rolled, mc.n);
    cr_expect_eq(rolled, dropped, "%d struck-out tokens, the critic dropped %d", rolled, dropped);
    cr_expect_eq(case_count(dom, "agents"), mc.per_case[7]);
    cr_expect_eq(count(dom, "class=\"ev ev-rollback\""), rollbacks);
    cr_expect_eq(count(dom, "class=\"ev ev-bad\""), bad);
    for (int s = 0; s < 2; s++) {  // the pool measures the logits only; every committed token is a point
        cr_expect_eq(plot_points(dom, SERIES[s]), all, "plot %s", SERIES[s]);
        cr_expect_eq(count(strstr(dom, SERIES[s]), "<line class=\"rollback-mark\"") -
                         count(strstr(strstr(dom, SERIES[s]), "</svg>"), "<line class=\"rollback-mark\""),
                     rollbacks, "plot %s: rollback marks", SERIES[s]);
    }
    cr_expect_eq(plot_points(dom, "attn_entropy_bits"), -1, "no attention metrics in agents mode");
    cr_expect(strstr(dom, "<summary>") && strstr(dom, " rounds of the agent pool"), "no rounds section");
    const int px = width_at_420(html, "qwen3-tiny-agents");  // the richest page: plots, rounds, the inspector
    cr_expect_leq(px, 420, "the report is %d px wide at 420", px);
    free(dom);
    unlink(html), unlink(metrics);
}

// --report is an output: it may not name an input nor another output; a failed write is one line.
Test(report, output_checks_and_write_errors, .timeout = 300) {
    char mp[512], copy[64], out[64];
    model(mp, sizeof mp, "stories260K.f32.bin");
    size_t n = 0;
    char *bytes = test_read_file(mp, &n);
    cr_assert(bytes);
    tmp_name(copy, ".bin");
    FILE *f = fopen(copy, "wb");
    cr_assert(f && fwrite(bytes, 1, n, f) == n && fclose(f) == 0);
    expect_error((const char *[]){copy, "-n", "2", "--report", copy, NULL}, 2, "--report");
    size_t n2 = 0;
    char *after = test_read_file(copy, &n2);
    cr_expect(after && n2 == n && memcmp(after, bytes, n) == 0, "the model file was changed");
    free(after);
    tmp_name(out, ".html");
    expect_error((const char *[]){copy, "-n", "2", "--metrics", out, "--report", out, NULL}, 2, "--report");
    // a folder that does not exist: a usage error, said before the model is opened (base/out_file.h)
    expect_error((const char *[]){copy, "-n", "2", "-t", "1", "-s", "1", "--report", "/nonexistent-dir/r.html", NULL}, 2,
                 "--report /nonexistent-dir/r.html: the folder /nonexistent-dir does not exist");
    expect_error((const char *[]){copy, "-n", "2", "-t", "1", "--agents", "2", "--check-every", "0", "-s", "1", "--report",
                                  "/nonexistent-dir/r.html", NULL}, 2,
                 "--report /nonexistent-dir/r.html: the folder /nonexistent-dir does not exist");
    unlink(copy), unlink(out);
    free(bytes);
}

// ---------------------------------------------------------------------------------------------
// The writer alone: hostile pieces

static const char *const HOSTILE[] = {
    "\"quoted\" \\ back",
    "</script><script>document.getElementById('status').setAttribute('data-pwned','1')</script>",
    "<img src=x onerror=\"document.title='pwned'\">",
    "<!-- <script>",
    "\xff\xfe bad \xc3",   // invalid UTF-8: U+FFFD
    "\x01\x1b[31m\x7f",   // control bytes
    "a\0b",               // NUL (length 3)
    "&amp; \xe2\x80\xa8 line sep",
};
static const size_t HOSTILE_LEN[] = {0, 0, 0, 0, 0, 0, 3, 0};

// The JSON blob of a written page.
static cJSON *page_data(const char *page) {
    const char *open = "<script type=\"application/json\" id=\"emx-data\">";
    const char *s = strstr(page, open);
    cr_assert(s);
    s += strlen(open);
    const char *e = strstr(s, "</script>");
    cr_assert(e);
    char *blob = strndup(s, (size_t)(e - s));
    cJSON *d = cJSON_Parse(blob);
    cr_assert(d, "the embedded JSON does not parse: %.200s", blob);
    free(blob);
    return d;
}

// Writes the hostile page into a new folder `dir` as dir/page.html; checks the writer's file
// handling on the way.
static void write_hostile(char *dir, char *path, size_t cap) {
    char mp[512], err[512];
    EmxModel m;
    cr_assert_eq(emx_model_open(&m, model(mp, sizeof mp, "stories260K.f32.bin"), err, sizeof err), 0, "%s", err);
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, sizeof err);
    cr_assert(tk, "%s", err);
    EmxProfile prof;
    emx_profile_builtin(&prof, "classic");
    EmxReportInfo info = {.model = "</script><b>model</b>", .prompt = "<script>alert(1)</script>", .prompt_len = 25,
                          .sampler = "entropix", .entropix = 1, .profile = &prof, .profile_name = "classic"};
    EmxReport *rep = emx_report_new(&info, tk);
    cr_assert(rep);
    const int nh = (int)(sizeof HOSTILE / sizeof HOSTILE[0]);
    EmxLogprobs lp = {.n = 5, .id = {1, 2, 3, 4, 5}, .logprob = {-0.1f, -2, -3, -4, -5}, .chosen = -0.1};
    for (int i = 0; i < nh; i++) {
        EmxMetrics mm = {.logits_entropy_bits = 1 + i, .logits_varentropy_bits2 = 2};
        EmxDecision d = {.kase = EMX_CASE_LEHV, .action = EMX_ACTION_SAMPLE, .params = {.temperature = 1, .top_k = 5, .top_p = 1}};
        EmxTokenRecord r = {.index = i, .id = 100 + i, .pos = 3 + i, .sampler = "entropix", .metrics = &mm, .decision = &d,
                            .score = NAN, .piece = HOSTILE[i], .piece_len = HOSTILE_LEN[i] ? HOSTILE_LEN[i] : strlen(HOSTILE[i]),
                            .logprobs = &lp, .n_logprobs = -1};
        cr_assert_eq(emx_report_add_token(rep, &r), 0);
    }
    cr_assert(mkdtemp(dir));
    snprintf(path, cap, "%s/page.html", dir);
    cr_assert_eq(emx_report_write(rep, path, err, sizeof err), 0, "%s", err);
    // a write that cannot happen: one line naming the file, nothing left behind
    char bad[700];
    snprintf(bad, sizeof bad, "%s/missing/page.html", dir);
    cr_expect_eq(emx_report_write(rep, bad, err, sizeof err), -1);
    cr_expect(strstr(err, bad) && !strchr(err, '\n'), "%s", err);
    emx_report_free(rep);
    DIR *dd = opendir(dir);
    int entries = 0;
    for (struct dirent *de; (de = readdir(dd));) entries += de->d_name[0] != '.';
    closedir(dd);
    cr_expect_eq(entries, 1, "only page.html: no temporary file left in %s", dir);
    emx_tokenizer_free(tk);
    emx_model_close(&m);
}

Test(report_writer, hostile_pieces_json_stays_valid, .timeout = 120) {
    char dir[] = "/tmp/emx_report_w_XXXXXX", path[600];
    write_hostile(dir, path, sizeof path);
    const int nh = (int)(sizeof HOSTILE / sizeof HOSTILE[0]);

    char *page = test_read_file(path, NULL);
    cr_assert(page);
    // The template closes its own script elements; the data adds none.
    cr_expect_eq(count(page, "</script"), count(emx_report_template, "</script"), "a piece closed a script element");
    cr_expect_eq(count(page, "<!--"), count(emx_report_template, "<!--"));
    cJSON *d = page_data(page);
    const cJSON *toks = cJSON_GetObjectItem(d, "tokens");
    cr_assert_eq(cJSON_GetArraySize(toks), nh);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 0), "piece")->valuestring, HOSTILE[0]);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 1), "piece")->valuestring, HOSTILE[1]);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 4), "piece")->valuestring,
                     "\xef\xbf\xbd\xef\xbf\xbd bad \xef\xbf\xbd");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 5), "piece")->valuestring, HOSTILE[5]);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 6), "piece")->valuestring, "a?b");
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(toks, 0), "top_logprobs")), EMX_REPORT_TOP);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "meta"), "model")->valuestring, "</script><b>model</b>");
    cJSON_Delete(d);
    free(page);
    unlink(path);
    rmdir(dir);
}

// Rendered: the page's script ran, nothing injected ran, the pieces show as text.
Test(report_writer, hostile_pieces_render_as_text, .timeout = 120) {
    char bin[512], dir[] = "/tmp/emx_report_w_XXXXXX", path[600];
    find_browser(bin, sizeof bin);
    write_hostile(dir, path, sizeof path);
    const int nh = (int)(sizeof HOSTILE / sizeof HOSTILE[0]);
    {
        char *dom = render(path, "hostile");
        int all, rolled;
        count_tokens(dom, &all, &rolled);
        cr_expect_eq(all, nh);
        cr_expect(!strstr(dom, "data-pwned=\"1\""), "an injected script ran");
        cr_expect(!strstr(dom, "<title>pwned"), "an injected handler ran");
        cr_expect(!strstr(dom, "<img"), "a piece became an element");
        cr_expect(strstr(dom, "&lt;/script&gt;&lt;script&gt;document"), "the </script> piece is not shown as text");
        cr_expect(strstr(dom, "&lt;/script&gt;&lt;b&gt;model"), "the model name is not shown as text");
        free(dom);
    }
    unlink(path);
    rmdir(dir);
}
