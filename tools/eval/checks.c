// checks.c — extraction and comparison for each check kind (checks.h).
#include "tools/eval/checks.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alnum(char c) { return isalnum((unsigned char)c) != 0; }

static void set_span(EvalSpan *span, size_t start, size_t end) {
    if (span) *span = (EvalSpan){.found = 1, .start = start, .end = end};
}

int eval_last_number(const char *text, double *value, char *out, size_t outlen) {
    return eval_last_number_at(text, value, out, outlen, NULL);
}

int eval_last_number_at(const char *text, double *value, char *out, size_t outlen, EvalSpan *span) {
    int found = 0;
    char buf[128];
    if (span) span->found = 0;
    for (size_t i = 0; text[i];) {
        if (!is_digit(text[i])) {
            i++;
            continue;
        }
        size_t n = 0, start = i;
        // a sign right before the digits counts unless it joins two words ("3-5", "x-2")
        if (i > 0 && (text[i - 1] == '-' || text[i - 1] == '+') && (i < 2 || !is_alnum(text[i - 2]))) {
            if (text[i - 1] == '-') buf[n++] = '-';
            start = i - 1;
        }
        while (is_digit(text[i])) {
            if (n < sizeof buf - 2) buf[n++] = text[i];
            i++;
            // "1,234,567": a comma followed by exactly three digits continues the number
            if (text[i] == ',' && is_digit(text[i + 1]) && is_digit(text[i + 2]) && is_digit(text[i + 3]) &&
                !is_digit(text[i + 4]) && n < sizeof buf - 5) {
                memcpy(buf + n, text + i + 1, 3);
                n += 3;
                i += 4;
                while (text[i] == ',' && is_digit(text[i + 1]) && is_digit(text[i + 2]) && is_digit(text[i + 3]) &&
                       !is_digit(text[i + 4]) && n < sizeof buf - 5) {
                    memcpy(buf + n, text + i + 1, 3);
                    n += 3;
                    i += 4;
                }
                break;
            }
        }
        if (text[i] == '.' && is_digit(text[i + 1])) {
            if (n < sizeof buf - 2) buf[n++] = '.';
            for (i++; is_digit(text[i]); i++)
                if (n < sizeof buf - 1) buf[n++] = text[i];
        }
        buf[n] = 0;
        *value = strtod(buf, NULL);
        snprintf(out, outlen, "%s", buf);
        set_span(span, start, i);
        found = 1;
    }
    return found;
}

// Case-insensitive (ASCII) search: the last occurrence of needle in hay, or NULL.
static const char *find_ci(const char *hay, const char *needle, int last) {
    size_t n = strlen(needle);
    const char *hit = NULL;
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0) {
            hit = p;
            if (!last) break;
        }
    return hit;
}

int eval_choice_letter(const char *text) { return eval_choice_letter_at(text, NULL); }

int eval_choice_letter_at(const char *text, EvalSpan *span) {
    if (span) span->found = 0;
    const char *a = find_ci(text, "answer:", 1);
    if (a) {
        a += 7;
        while (*a == ' ' || *a == '\t' || *a == '\n' || *a == '\r') a++;
        if (*a == '(') a++;
        if (isalpha((unsigned char)*a)) {
            set_span(span, (size_t)(a - text), (size_t)(a - text) + 1);
            return toupper((unsigned char)*a);
        }
    }
    // "B", "(B)", "B)": a capital A-E with no letter or digit either side
    for (size_t i = 0; text[i]; i++)
        if (text[i] >= 'A' && text[i] <= 'E' && (i == 0 || !is_alnum(text[i - 1])) && !is_alnum(text[i + 1])) {
            set_span(span, i, i + 1);
            return text[i];
        }
    return 0;
}

int eval_first_word(const char *text, char *const *alphabet, int n, EvalSpan *span) {
    if (span) span->found = 0;
    for (size_t i = 0; text[i]; i++) {
        if (i > 0 && is_alnum(text[i - 1])) continue;  // a word starts here or nowhere
        int best = -1;
        size_t best_len = 0;
        for (int k = 0; k < n; k++) {
            const size_t len = strlen(alphabet[k]);
            if (len > best_len && strncasecmp(text + i, alphabet[k], len) == 0 && !is_alnum(text[i + len]))
                best = k, best_len = len;
        }
        if (best >= 0) {
            set_span(span, i, i + best_len);
            return best;
        }
    }
    return -1;
}

static char *trim_exact(const char *text, EvalSpan *span) {
    const char *s = text, *e = text + strlen(text);
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    if (e > s && e[-1] == '.') e--;  // one trailing period: "Paris."
    if (e > s) set_span(span, (size_t)(s - text), (size_t)(e - text));
    return strndup(s, (size_t)(e - s));
}

static int check_regex(const EvalItem *it, const char *text, char **extracted, EvalSpan *span) {
    pcre2_code *re = it->re;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)text, strlen(text), 0, 0, md, NULL);
    if (rc > 0) {
        uint32_t groups = 0;
        pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &groups);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int g = groups >= 1 ? 1 : 0;  // group 1, or the whole match when there are no groups
        if (g < rc && ov[2 * g] != PCRE2_UNSET) {
            *extracted = strndup(text + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
            if (ov[2 * g + 1] > ov[2 * g]) set_span(span, ov[2 * g], ov[2 * g + 1]);
        }
    }
    pcre2_match_data_free(md);
    return *extracted && strcmp(*extracted, it->answer) == 0;
}

int eval_check(const EvalItem *it, const char *text, char **extracted) {
    EvalSpan span;
    return eval_check_at(it, text, extracted, &span);
}

int eval_check_at(const EvalItem *it, const char *text, char **extracted, EvalSpan *span) {
    *extracted = NULL;
    span->found = 0;
    switch (it->check) {
    case EVAL_CHECK_NUMBER: {
        char buf[128];
        double v;
        if (!eval_last_number_at(text, &v, buf, sizeof buf, span)) return 0;
        *extracted = strndup(buf, strlen(buf));
        return fabs(v - it->answer_num) <= it->tolerance + 1e-9;
    }
    case EVAL_CHECK_EXACT:
        *extracted = trim_exact(text, span);
        return *extracted && strcasecmp(*extracted, it->answer) == 0;
    case EVAL_CHECK_CHOICE: {
        int c = eval_choice_letter_at(text, span);
        if (!c) return 0;
        char s[2] = {(char)c, 0};
        *extracted = strndup(s, 1);
        return c == it->answer[0];
    }
    case EVAL_CHECK_REGEX:
        return check_regex(it, text, extracted, span);
    case EVAL_CHECK_CONTAINS: {
        const char *hit = find_ci(text, it->answer, 0);
        if (!hit) return 0;
        set_span(span, (size_t)(hit - text), (size_t)(hit - text) + strlen(it->answer));
        *extracted = strndup(it->answer, strlen(it->answer));
        return 1;
    }
    case EVAL_CHECK_WORD: {
        const int k = eval_first_word(text, it->answer_alphabet, it->n_answer_alphabet, span);
        if (k < 0) return 0;
        *extracted = strdup(it->answer_alphabet[k]);
        return strcmp(it->answer_alphabet[k], it->answer) == 0;
    }
    }
    return 0;  // EVAL_CHECK_OPEN: nothing to extract
}
