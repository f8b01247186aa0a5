// test_eval_tasks.c — the shipped eval task sets (tools/eval/tasks/*.jsonl): every file follows
// the task format of docs/eval-tasks.md (fields, types, unique ids, checks, choice letters that
// are options of the question, answer alphabets that hold the answer, max_tokens range, >= 300
// items a file with answers and >= 30 open-ended prompts, >= 10 families), the validator here
// rejects each kind of bad line, and tools/eval/make_tasks.py regenerates the committed files
// byte for byte. Paths are relative to the repository root (make test runs from there).
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tests/run_util.h"
#include "tests/test_util.h"

#define TASK_DIR "tools/eval/tasks"
#define MIN_ITEMS 300
#define MIN_OPEN_ITEMS 30
#define MIN_FAMILIES 10

static const char *const KEYS[] = {"id", "family", "prompt", "messages", "answer", "check", "tolerance", "pattern",
                                   "max_tokens", "answer_cue", "answer_alphabet", "baselines", NULL};
static const char *const CHECKS[] = {"number", "exact", "choice", "regex", "contains", "word", "open", NULL};

static int in_list(const char *s, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

// A number check's answer: a JSON number, or a string strtod reads whole and finite.
static int numeric_answer(const cJSON *a) {
    if (cJSON_IsNumber(a)) return isfinite(a->valuedouble);
    if (!cJSON_IsString(a) || !*a->valuestring) return 0;
    char *end;
    double v = strtod(a->valuestring, &end);
    return *end == 0 && isfinite(v);
}

// messages: [{"role","content"}...], "system" only first, the rest "user", the last "user".
// Sets *user to the last message's content.
static const char *check_messages(const cJSON *m, const char **user) {
    int n = cJSON_GetArraySize(m);
    if (!cJSON_IsArray(m) || n < 1) return "not a non-empty array";
    for (int i = 0; i < n; i++) {
        const cJSON *msg = cJSON_GetArrayItem(m, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || cJSON_GetArraySize(msg) != 2 || !cJSON_IsString(role) ||
            !cJSON_IsString(content))
            return "a message is not {\"role\": string, \"content\": string}";
        if (strcmp(role->valuestring, "user") != 0 && (i > 0 || strcmp(role->valuestring, "system") != 0))
            return "role is not system (first) or user";
        if (!*content->valuestring) return "empty content";
        *user = content->valuestring;
    }
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(m, n - 1), "role");
    return strcmp(last->valuestring, "user") == 0 ? NULL : "the last message is not user";
}

// answer_alphabet: 1..256 distinct non-empty strings, one of them the answer (by value for
// 'number'). NULL when it is so, else the problem.
static const char *check_alphabet(const cJSON *a, const cJSON *answer, const char *check) {
    const int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1 || n > 256) return "not an array of 1..256 strings";
    int found = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsString(e) || !*e->valuestring) return "an entry is not a non-empty string";
        for (int j = 0; j < i; j++)
            if (strcmp(cJSON_GetArrayItem(a, j)->valuestring, e->valuestring) == 0) return "an entry repeats";
        if (strcmp(check, "number") == 0) {
            char *end;
            const double v = strtod(e->valuestring, &end);
            const double want = cJSON_IsNumber(answer) ? answer->valuedouble : strtod(answer->valuestring, NULL);
            found |= *end == 0 && v == want;
        } else {
            found |= cJSON_IsString(answer) && strcmp(e->valuestring, answer->valuestring) == 0;
        }
    }
    return found ? NULL : "the answer is not an entry";
}

