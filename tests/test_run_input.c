// test_run_input.c — how ./run takes its inputs: the model named by -m as by the positional
// argument, a model path that is not a file, a prompt from stdin (-f -), a NUL byte in a chat
// prompt (refused, not cut there), and --ignore-eos (exactly -n tokens past a stop token).
//
// Models: $EMX_BUILD/models/stories260K.f32.bin (no chat template) and qwen3-tiny.f32.bin (a
// chat template; random weights).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "test_util.h"

static const char *model(char *buf, size_t cap, const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s", name);
    test_build_path(buf, cap, rel);
    cr_assert_eq(access(buf, R_OK), 0, "%s missing: make test-models", buf);
    return buf;
}

// The number of --metrics records in out (stdout: the text and the JSON lines interleaved) and
// whether the last is a stop.
static int metrics_lines(const char *out, int *last_stop) {
    int n = 0;
    *last_stop = 0;
    for (const char *l = strstr(out, "{\"index\":"); l; l = strstr(l + 1, "{\"index\":")) {
        n++;
        const char *end = strchr(l, '\n');
        const char *stop = strstr(l, "\"stop\":true");
        *last_stop = stop && (!end || stop < end);
    }
    return n;
}

Test(run_input, model_flag_runs_as_the_positional_model, .timeout = 120) {
    char m[512];
    model(m, sizeof m, "stories260K.f32.bin");
    const char *positional[] = {m, "-t", "1", "-n", "8", "--temp", "0", NULL};
    const char *flag[] = {"-m", m, "-t", "1", "-n", "8", "--temp", "0", NULL};
    RunResult a = run(positional), b = run(flag);
    cr_expect(a.code == 0 && b.code == 0, "%s / %s", a.err, b.err);
    cr_expect(a.out_len > 0 && a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0, "[%s] vs [%s]", a.out,
              b.out);
    run_free(&a);
    run_free(&b);
}

Test(run_input, a_model_path_that_is_not_a_file_says_what_it_is, .timeout = 120) {
    const char *dir[] = {"/tmp", "-n", "1", NULL};
    expect_error(dir, 1, "/tmp: is a directory, not a model file");
    const char *dev[] = {"/dev/zero", "-n", "1", NULL};
    expect_error(dev, 1, "/dev/zero: is a character device, not a model file");
}

Test(run_input, prompt_from_stdin, .timeout = 120) {
    char m[512], cmd[2048];
    model(m, sizeof m, "stories260K.f32.bin");
    const char *file[] = {m, "-t", "1", "-n", "8", "--temp", "0", "--raw", "-p", "Once upon", NULL};
    RunResult a = run(file);
    snprintf(cmd, sizeof cmd, "printf 'Once upon' | '%s' '%s' -t 1 -n 8 --temp 0 --raw -f -", run_binary(), m);
    RunResult b = run_prog("/bin/sh", (const char *[]){"-c", cmd, NULL});
    cr_expect(a.code == 0 && b.code == 0, "%s / %s", a.err, b.err);
    cr_expect(strncmp(b.out, "Once upon", 9) == 0, "[%s]", b.out);
    cr_expect(a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0, "[%s] vs [%s]", a.out, b.out);
    run_free(&a);
    run_free(&b);
}

// A chat message reaches the template as a C string: a NUL would end it there, silently.
Test(run_input, nul_byte_in_a_chat_prompt_is_refused, .timeout = 120) {
    char m[512], path[] = "/tmp/emx_nul_XXXXXX";
    model(m, sizeof m, "qwen3-tiny.f32.bin");
    int fd = mkstemp(path);
    cr_assert(fd >= 0 && write(fd, "Hello\0world", 11) == 11 && close(fd) == 0);
    const char *chat[] = {m, "-t", "1", "-n", "1", "-f", path, NULL};
    expect_error(chat, 1, "chat mode: the prompt has a NUL byte at offset 5");
    const char *raw[] = {m, "-t", "1", "-n", "1", "--raw", "-f", path, NULL};  // bytes as they are
    RunResult r = run(raw);
    cr_expect_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    unlink(path);
}

// Greedy stories260K ends its story with a stop token; with --ignore-eos the same run goes on to
// exactly -n tokens, the stop token among them, the text before it the same.
Test(run_input, ignore_eos_generates_exactly_n_tokens, .timeout = 120) {
    char m[512];
    model(m, sizeof m, "stories260K.f32.bin");
    const char *stops[] = {m, "-t", "1", "-n", "400", "--temp", "0", "--metrics", "-", NULL};
    const char *goes_on[] = {m, "-t", "1", "-n", "400", "--temp", "0", "--metrics", "-", "--ignore-eos", NULL};
    RunResult a = run(stops), b = run(goes_on);
    cr_assert(a.code == 0 && b.code == 0, "%s / %s", a.err, b.err);
    int a_stop = 0, b_stop = 0;
    const int na = metrics_lines(a.out, &a_stop), nb = metrics_lines(b.out, &b_stop);
    cr_assert(a_stop && na < 400, "the plain run made %d tokens, last a stop: %d (the test needs a stop)", na, a_stop);
    cr_expect(nb == 400 && !b_stop, "--ignore-eos made %d tokens, last a stop: %d", nb, b_stop);
    const char *end = strstr(a.out, "\"stop\":true");  // the same up to the stop's record
    cr_expect(end && strncmp(a.out, b.out, (size_t)(end - a.out)) == 0, "the runs differ before the stop");
    run_free(&a);
    run_free(&b);
}
