// test_chat_template.c — emx_chat_render against the official Jinja templates: every case in
// tests/data/chat_templates/<family>.json was rendered by the model family's own template with
// jinja2 the way transformers' apply_chat_template renders it (tools/gen_chat_references.py),
// and must come out byte for byte the same, or fail where the template raises. Detection is
// checked on the official template texts (the committed .jinja copies and the tokenizer_config
// files in ../shared), plus templates of other families that must stay unrecognised.
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"
#include "runtime/convert/gguf.h"
#include "tools/server/request_tools.h"
#include "test_util.h"

#define DATA_DIR "tests/data/chat_templates/"

static char *read_data(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, DATA_DIR "%s", name);
    char *text = test_read_file(path, len);
    cr_assert_not_null(text, "cannot read %s (run the tests from the repository root)", path);
    return text;
}

// Byte-for-byte comparison that names the first differing offset and shows both sides there.
static void assert_same(const char *got, const char *want, const char *what) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    if (got[i] == 0 && want[i] == 0) return;
    size_t from = i > 20 ? i - 20 : 0;
    cr_assert_fail("%s: differs at byte %zu (lengths %zu vs %zu)\n  got:  \"%.60s\"\n  want: \"%.60s\"",
                   what, i, strlen(got), strlen(want), got + from, want + from);
}

// Runs every case of <family>.json; returns how many were checked.
static int check_family_file(uint32_t family) {
    char name[64];
    snprintf(name, sizeof name, "%s.json", emx_chat_template_name(family));
    char *text = read_data(name, NULL);
    cJSON *cases = cJSON_Parse(text);
    free(text);
    cr_assert(cJSON_IsArray(cases), "%s: not a JSON array", name);

    int checked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *case_name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const cJSON *messages = cJSON_GetObjectItem(c, "messages");
        const cJSON *expected = cJSON_GetObjectItem(c, "expected");
        cr_assert(case_name && cJSON_IsArray(messages) && expected, "%s: malformed case %d", name, checked);

        int n = cJSON_GetArraySize(messages);
        EmxChatMessage *msgs = calloc((size_t)n + 1, sizeof *msgs);
        EmxChatToolCall calls[64];
        char *owned[64];
        int n_calls = 0, n_owned = 0;
        for (int i = 0; i < n; i++) {
            const cJSON *m = cJSON_GetArrayItem(messages, i), *tc;
            msgs[i].role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
            msgs[i].content = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
            msgs[i].tool_calls = calls + n_calls;
            cJSON_ArrayForEach(tc, cJSON_GetObjectItem(m, "tool_calls")) {  // OpenAI's shape
                const cJSON *f = cJSON_GetObjectItem(tc, "function");
                cr_assert_lt(n_calls, 64);
                const cJSON *args = cJSON_GetObjectItem(f, "arguments");
                // llama3's cases give an object (its template's tojson): written as the server writes it
                const char *a = cJSON_IsString(args) ? args->valuestring : (owned[n_owned++] = srv_py_json(args));
                calls[n_calls++] = (EmxChatToolCall){cJSON_GetStringValue(cJSON_GetObjectItem(f, "name")), a};
                msgs[i].n_tool_calls++;
            }
        }
        const char *tools[16];
        int n_tools = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "tools_json")) {
            cr_assert_lt(n_tools, 16);
            tools[n_tools] = cJSON_GetStringValue(t);
            // the server writes each tool as the template's tojson does: the same bytes
            char *mine = srv_py_json_indent(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "tools"), n_tools),
                                            family == EMX_CHAT_LLAMA3 ? 4 : 0);
            cr_assert_str_eq(mine, tools[n_tools], "%s: tool %d as tojson", case_name, n_tools);
            free(mine);
            n_tools++;
        }
        EmxChatOptions opt = {
            .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
            .enable_thinking = cJSON_IsTrue(cJSON_GetObjectItem(c, "enable_thinking")),
            .tools = tools,
            .n_tools = n_tools,
        };
        char err[256] = "";
        char *got = emx_chat_render(family, msgs, n, &opt, err, sizeof err);
        char what[160];
        snprintf(what, sizeof what, "%s/%s", emx_chat_template_name(family), case_name);
        if (cJSON_IsNull(expected)) {
            cr_expect_null(got, "%s: the official template raises (%s) but we rendered \"%s\"", what,
                           cJSON_GetStringValue(cJSON_GetObjectItem(c, "error")), got ? got : "");
            cr_expect(err[0] != 0, "%s: no reason given for the failure", what);
        } else {
            cr_assert_not_null(got, "%s: render failed: %s", what, err);
            assert_same(got, cJSON_GetStringValue(expected), what);
        }
        free(got);
        free(msgs);
        for (int i = 0; i < n_owned; i++) free(owned[i]);
        checked++;
    }
    cJSON_Delete(cases);
    return checked;
}