// One parsed item: NULL when it follows the format, else "field 'F': problem" in err.
static const char *check_item(const cJSON *o, char *err, size_t errlen) {
#define BAD(...) return snprintf(err, errlen, __VA_ARGS__), err
    if (!cJSON_IsObject(o)) BAD("not a JSON object");
    for (const cJSON *k = o->child; k; k = k->next) {
        if (!in_list(k->string, KEYS)) BAD("field '%s': unknown field", k->string);
        for (const cJSON *j = k->next; j; j = j->next)
            if (strcmp(k->string, j->string) == 0) BAD("field '%s': given twice", k->string);
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(o, "family");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    const cJSON *answer = cJSON_GetObjectItemCaseSensitive(o, "answer");
    const cJSON *check = cJSON_GetObjectItemCaseSensitive(o, "check");
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(o, "tolerance");
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const cJSON *maxt = cJSON_GetObjectItemCaseSensitive(o, "max_tokens");
    const cJSON *cue = cJSON_GetObjectItemCaseSensitive(o, "answer_cue");
    const cJSON *alphabet = cJSON_GetObjectItemCaseSensitive(o, "answer_alphabet");
    if (!cJSON_IsString(id) || !*id->valuestring) BAD("field 'id': missing or not a non-empty string");
    if (family && !cJSON_IsString(family)) BAD("field 'family': not a string");
    if (!prompt == !msgs) BAD("field 'prompt'/'messages': exactly one of them is required");
    const char *user = NULL, *why;
    if (prompt && (!cJSON_IsString(prompt) || !*prompt->valuestring)) BAD("field 'prompt': not a non-empty string");
    if (prompt) user = prompt->valuestring;
    if (msgs && (why = check_messages(msgs, &user))) BAD("field 'messages': %s", why);
    if (!cJSON_IsString(check) || !in_list(check->valuestring, CHECKS)) BAD("field 'check': missing or unknown");
    const char *c = check->valuestring;
    if (maxt && (!cJSON_IsNumber(maxt) || maxt->valuedouble != floor(maxt->valuedouble) ||
                 maxt->valuedouble < 1 || maxt->valuedouble > 4096))
        BAD("field 'max_tokens': not an integer 1..4096");
    if (strcmp(c, "open") == 0) {
        if (answer || alphabet || cue || tol || pattern) BAD("field 'answer': an open-ended item has no answer, cue or alphabet");
        return NULL;
    }
    if (!answer) BAD("field 'answer': missing");
    if (strcmp(c, "number") == 0 ? !numeric_answer(answer) : !cJSON_IsString(answer))
        BAD("field 'answer': not a %s", strcmp(c, "number") == 0 ? "number or numeric string" : "string");
    if (tol && (strcmp(c, "number") != 0 || !cJSON_IsNumber(tol) || !(tol->valuedouble >= 0)))
        BAD("field 'tolerance': not a number >= 0 of a number check");
    if (strcmp(c, "choice") == 0) {
        const char *a = answer->valuestring;
        if (strlen(a) != 1 || a[0] < 'A' || a[0] > 'Z') BAD("field 'answer': '%s' is not one letter A-Z", a);
        char opt[3] = {a[0], ')', 0};  // the answer must be an option the question offers
        if (!strstr(user, opt)) BAD("field 'answer': option %s is not in the question", opt);
    }
    if (!pattern != (strcmp(c, "regex") != 0)) BAD("field 'pattern': required by regex, and only by it");
    if (pattern) {
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = cJSON_IsString(pattern) ? pcre2_compile((PCRE2_SPTR)pattern->valuestring,
                                                                 PCRE2_ZERO_TERMINATED, 0, &code, &off, NULL)
                                                 : NULL;
        if (!re) BAD("field 'pattern': not a PCRE2 pattern");
        pcre2_code_free(re);
    }
    if (cue && (!cJSON_IsString(cue) || !*cue->valuestring)) BAD("field 'answer_cue': not a non-empty string");
    if (!alphabet && strcmp(c, "word") == 0) BAD("field 'answer_alphabet': required by word");
    if (alphabet && (why = check_alphabet(alphabet, answer, c))) BAD("field 'answer_alphabet': %s", why);
    return NULL;
#undef BAD
}

// Checks a whole file's text: each non-blank line one valid item, ids unique, family (when given)
// = `family`. Returns the item count (*n_open: of them open-ended), or -1 with "LINE: problem" in err.
static int check_text(const char *text, const char *family, int *n_open, char *err, size_t errlen) {
    char **ids = NULL;
    int n = 0, line = 0, bad = 0;
    char why[256];
    for (const char *p = text; *p && !bad;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        line++;
        if (strspn(p, " \t\r") < len) {
            const char *end = NULL;
            cJSON *o = cJSON_ParseWithLengthOpts(p, len, &end, 0);
            const char *w = !o ? "not JSON" : strspn(end, " \t\r") < len - (size_t)(end - p) ? "text after the object" : check_item(o, why, sizeof why);
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
            const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
            if (!w && fam && strcmp(fam->valuestring, family) != 0) w = "field 'family': not the file's name";
            for (int i = 0; !w && i < n; i++)
                if (strcmp(ids[i], id->valuestring) == 0) w = "field 'id': duplicate";
            if (w) {
                snprintf(err, errlen, "%d: %s", line, w);
                bad = 1;
            } else {
                *n_open += strcmp(cJSON_GetObjectItemCaseSensitive(o, "check")->valuestring, "open") == 0;
                ids = realloc(ids, (size_t)(n + 1) * sizeof *ids);
                ids[n++] = strdup(id->valuestring);
            }
            cJSON_Delete(o);
        }
        p += len + (eol != NULL);
    }
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids);
    return bad ? -1 : n;
}

