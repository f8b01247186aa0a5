// test_convert_robust.c — the converter on hostile and careless input: malformed safetensors
// headers, source values the loader would reject, an output that is one of the inputs, two
// converts to one output at once, a convert killed mid-write, names with control bytes,
// tokenizer.json that is not an object or a link stub to an absolute path, an oversized
// vocab_size; and the integrity record (convert --check, ./run --verify).
//
// Every failure must be one line on stderr, exit 1 (never a signal), leave no temporary file and
// leave an existing output byte for byte as it was.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/model.h"
#include "runtime/model_verify.h"
#include "run_util.h"
#include "test_util.h"
#include "tools/convert/tokenizer_build.h"

typedef struct {
    char dir[64], out[128], conv[512];
} Ctx;

static void setup(Ctx *c) {
    snprintf(c->dir, sizeof c->dir, "/tmp/emx-test-convrob-XXXXXX");
    cr_assert_not_null(mkdtemp(c->dir));
    snprintf(c->out, sizeof c->out, "%s/out.bin", c->dir);
    test_build_path(c->conv, sizeof c->conv, "tools/convert");
    cr_assert_eq(access(c->conv, X_OK), 0, "no converter binary at %s", c->conv);
}

static void cleanup(Ctx *c) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static void put(const Ctx *c, const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", c->dir, name);
    write_file(p, text, strlen(text));
}

static void link_shared(const Ctx *c, const char *rel, const char *name) {
    char src[512], real[4096], p[256];
    test_shared_path(src, sizeof src, rel);
    cr_assert_not_null(realpath(src, real), "%s", src);
    snprintf(p, sizeof p, "%s/%s", c->dir, name);
    cr_assert_eq(symlink(real, p), 0, "%s", p);
}

// Files in c->dir whose names end in ".tmp" (a converter's temporary files).
static int count_tmp(const Ctx *c) {
    DIR *d = opendir(c->dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        n += l > 4 && !strcmp(e->d_name + l - 4, ".tmp") && e->d_name[0] == '.';
    }
    closedir(d);
    return n;
}

// convert with the given arguments (NULL-terminated).
static RunResult convert(const Ctx *c, const char *const *args) { return run_prog(c->conv, args); }

// Failed cleanly: exit 1, exactly one line naming `needle`, no temporary file left.
static void expect_fail(const Ctx *c, const RunResult *r, const char *needle) {
    cr_assert_eq(r->code, 1, "exit %d (want 1); stderr: %s", r->code, r->err);
    size_t n = strlen(r->err);
    cr_assert(n > 0 && r->err[n - 1] == '\n' && strchr(r->err, '\n') == r->err + n - 1,
              "stderr is not exactly one line: \"%s\"", r->err);
    cr_assert_not_null(strstr(r->err, needle), "message lacks \"%s\": %s", needle, r->err);
    cr_assert_eq(count_tmp(c), 0, "a temporary file was left behind");
}

// A safetensors file whose JSON header is `hdr` (padded to 8 bytes), then `data` zero bytes.
static void put_safetensors(const Ctx *c, const char *hdr, size_t data) {
    size_t n = strlen(hdr), pad = (8 - n % 8) % 8, total = 8 + n + pad + data;
    char *buf = calloc(1, total);
    uint64_t len = n + pad;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, ' ', pad);
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", c->dir);
    write_file(p, buf, total);
    free(buf);
}

// A HuggingFace directory: llama3-tiny's config.json (with `edit` applied to it), tokenizer
// files linked from the shared data, and its safetensors linked (unless the test writes one).
static void hf_dir(const Ctx *c, void (*edit)(cJSON *), int link_weights) {
    char p[512];
    size_t n;
    char *text = test_read_file(test_shared_path(p, sizeof p, "testdata/tiny/llama3-tiny/hf/config.json"), &n);
    cr_assert_not_null(text);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(cfg);
    if (edit) edit(cfg);
    char *out = cJSON_Print(cfg);
    put(c, "config.json", out);
    free(out);
    cJSON_Delete(cfg);
    link_shared(c, "testdata/tokenizers/llama3/tokenizer.json", "tokenizer.json");
    link_shared(c, "testdata/tokenizers/llama3/tokenizer_config.json", "tokenizer_config.json");
    if (link_weights) link_shared(c, "testdata/tiny/llama3-tiny/hf/model.safetensors", "model.safetensors");
}

