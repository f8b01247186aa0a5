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

int eval_last_number(const char *text, double *value, char *out, size_t outlen) {
    int found = 0;
    char buf[128];
    for (size_t i = 0; text[i];) {
        if (!is_digit(text[i])) {
            i++;
            continue;
        }
        size_t n = 0;
        // a sign right before the digits counts unless it joins two words ("3-5", "x-2")
        if (i > 0 && (text[i - 1] == '-' || text[i - 1] == '+') && (i < 2 || !is_alnum(text[i - 2])))
            if (text[i - 1] == '-') buf[n++] = '-';
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

int eval_choice_letter(const char *text) {
    const char *a = find_ci(text, "answer:", 1);
    if (a) {
        a += 7;
        while (*a == ' ' || *a == '\t' || *a == '\n' || *a == '\r') a++;
        if (*a == '(') a++;
        if (isalpha((unsigned char)*a)) return toupper((unsigned char)*a);
    }
    // "B", "(B)", "B)": a capital A-E with no letter or digit either side
    for (size_t i = 0; text[i]; i++)
        if (text[i] >= 'A' && text[i] <= 'E' && (i == 0 || !is_alnum(text[i - 1])) && !is_alnum(text[i + 1]))
            return text[i];
    return 0;
}

static char *trim_exact(const char *text) {
    const char *s = text, *e = text + strlen(text);
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    if (e > s && e[-1] == '.') e--;  // one trailing period: "Paris."
    return strndup(s, (size_t)(e - s));
}

static int check_regex(const EvalItem *it, const char *text, char **extracted) {
    pcre2_code *re = it->re;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)text, strlen(text), 0, 0, md, NULL);
    if (rc > 0) {
        uint32_t groups = 0;
        pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &groups);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int g = groups >= 1 ? 1 : 0;  // group 1, or the whole match when there are no groups
        if (g < rc && ov[2 * g] != PCRE2_UNSET) *extracted = strndup(text + ov[2 * g], ov[2 * g + 1] - ov[2 * g]);
    }
    pcre2_match_data_free(md);
    return *extracted && strcmp(*extracted, it->answer) == 0;
}

int eval_check(const EvalItem *it, const char *text, char **extracted) {
    *extracted = NULL;
    switch (it->check) {
    case EVAL_CHECK_NUMBER: {
        char buf[128];
        double v;
        if (!eval_last_number(text, &v, buf, sizeof buf)) return 0;
        *extracted = strndup(buf, strlen(buf));
        return fabs(v - it->answer_num) <= it->tolerance + 1e-9;
    }
    case EVAL_CHECK_EXACT:
        *extracted = trim_exact(text);
        return *extracted && strcasecmp(*extracted, it->answer) == 0;
    case EVAL_CHECK_CHOICE: {
        int c = eval_choice_letter(text);
        if (!c) return 0;
        char s[2] = {(char)c, 0};
        *extracted = strndup(s, 1);
        return c == it->answer[0];
    }
    case EVAL_CHECK_REGEX:
        return check_regex(it, text, extracted);
    case EVAL_CHECK_CONTAINS:
        if (!find_ci(text, it->answer, 0)) return 0;
        *extracted = strndup(it->answer, strlen(it->answer));
        return 1;
    }
    return 0;
}