static int strcmp_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

// The *.jsonl names in `dir`, sorted; returns the count (names freed by free_names).
static int list_tasks(const char *dir, char ***names) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot open %s (run the tests from the repository root)", dir);
    int n = 0;
    *names = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".jsonl") == 0) {
            *names = realloc(*names, (size_t)(n + 1) * sizeof **names);
            (*names)[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(*names, (size_t)n, sizeof **names, strcmp_ptr);
    return n;
}

Test(eval_tasks, shipped_files_follow_the_format) {
    char **names;
    int n = list_tasks(TASK_DIR, &names);
    cr_expect_geq(n, MIN_FAMILIES, "%d task files in " TASK_DIR ", expected >= %d", n, MIN_FAMILIES);
    for (int i = 0; i < n; i++) {
        char path[512], family[256], err[512];
        snprintf(path, sizeof path, TASK_DIR "/%s", names[i]);
        snprintf(family, sizeof family, "%.*s", (int)(strlen(names[i]) - 6), names[i]);
        char *text = test_read_file(path, NULL);
        cr_assert_not_null(text, "cannot read %s", path);
        int n_open = 0, items = check_text(text, family, &n_open, err, sizeof err);
        cr_expect_geq(items, 0, "%s:%s", path, err);
        cr_expect(n_open == 0 || n_open == items, "%s: open-ended items mixed with others", path);
        const int want = n_open ? MIN_OPEN_ITEMS : MIN_ITEMS;
        cr_expect(items < 0 || items >= want, "%s: %d items, expected >= %d", path, items, want);
        free(text);
    }
    free_names(names, n);
}

// The validator above is what makes the test of the shipped files worth anything: each bad line
// here must be rejected, naming its field; the good line must pass.
Test(eval_tasks, validator_rejects_each_kind_of_bad_line) {
    static const struct { const char *line, *want; } cases[] = {
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"}", NULL},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"A) x B) y\"}],"
         "\"answer\":\"B\",\"check\":\"choice\",\"max_tokens\":4096}", NULL},
        {"[1]", "not a JSON object"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"} x", "text after"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"numbr\"}", "field 'check'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\",\"extra\":1}", "field 'extra'"},
        {"{\"id\":\"a\",\"id\":\"b\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"}", "given twice"},
        {"{\"id\":7,\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"}", "field 'id'"},
        {"{\"id\":\"a\",\"answer\":\"1\",\"check\":\"number\"}", "field 'prompt'/'messages'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"answer\":\"1\",\"check\":\"number\"}",
         "field 'prompt'/'messages'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"system\",\"content\":\"s\"}],"
         "\"answer\":\"1\",\"check\":\"number\"}", "field 'messages'"},
        {"{\"id\":\"a\",\"messages\":[{\"role\":\"assistant\",\"content\":\"q\"}],\"answer\":\"1\",\"check\":\"number\"}",
         "field 'messages'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1x\",\"check\":\"number\"}", "field 'answer'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":1,\"check\":\"exact\"}", "field 'answer'"},
        {"{\"id\":\"a\",\"prompt\":\"A) x B) y\",\"answer\":\"AB\",\"check\":\"choice\"}", "field 'answer'"},
        {"{\"id\":\"a\",\"prompt\":\"A) x B) y\",\"answer\":\"C\",\"check\":\"choice\"}", "option C)"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\",\"tolerance\":-1}", "field 'tolerance'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"regex\"}", "field 'pattern'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"regex\",\"pattern\":\"(\"}", "field 'pattern'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":0}", "field 'max_tokens'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":4097}", "field 'max_tokens'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\",\"max_tokens\":2.5}", "field 'max_tokens'"},
        {"{\"id\":\"a\",\"family\":\"other\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"}", "field 'family'"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"check\":\"open\",\"max_tokens\":128}", NULL},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"x\",\"check\":\"open\"}", "open-ended item has no answer"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"Rome\",\"check\":\"word\",\"answer_cue\":\"The answer is\","
         "\"answer_alphabet\":[\"Paris\",\"Rome\"]}", NULL},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"Rome\",\"check\":\"word\"}", "field 'answer_alphabet': required"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"Rome\",\"check\":\"word\",\"answer_alphabet\":[\"Paris\"]}",
         "the answer is not an entry"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[\"6\",\"7.0\"]}", NULL},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[\"7\",\"7\"]}", "repeats"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":7,\"check\":\"number\",\"answer_alphabet\":[]}", "1..256"},
        {"{\"id\":\"a\",\"prompt\":\"q\",\"answer\":7,\"check\":\"number\",\"answer_cue\":\"\"}", "field 'answer_cue'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        int n_open = 0, n = check_text(cases[i].line, "fam", &n_open, err, sizeof err);
        if (!cases[i].want) {
            cr_expect_eq(n, 1, "rejected a good line: %s (%s)", cases[i].line, err);
        } else {
            cr_expect_eq(n, -1, "accepted a bad line: %s", cases[i].line);
            cr_expect(strstr(err, cases[i].want) != NULL, "%s: error [%s] lacks [%s]", cases[i].line, err, cases[i].want);
        }
    }
    char err[512] = "";  // a duplicate id, on the third line (a blank line counts)
    const char *dup = "{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"1\",\"check\":\"number\"}\n\n"
                      "{\"id\":\"a\",\"prompt\":\"q\",\"answer\":\"2\",\"check\":\"number\"}\n";
    int n_open = 0;
    cr_expect_eq(check_text(dup, "fam", &n_open, err, sizeof err), -1);
    cr_expect_str_eq(err, "3: field 'id': duplicate");
}

