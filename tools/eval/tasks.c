// tasks.c — loading and validating eval task files (tasks.h).
#include "tools/eval/tasks.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"
#include "base/read_file.h"

static const char *const check_names[] = {"number", "exact", "choice", "regex", "contains", "word", "open"};
#define N_CHECKS EVAL_CHECK_COUNT
#define CHECK_LIST "number, exact, choice, regex, contains, word, open"
static const char *const known_fields[] = {"id", "family", "prompt", "messages", "answer", "check", "tolerance",
                                           "pattern", "max_tokens", "answer_cue", "answer_alphabet", "baselines"};
#define N_FIELDS 12
#define FIELD_LIST "id, family, prompt, messages, answer, check, tolerance, pattern, max_tokens, answer_cue, " \
                   "answer_alphabet, baselines"

const char *eval_check_name(int kind) { return kind >= 0 && kind < N_CHECKS ? check_names[kind] : "?"; }

// "FILE:LINE: field 'F': <why>" (field NULL: no field part). Returns -1.
__attribute__((format(printf, 6, 7)))
static int field_err(char *err, size_t errlen, const char *path, int line, const char *field, const char *fmt, ...) {
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    // The field name and the values the reason quotes come from the file: escaped, so a name
    // like "a\nswer" keeps the message on one line (found by fuzz_evaltasks).
    char why_esc[800], field_esc[200];
    emx_escape(why, sizeof why, why_esc, sizeof why_esc);
    if (field)
        return emx_seterr(err, errlen, "%s:%d: field '%s': %s", path, line,
                          emx_escape(field, strlen(field), field_esc, sizeof field_esc), why_esc);
    return emx_seterr(err, errlen, "%s:%d: %s", path, line, why_esc);
}

// The item's text fields: an optional string field (NULL if absent). Returns 0 or -1.
static int opt_string(const cJSON *o, const char *name, char **out, const char *path, int line, char *err,
                      size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *out = NULL;
    if (!v) return 0;
    if (!cJSON_IsString(v)) return field_err(err, errlen, path, line, name, "not a string");
    if (!(*out = strdup(v->valuestring))) return field_err(err, errlen, path, line, name, "out of memory");
    return 0;
}

// messages: an optional system message first, then exactly one user message (./run --chat's
// conversation: --system and the prompt).
static int parse_messages(const cJSON *msgs, EvalItem *it, const char *path, int line, char *err, size_t errlen) {
    const char *F = "messages";
    if (!cJSON_IsArray(msgs)) return field_err(err, errlen, path, line, F, "not an array");
    int n = cJSON_GetArraySize(msgs);
    if (n < 1 || n > 2) return field_err(err, errlen, path, line, F, "%d messages: expected a user message, after an optional system message", n);
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(msgs, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !cJSON_IsString(content))
            return field_err(err, errlen, path, line, F, "message %d is not an object with string \"role\" and \"content\"", i);
        const char *r = role->valuestring;
        int want_user = i == n - 1;
        if (strcmp(r, want_user ? "user" : "system") != 0)
            return field_err(err, errlen, path, line, F, "message %d has role '%.40s': expected '%s'%s", i, r,
                             want_user ? "user" : "system", want_user ? " (the last message is the user's)" : " (only a system message may come first)");
        char **dst = want_user ? &it->prompt : &it->system;
        if (!(*dst = strdup(content->valuestring))) return field_err(err, errlen, path, line, F, "out of memory");
    }
    it->chat = 1;
    return 0;
}