Test(chat_template, qwen3_matches_official_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_QWEN3), 30, "too few qwen3 cases");
}

Test(chat_template, llama3_matches_official_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_LLAMA3), 15, "too few llama3 cases");
}

Test(chat_template, smollm2_matches_official_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_SMOLLM2), 15, "too few smollm2 cases");
}

Test(chat_template, chatml_matches_reference_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_CHATML), 15, "too few chatml cases");
}

Test(chat_template, qwen25_matches_official_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_QWEN25), 15, "too few qwen2.5 cases");
}

Test(chat_template, gemma3_matches_official_template) {
    cr_assert_geq(check_family_file(EMX_CHAT_GEMMA3), 15, "too few gemma3 cases");
}

// ---------------------------------------------------------------------------------------------
// Behaviour the reference files cannot show.

static const EmxChatMessage CONV[] = {
    {.role = "system", .content = "Be brief."},
    {.role = "user", .content = "Hi"},
    {.role = "assistant", .content = "<think>x</think>Hello"},
    {.role = "user", .content = "Bye"},
};

Test(chat_template, none_concatenates_contents) {
    char *got = emx_chat_render(EMX_CHAT_NONE, CONV, 4, NULL, NULL, 0);
    cr_assert_str_eq(got, "Be brief.Hi<think>x</think>HelloBye");
    free(got);
    got = emx_chat_render(EMX_CHAT_NONE, NULL, 0, NULL, NULL, 0);
    cr_assert_str_eq(got, "");
    free(got);
}

Test(chat_template, null_options_are_the_defaults) {
    const EmxChatOptions defaults = {.add_generation_prompt = 1, .enable_thinking = 1};
    for (uint32_t f = EMX_CHAT_NONE; f <= EMX_CHAT_CHATML; f++) {
        char *a = emx_chat_render(f, CONV, 4, NULL, NULL, 0);
        char *b = emx_chat_render(f, CONV, 4, &defaults, NULL, 0);
        cr_assert(a && b);
        cr_expect_str_eq(a, b, "%s", emx_chat_template_name(f));
        free(a);
        free(b);
    }
}

Test(chat_template, enable_thinking_only_changes_qwen3) {
    const EmxChatOptions on = {.add_generation_prompt = 1, .enable_thinking = 1}, off = {.add_generation_prompt = 1};
    for (uint32_t f = EMX_CHAT_NONE; f <= EMX_CHAT_CHATML; f++) {
        char *a = emx_chat_render(f, CONV, 4, &on, NULL, 0);
        char *b = emx_chat_render(f, CONV, 4, &off, NULL, 0);
        cr_assert(a && b);
        if (f == EMX_CHAT_QWEN3) {
            size_t la = strlen(a);
            cr_expect_eq(strlen(b), la + strlen("<think>\n\n</think>\n\n"));
            cr_expect_str_eq(b + la, "<think>\n\n</think>\n\n");
        } else {
            cr_expect_str_eq(a, b, "%s", emx_chat_template_name(f));
        }
        free(a);
        free(b);
    }
}