// make_tasks.py (default seed) into a temporary folder: the same file names, the same bytes.
Test(eval_tasks, generator_reproduces_the_shipped_files, .timeout = 120) {
    char dir[] = "/tmp/emx_tasks_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *args[] = {"python3", "tools/eval/make_tasks.py", "--out", dir, NULL};
    RunResult r = run_prog("/usr/bin/env", args);
    cr_expect_eq(r.code, 0, "make_tasks.py exit %d: %s", r.code, r.err);
    run_free(&r);
    char **want, **got;
    int n_want = list_tasks(TASK_DIR, &want), n_got = list_tasks(dir, &got);
    cr_expect_eq(n_got, n_want, "the generator wrote %d files, " TASK_DIR " has %d", n_got, n_want);
    for (int i = 0; i < n_want && i < n_got; i++) {
        cr_expect_str_eq(got[i], want[i]);
        char a_path[512], b_path[512];
        snprintf(a_path, sizeof a_path, TASK_DIR "/%s", want[i]);
        snprintf(b_path, sizeof b_path, "%s/%s", dir, got[i]);
        size_t a_len = 0, b_len = 0;
        char *a = test_read_file(a_path, &a_len), *b = test_read_file(b_path, &b_len);
        cr_expect(a && b && a_len == b_len && memcmp(a, b, a_len) == 0,
                  "%s differs from what make_tasks.py writes (%zu vs %zu bytes): regenerate and commit", a_path,
                  a_len, b_len);
        free(a);
        free(b);
    }
    for (int i = 0; i < n_got; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, got[i]);
        unlink(p);
    }
    free_names(want, n_want);
    free_names(got, n_got);
    cr_expect_eq(rmdir(dir), 0, "rmdir %s: the generator left other files", dir);
}