static int parse_check(const cJSON *o, EvalItem *it, const char *path, int line, char *err, size_t errlen) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "check");
    if (!c) return field_err(err, errlen, path, line, "check", "missing (" CHECK_LIST ")");
    if (!cJSON_IsString(c)) return field_err(err, errlen, path, line, "check", "not a string");
    it->check = -1;
    for (int k = 0; k < N_CHECKS; k++)
        if (strcmp(c->valuestring, check_names[k]) == 0) it->check = k;
    if (it->check < 0)
        return field_err(err, errlen, path, line, "check", "unknown check '%.40s' (" CHECK_LIST ")", c->valuestring);
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(o, "tolerance");
    if (tol && it->check != EVAL_CHECK_NUMBER)
        return field_err(err, errlen, path, line, "tolerance", "only applies to check 'number'");
    if (tol && (!cJSON_IsNumber(tol) || !(tol->valuedouble >= 0) || !isfinite(tol->valuedouble)))
        return field_err(err, errlen, path, line, "tolerance", "not a finite number >= 0");
    it->tolerance = tol ? tol->valuedouble : 0.0;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    if (pat && it->check != EVAL_CHECK_REGEX)
        return field_err(err, errlen, path, line, "pattern", "only applies to check 'regex'");
    if (it->check != EVAL_CHECK_REGEX) return 0;
    if (!pat) return field_err(err, errlen, path, line, "pattern", "missing (check 'regex' needs one)");
    if (!cJSON_IsString(pat)) return field_err(err, errlen, path, line, "pattern", "not a string");
    int code = 0;
    PCRE2_SIZE off = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat->valuestring, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                   &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return field_err(err, errlen, path, line, "pattern", "bad regex at offset %zu: %s", (size_t)off, (const char *)msg);
    }
    it->re = re;
    return (it->pattern = strdup(pat->valuestring)) ? 0 : field_err(err, errlen, path, line, "pattern", "out of memory");
}

// answer: a string; for 'number' a JSON number or a numeric string; for 'choice' one letter A-Z;
// none for 'open'.
static int parse_answer(const cJSON *o, EvalItem *it, const char *path, int line, char *err, size_t errlen) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "answer");
    if (it->check == EVAL_CHECK_OPEN)
        return a ? field_err(err, errlen, path, line, "answer", "check 'open' has no answer") : 0;
    if (!a) return field_err(err, errlen, path, line, "answer", "missing");
    char buf[64];
    if (cJSON_IsNumber(a) && it->check == EVAL_CHECK_NUMBER) {
        if (!isfinite(a->valuedouble))  // 1e999 parses as infinity: no text is ever within tolerance of it
            return field_err(err, errlen, path, line, "answer", "not a finite number (check 'number')");
        snprintf(buf, sizeof buf, "%.17g", a->valuedouble);
        it->answer_num = a->valuedouble;
        return (it->answer = strdup(buf)) ? 0 : field_err(err, errlen, path, line, "answer", "out of memory");
    }
    if (!cJSON_IsString(a))
        return field_err(err, errlen, path, line, "answer", "not a string%s", it->check == EVAL_CHECK_NUMBER ? " or a number" : "");
    const char *s = a->valuestring;
    if (it->check == EVAL_CHECK_NUMBER) {
        char *end;
        errno = 0;
        it->answer_num = strtod(s, &end);
        if (end == s || *end || !isfinite(it->answer_num))
            return field_err(err, errlen, path, line, "answer", "'%.40s' is not a number (check 'number')", s);
    }
    if (it->check == EVAL_CHECK_CHOICE && !(s[0] >= 'A' && s[0] <= 'Z' && s[1] == 0))
        return field_err(err, errlen, path, line, "answer", "'%.40s' is not one letter A-Z (check 'choice')", s);
    return (it->answer = strdup(s)) ? 0 : field_err(err, errlen, path, line, "answer", "out of memory");
}

// An alphabet entry equals the answer: by value for 'number' ("7" and "7.0"), as bytes otherwise.
static int same_answer(const EvalItem *it, const char *entry) {
    if (it->check != EVAL_CHECK_NUMBER) return strcmp(entry, it->answer) == 0;
    char *end;
    const double v = strtod(entry, &end);
    return end != entry && !*end && v == it->answer_num;
}

