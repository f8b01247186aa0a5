// test_pool.c — the agent pool end to end through ./run (runtime/pool/pool_generate.h): the log's
// format and choices, critic verdicts and rollbacks, no deterministic repeat after a rollback,
// the cap on rollbacks, the same text for 1, 2 and 3 workers, --metrics, SIGINT, bad flags.
//
// Models: stories260K (real weights, 512-token vocabulary, no chat template: the raw critic
// prompt) and qwen3-tiny q8 (random weights, 151k vocabulary, chat template); SmolLM2 when
// `make weights` has fetched it. Margins are chosen per model so that both verdicts occur: the
// critic's logit difference BAD - GOOD sits near -2.1 on stories260K's texts and near +5 on
// SmolLM2's (a 135M model is no judge of coherence; runtime/pool/critic.h).
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "run_util.h"
#include "test_util.h"

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static const char *model(char *buf, size_t cap, const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    return test_build_path(buf, cap, rel);
}

static char *tmp_path(char *buf) {
    strcpy(buf, "/tmp/emx_pool_XXXXXX");
    int fd = mkstemp(buf);
    cr_assert(fd >= 0);
    close(fd);
    return buf;
}

// ./run with args; the log is read back into *log (free it).
static RunResult run_logged(const char *const *args, const char *log_path, char **log) {
    RunResult r = run(args);
    size_t n;
    *log = test_read_file(log_path, &n);
    cr_assert(*log, "no log at %s (exit %d: %s)", log_path, r.code, r.err);
    return r;
}

// Lines of text (modified in place), NULL-terminated array (free it).
static char **lines_of(char *text, int *n) {
    int cap = 64, k = 0;
    char **v = malloc((size_t)cap * sizeof *v);
    for (char *s = strtok(text, "\n"); s; s = strtok(NULL, "\n")) {
        if (k + 1 >= cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[k++] = s;
    }
    v[k] = NULL;
    *n = k;
    return v;
}

// The final text section of a log: everything after "=== Final text ... ===\n".
static const char *final_text(const char *log) {
    const char *h = strstr(log, "=== Final text");
    if (!h) return NULL;
    const char *nl = strchr(h, '\n');
    return nl ? nl + 1 : NULL;
}

// ---------------------------------------------------------------------------------------------
// The choice, as logged: at every step the starred agent has the lowest entropy (ties: lower
// index) and its token is the chosen one.

Test(pool, log_step_picks_lowest_entropy, .timeout = 300) {
    char mp[1024], lp[64];
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once upon a time", "-n", "40", "-s", "5",
                          "--agents", "6", "--check-every", "0", "-t", "1", "--log", tmp_path(lp), NULL};
    char *log;
    RunResult r = run_logged(args, lp, &log);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(final_text(log), "the log has no final text");
    int n, steps = 0;
    char **ln = lines_of(log, &n);
    for (int i = 0; i < n; i++) {
        int step;
        if (sscanf(ln[i], "Step %d: chosen=", &step) != 1) continue;
        steps++;
        const char *chosen = strstr(ln[i], "chosen=") + 7, *paren = strrchr(ln[i], '(');
        double chosen_h;
        cr_assert(paren && sscanf(paren, "(entropy=%lf)", &chosen_h) == 1, "bad step line: %s", ln[i]);
        int best = -1, starred = -1;
        double best_h = 0;
        for (int a = 0; a < 6; a++) {
            const char *al = ln[i + 1 + a];
            int idx;
            cr_assert(al && sscanf(al, "  agent %d (T=", &idx) == 1 && idx == a, "agent line: %s", al ? al : "?");
            const char *colon = strstr(al, "): "), *p2 = strrchr(al, '(');
            double h;
            cr_assert(sscanf(p2, "(entropy=%lf)", &h) == 1, "%s", al);
            if (best < 0 || h < best_h) best = a, best_h = h;  // strict: ties keep the lower index
            if (strstr(al, ") *")) {
                starred = a;
                // the chosen token text is the starred agent's
                size_t tlen = (size_t)(paren - 1 - chosen);
                cr_expect(strncmp(colon + 3, chosen, tlen) == 0 && colon[3 + tlen] == ' ', "step %d: [%s] vs [%s]",
                          step, ln[i], al);
            }
        }
        cr_expect_eq(starred, best, "step %d: agent %d starred, lowest entropy is agent %d", step, starred, best);
        cr_expect(chosen_h == best_h, "step %d: logged entropy %.3f, lowest %.3f", step, chosen_h, best_h);
    }
    cr_expect_eq(steps, 40, "%d steps logged", steps);
    free(ln);
    free(log);
    run_free(&r);
}

