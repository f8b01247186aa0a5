// test_api_gguf.c — entropix_model_open given a GGUF (runtime/convert/gguf_cache.h through the
// public API): stories260K's F32 GGUF gives the logits of the model file `convert` writes from it
// (bit for bit) and numpy's (1e-4, ../shared/testdata/stories260K/golden.json); llama3-tiny's F16
// GGUF gives numpy's and llama.cpp's step-0 logits (2e-4, as tests/test_forward.c); the cache file
// lands in params->gguf_cache (one .bin, nothing beside the GGUF, nothing printed), or in
// $EMX_CACHE for a caller whose struct ends before gguf_cache; a truncated GGUF and a cache
// folder that cannot be written each fail with ENTROPIX_ERR_FILE and one line naming the GGUF.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/entropix.h"
#include "api_test_util.h"
#include "gguf_test_util.h"
#include "test_ref_util.h"
#include "test_util.h"

// The number of names in folder (. and .. aside; -1 when it is missing), the first into first.
static int count_names(const char *folder, char *first, size_t cap) {
    DIR *d = opendir(folder);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n++ == 0 && first) snprintf(first, cap, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

// entropix_model_open with cache as params->gguf_cache and params->size as given; what it wrote
// on stderr (it must write nothing) into printed.
static int open_gguf(const char *path, const char *cache, size_t size, entropix_model **m, char *printed, size_t cap) {
    entropix_model_params mp;
    entropix_model_params_init(&mp);
    mp.threads = 1;
    mp.gguf_cache = cache;
    mp.size = size;
    char log[] = "/tmp/emx_api_gguf_stderr_XXXXXX";
    int fd = mkstemp(log), saved = dup(2);
    cr_assert(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    int rc = entropix_model_open(path, &mp, m);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, printed, cap - 1, 0);
    printed[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(log);
    return rc;
}

// The last position's logits of ids on a fresh state of m, into out [n_vocab].
static void logits_of(entropix_model *m, const int *ids, int n, float *out, int n_vocab) {
    entropix_state_params sp;
    entropix_state_params_init(&sp);
    sp.ctx = 128;  // stories260K's whole context; the tiny models' prompts of <= 32 tokens fit
    entropix_state *s = NULL;
    cr_assert_eq(entropix_state_new(m, &sp, &s), ENTROPIX_OK, "%s", entropix_error_last());
    entropix_step st = {.size = sizeof st};
    cr_assert_eq(entropix_forward(s, ids, n, 0, &st), ENTROPIX_OK, "%s", entropix_error_last());
    cr_assert_eq(st.n_vocab, n_vocab);
    memcpy(out, st.logits, (size_t)n_vocab * sizeof *out);
    entropix_state_free(s);
}

Test(api_gguf, stories_gguf_is_the_converted_model_and_numpy, .timeout = 120) {
    GgufTmp t;
    gguf_tmp_setup(&t, "api_gguf", "testdata/stories260K/stories260K.gguf");
    entropix_model *gg = NULL, *bin = open_api("stories260K.gguf.f32.bin", 1);
    char printed[512];
    cr_assert_eq(open_gguf(t.gguf, t.cache, sizeof(entropix_model_params), &gg, printed, sizeof printed), ENTROPIX_OK,
                 "%s", entropix_error_last());
    cr_expect_str_eq(printed, "", "the library printed [%s]", printed);
    char name[256];
    cr_expect_eq(count_names(t.cache, name, sizeof name), 1, "the cache holds more than one file");
    cr_expect(strlen(name) > 4 && !strcmp(name + strlen(name) - 4, ".bin") && name[0] != '.', "cache file [%s]", name);
    cr_expect_eq(count_names(t.dir, NULL, 0), 2, "%s holds more than model.gguf and cache/", t.dir);

    cJSON *g = ref_load_shared_json("testdata/stories260K/golden.json");
    float got[512], want[512];
    int n_prompts = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(g, "prompts")) {
        int n;
        int *ids = ref_json_ints(cJSON_GetObjectItem(p, "prompt_ids"), &n);
        logits_of(gg, ids, n, got, 512);
        logits_of(bin, ids, n, want, 512);
        cr_expect_eq(memcmp(got, want, sizeof got), 0, "prompt %d: the GGUF's logits differ from the .bin's", n_prompts);
        const cJSON *ref0 = cJSON_GetObjectItem(p, "step0_logits_numpy");
        for (int v = 0; v < 512; v++) {
            double d = fabs(got[v] - cJSON_GetArrayItem(ref0, v)->valuedouble);
            cr_assert(d <= 1e-4, "prompt %d logit %d off numpy by %g", n_prompts, v, d);
        }
        free(ids);
        n_prompts++;
    }
    cr_assert_eq(n_prompts, 5);
    cJSON_Delete(g);
    entropix_model_close(gg);
    // Opened again: the cache file is reused (the same single file, no conversion).
    struct stat before, after;
    char cached[512];
    snprintf(cached, sizeof cached, "%s/%s", t.cache, name);
    cr_assert_eq(stat(cached, &before), 0);
    cr_assert_eq(open_gguf(t.gguf, t.cache, sizeof(entropix_model_params), &gg, printed, sizeof printed), ENTROPIX_OK,
                 "%s", entropix_error_last());
    cr_assert_eq(stat(cached, &after), 0);
    cr_expect(before.st_ino == after.st_ino && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec, "converted again");
    entropix_model_close(gg);
    entropix_model_close(bin);
    gguf_tmp_cleanup(&t);
}

Test(api_gguf, llama3_tiny_f16_gguf_is_numpy_and_llama_cpp, .timeout = 120) {
    GgufTmp t;
    gguf_tmp_setup(&t, "api_gguf", "testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf");
    entropix_model *m = NULL;
    char printed[512];
    cr_assert_eq(open_gguf(t.gguf, t.cache, sizeof(entropix_model_params), &m, printed, sizeof printed), ENTROPIX_OK,
                 "%s", entropix_error_last());
    entropix_model_info info = {.size = sizeof info};
    cr_assert_eq(entropix_model_get_info(m, &info), ENTROPIX_OK);
    cJSON *ref = ref_load_shared_json("testdata/tiny/llama3-tiny/reference.json");
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const int vocab = info.vocab_size, n_prompts = cJSON_GetArraySize(prompts);
    float *numpy0 = ref_read_shared_f32("testdata/tiny/llama3-tiny/logits_step0.numpy.f32", (size_t)n_prompts * vocab);
    float *llama0 = ref_read_shared_f32("testdata/tiny/llama3-tiny/logits_step0.llamacpp.f32", (size_t)n_prompts * vocab);
    float *got = malloc((size_t)vocab * sizeof *got);
    int checked = 0;
    for (int pi = 0; pi < n_prompts; pi++) {
        int n;
        int *ids = ref_json_ints(cJSON_GetObjectItem(cJSON_GetArrayItem(prompts, pi), "ids"), &n);
        if (n <= 32) {  // the short prompts, at the tight tolerance (a 128-position state)
            logits_of(m, ids, n, got, vocab);
            double d_np = ref_max_abs_diff(got, numpy0 + (size_t)pi * vocab, vocab);
            double d_lc = ref_max_abs_diff(got, llama0 + (size_t)pi * vocab, vocab);
            cr_expect(d_np <= 2e-4 && d_lc <= 2e-4, "prompt %d: off numpy by %g, llama.cpp by %g", pi, d_np, d_lc);
            checked++;
        }
        free(ids);
    }
    cr_assert_gt(checked, 0);
    free(got);
    free(numpy0);
    free(llama0);
    cJSON_Delete(ref);
    entropix_model_close(m);
    gguf_tmp_cleanup(&t);
}

// A caller built against the header before gguf_cache: its size ends at mmap, so the field's
// bytes (here a folder that must not be used) are never read and $EMX_CACHE is the folder.
Test(api_gguf, older_params_struct_uses_the_default_folder, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "api_gguf", "testdata/stories260K/stories260K.gguf");
    char env_cache[128];
    snprintf(env_cache, sizeof env_cache, "%s/env", t.dir);
    setenv("EMX_CACHE", env_cache, 1);
    entropix_model *m = NULL;
    char printed[512];
    const size_t old_size = offsetof(entropix_model_params, mmap) + sizeof(int);
    cr_assert_eq(open_gguf(t.gguf, t.cache, old_size, &m, printed, sizeof printed), ENTROPIX_OK, "%s",
                 entropix_error_last());
    cr_expect_eq(count_names(env_cache, NULL, 0), 1);
    cr_expect_eq(count_names(t.cache, NULL, 0), -1, "%s was used", t.cache);
    entropix_model_close(m);
    unsetenv("EMX_CACHE");
    gguf_tmp_cleanup(&t);
}