// answer_cue: a non-empty string. answer_alphabet: 1..EVAL_MAX_ALPHABET distinct non-empty strings,
// holding the answer; required by 'word', none for 'open'. Returns 0 or -1.
static int parse_cue_alphabet(const cJSON *o, EvalItem *it, const char *path, int line, char *err, size_t errlen) {
    const cJSON *cue = cJSON_GetObjectItemCaseSensitive(o, "answer_cue");
    if (cue && (!cJSON_IsString(cue) || !cue->valuestring[0]))
        return field_err(err, errlen, path, line, "answer_cue", "not a non-empty string");
    if (cue && !(it->answer_cue = strdup(cue->valuestring))) return field_err(err, errlen, path, line, "answer_cue", "out of memory");
    const char *F = "answer_alphabet";
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, F);
    if (!a) return it->check == EVAL_CHECK_WORD ? field_err(err, errlen, path, line, F, "missing (check 'word' needs one)") : 0;
    if (it->check == EVAL_CHECK_OPEN) return field_err(err, errlen, path, line, F, "check 'open' has no answer");
    const int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n < 1 || n > EVAL_MAX_ALPHABET)
        return field_err(err, errlen, path, line, F, "not an array of 1..%d strings", EVAL_MAX_ALPHABET);
    if (!(it->answer_alphabet = calloc((size_t)n, sizeof *it->answer_alphabet))) return field_err(err, errlen, path, line, F, "out of memory");
    int has_answer = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsString(e) || !e->valuestring[0]) return field_err(err, errlen, path, line, F, "entry %d is not a non-empty string", i);
        for (int j = 0; j < i; j++)
            if (strcmp(it->answer_alphabet[j], e->valuestring) == 0)
                return field_err(err, errlen, path, line, F, "entry %d repeats entry %d ('%.40s')", i, j, e->valuestring);
        if (!(it->answer_alphabet[i] = strdup(e->valuestring))) return field_err(err, errlen, path, line, F, "out of memory");
        it->n_answer_alphabet = i + 1;
        has_answer |= same_answer(it, e->valuestring);
    }
    if (!has_answer) return field_err(err, errlen, path, line, F, "the answer '%.40s' is not one of its entries", it->answer);
    return 0;
}

// baselines: {"NAME": "ANSWER", ...}, 1..EVAL_MAX_BASELINES names of [a-z0-9-] (1..32 bytes),
// each a fixed answer the summary scores as row "baseline:NAME". Returns 0 or -1.
static int parse_baselines(const cJSON *o, EvalItem *it, const char *path, int line, char *err, size_t errlen) {
    const char *F = "baselines";
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, F);
    if (!b) return 0;
    if (it->check == EVAL_CHECK_OPEN) return field_err(err, errlen, path, line, F, "check 'open' has no answer");
    const int n = cJSON_IsObject(b) ? cJSON_GetArraySize(b) : -1;
    if (n < 1 || n > EVAL_MAX_BASELINES)
        return field_err(err, errlen, path, line, F, "not an object of 1..%d names", EVAL_MAX_BASELINES);
    it->baseline_names = calloc((size_t)n, sizeof *it->baseline_names);
    it->baseline_answers = calloc((size_t)n, sizeof *it->baseline_answers);
    if (!it->baseline_names || !it->baseline_answers) return field_err(err, errlen, path, line, F, "out of memory");
    for (const cJSON *e = b->child; e; e = e->next) {
        const size_t len = strlen(e->string);
        if (len < 1 || len > 32 || strspn(e->string, "abcdefghijklmnopqrstuvwxyz0123456789-") != len)
            return field_err(err, errlen, path, line, F, "name '%.40s' is not 1..32 of [a-z0-9-]", e->string);
        if (eval_item_baseline(it, e->string) >= 0) return field_err(err, errlen, path, line, F, "name '%.40s' given twice", e->string);
        if (!cJSON_IsString(e)) return field_err(err, errlen, path, line, F, "'%.40s': the answer is not a string", e->string);
        it->baseline_names[it->n_baselines] = strdup(e->string);
        it->baseline_answers[it->n_baselines] = strdup(e->valuestring);
        if (!it->baseline_names[it->n_baselines++] || !it->baseline_answers[it->n_baselines - 1])
            return field_err(err, errlen, path, line, F, "out of memory");
    }
    return 0;
}

int eval_item_baseline(const EvalItem *it, const char *name) {
    for (int k = 0; k < it->n_baselines; k++)
        if (it->baseline_names[k] && strcmp(it->baseline_names[k], name) == 0) return k;
    return -1;
}