// ---------------------------------------------------------------------------------------------
// Critic and rollback, in the original's format.

typedef struct {
    int good, bad_rollback, bad_accepted, steps, bad_format;
} LogCounts;

// Checks every line's format and that after each rollback the first regenerated token differs
// from the rejected one (the ban: no deterministic repeat).
static LogCounts check_log(char *log) {
    LogCounts c = {0};
    int n;
    char **ln = lines_of(log, &n);
    // token chosen at each step (the latest time it was chosen)
    static char chosen[4096][64];
    int pending_step = -1;       // after a rollback: the step whose token must differ
    char rejected[64] = "";
    for (int i = 0; i < n && strncmp(ln[i], "=== Final text", 14) != 0; i++) {
        int step, k;
        char tail[64];
        if (sscanf(ln[i], "Step %d: chosen=", &step) == 1) {
            c.steps++;
            const char *t = strstr(ln[i], "chosen=") + 7, *paren = strrchr(ln[i], '(');
            double h;
            if (!paren || sscanf(paren, "(entropy=%lf)", &h) != 1 || paren[strlen(paren) - 1] != ')') c.bad_format++;
            if (step >= 1 && step < 4096) snprintf(chosen[step], sizeof chosen[step], "%.*s", (int)(paren - 1 - t), t);
            if (step == pending_step) {
                cr_expect(strcmp(chosen[step], rejected) != 0, "step %d repeats the rejected token '%s'", step,
                          rejected);
                pending_step = -1;
            }
        } else if (sscanf(ln[i], "Evaluator after step %d: %63s", &step, tail) == 2) {
            if (strcmp(tail, "GOOD") == 0) c.good++;
            else if (strstr(ln[i], ": BAD → rolling back ") && sscanf(strstr(ln[i], "back ") + 5, "%d", &k) == 1) {
                c.bad_rollback++;
                pending_step = step - k + 1;  // the first dropped step is regenerated first
                if (pending_step >= 1 && pending_step < 4096) snprintf(rejected, sizeof rejected, "%s", chosen[pending_step]);
            } else if (strstr(ln[i], ": BAD → accepted")) c.bad_accepted++;
            else c.bad_format++;
            if (!strstr(ln[i], "(log p GOOD=")) c.bad_format++;
        } else if (ln[i][0] != '#' && strncmp(ln[i], "  agent ", 8) != 0 && strncmp(ln[i], "Round ", 6) != 0) {
            c.bad_format++;
            cr_log_error("unexpected log line: %s", ln[i]);
        }
    }
    free(ln);
    return c;
}

Test(pool, critic_verdicts_and_rollbacks_stories, .timeout = 300) {
    char mp[1024], lp[64];
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once upon a time", "-n", "120", "-s",
                          "11", "--agents", "4", "--check-every", "5", "--critic-margin", "-2.12", "-t", "1", "--log", tmp_path(lp), NULL};
    char *log;
    RunResult r = run_logged(args, lp, &log);
    cr_assert_eq(r.code, 0, "%s", r.err);
    char *copy = strdup(log);
    LogCounts c = check_log(copy);
    cr_expect(c.good > 0 && c.bad_rollback > 0, "GOOD %d, BAD with rollback %d", c.good, c.bad_rollback);
    cr_expect_eq(c.bad_format, 0);
    cr_expect(c.steps >= 120, "%d steps", c.steps);
    // the final text is what stdout shows after the echoed prompt
    const char *ft = final_text(log);
    cr_assert(ft);
    const char *gen = r.out + strlen("Once upon a time");
    cr_expect(strncmp(gen, ft, strlen(gen) - 1) == 0, "stdout [%s] vs log [%s]", gen, ft);
    cr_expect(strstr(r.err, "critic: "), "no critic summary: %s", r.err);
    free(copy);
    free(log);
    run_free(&r);
}

