// test_run_input.c — how ./run takes its inputs: the model named by -m as by the positional
// argument, a model path that is not a file, a prompt from stdin (-f -), a NUL byte in a chat
// prompt (refused, not cut there), --ignore-eos (exactly -n tokens past a stop token), -e's
// escapes, and a bad --device or grammar told as a usage error before the model opens.
//
// Models: $EMX_BUILD/models/stories260K.f32.bin (no chat template) and qwen3-tiny.f32.bin (a
// chat template; random weights).
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "runtime/cli/cli_args.h"
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

// -e: the escapes become their characters in the echoed raw prompt and in what the model reads
// (the same text as a prompt file holding the real characters); without -e they stay as written.
Test(run_input, escape_flag_reads_backslash_sequences, .timeout = 120) {
    char m[512], path[] = "/tmp/emx_esc_XXXXXX";
    model(m, sizeof m, "stories260K.f32.bin");
    const char want[] = "Tom said \"hi\".\nHe ran\tfast\\ \x41";
    int fd = mkstemp(path);
    cr_assert(fd >= 0 && write(fd, want, sizeof want - 1) == (ssize_t)(sizeof want - 1) && close(fd) == 0);
    const char *esc = "Tom said \\\"hi\\\".\\nHe ran\\tfast\\\\ \\x41";
    const char *with_e[] = {m, "-t", "1", "-n", "8", "--temp", "0", "--raw", "-e", "-p", esc, NULL};
    const char *file[] = {m, "-t", "1", "-n", "8", "--temp", "0", "--raw", "-f", path, NULL};
    const char *without[] = {m, "-t", "1", "-n", "1", "--temp", "0", "--raw", "-p", esc, NULL};
    RunResult a = run(with_e), b = run(file), c = run(without);
    cr_assert(a.code == 0 && b.code == 0 && c.code == 0, "%s / %s / %s", a.err, b.err, c.err);
    cr_expect(strncmp(a.out, want, sizeof want - 1) == 0, "echoed [%s]", a.out);
    cr_expect(a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0, "[%s] vs [%s]", a.out, b.out);
    cr_expect(strncmp(c.out, esc, strlen(esc)) == 0, "without -e: [%s]", c.out);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    unlink(path);
    char *unesc = NULL;
    size_t n = 0;
    cr_assert((unesc = emx_cli_unescape("a\\x00b\\q\\x4\\", &n)) != NULL);  // NUL kept; the rest as written
    cr_expect(n == 9 && memcmp(unesc, "a\0b\\q\\x4\\", 9) == 0, "%zu bytes", n);
    free(unesc);
    const char *sys_nul[] = {"/nonexistent.bin", "-e", "--system", "be\\x00brief", NULL};
    expect_error(sys_nul, 2, "--system: -e made a NUL byte of \\x00");
}

// Values that cannot work are usage errors, told before the model is read: the model path here
// does not exist, and the error is still the flag's.
Test(run_input, bad_device_and_grammar_are_usage_errors, .timeout = 120) {
    const char *dev[] = {"/nonexistent.bin", "-dev", "gpu0", NULL};
    expect_error(dev, 2, "device 'gpu0': expected cpu, cuda:N or auto");
    const char *cuda[] = {"/nonexistent.bin", "-dev", "cuda:x", NULL};
    expect_error(cuda, 2, "device 'cuda:x'");
    const char *gbnf[] = {"/nonexistent.bin", "--grammar", "root ::= (", NULL};
    expect_error(gbnf, 2, "--grammar: ");
    const char *schema[] = {"/nonexistent.bin", "-j", "{\"type\": 7}", NULL};
    expect_error(schema, 2, "--json-schema: ");
    const char *file[] = {"/nonexistent.bin", "--grammar-file", "/nonexistent.gbnf", NULL};
    expect_error(file, 2, "--grammar-file /nonexistent.gbnf: No such file or directory");
}