// A failure's message: one line, naming the GGUF, and the needle.
static void expect_file_error(int rc, const char *gguf, const char *needle) {
    const char *msg = entropix_error_last();
    cr_expect_eq(rc, ENTROPIX_ERR_FILE, "status %d: %s", rc, msg);
    cr_expect(strstr(msg, gguf) && strstr(msg, needle) && !strchr(msg, '\n'), "message [%s]", msg);
}

Test(api_gguf, truncated_gguf_and_unwritable_cache_are_one_line, .timeout = 60) {
    GgufTmp t;
    gguf_tmp_setup(&t, "api_gguf", "testdata/stories260K/stories260K.gguf");
    // A folder nothing can be created in: a mode of 0555, or (root ignores modes) /proc.
    const char *ro = t.cache;
    if (geteuid() == 0) ro = "/proc";
    else cr_assert_eq(mkdir(t.cache, 0555), 0);
    entropix_model *m = (entropix_model *)&t;  // set to NULL on failure
    char printed[512];
    int rc = open_gguf(t.gguf, ro, sizeof(entropix_model_params), &m, printed, sizeof printed);
    expect_file_error(rc, t.gguf, "cannot write in the cache folder");
    cr_expect(strstr(entropix_error_last(), "entropix_model_params.gguf_cache"), "[%s]", entropix_error_last());
    cr_expect_null(m);
    if (geteuid() != 0) {
        cr_expect_eq(count_names(t.cache, NULL, 0), 0);
        cr_assert_eq(chmod(t.cache, 0755), 0);
    }
    cr_assert_eq(truncate(t.gguf, 4096), 0);
    rc = open_gguf(t.gguf, t.cache, sizeof(entropix_model_params), &m, printed, sizeof printed);
    expect_file_error(rc, t.gguf, "");
    cr_expect_str_eq(printed, "", "the library printed [%s]", printed);
    cr_expect_eq(count_names(t.cache, NULL, 0), 0, "a failed conversion left a file");
    gguf_tmp_cleanup(&t);
}