Test(chat_template, rejects_bad_messages) {
    char err[128];
    const EmxChatMessage tool[] = {{.role = "user", .content = "q"}, {.role = "tool", .content = "42"}};
    for (uint32_t f = EMX_CHAT_NONE; f <= EMX_CHAT_GEMMA3; f++) {
        if (f == EMX_CHAT_QWEN3 || f == EMX_CHAT_LLAMA3) continue;  // they write tool results (tools cases)
        err[0] = 0;
        cr_expect_null(emx_chat_render(f, tool, 2, NULL, err, sizeof err));
        cr_expect(strstr(err, "message 1") && strstr(err, "\"tool\""), "%s: err \"%s\"",
                  emx_chat_template_name(f), err);
    }
    const EmxChatMessage no_role[] = {{.role = NULL, .content = "x"}}, no_content[] = {{.role = "user", .content = NULL}};
    cr_expect_null(emx_chat_render(EMX_CHAT_QWEN3, no_role, 1, NULL, err, sizeof err));
    cr_expect(strstr(err, "no role"), "%s", err);
    cr_expect_null(emx_chat_render(EMX_CHAT_LLAMA3, no_content, 1, NULL, err, sizeof err));
    cr_expect(strstr(err, "no content"), "%s", err);
    cr_expect_null(emx_chat_render(EMX_CHAT_CHATML, CONV, -1, NULL, err, sizeof err));
    cr_expect_null(emx_chat_render(EMX_CHAT_CHATML, NULL, 2, NULL, err, sizeof err));
    cr_expect_null(emx_chat_render(99, CONV, 4, NULL, err, sizeof err));
    cr_expect(strstr(err, "99"), "%s", err);
    // A NULL or tiny error buffer is fine.
    cr_expect_null(emx_chat_render(EMX_CHAT_CHATML, tool, 2, NULL, NULL, 0));
    // tool calls and tools: qwen3's only, and a call needs its name and arguments
    const EmxChatToolCall bad_call = {.name = "f"};
    const EmxChatMessage call[] = {{.role = "user", .content = "q"},
                                   {.role = "assistant", .content = "", .tool_calls = &bad_call, .n_tool_calls = 1}};
    cr_expect_null(emx_chat_render(EMX_CHAT_QWEN3, call, 2, NULL, err, sizeof err));
    cr_expect(strstr(err, "without name or arguments"), "%s", err);
    cr_expect_null(emx_chat_render(EMX_CHAT_CHATML, call, 2, NULL, err, sizeof err));
    cr_expect(strstr(err, "tool calls"), "%s", err);
    const char *tools[] = {"{}"};
    const EmxChatOptions with_tools = {.add_generation_prompt = 1, .tools = tools, .n_tools = 1};
    cr_expect_null(emx_chat_render(EMX_CHAT_SMOLLM2, call, 1, &with_tools, err, sizeof err));
    cr_expect(strstr(err, "smollm2 has no tool calling"), "%s", err);
    char tiny[4] = "abc";
    cr_expect_null(emx_chat_render(EMX_CHAT_CHATML, tool, 2, NULL, tiny, sizeof tiny));
    cr_expect_eq(strlen(tiny), 3u);
}

Test(chat_template, bos_is_in_the_text_only_for_llama3_and_gemma3) {
    const EmxChatMessage user[] = {{.role = "user", .content = "x"}};
    for (uint32_t f = EMX_CHAT_NONE; f <= EMX_CHAT_GEMMA3; f++) {
        char *s = emx_chat_render(f, user, 1, NULL, NULL, 0);
        cr_assert_not_null(s);
        int starts = strncmp(s, "<|begin_of_text|>", 17) == 0 || strncmp(s, "<bos>", 5) == 0;
        cr_expect_eq(starts, emx_chat_template_adds_bos(f), "%s", emx_chat_template_name(f));
        free(s);
    }
}

// ---------------------------------------------------------------------------------------------
// Names and detection.

Test(chat_template, names_round_trip) {
    const char *names[] = {"none", "qwen3", "llama3", "smollm2", "chatml", "qwen2.5", "gemma3"};
    const uint32_t families[] = {EMX_CHAT_NONE,   EMX_CHAT_QWEN3,  EMX_CHAT_LLAMA3, EMX_CHAT_SMOLLM2,
                                 EMX_CHAT_CHATML, EMX_CHAT_QWEN25, EMX_CHAT_GEMMA3};
    for (int i = 0; i < 7; i++) {
        cr_expect_str_eq(emx_chat_template_name(families[i]), names[i]);
        cr_expect_eq(emx_chat_template_from_name(names[i]), (int)families[i]);
    }
    cr_expect_null(emx_chat_template_name(7));
    cr_expect_eq(emx_chat_template_from_name("llama2"), -1);
    cr_expect_eq(emx_chat_template_from_name(""), -1);
    cr_expect_eq(emx_chat_template_from_name(NULL), -1);
}