static int parse_item(const cJSON *o, EvalItem *it, const char *family, const char *path, int line, char *err,
                      size_t errlen) {
    it->line = line;
    if (!cJSON_IsObject(o)) return field_err(err, errlen, path, line, NULL, "not a JSON object");
    for (const cJSON *f = o->child; f; f = f->next) {
        int known = 0;
        for (int k = 0; k < N_FIELDS; k++) known |= strcmp(f->string, known_fields[k]) == 0;
        if (!known)
            return field_err(err, errlen, path, line, f->string, "unknown field (" FIELD_LIST ")");
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!id) return field_err(err, errlen, path, line, "id", "missing");
    if (!cJSON_IsString(id) || !id->valuestring[0]) return field_err(err, errlen, path, line, "id", "not a non-empty string");
    if (opt_string(o, "id", &it->id, path, line, err, errlen) || opt_string(o, "family", &it->family, path, line, err, errlen))
        return -1;
    if (!it->family && !(it->family = strdup(family))) return field_err(err, errlen, path, line, "family", "out of memory");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt"), *m = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if ((p != NULL) == (m != NULL))
        return field_err(err, errlen, path, line, p ? "messages" : "prompt", "exactly one of 'prompt' and 'messages' is needed");
    if (p && opt_string(o, "prompt", &it->prompt, path, line, err, errlen)) return -1;
    if (m && parse_messages(m, it, path, line, err, errlen)) return -1;
    if (parse_check(o, it, path, line, err, errlen) || parse_answer(o, it, path, line, err, errlen)) return -1;
    if (parse_cue_alphabet(o, it, path, line, err, errlen) || parse_baselines(o, it, path, line, err, errlen)) return -1;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "max_tokens");
    it->max_tokens = 64;
    if (mt) {
        double v = cJSON_IsNumber(mt) ? mt->valuedouble : -1;
        if (!(v >= 1 && v <= EVAL_MAX_TOKENS_LIMIT && v == floor(v)))
            return field_err(err, errlen, path, line, "max_tokens", "not an integer in 1..%d", EVAL_MAX_TOKENS_LIMIT);
        it->max_tokens = (int)v;
    }
    return 0;
}

// The default family: the file's basename without ".jsonl".
static void default_family(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    size_t n = strlen(out);
    if (n > 6 && strcmp(out + n - 6, ".jsonl") == 0) out[n - 6] = 0;
}

// Whether the line [s, s+n), valid JSON, writes a NUL character (the escape \u0000) in a string:
// cJSON keeps such a string only up to it, so a prompt would silently lose its end. 1 with field
// set to the top-level key it is under (or the key that holds it), else 0.
static int nul_escape(const char *s, size_t n, char *field, size_t cap) {
    int depth = 0, in_str = 0, is_key = 0, expect_key = 0;
    size_t str_at = 0;
    field[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = s[i];
        if (in_str && ch == '\\' && i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0) {
            if (is_key) snprintf(field, cap, "%.*s", (int)(i - str_at), s + str_at);
            return 1;
        }
        if (in_str && ch == '\\') i++;  // the escaped byte cannot end the string
        else if (in_str && ch == '"') {
            in_str = 0;
            if (is_key) snprintf(field, cap, "%.*s", (int)(i - str_at), s + str_at);
        } else if (!in_str && ch == '"') {
            in_str = 1, is_key = depth == 1 && expect_key, str_at = i + 1;
        } else if (!in_str) {
            depth += (ch == '{' || ch == '[') - (ch == '}' || ch == ']');
            if ((ch == '{' && depth == 1) || (ch == ',' && depth == 1)) expect_key = 1;
            if (ch == ':' && depth == 1) expect_key = 0;
        }
    }
    return 0;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// One line [s, s+n) of the file: blank, or an item appended to tf. Returns 0 or -1.
static int load_line(EvalTaskFile *tf, const char *s, size_t n, int line, const char *family, char *err, size_t errlen) {
    if (is_blank(s, n)) return 0;
    if (memchr(s, 0, n)) return field_err(err, errlen, tf->path, line, NULL, "a NUL byte in the line");
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, 0);
    if (!o || !is_blank(end, n - (size_t)(end - s))) {
        cJSON_Delete(o);
        return field_err(err, errlen, tf->path, line, NULL, "not a JSON object (one per line)");
    }
    char field[64];
    if (nul_escape(s, n, field, sizeof field)) {
        cJSON_Delete(o);
        return field_err(err, errlen, tf->path, line, field, "holds a NUL character (U+0000), which would cut the text");
    }
    EvalItem *grown = realloc(tf->items, (size_t)(tf->n + 1) * sizeof *grown);
    if (!grown) {
        cJSON_Delete(o);
        return field_err(err, errlen, tf->path, line, NULL, "out of memory");
    }
    tf->items = grown;
    EvalItem *it = &tf->items[tf->n++];
    memset(it, 0, sizeof *it);
    it->file = tf->path;
    int rc = parse_item(o, it, family, tf->path, line, err, errlen);
    cJSON_Delete(o);
    if (rc) return -1;
    for (int i = 0; i < tf->n - 1; i++)
        if (strcmp(tf->items[i].id, it->id) == 0 && strcmp(tf->items[i].family, it->family) == 0)
            return field_err(err, errlen, tf->path, line, "id", "'%.60s' repeats line %d's", it->id, tf->items[i].line);
    return 0;
}

