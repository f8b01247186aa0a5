// test_run_entropix.c — ./run with the entropix sampler (its default) end to end: runs and
// reproduces with a seed, the --metrics JSON lines (valid, complete, and consistent with the
// switch's own rule applied to the logged metrics), --color, profile flags and their errors,
// and fluent text with the pause token on SmolLM2 when its weights are present.
//
// Models: $EMX_BUILD/models/stories260K.f32.bin (tests/models.mk), and
// $EMX_BUILD/models/smollm2.q8.bin (tests/models_smollm2.mk, after `make weights`).
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sampler/entropix.h"
#include "sampler/profile.h"
#include "run_util.h"
#include "test_util.h"

static const char *stories(char *buf, size_t cap) {
    test_build_path(buf, cap, "models/stories260K.f32.bin");
    if (access(run_binary(), X_OK) != 0) cr_assert_fail("%s is not built (make run)", run_binary());
    if (access(buf, R_OK) != 0) cr_assert_fail("%s is missing: make test-models", buf);
    return buf;
}

static int generated_count(const char *err) {
    const char *s = strstr(err, "generated: ");
    int n = -1;
    cr_assert(s && sscanf(s, "generated: %d", &n) == 1, "no 'generated:' line in [%s]", err);
    return n;
}

Test(run_entropix, default_sampler_runs_and_a_seed_reproduces, .timeout = 300) {
    char mp[1024];
    stories(mp, sizeof mp);
    const char *a42[] = {mp, "-s", "42", "-n", "80", "-t", "1", NULL};
    const char *a43[] = {mp, "-s", "43", "-n", "80", "-t", "1", NULL};
    RunResult r1 = run(a42), r2 = run(a42), r3 = run(a43);
    cr_assert(r1.code == 0 && r2.code == 0 && r3.code == 0, "%s | %s | %s", r1.err, r2.err, r3.err);
    cr_expect(strstr(r1.err, "entropix cases:") != NULL, "not the entropix sampler: %s", r1.err);
    cr_expect(r1.out_len > 40, "too little text: [%s]", r1.out);
    cr_expect_str_eq(r1.out, r2.out, "seed 42 twice gave different text");
    cr_expect_str_neq(r1.out, r3.out, "seeds 42 and 43 gave the same text");
    run_free(&r1);
    run_free(&r2);
    run_free(&r3);
}

// Reads a --metrics file into an array of parsed lines.
static cJSON **read_jsonl(const char *path, int *n) {
    char *text = test_read_file(path, NULL);
    cr_assert(text, "cannot read %s", path);
    cJSON **lines = NULL;
    *n = 0;
    for (char *s = text, *nl; *s; s = nl + 1) {
        nl = strchr(s, '\n');
        cr_assert(nl, "line %d of %s does not end with a newline", *n + 1, path);
        *nl = 0;
        cJSON *j = cJSON_Parse(s);
        cr_assert(j && cJSON_IsObject(j), "line %d is not a JSON object: %s", *n + 1, s);
        lines = realloc(lines, sizeof *lines * (size_t)(*n + 1));
        lines[(*n)++] = j;
    }
    free(text);
    return lines;
}