// ---------------------------------------------------------------------------------------------
// safetensors headers

Test(convert_robust, malformed_safetensors_headers) {
    static const char *const bad[] = {
        "[1]", "[{\"dtype\":\"F32\"}]", "null", "42", "\"s\"", "[]", "{\"__metadata__\": 5}", "{}",
        "{\"model.norm.weight\": 5}",
        "{\"model.norm.weight\": {\"dtype\": 5, \"shape\": [4], \"data_offsets\": [0, 16]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [-4], \"data_offsets\": [0, 16]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [4.5], \"data_offsets\": [0, 16]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0]}}",
        "{\"rotary.inv_freq\": {\"dtype\": \"F32\", \"shape\": [\"x\"], \"data_offsets\": [0, 16]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Ctx c;
        setup(&c);
        hf_dir(&c, NULL, 0);
        put_safetensors(&c, bad[i], 16);
        RunResult r = convert(&c, (const char *const[]){c.dir, c.out, NULL});
        cr_log_info("%s -> %s", bad[i], r.err);
        expect_fail(&c, &r, "malformed safetensors header");
        cr_assert_null(strstr(r.err, "missing"), "%s: reported as a missing tensor: %s", bad[i], r.err);
        cr_assert_neq(access(c.out, F_OK), 0);
        run_free(&r);
        cleanup(&c);
    }
    // Offsets past the data, or not covering the shape.
    static const char *const off[] = {
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 17]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 4]}}",
        "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 16]}}",
    };
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        Ctx c;
        setup(&c);
        hf_dir(&c, NULL, 0);
        put_safetensors(&c, off[i], 16);
        RunResult r = convert(&c, (const char *const[]){c.dir, c.out, NULL});
        expect_fail(&c, &r, "data_offsets");
        run_free(&r);
        cleanup(&c);
    }
}