int eval_tasks_load(const char *path, EvalTaskFile *tf, char *err, size_t errlen) {
    memset(tf, 0, sizeof *tf);
    size_t len = 0;
    char *text = emx_read_file(path, &len);
    if (!text) return emx_seterr(err, errlen, "%s: %s", path, strerror(errno));
    tf->path = strdup(path);
    char family[256];
    default_family(path, family, sizeof family);
    int rc = 0, line = 1;
    for (size_t at = 0; at < len && rc == 0; line++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (n > EVAL_MAX_LINE_BYTES)  // refused unparsed: a 20 MB prompt would be tokenized before the context check
            rc = field_err(err, errlen, path, line, NULL, "the line is %zu bytes; a task line is at most %d", n,
                           EVAL_MAX_LINE_BYTES);
        else rc = load_line(tf, text + at, n, line, family, err, errlen);
        at += n + 1;
    }
    free(text);
    if (rc == 0 && tf->n == 0) rc = emx_seterr(err, errlen, "%s: no items", path);
    if (rc) eval_tasks_free(tf);
    return rc;
}

typedef struct {
    const EvalItem *it;
    int k;  // its place in the run's order
} Keyed;

static int keyed_cmp(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    int d = strcmp(x->it->family, y->it->family);
    if (!d) d = strcmp(x->it->id, y->it->id);
    return d ? d : x->k - y->k;
}

int eval_items_unique(const EvalItem *const *items, int n_items, char *err, size_t errlen) {
    Keyed *v = malloc((size_t)(n_items > 0 ? n_items : 1) * sizeof *v);
    if (!v) return emx_seterr(err, errlen, "the task items: out of memory");
    for (int i = 0; i < n_items; i++) v[i] = (Keyed){items[i], i};
    qsort(v, (size_t)n_items, sizeof *v, keyed_cmp);
    int rc = 0;
    for (int i = 1; i < n_items && rc == 0; i++) {
        const EvalItem *x = v[i - 1].it, *y = v[i].it;  // y comes later in the run
        if (strcmp(x->family, y->family) == 0 && strcmp(x->id, y->id) == 0)
            rc = field_err(err, errlen, y->file, y->line, "id", "'%.60s' of family '%.60s' repeats %.200s:%d's (a result "
                           "is known by family and id)", y->id, y->family, x->file, x->line);
    }
    free(v);
    return rc;
}

void eval_tasks_free(EvalTaskFile *tf) {
    for (int i = 0; i < tf->n; i++) {
        EvalItem *it = &tf->items[i];
        free(it->id);
        free(it->family);
        free(it->prompt);
        free(it->system);
        free(it->answer);
        free(it->pattern);
        pcre2_code_free((pcre2_code *)it->re);
        free(it->answer_cue);
        for (int k = 0; k < it->n_answer_alphabet; k++) free(it->answer_alphabet[k]);
        free(it->answer_alphabet);
        for (int k = 0; k < it->n_baselines; k++) free(it->baseline_names[k]), free(it->baseline_answers[k]);
        free(it->baseline_names);
        free(it->baseline_answers);
    }
    free(tf->items);
    free(tf->path);
    memset(tf, 0, sizeof *tf);
}