Test(chat_template, detects_the_official_templates) {
    static const struct {
        const char *file;
        uint32_t family;
    } cases[] = {
        {"qwen3.jinja", EMX_CHAT_QWEN3},         {"llama3.jinja", EMX_CHAT_LLAMA3},
        {"llama3.1.jinja", EMX_CHAT_LLAMA3},     {"llama3-short.jinja", EMX_CHAT_LLAMA3},
        {"smollm2.jinja", EMX_CHAT_SMOLLM2},     {"chatml.jinja", EMX_CHAT_CHATML},
        {"qwen2.5.jinja", EMX_CHAT_QWEN25},      {"gemma3.jinja", EMX_CHAT_GEMMA3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        char *t = read_data(cases[i].file, &len);
        cr_expect_eq(emx_chat_template_detect(t, len), cases[i].family, "%s", cases[i].file);
        // Only the first len bytes count: a prefix without the markers is not recognised.
        cr_expect_eq(emx_chat_template_detect(t, 10), EMX_CHAT_NONE, "%s prefix", cases[i].file);
        free(t);
    }
}

// The chat templates in ../shared as a converter sees them: the "chat_template" field of
// tokenizer_config.json, and tokenizer.chat_template of the tiny models' GGUFs (not
// NUL-terminated, so detection must honour the length).
Test(chat_template, detects_shared_templates) {
    static const struct {
        const char *rel;
        uint32_t family;
    } configs[] = {
        {"testdata/tokenizers/qwen3/tokenizer_config.json", EMX_CHAT_QWEN3},
        {"testdata/tokenizers/llama3/tokenizer_config.json", EMX_CHAT_LLAMA3},
    }, ggufs[] = {
        {"testdata/tiny/qwen3-tiny/qwen3-tiny.bf16.gguf", EMX_CHAT_QWEN3},
        {"testdata/tiny/llama3-tiny/llama3-tiny.f16.gguf", EMX_CHAT_LLAMA3},
    };
    char path[512];
    int seen = 0;
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        char *text = test_read_file(test_shared_path(path, sizeof path, configs[i].rel), NULL);
        if (!text) continue;
        cJSON *cfg = cJSON_Parse(text);
        free(text);
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "chat_template"));
        cr_assert_not_null(t, "%s: no chat_template string", path);
        cr_expect_eq(emx_chat_template_detect(t, strlen(t)), configs[i].family, "%s", path);
        cJSON_Delete(cfg);
        seen++;
    }
    for (size_t i = 0; i < sizeof ggufs / sizeof ggufs[0]; i++) {
        GGUFFile f;
        char err[256];
        if (gguf_open(&f, test_shared_path(path, sizeof path, ggufs[i].rel), err, sizeof err) != 0) continue;
        size_t len = 0;
        const char *t = gguf_get_str(&f, "tokenizer.chat_template", &len);
        cr_expect_not_null(t, "%s: no tokenizer.chat_template", path);
        if (t) cr_expect_eq(emx_chat_template_detect(t, len), ggufs[i].family, "%s", path);
        gguf_close(&f);
        seen++;
    }
    if (seen == 0) cr_skip_test("no shared templates found (EMX_SHARED=%s)", getenv("EMX_SHARED"));
}

// Real templates of other models that look like ours (ChatML with reasoning or a default system
// prompt, Llama 3 headers with tool prompts, ...). The generator proved each renders some
// reference case differently from every family, so none may be detected as one.
Test(chat_template, lookalike_templates_stay_unrecognised) {
    DIR *dir = opendir(DATA_DIR "others");
    cr_assert_not_null(dir, "cannot open " DATA_DIR "others (run the tests from the repository root)");
    int checked = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 6, ".jinja")) continue;
        char name[300];
        snprintf(name, sizeof name, "others/%s", e->d_name);
        size_t len;
        char *t = read_data(name, &len);
        uint32_t got = emx_chat_template_detect(t, len);
        cr_expect_eq(got, EMX_CHAT_NONE, "%s detected as %s", name, emx_chat_template_name(got));
        free(t);
        checked++;
    }
    closedir(dir);
    cr_expect_geq(checked, 10, "only %d look-alike templates found", checked);
}

Test(chat_template, other_templates_stay_unrecognised) {
    static const char *const others[] = {
        "",
        "{{ messages[0]['content'] }}",
        // Gemma-style turns
        "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
        "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}",
        // Mistral-style [INST]
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
        // ChatML with a default system prompt of its own (Qwen2.5-style)
        "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant."
        "<|im_end|>\\n' }}{%- endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>\\n'}}{% endfor %}",
        // ChatML that starts with BOS
        "{{bos_token}}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        // ChatML that always opens a reasoning block (QwQ-style, no enable_thinking switch)
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}",
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_expect_eq(emx_chat_template_detect(others[i], strlen(others[i])), EMX_CHAT_NONE, "template %zu", i);
    cr_expect_eq(emx_chat_template_detect(NULL, 0), EMX_CHAT_NONE);

    // Qwen3's template with a generation prompt that always opens a think block (as the
    // thinking-only Qwen3 releases do) renders differently: not Qwen3.
    size_t len;
    char *qwen3 = read_data("qwen3.jinja", &len);
    static const char always_think[] = "{{- '<|im_start|>assistant\\n<think>\\n' }}";
    char *t = malloc(len + sizeof always_think);
    memcpy(t, qwen3, len);
    memcpy(t + len, always_think, sizeof always_think);
    cr_expect_eq(emx_chat_template_detect(qwen3, len), EMX_CHAT_QWEN3);
    cr_expect_eq(emx_chat_template_detect(t, strlen(t)), EMX_CHAT_NONE);
    free(t);
    free(qwen3);
}