// A tensor name with CR, LF and a control byte stays on one line, escaped.
Test(convert_robust, control_bytes_in_names_are_escaped) {
    Ctx c;
    setup(&c);
    hf_dir(&c, NULL, 0);
    put_safetensors(&c, "{\"model.x\\r\\ny\\u0001\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 16);
    RunResult r = convert(&c, (const char *const[]){c.dir, c.out, NULL});
    expect_fail(&c, &r, "model.x\\r\\ny\\x01");
    run_free(&r);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// Source values the loader rejects: refused by name, the previous output kept.

static const char OLD[] = "the previous good output";

static void expect_old_kept(const Ctx *c) {
    size_t n = 0;
    char *t = test_read_file(c->out, &n);
    cr_assert_not_null(t, "the previous output is gone");
    cr_assert(n == strlen(OLD) && !memcmp(t, OLD, n), "the previous output was changed");
    free(t);
}

static void theta_1e39(cJSON *cfg) { cJSON_ReplaceItemInObject(cfg, "rope_theta", cJSON_CreateNumber(1e39)); }

Test(convert_robust, hf_rope_theta_overflowing_float_keeps_old_output) {
    Ctx c;
    setup(&c);
    hf_dir(&c, theta_1e39, 1);
    put(&c, "out.bin", OLD);
    RunResult r = convert(&c, (const char *const[]){c.dir, c.out, "--dtype", "f32", NULL});
    expect_fail(&c, &r, "rope_theta");
    cr_assert_not_null(strstr(r.err, "1e+39"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "config.json"), "%s", r.err);
    cr_assert_null(strstr(r.err, "out.bin"), "the message blames the output: %s", r.err);
    expect_old_kept(&c);
    run_free(&r);
    cleanup(&c);
}

// stories260K.gguf with the 4-byte value of `key` replaced in place (its type too when
// new_type is not 0): written to DIR/m.gguf, whose path goes to g. Returns the key's old type.
static uint32_t gguf_with_key(const Ctx *c, const char *key, uint32_t new_type, const void *value, char *g,
                              size_t glen) {
    char p[512];
    size_t n, klen = strlen(key);
    uint8_t *buf = (uint8_t *)test_read_file(test_shared_path(p, sizeof p, "testdata/stories260K/stories260K.gguf"), &n);
    cr_assert_not_null(buf);
    uint8_t *k = NULL;
    for (size_t i = 0; !k && i + klen + 8 < n; i++)
        if (!memcmp(buf + i, key, klen)) k = buf + i;
    cr_assert_not_null(k, "no %s in the GGUF", key);
    uint32_t type;
    memcpy(&type, k + klen, 4);
    if (new_type) memcpy(k + klen, &new_type, 4);
    memcpy(k + klen + 4, value, 4);
    snprintf(g, glen, "%s/m.gguf", c->dir);
    write_file(g, buf, n);
    free(buf);
    return type;
}

Test(convert_robust, gguf_eps_inf_keeps_old_output) {
    Ctx c;
    setup(&c);
    char g[256];
    const char key[] = "llama.attention.layer_norm_rms_epsilon";
    float inf = INFINITY;
    uint32_t type = gguf_with_key(&c, key, 0, &inf, g, sizeof g);
    cr_assert_eq(type, 6u, "%s is not an f32 (type %u)", key, type);  // GGUF_FLOAT32
    put(&c, "out.bin", OLD);
    RunResult r = convert(&c, (const char *const[]){g, c.out, NULL});
    expect_fail(&c, &r, key);
    cr_assert_not_null(strstr(r.err, "inf"), "%s", r.err);
    cr_assert_null(strstr(r.err, "out.bin"), "the message blames the output: %s", r.err);
    expect_old_kept(&c);
    run_free(&r);
    cleanup(&c);
}

// An optional key that is present but not an integer in range is an error, not its default:
// head_count_kv = 1e30 stored as a float once converted as if the key were absent (n_heads).
Test(convert_robust, gguf_optional_key_not_an_integer_is_an_error) {
    Ctx c;
    setup(&c);
    char g[256];
    const char key[] = "llama.attention.head_count_kv";
    float big = 1e30f;  // a 4-byte integer key becomes GGUF_FLOAT32 (6) in place
    uint32_t type = gguf_with_key(&c, key, 6, &big, g, sizeof g);
    cr_assert(type == 4 || type == 5, "%s is not a 32-bit integer (type %u)", key, type);
    put(&c, "out.bin", OLD);
    RunResult r = convert(&c, (const char *const[]){g, c.out, NULL});
    expect_fail(&c, &r, key);
    cr_assert_not_null(strstr(r.err, "not an integer"), "%s", r.err);
    expect_old_kept(&c);
    run_free(&r);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// The output may not be an input.

Test(convert_robust, output_that_is_an_input_is_refused) {
    Ctx c;
    setup(&c);
    char p[512], g[256], tok[512], lnk[256];
    size_t n;
    char *buf = test_read_file(test_shared_path(p, sizeof p, "testdata/stories260K/stories260K.gguf"), &n);
    cr_assert_not_null(buf);
    snprintf(g, sizeof g, "%s/s.gguf", c.dir);
    write_file(g, buf, n);
    RunResult r = convert(&c, (const char *const[]){g, g, NULL});  // convert SRC SRC
    expect_fail(&c, &r, "an input of this conversion");
    run_free(&r);
    snprintf(lnk, sizeof lnk, "%s/hard.gguf", c.dir);  // the same file under another name
    cr_assert_eq(link(g, lnk), 0);
    r = convert(&c, (const char *const[]){g, lnk, NULL});
    expect_fail(&c, &r, "an input of this conversion");
    run_free(&r);
    size_t m;
    char *now = test_read_file(g, &m);
    cr_assert(now && m == n && !memcmp(now, buf, n), "the source was changed");
    free(now);
    free(buf);
    // llama2.c: the output is the tokenizer.
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    char bin[512];
    test_shared_path(bin, sizeof bin, "testdata/stories260K/stories260K.bin");
    snprintf(lnk, sizeof lnk, "%s/tok.bin", c.dir);
    char real[4096];
    cr_assert_not_null(realpath(tok, real));
    cr_assert_eq(symlink(real, lnk), 0);
    r = convert(&c, (const char *const[]){bin, lnk, "--tokenizer", tok, NULL});
    expect_fail(&c, &r, "an input of this conversion");
    run_free(&r);
    // HuggingFace: the output is the directory's safetensors, or its tokenizer.json.
    hf_dir(&c, NULL, 1);
    snprintf(lnk, sizeof lnk, "%s/model.safetensors", c.dir);
    r = convert(&c, (const char *const[]){c.dir, lnk, NULL});
    expect_fail(&c, &r, "an input of this conversion");
    run_free(&r);
    snprintf(lnk, sizeof lnk, "%s/tokenizer.json", c.dir);
    r = convert(&c, (const char *const[]){c.dir, lnk, NULL});
    expect_fail(&c, &r, "an input of this conversion");
    run_free(&r);
    r = convert(&c, (const char *const[]){c.dir, c.dir, NULL});  // the directory itself
    expect_fail(&c, &r, "not a regular file");
    run_free(&r);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// Temporary files

static void stories_args(const Ctx *c, const char **args, char *bin, char *tok) {
    test_shared_path(bin, 512, "testdata/stories260K/stories260K.bin");
    test_shared_path(tok, 512, "testdata/stories260K/tok512.bin");
    const char *a[] = {bin, c->out, "--tokenizer", tok, NULL};
    memcpy(args, a, sizeof a);
}

// The file loads; its checksum, when recorded, matches.
static void expect_loads(const char *path) {
    char msg[768];
    int v = emx_model_verify(path, msg, sizeof msg);
    cr_assert_geq(v, 0, "%s does not verify: %s", path, msg);
}

// Two converts to one output at once, several times: both succeed and the file is whole.
Test(convert_robust, concurrent_converts_to_one_output) {
    Ctx c;
    setup(&c);
    char bin[512], tok[512];
    const char *args[6];
    stories_args(&c, args, bin, tok);
    const char *argv[7] = {c.conv};
    memcpy(argv + 1, args, sizeof args);
    for (int round = 0; round < 6; round++) {
        pid_t pid[2];
        for (int k = 0; k < 2; k++) {
            pid[k] = fork();
            cr_assert_geq(pid[k], 0);
            if (pid[k] == 0) {
                int null = open("/dev/null", O_WRONLY);
                dup2(null, 1);
                execv(c.conv, (char *const *)argv);
                _exit(127);
            }
        }
        for (int k = 0; k < 2; k++) {
            int st;
            cr_assert_eq(waitpid(pid[k], &st, 0), pid[k]);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: convert %d ended with status %d", round, k, st);
        }
        expect_loads(c.out);
        cr_assert_eq(count_tmp(&c), 0, "round %d: a temporary file was left", round);
    }
    cleanup(&c);
}

// A file at the old fixed temporary name (or any stale .tmp) is neither used nor touched.
Test(convert_robust, stale_temporary_files_are_not_reused) {
    Ctx c;
    setup(&c);
    char bin[512], tok[512], p[256];
    const char *args[6];
    stories_args(&c, args, bin, tok);
    put(&c, "victim", "keep me");
    snprintf(p, sizeof p, "%s/out.bin.tmp", c.dir);
    char victim[256];
    snprintf(victim, sizeof victim, "%s/victim", c.dir);
    cr_assert_eq(symlink(victim, p), 0);
    put(&c, ".out.bin.AAAAAA.tmp", "stale");
    RunResult r = convert(&c, args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);
    expect_loads(c.out);
    size_t n;
    char *t = test_read_file(victim, &n);
    cr_assert(t && !strcmp(t, "keep me"), "a file behind a stale temporary name was overwritten");
    free(t);
    snprintf(p, sizeof p, "%s/.out.bin.AAAAAA.tmp", c.dir);
    t = test_read_file(p, &n);
    cr_assert(t && !strcmp(t, "stale"), "a stale temporary file was reused");
    free(t);
    cleanup(&c);
}

// A convert killed (SIGKILL) while its temporary file exists leaves at most that hidden .tmp
// file and the previous output intact; a later convert succeeds beside it. SIGTERM removes it.
Test(convert_robust, killed_convert_keeps_old_output) {
    Ctx c;
    setup(&c);
    char src[512];
    test_shared_path(src, sizeof src, "testdata/tiny/qwen3-tiny/hf");
    for (int sig = 1; sig >= 0; sig--) {  // SIGTERM first: SIGKILL may leave a .tmp behind
        put(&c, "out.bin", OLD);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, 1);
            execl(c.conv, c.conv, src, c.out, "--dtype", "f32", (char *)NULL);
            _exit(127);
        }
        // Wait for the temporary file to appear (or the convert to end), then stop and kill it.
        int st = 0, done = 0;
        while (!done && count_tmp(&c) == 0) done = waitpid(pid, &st, WNOHANG) == pid;
        if (!done) {
            kill(pid, sig ? SIGTERM : SIGKILL);
            cr_assert_eq(waitpid(pid, &st, 0), pid);
        }
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {  // it finished first: the new file is whole
            expect_loads(c.out);
        } else {
            cr_assert(WIFSIGNALED(st), "convert ended with status %d", st);
            // The old output, or (killed between the rename and its exit) the whole new one.
            size_t n = 0;
            char *t = test_read_file(c.out, &n);
            cr_assert_not_null(t, "the output is gone");
            if (n != strlen(OLD) || memcmp(t, OLD, n)) expect_loads(c.out);
            free(t);
            if (sig) cr_assert_eq(count_tmp(&c), 0, "SIGTERM left the temporary file");
            cr_assert_leq(count_tmp(&c), 1);
        }
        // A later convert is not disturbed by what the killed one left.
        RunResult r = convert(&c, (const char *const[]){src, c.out, "--dtype", "f32", NULL});
        cr_assert_eq(r.code, 0, "%s", r.err);
        run_free(&r);
        expect_loads(c.out);
    }
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// Sizes checked before allocating

static void vocab_huge(cJSON *cfg) { cJSON_ReplaceItemInObject(cfg, "vocab_size", cJSON_CreateNumber(1073741823)); }

Test(convert_robust, vocab_size_contradicting_the_embedding) {
    Ctx c;
    setup(&c);
    hf_dir(&c, vocab_huge, 1);
    RunResult r = convert(&c, (const char *const[]){c.dir, c.out, NULL});
    expect_fail(&c, &r, "vocab_size = 1073741823");
    cr_assert_not_null(strstr(r.err, "128256"), "the embedding's rows are not named: %s", r.err);
    run_free(&r);
    cleanup(&c);
}

Test(convert_robust, sparse_token_id_is_rejected_before_allocating) {
    Ctx c;
    setup(&c);
    put(&c, "tokenizer.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2E8}, \"merges\": []},"
        " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    TokenizerData d;
    char err[512];
    cr_assert_eq(tokdata_from_hf_dir(c.dir, 0, &d, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "200000000"), "%s", err);
    cr_assert_not_null(strstr(err, "far past"), "%s", err);
    tokdata_free(&d);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json: JSON that is not an object, and link stubs

Test(convert_robust, tokenizer_json_not_an_object_and_absolute_stub) {
    static const char *const bad[] = {"[1]", "42", "\"x\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Ctx c;
        setup(&c);
        put(&c, "tokenizer.json", bad[i]);
        TokenizerData d;
        char err[512];
        cr_assert_eq(tokdata_from_hf_dir(c.dir, 0, &d, err, sizeof err), -1);
        cr_assert_not_null(strstr(err, "tokenizer.json: not a JSON object"), "%s -> %s", bad[i], err);
        tokdata_free(&d);
        cleanup(&c);
    }
    // A "stub" naming an absolute path (or a file of another name) is not followed.
    static const char *const stub[] = {"/etc/passwd\n", "../../../../../../etc/passwd"};
    for (size_t i = 0; i < sizeof stub / sizeof stub[0]; i++) {
        Ctx c;
        setup(&c);
        hf_dir(&c, NULL, 1);
        char p[256];
        snprintf(p, sizeof p, "%s/tokenizer.json", c.dir);
        cr_assert_eq(unlink(p), 0);
        put(&c, "tokenizer.json", stub[i]);
        RunResult r = convert(&c, (const char *const[]){c.dir, c.out, NULL});
        expect_fail(&c, &r, "tokenizer.json");
        cr_assert_null(strstr(r.err, "passwd"), "the stub was followed: %s", r.err);
        run_free(&r);
        cleanup(&c);
    }
    // A relative stub to a file of the same name still works (a checkout without symlinks).
    TokenizerData d;
    char err[512], rel[4200], p[512], real[4096];
    Ctx c;
    setup(&c);
    cr_assert_not_null(realpath(test_shared_path(p, sizeof p, "testdata/tokenizers/llama3/tokenizer.json"), real));
    snprintf(rel, sizeof rel, "../../../..%s\n", real);  // /tmp/emx-.../ -> / -> the file
    put(&c, "tokenizer.json", rel);
    cr_assert_eq(tokdata_from_hf_dir(c.dir, 0, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.n_vocab, 128256u);
    tokdata_free(&d);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// llama2.c header with vocab_size INT32_MIN (negating it was undefined behaviour).

Test(convert_robust, llama2c_vocab_int_min) {
    Ctx c;
    setup(&c);
    int32_t h[16] = {64, 128, 2, 4, 4, INT32_MIN, 256};
    char p[256], tok[512];
    snprintf(p, sizeof p, "%s/m.bin", c.dir);
    write_file(p, h, sizeof h);
    test_shared_path(tok, sizeof tok, "testdata/stories260K/tok512.bin");
    RunResult r = convert(&c, (const char *const[]){p, c.out, "--tokenizer", tok, NULL});
    expect_fail(&c, &r, "vocab_size = -2147483648");
    run_free(&r);
    cleanup(&c);
}

// ---------------------------------------------------------------------------------------------
// Integrity record: convert --check and ./run --verify

static void copy_model(const Ctx *c, const char *rel, char *dst, size_t cap, char **buf, size_t *n) {
    char p[512];
    *buf = test_read_file(test_build_path(p, sizeof p, rel), n);
    cr_assert_not_null(*buf, "%s (make test-models)", p);
    snprintf(dst, cap, "%s/m.bin", c->dir);
    write_file(dst, *buf, *n);
}

Test(convert_robust, check_and_verify_find_a_flipped_byte) {
    Ctx c;
    setup(&c);
    char m[256], *buf;
    size_t n;
    copy_model(&c, "models/stories260K.q8.bin", m, sizeof m, &buf, &n);
    RunResult r = convert(&c, (const char *const[]){"--check", m, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, ": ok (checksum "), "%s", r.out);
    run_free(&r);
    const char *const run_args[] = {m, "--verify", "-n", "1", "--temp", "0", "-p", "a", NULL};
    r = run_prog(run_binary(), run_args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    run_free(&r);

    buf[n - 100] ^= 0x10;  // a weight of the last tensor
    write_file(m, buf, n);
    EmxModel model;
    char err[512];
    cr_assert_eq(emx_model_open(&model, m, err, sizeof err), 0, "the flip is structural: %s", err);
    emx_model_close(&model);
    r = convert(&c, (const char *const[]){"--check", m, NULL});
    expect_fail(&c, &r, "checksum mismatch in the tensor data");
    run_free(&r);
    r = run_prog(run_binary(), run_args);
    cr_assert_eq(r.code, 1, "./run --verify ran a corrupted file: %s", r.err);
    cr_assert_not_null(strstr(r.err, "checksum mismatch in the tensor data"), "%s", r.err);
    cr_assert_eq(r.out_len, 0u, "./run generated from a corrupted file");
    run_free(&r);
    free(buf);
    cleanup(&c);
}

// A file without the record (as written before convert recorded one) loads, runs and passes
// --check on its structure, saying it has no checksum.
Test(convert_robust, file_without_checksum_still_loads) {
    Ctx c;
    setup(&c);
    char m[256], *buf;
    size_t n;
    copy_model(&c, "models/stories260K.f32.bin", m, sizeof m, &buf, &n);
    EmxFileHeader h;
    memcpy(&h, buf, sizeof h);
    cr_assert_eq(h.config.reserved[0], EMX_CHECK_MAGIC, "convert recorded no checksum");
    memset(h.config.reserved, 0, sizeof h.config.reserved);
    memcpy(buf, &h, sizeof h);
    write_file(m, buf, n);
    free(buf);
    EmxModel model;
    char err[512];
    cr_assert_eq(emx_model_open(&model, m, err, sizeof err), 0, "%s", err);
    emx_model_close(&model);
    RunResult r = convert(&c, (const char *const[]){"--check", m, NULL});
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.out, "no checksum recorded"), "%s", r.out);
    run_free(&r);
    const char *const run_args[] = {m, "--verify", "-n", "1", "--temp", "0", "-p", "a", NULL};
    r = run_prog(run_binary(), run_args);
    cr_assert_eq(r.code, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "no checksum recorded"), "%s", r.err);
    run_free(&r);
    cleanup(&c);
}