Test(pool, critic_verdicts_smollm2, .timeout = 300) {
    char mp[1024], lp[64];
    model(mp, sizeof mp, "smollm2.q8.bin");
    if (access(mp, R_OK) != 0) cr_skip_test("%s missing: run `make weights` first", mp);
    const char *args[] = {mp, "-p", "Write a short story about a lighthouse keeper.", "-n", "60", "-s", "3",
                          "--agents", "4", "--check-every", "5", "--critic-margin", "5.3", "-t", "2", "-c", "512", "--log", tmp_path(lp),
                          NULL};
    char *log;
    RunResult r = run_logged(args, lp, &log);
    cr_assert_eq(r.code, 0, "%s", r.err);
    LogCounts c = check_log(log);
    cr_expect(c.good > 0 && c.bad_rollback > 0, "GOOD %d, BAD with rollback %d", c.good, c.bad_rollback);
    cr_expect_eq(c.bad_format, 0);
    cr_log_info("smollm2 agent pool: %s", r.out);
    free(log);
    run_free(&r);
}

// A pool of greedy agents would regenerate the rejected text exactly: the ban and the new
// epoch must prevent it; every BAD here (margin -1000) rolls back until the cap accepts one.
Test(pool, no_repeat_after_rollback_and_capped, .timeout = 300) {
    char mp[1024], lp[64];
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once upon a time", "-n", "40", "-s", "1",
                          "--agent-configs", "0:0,0:1", "--check-every", "5", "--critic-margin", "-1000", "--max-rollbacks", "2", "-t", "1",
                          "--log", tmp_path(lp), NULL};
    char *log;
    RunResult r = run_logged(args, lp, &log);
    cr_assert_eq(r.code, 0, "%s", r.err);
    LogCounts c = check_log(log);
    cr_expect_eq(c.good, 0);
    cr_expect(c.bad_rollback > 0 && c.bad_accepted > 0, "rollbacks %d, accepted %d", c.bad_rollback, c.bad_accepted);
    cr_expect_eq(c.bad_rollback, 2 * c.bad_accepted, "at most 2 rollbacks before each accepted BAD");
    cr_expect_eq(c.bad_format, 0);
    free(log);
    run_free(&r);
}

// ---------------------------------------------------------------------------------------------
// Workers: the same text and log for 1, 2 and 3 workers, at lookahead 1 and 4, with rollbacks.

static void check_workers(const char *name, const char *lookahead, const char *margin) {
    char mp[1024];
    model(mp, sizeof mp, name);
    char *first_out = NULL, *first_log = NULL;
    for (int w = 1; w <= 3; w++) {
        char lp[64], ws[16];
        snprintf(ws, sizeof ws, "%d", w);
        const char *args[] = {mp, "-p", "Once upon a time", "-n", "48", "-s", "9", "--agents", "5", "--lookahead",
                              lookahead, "--workers", ws, "--check-every", "5", "--critic-margin", margin, "-c", "256", "-t", "2", "--log",
                              tmp_path(lp), NULL};
        char *log;
        RunResult r = run_logged(args, lp, &log);
        cr_assert_eq(r.code, 0, "workers %d: %s", w, r.err);
        char *body = strchr(log, '\n');  // the header names the worker count
        body = strchr(body + 1, '\n');
        body = strchr(body + 1, '\n');
        if (w == 1) {
            first_out = strdup(r.out);
            first_log = strdup(body);
            cr_expect(strstr(first_log, "rolling back"), "%s: no rollback to test", name);
        } else {
            cr_expect_str_eq(r.out, first_out, "%s L=%s: text differs with %d workers", name, lookahead, w);
            cr_expect(strcmp(body, first_log) == 0, "%s L=%s: log differs with %d workers", name, lookahead, w);
        }
        free(log);
        run_free(&r);
    }
    free(first_out);
    free(first_log);
}

Test(pool, workers_same_text_stories_l1, .timeout = 300) { check_workers("stories260K.f32.bin", "1", "-2.12"); }
Test(pool, workers_same_text_stories_l4, .timeout = 300) { check_workers("stories260K.q8.bin", "4", "-2.12"); }
Test(pool, workers_same_text_qwen3_q8_l4, .timeout = 300) { check_workers("qwen3-tiny.q8.bin", "4", "0"); }
// Gemma 3 (local layers, window 8: the 48 tokens and the critic's passes cross it); margin -1000:
// every check is BAD, rolled back up to the cap (its critic never says BAD at 0)
Test(pool, workers_same_text_gemma3_q8_l4, .timeout = 300) { check_workers("gemma3-tiny.q8.bin", "4", "-1000"); }

// ---------------------------------------------------------------------------------------------
// --metrics: one JSON line per token of the final text, the winning agent's parameters.