static void free_jsonl(cJSON **lines, int n) {
    for (int i = 0; i < n; i++) cJSON_Delete(lines[i]);
    free(lines);
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(v, "missing key %s", key);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

static const char *const every_key[] = {
    "index", "pos", "id", "piece", "piece_bytes", "stop", "sampler", "case", "action",
    "inserted", "temperature", "top_k", "top_p", "min_p", "n_samples", "score",
    "logits_entropy_bits", "logits_varentropy_bits2", "attn_entropy_bits",
    "attn_varentropy_heads_bits2", "attn_varentropy_true_bits2", "attn_agreement",
    "attn_interaction_strength"};

static EmxMetrics metrics_of(const cJSON *o) {
    EmxMetrics m = {0};
    m.logits_entropy_bits = num(o, "logits_entropy_bits");
    m.logits_varentropy_bits2 = num(o, "logits_varentropy_bits2");
    m.attn_entropy_bits = num(o, "attn_entropy_bits");
    m.attn_varentropy_heads_bits2 = num(o, "attn_varentropy_heads_bits2");
    m.attn_varentropy_true_bits2 = num(o, "attn_varentropy_true_bits2");
    m.attn_agreement = num(o, "attn_agreement");
    m.attn_interaction_strength = num(o, "attn_interaction_strength");
    return m;
}

// Every line has every key; the case and the effective parameters are what the default
// profile's switch gives for the logged metrics (cJSON writes doubles that read back exactly).
Test(run_entropix, metrics_jsonl_is_complete_and_consistent, .timeout = 300) {
    char mp[1024], path[] = "/tmp/emx_metrics_XXXXXX";
    stories(mp, sizeof mp);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    const char *args[] = {mp, "-s", "7", "-n", "60", "-t", "1", "--metrics", path, NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    int n;
    cJSON **lines = read_jsonl(path, &n);
    cr_expect_eq(n, generated_count(r.err), "one line per generated token");
    EmxProfile prof;
    cr_assert_eq(emx_profile_builtin(&prof, EMX_PROFILE_DEFAULT), 0);
    int seen_case[EMX_CASE_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        const cJSON *o = lines[i];
        for (size_t k = 0; k < sizeof every_key / sizeof every_key[0]; k++)
            cr_assert(cJSON_GetObjectItemCaseSensitive(o, every_key[k]), "line %d lacks %s", i,
                      every_key[k]);
        cr_expect_eq((int)num(o, "index"), i);
        cr_expect_str_eq(cJSON_GetObjectItem(o, "sampler")->valuestring, "entropix");
        EmxMetrics m = metrics_of(o);
        cr_expect(m.logits_entropy_bits >= 0 && m.logits_entropy_bits <= log2(512.0) + 1e-9);
        cr_expect(m.attn_entropy_bits >= 0 && m.attn_entropy_bits <= log2(num(o, "pos")) + 1e-9,
                  "line %d: attention entropy %g over %g keys", i, m.attn_entropy_bits, num(o, "pos"));
        EmxEntropixState none = {0};
        EmxDecision d = emx_entropix_decide(&m, &prof, &none, -1);  // stories260K: no pause token
        const char *kase = cJSON_GetObjectItem(o, "case")->valuestring;
        cr_assert(kase, "line %d: case is not a string", i);
        cr_expect_str_eq(kase, emx_case_name(d.kase), "line %d", i);
        seen_case[d.kase]++;
        cr_expect(!cJSON_IsTrue(cJSON_GetObjectItem(o, "inserted")));
        cr_expect_eq((float)num(o, "temperature"), d.params.temperature, "line %d (%s)", i, kase);
        cr_expect_eq((int)num(o, "top_k"), d.params.top_k, "line %d (%s)", i, kase);
        cr_expect_eq((float)num(o, "top_p"), d.params.top_p, "line %d (%s)", i, kase);
        cr_expect_eq((float)num(o, "min_p"), d.params.min_p, "line %d (%s)", i, kase);
        int best_of = d.action == EMX_ACTION_BEST_OF_N;
        cr_expect_eq((int)num(o, "n_samples"), best_of ? d.n_samples : 1);
        cr_expect_eq(cJSON_IsNumber(cJSON_GetObjectItem(o, "score")), best_of, "line %d", i);
    }
    int kinds = 0;
    for (int c = 0; c < EMX_CASE_COUNT; c++) kinds += seen_case[c] > 0;
    cr_expect(kinds >= 2, "60 tokens went through one case only: not a switch");
    free_jsonl(lines, n);
    unlink(path);
    run_free(&r);
}

Test(run_entropix, metrics_with_a_basic_sampler, .timeout = 300) {
    char mp[1024], path[] = "/tmp/emx_metrics_XXXXXX";
    stories(mp, sizeof mp);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    const char *args[] = {mp, "--sampler", "greedy", "-n", "20", "-t", "1", "--metrics", path,
                          "--metric-layers", "all", NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "entropix cases:") == NULL);
    int n;
    cJSON **lines = read_jsonl(path, &n);
    cr_expect_eq(n, 20);
    for (int i = 0; i < n; i++) {
        cr_expect(cJSON_IsNull(cJSON_GetObjectItem(lines[i], "case")), "line %d", i);
        cr_expect_str_eq(cJSON_GetObjectItem(lines[i], "sampler")->valuestring, "greedy");
        cr_expect_eq(num(lines[i], "temperature"), 0.0);
        // Line 0 follows [BOS] alone: one key, entropy 0. Later ones see more keys.
        if (i > 0) cr_expect(num(lines[i], "attn_entropy_bits") > 0.0, "line %d: no attention metrics", i);
    }
    free_jsonl(lines, n);
    unlink(path);
    run_free(&r);
}

Test(run_entropix, color_shows_cases_with_a_legend, .timeout = 300) {
    char mp[1024];
    stories(mp, sizeof mp);
    const char *plain[] = {mp, "-s", "1", "-n", "30", "-t", "1", NULL};
    const char *colored[] = {mp, "-s", "1", "-n", "30", "-t", "1", "--color", NULL};
    RunResult p = run(plain), c = run(colored);
    cr_assert(p.code == 0 && c.code == 0, "%s | %s", p.err, c.err);
    cr_expect(strchr(p.out, '\033') == NULL, "escape codes without --color");
    cr_expect(strstr(c.out, "\033[") != NULL, "no escape codes with --color");
    cr_expect(strstr(c.err, "colors:") && strstr(c.err, "flowing") && strstr(c.err, "adaptive"),
              "no legend: %s", c.err);
    // The same text underneath the colours.
    char *stripped = malloc(c.out_len + 1);
    size_t k = 0;
    for (size_t i = 0; i < c.out_len; i++) {
        if (c.out[i] == '\033') {
            while (i < c.out_len && c.out[i] != 'm') i++;
            continue;
        }
        stripped[k++] = c.out[i];
    }
    stripped[k] = 0;
    cr_expect_str_eq(stripped, p.out);
    free(stripped);
    run_free(&p);
    run_free(&c);
    // With another sampler, --color says it does nothing.
    const char *greedy[] = {mp, "--sampler", "greedy", "-n", "5", "-t", "1", "--color", NULL};
    RunResult g = run(greedy);
    cr_expect_eq(g.code, 0);
    cr_expect(strstr(g.err, "--color shows entropix cases") != NULL, "%s", g.err);
    run_free(&g);
}

Test(run_entropix, profile_flags_and_their_errors, .timeout = 300) {
    char mp[1024];
    stories(mp, sizeof mp);
    // Built-in profiles, a file, overrides and layer choices all run.
    char file[] = "/tmp/emx_profile_XXXXXX";
    int fd = mkstemp(file);
    cr_assert(fd >= 0);
    const char good[] = "# a calibrated-style override\nlelv_entropy_below = 2.5\ntop_k = 10\n";
    cr_assert_eq(write(fd, good, sizeof good - 1), (ssize_t)(sizeof good - 1));
    close(fd);
    const char *const ok[][16] = {
        {mp, "-n", "10", "-t", "1", "--profile", "masked-bits", NULL},
        {mp, "-n", "10", "-t", "1", "--profile", file, NULL},
        {mp, "-n", "10", "-t", "1", "--profile-set", "ada_n_samples=1", "--profile-set", "top_p=0.5", NULL},
        {mp, "-n", "10", "-t", "1", "--metric-layers", "all", NULL},
        {mp, "-n", "10", "-t", "1", "--metric-layers", "0", NULL},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        RunResult r = run(ok[i]);
        cr_expect_eq(r.code, 0, "case %zu: %s", i, r.err);
        run_free(&r);
    }
    // The file's first line says lelv below 2.5 bits: stories260K's confident tokens are then
    // "flowing", which the classic 0.1 rarely allows.
    char bad[] = "/tmp/emx_profile_XXXXXX";
    fd = mkstemp(bad);
    cr_assert(fd >= 0);
    const char text[] = "top_k = 3\ntop_kk = 4\n";
    cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    char want[1100];
    snprintf(want, sizeof want, "%s:2: unknown key 'top_kk'", bad);
    expect_error((const char *[]){mp, "--profile", bad, NULL}, 2, want);
    expect_error((const char *[]){mp, "--profile", "nosuch", NULL}, 2, "no profile 'nosuch'");
    expect_error((const char *[]){mp, "--profile-set", "top_k=abc", NULL}, 2,
                 "--profile-set top_k=abc: bad value 'abc' for top_k");
    expect_error((const char *[]){mp, "--profile-set", "warp=9", NULL}, 2, "unknown key 'warp'");
    expect_error((const char *[]){mp, "--metric-layers", "99", "-t", "1", NULL}, 1,
                 "attn_layer = 99, but the model has 5 layers");
    expect_error((const char *[]){mp, "--metrics", "/nonexistent/dir/m.jsonl", "-t", "1", NULL},
                 2, "--metrics /nonexistent/dir/m.jsonl: the folder /nonexistent/dir does not exist");
    unlink(file);
    unlink(bad);
}

// SmolLM2-135M-Instruct (when `make weights` has fetched it). With the default (measured)
// profile a chat prompt gives readable English. With HELV made common (H > 2 bits, V < 8 bits²)
// the pause token (" ...", id 4563) is inserted, at most once per run of consecutive HELV steps.
static void smollm2_run(const char *mp, const char *path, const char *const *extra, RunResult *r) {
    const char *args[32] = {mp, "-p", "Write a short story about a lighthouse keeper.", "-n", "120",
                            "-s", "3", "-t", "1", "-c", "512", "--metrics", path};
    int n = 13;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    *r = run(args);
    cr_assert_eq(r->code, 0, "%s", r->err);
}

Test(run_entropix, smollm2_fluent, .timeout = 300) {
    char mp[1024], path[] = "/tmp/emx_metrics_XXXXXX";
    test_build_path(mp, sizeof mp, "models/smollm2.q8.bin");
    if (access(mp, R_OK) != 0) cr_skip_test("%s missing: run `make weights` first", mp);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    RunResult r;
    smollm2_run(mp, path, (const char *[]){NULL}, &r);
    // Readable: mostly letters, spaces and punctuation; words of sane length; no token loop.
    size_t letters = 0, other = 0, word = 0, longest = 0;
    for (size_t i = 0; i < r.out_len; i++) {
        unsigned char ch = (unsigned char)r.out[i];
        if (isalpha(ch)) letters++, word++;
        else {
            other += !(isspace(ch) || ispunct(ch) || isdigit(ch));
            if (word > longest) longest = word;
            word = 0;
        }
    }
    cr_expect(letters > r.out_len * 6 / 10, "not mostly letters: [%s]", r.out);
    cr_expect(other < r.out_len / 20, "odd bytes: [%s]", r.out);
    cr_expect(longest < 25, "a %zu-letter word: [%s]", longest, r.out);
    int n;
    cJSON **lines = read_jsonl(path, &n);
    cr_assert(n >= 20, "only %d tokens", n);
    int same_run = 1;
    for (int i = 1; i < n; i++) {
        same_run = (int)num(lines[i], "id") == (int)num(lines[i - 1], "id") ? same_run + 1 : 1;
        cr_expect(same_run <= 6, "token %d repeated %d times", (int)num(lines[i], "id"), same_run);
    }
    cr_log_info("smollm2 entropix (measured): %s", r.out);
    free_jsonl(lines, n);
    unlink(path);
    run_free(&r);
}

Test(run_entropix, smollm2_pause_inserted_once_per_helv_run, .timeout = 300) {
    char mp[1024], path[] = "/tmp/emx_metrics_XXXXXX";
    test_build_path(mp, sizeof mp, "models/smollm2.q8.bin");
    if (access(mp, R_OK) != 0) cr_skip_test("%s missing: run `make weights` first", mp);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    RunResult r;
    smollm2_run(mp, path, (const char *[]){"--profile-set", "helv_entropy_above=2", "--profile-set",
                                           "helv_varentropy_below=8", NULL}, &r);
    int n;
    cJSON **lines = read_jsonl(path, &n);
    int helv = 0, helv_run_inserts = 0, inserted = 0;
    for (int i = 0; i < n; i++) {
        const char *kase = cJSON_GetObjectItem(lines[i], "case")->valuestring;
        int ins = cJSON_IsTrue(cJSON_GetObjectItem(lines[i], "inserted"));
        if (strcmp(kase, "HELV") != 0) helv_run_inserts = 0;
        else helv++;
        if (!ins) continue;
        cr_expect_str_eq(kase, "HELV");
        cr_expect_eq((int)num(lines[i], "id"), 4563, "the pause token is ' ...'");
        cr_expect(cJSON_IsNull(cJSON_GetObjectItem(lines[i], "temperature")));
        inserted++;
        cr_expect(++helv_run_inserts <= 1, "two inserts in one HELV run (line %d)", i);
    }
    cr_expect(inserted >= 1, "no pause inserted in %d HELV steps", helv);
    char want[64];
    snprintf(want, sizeof want, "pauses inserted: %d", inserted);
    cr_expect(strstr(r.err, want) != NULL, "stderr [%s] lacks [%s]", r.err, want);
    free_jsonl(lines, n);
    unlink(path);
    run_free(&r);
}