Test(pool, metrics_jsonl, .timeout = 300) {
    char mp[1024], mpath[64];
    const char *args[] = {model(mp, sizeof mp, "stories260K.f32.bin"), "-p", "Once upon a time", "-n", "30", "-s", "2",
                          "--agents", "4", "--lookahead", "3", "--check-every", "5", "--critic-margin", "-2.12", "-t", "1", "--metrics",
                          tmp_path(mpath), NULL};
    RunResult r = run(args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    size_t len;
    char *text = test_read_file(mpath, &len);
    cr_assert(text);
    int n;
    char **ln = lines_of(text, &n);
    cr_expect_eq(n, 30, "%d lines", n);
    const float temps[4] = {0.3f, 0.7f, 1.1f, 1.5f};  // the default spread of 4 agents
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_Parse(ln[i]);
        cr_assert(o, "line %d does not parse: %s", i, ln[i]);
        cr_expect_eq(cJSON_GetObjectItem(o, "index")->valueint, i);
        cr_expect_str_eq(cJSON_GetObjectItem(o, "sampler")->valuestring, "agents");
        int a = cJSON_GetObjectItem(o, "agent")->valueint;
        cr_assert(a >= 0 && a < 4);
        cr_expect(fabs(cJSON_GetObjectItem(o, "temperature")->valuedouble - temps[a]) < 1e-6);
        double h = cJSON_GetObjectItem(o, "proposal_entropy_bits")->valuedouble;
        cr_expect(h >= 0 && h <= 9.0, "entropy %g bits over 512 tokens", h);
        cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(o, "logits_entropy_bits")));
        cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "attn_entropy_bits")));
        cJSON_Delete(o);
    }
    free(ln);
    free(text);
    run_free(&r);
}

// ---------------------------------------------------------------------------------------------
// SIGINT in the middle of a long generation: the log so far, the final text, exit 130.

static int count_steps(const char *path) {
    size_t n;
    char *t = test_read_file(path, &n);
    int k = 0;
    for (const char *s = t; s && (s = strstr(s, "\nStep ")); s++) k++;
    free(t);
    return k;
}

Test(pool, sigint_keeps_log_and_text, .timeout = 300) {
    char mp[1024], lp[64], op[] = "/tmp/emx_pool_out_XXXXXX", ep[] = "/tmp/emx_pool_err_XXXXXX";
    model(mp, sizeof mp, "qwen3-tiny.q8.bin");
    tmp_path(lp);
    int ofd = mkstemp(op), efd = mkstemp(ep);
    const char *argv[] = {run_binary(), mp, "-p", "hello", "--agents", "8", "--lookahead", "4", "-c", "4096", "-t", "1",
                          "-s", "3", "--log", lp, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ofd, 1);
    posix_spawn_file_actions_adddup2(&fa, efd, 2);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    // wait for 100 logged steps (the whole run, 4087 tokens, takes about a minute), however
    // long a loaded machine takes, unless the run ends first (the test's timeout ends a hang)
    int ended = 0;
    while (count_steps(lp) < 100 && !(ended = waitpid(pid, &(int){0}, WNOHANG) == pid))
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    cr_assert(!ended && count_steps(lp) >= 100, "the run ended before 100 steps");
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status), "killed by signal %d instead of stopping", WTERMSIG(status));
    cr_expect_eq(WEXITSTATUS(status), 130);
    size_t n;
    char *out = slurp_fd(ofd, &n), *err = slurp_fd(efd, NULL), *log = test_read_file(lp, NULL);
    cr_expect(strstr(err, "interrupted"), "stderr: %s", err);
    const char *ft = strstr(log, "=== Final text (interrupted) (");
    cr_assert(ft, "no final text in the log");
    int n_tokens = atoi(ft + strlen("=== Final text (interrupted) ("));
    // steps are logged as they are chosen, rolled back or not: fewer tokens remain in the text
    cr_expect(n_tokens >= 10 && n_tokens < 4000, "%d tokens", n_tokens);
    const char *body = strchr(ft, '\n') + 1;
    // stdout: the generated text (chat mode: no echo) and a newline; the log ends with the same
    cr_expect(n > 1 && strncmp(body, out, n - 1) == 0, "stdout and the log's final text differ");
    free(out);
    free(err);
    free(log);
    close(ofd);
    close(efd);
    unlink(op);
    unlink(ep);
}

// ---------------------------------------------------------------------------------------------
// Bad flags: one line, exit 2 (usage) or 1 (a file).

static void expect_fail(const char *const *args, int code, const char *needle) {
    RunResult r = run(args);
    cr_expect_eq(r.code, code, "exit %d for %s", r.code, needle);
    cr_expect(strstr(r.err, needle), "stderr [%s] lacks [%s]", r.err, needle);
    const char *nl = strchr(r.err, '\n');
    cr_expect(nl && nl[1] == 0, "more than one line: [%s]", r.err);
    run_free(&r);
}

Test(pool, bad_flags, .timeout = 300) {
    char mp[1024];
    const char *m = model(mp, sizeof mp, "stories260K.f32.bin");
    expect_fail((const char *[]){m, "--agent-configs", "0.3", NULL}, 2, "entry 1 ('0.3') is not T:k");
    expect_fail((const char *[]){m, "--agent-configs", "0.3:5,", NULL}, 2, "empty entry");
    expect_fail((const char *[]){m, "--agent-configs", "0.3:5,x:2", NULL}, 2, "entry 2 ('x:2')");
    expect_fail((const char *[]){m, "--agents", "4", "--workers", "5", NULL}, 2, "--workers 5 is more than the 4 agents");
    expect_fail((const char *[]){m, "--agents", "0", NULL}, 2, "--agents: 0 is out of range");
    expect_fail((const char *[]){m, "--lookahead", "17", NULL}, 2, "--lookahead: 17 is out of range");
    expect_fail((const char *[]){m, "--devices", "cuda:0", NULL}, 2, "CPU only");
    expect_fail((const char *[]){m, "--devices", "tpu", NULL}, 2, "'tpu' is not cpu");
    expect_fail((const char *[]){m, "--sampler", "entropix", "--agents", "4", NULL}, 2, "need --sampler agents");
    expect_fail((const char *[]){m, "--agents", "2", "--critic-model", "/nonexistent/critic.bin", NULL}, 1,
                "/nonexistent/critic.bin");
    expect_fail((const char *[]){m, "--agents", "2", "--log", "/nonexistent/dir/log.txt", NULL}, 2,
                "--log /nonexistent/dir/log.txt: the folder /nonexistent/dir does not exist");
    expect_fail((const char *[]){m, "--agents", "2", "-n", "100000", NULL}, 1, "-n 100000 is more than");
}

Test(pool, default_n_is_capped_by_the_context, .timeout = 300) {
    char mp[1024];
    RunResult r = run((const char *[]){model(mp, sizeof mp, "stories260K.f32.bin"), "--agents", "2", "-s", "1",
                                       "--check-every", "0", "-c", "64", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "-n 25000 capped to 63 by the context"), "%s", r.err);
    run_free(&r);
}

// No critic unless asked for (the generating model judges its own text poorly): said once on
// stderr; --check-every turns it on over the same model.
Test(pool, critic_off_by_default, .timeout = 300) {
    char mp[1024];
    model(mp, sizeof mp, "stories260K.f32.bin");
    RunResult r = run((const char *[]){mp, "--agents", "2", "-s", "1", "-n", "12", "-t", "1", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.err, "run: agents: no critic ("), "%s", r.err);
    cr_expect_eq(count(r.err, "no critic"), 1, "said once: %s", r.err);
    cr_expect(!strstr(r.err, "critic: "), "a critic ran: %s", r.err);
    run_free(&r);
    r = run((const char *[]){mp, "--agents", "2", "-s", "1", "-n", "12", "-t", "1", "--check-every", "4", NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(!strstr(r.err, "no critic"), "%s", r.err);
    cr_expect(strstr(r.err, "critic: 3 checks"), "%s", r.err);
    run_free(&r);
}

// --critic-model: the critic on another model file with its own tokenizer (llama3-tiny judging
// qwen3-tiny's text); the log names it and shows its verdicts.
Test(pool, critic_model_from_another_file, .timeout = 300) {
    char mp[1024], cp[1024], lp[64];
    const char *args[] = {model(mp, sizeof mp, "qwen3-tiny.q8.bin"), "-p", "hello", "-n", "20", "-s", "4", "--agents",
                          "3", "--critic-model", model(cp, sizeof cp, "llama3-tiny.q8.bin"), "-c", "256", "-t", "1",
                          "--log", tmp_path(lp), NULL};
    char *log;
    RunResult r = run_logged(args, lp, &log);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(log, "# critic: ") && strstr(log, "llama3-tiny.q8.bin"), "critic not named in the log");
    LogCounts c = check_log(log);
    cr_expect(c.good + c.bad_rollback + c.bad_accepted >= 4, "%d verdicts", c.good + c.bad_rollback + c.bad_accepted);
    cr_expect_eq(c.bad_format, 0);
    free(log);
    run_free(&r);
}
