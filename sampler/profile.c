// profile.c — the built-in profiles and the `key = value` text form (profile.h).
//
// One table lists every EmxProfile field with its type and allowed range; parsing, writing and
// the tests all go through it, so a field added to the struct needs one line here.
#include "sampler/profile.h"
#include "base/errmsg.h"

#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum field_type { F_DOUBLE, F_INT, F_LAYER, F_AVENT };

typedef struct {
    const char *key;
    enum field_type type;
    size_t offset;
    double lo, hi;  // allowed range (F_DOUBLE, F_INT)
} Field;

#define D(name, lo, hi) {#name, F_DOUBLE, offsetof(EmxProfile, name), lo, hi}
#define I(name, lo, hi) {#name, F_INT, offsetof(EmxProfile, name), lo, hi}
#define BIG 1e9
#define P(name) D(name, 0.0, 1.0)  // a probability

static const Field fields[] = {
    {"attn_layer", F_LAYER, offsetof(EmxProfile, attn_layer), 0, 0},
    {"attn_varentropy_def", F_AVENT, offsetof(EmxProfile, attn_varentropy_def), 0, 0},
    D(temperature, 0.0, 100.0), I(top_k, 0, 1000000), P(top_p), P(min_p), D(temp_max, 0.0, 100.0),
    D(lelv_entropy_below, -BIG, BIG), D(lelv_varentropy_below, -BIG, BIG),
    D(helv_entropy_above, -BIG, BIG), D(helv_varentropy_below, -BIG, BIG),
    I(helv_insert_pause, 0, 1), I(pause_token_id, -1, 1e8),
    D(helv_temp_base, -BIG, BIG), D(helv_temp_attn_entropy, -BIG, BIG),
    D(helv_temp_max, 0.0, 100.0), I(helv_n_samples, 1, 1024),
    D(lehv_entropy_below, -BIG, BIG), D(lehv_varentropy_above, -BIG, BIG),
    D(lehv_temp_base, -BIG, BIG), D(lehv_temp_interaction, -BIG, BIG),
    D(lehv_temp_max, 0.0, 100.0), D(lehv_top_k_disagreement, -BIG, BIG),
    I(lehv_top_k_min, 0, 1000000), I(lehv_n_samples, 1, 1024),
    D(hehv_entropy_above, -BIG, BIG), D(hehv_varentropy_above, -BIG, BIG),
    D(hehv_temp_base, -BIG, BIG), D(hehv_temp_attn_varentropy, -BIG, BIG),
    D(hehv_temp_min, 0.0, 100.0), D(hehv_top_p_attn_entropy, -BIG, BIG),
    P(hehv_top_p_min), I(hehv_n_samples, 1, 1024),
    D(ada_temp_logits_unc, -BIG, BIG), D(ada_temp_attn_unc, -BIG, BIG),
    D(ada_temp_agreement, -BIG, BIG), D(ada_top_p_attn_varentropy, -BIG, BIG),
    P(ada_top_p_min), P(ada_top_p_max),
    D(ada_top_k_interaction, -BIG, BIG), D(ada_top_k_agreement, -BIG, BIG),
    I(ada_top_k_min, 0, 1000000), I(ada_top_k_max, 0, 1000000),
    D(ada_min_p_logits_unc, -BIG, BIG), P(ada_min_p_min), P(ada_min_p_max),
    I(ada_n_samples, 1, 1024), D(ada_score_typicality, -BIG, BIG),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

void emx_profile_classic(EmxProfile *p) {
    *p = (EmxProfile){
        .attn_layer = EMX_ATTN_LAYER_LAST,
        .attn_varentropy_def = EMX_ATTN_VARENTROPY_HEADS,
        .temperature = 0.666, .top_k = 27, .top_p = 0.90, .min_p = 0.03, .temp_max = 0.0,
        .lelv_entropy_below = 0.1, .lelv_varentropy_below = 0.1,
        .helv_entropy_above = 5.0, .helv_varentropy_below = 0.1,
        .helv_insert_pause = 1, .pause_token_id = -1,
        .helv_temp_base = 1.3, .helv_temp_attn_entropy = 0.2, .helv_temp_max = 1.5,
        .helv_n_samples = 1,
        .lehv_entropy_below = 5.0, .lehv_varentropy_above = 5.0,
        .lehv_temp_base = 1.2, .lehv_temp_interaction = 0.3, .lehv_temp_max = 1.5,
        .lehv_top_k_disagreement = 0.5, .lehv_top_k_min = 5, .lehv_n_samples = 1,
        .hehv_entropy_above = 3.0, .hehv_varentropy_above = 5.0,
        .hehv_temp_base = 2.0, .hehv_temp_attn_varentropy = 0.5, .hehv_temp_min = 2.0,
        .hehv_top_p_attn_entropy = 0.2, .hehv_top_p_min = 0.5, .hehv_n_samples = 1,
        .ada_temp_logits_unc = 0.3, .ada_temp_attn_unc = 0.2, .ada_temp_agreement = 0.2,
        .ada_top_p_attn_varentropy = 0.1, .ada_top_p_min = 0.1, .ada_top_p_max = 1.0,
        .ada_top_k_interaction = 0.3, .ada_top_k_agreement = 0.2,
        .ada_top_k_min = 1, .ada_top_k_max = 100,
        .ada_min_p_logits_unc = 0.5, .ada_min_p_min = 0.01, .ada_min_p_max = 0.5,
        .ada_n_samples = 5, .ada_score_typicality = 2.0,
    };
}

// masked-bits: classic with the attention-fed coefficients rescaled for masked attention.
// The sources' constants were set with scores over a zero-padded 4096-slot cache, where every
// head's entropy is ≈ log2 4096 ≈ 11.9 bits, their spread across heads ≈ 0, agreement ≈ 1e-6
// and interaction strength ≈ 0.2 (docs/entropix.md). Our metrics are masked to the valid
// keys. Measured with SmolLM2-135M-Instruct (q8; 391 teacher-forced positions of English prose
// and 200 generated tokens; medians): attention entropy ≈ 3.3 bits, spread across heads ≈ 1.1,
// agreement ≈ 0.005, interaction strength ≈ 2.5. (The logits metrics H, V do not depend on
// masking, so the thresholds stay.) Each coefficient c on an attention metric x becomes
// c·x_padded/x_masked, so every formula gives at the typical masked values what it gave at the
// typical padded ones, i.e. the behaviour the sources' constants were tuned for; a term whose
// metric was ≈ 0 under padding (the spread across heads) is switched off rather than switched
// on by masking. Agreement terms stay: ≈ 0 in both conventions.
static void profile_masked_bits(EmxProfile *p) {
    emx_profile_classic(p);
    p->helv_temp_attn_entropy = 0.72;     // 0.2 · 11.9/3.3: T stays at its 1.5 cap, as sourced
    p->lehv_temp_interaction = 0.024;     // 0.3 · 0.2/2.5: T ≈ 0.84, not 1.30
    p->hehv_temp_attn_varentropy = 0.0;   // spread across heads was ≈ 0: T = its 2.0 floor
    p->hehv_top_p_attn_entropy = 0.72;    // 0.2 · 11.9/3.3: top_p at its 0.5 floor, as sourced
    p->ada_temp_attn_unc = 0.54;          // 0.2 · (11.9 + 0)/(3.3 + 1.1)
    p->ada_top_p_attn_varentropy = 0.0;   // was ≈ 0: top_p stays 0.9 instead of 1 (off)
    p->ada_top_k_interaction = 0.024;     // 0.3 · 0.2/2.5: top_k ≈ 29, not 47
}

// measured: classic's switch, thresholds and case formulas, with what the evaluation of
// docs/eval.md changed (SmolLM2-135M-Instruct; docs/entropix.md "The default profile"). Classic
// sampled most steps of that model at T ≈ 1.3 (LEHV) to 2 (HEHV) and ≈ 4.7 (ADAPTIVE, calibrated),
// one draw, and its best-of-N score preferred a less likely draw whenever the entropy exceeded the
// top token's surprisal: at the few tokens that decide a short answer (the reply's first word,
// the answer itself: 3-5 bits, a leader at p ≈ 0.2-0.3 and a runner-up at half of it) it
// re-rolled what greedy keeps, and answered 0.155 where greedy answered 0.364. Here:
//   - no case samples hotter than the model's own distribution (temp_max = 1);
//   - every sampling case takes the most likely of 5 draws (n_samples 5, score weight w = 0):
//     a leader is kept almost always (a runner-up at half its probability wins only when all
//     five draws miss the leader: ≈ 4%), while among near-equal candidates the draws still
//     spread (four equal tokens: the first of them 76%), so the text explores where the model
//     has no preference and commits where it has one;
//   - the min-p gate of every case is 0.1 of the top token's probability (classic: 0.03, and
//     ADAPTIVE lowered it to 0.01 at high uncertainty), so the tail never enters a draw.
static void profile_measured(EmxProfile *p) {
    emx_profile_classic(p);
    p->temp_max = 1.0;
    p->min_p = 0.1;
    p->ada_min_p_logits_unc = 0.0;  // ADAPTIVE keeps the base gate at any uncertainty
    p->ada_min_p_min = 0.0;
    p->ada_min_p_max = 1.0;
    p->helv_n_samples = p->lehv_n_samples = p->hehv_n_samples = p->ada_n_samples = 5;
    p->ada_score_typicality = 0.0;  // the most likely of the draws
}

int emx_profile_builtin(EmxProfile *p, const char *name) {
    if (strcmp(name, "measured") == 0) {
        profile_measured(p);
        return 0;
    }
    if (strcmp(name, "classic") == 0) {
        emx_profile_classic(p);
        return 0;
    }
    if (strcmp(name, "masked-bits") == 0) {
        profile_masked_bits(p);
        return 0;
    }
    return -1;
}

static const Field *find_field(const char *key) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(fields[i].key, key) == 0) return &fields[i];
    return NULL;
}

// Parses the whole of `value` as the field's type; 0 or -1 (bad value).
static int parse_value(const Field *f, const char *value, EmxProfile *p) {
    char *end = NULL;
    void *dst = (char *)p + f->offset;
    if (f->type == F_AVENT) {
        if (strcmp(value, "heads") == 0) *(int *)dst = EMX_ATTN_VARENTROPY_HEADS;
        else if (strcmp(value, "true") == 0) *(int *)dst = EMX_ATTN_VARENTROPY_TRUE;
        else return -1;
        return 0;
    }
    if (f->type == F_LAYER) {
        if (strcmp(value, "last") == 0) *(int *)dst = EMX_ATTN_LAYER_LAST;
        else if (strcmp(value, "all") == 0) *(int *)dst = EMX_ATTN_LAYERS_ALL;
        else {
            errno = 0;
            long v = strtol(value, &end, 10);
            if (*value == 0 || *end || errno || v < 0 || v > 100000) return -1;
            *(int *)dst = (int)v;
        }
        return 0;
    }
    errno = 0;
    if (f->type == F_INT) {
        long v = strtol(value, &end, 10);
        if (*value == 0 || *end || errno || v < f->lo || v > f->hi) return -1;
        *(int *)dst = (int)v;
    } else {
        double v = strtod(value, &end);
        // strtod flags ERANGE for a subnormal result too: keep it (emx_profile_write writes one
        // back as e.g. 5e-324, which must read back); underflow to 0 and overflow stay errors.
        int range_err = errno && !(errno == ERANGE && fpclassify(v) == FP_SUBNORMAL);
        if (*value == 0 || *end || range_err || !isfinite(v) || v < f->lo || v > f->hi) return -1;
        *(double *)dst = v;
    }
    return 0;
}

static void describe_type(const Field *f, char *buf, size_t cap) {
    switch (f->type) {
    case F_AVENT: snprintf(buf, cap, "heads or true"); break;
    case F_LAYER: snprintf(buf, cap, "last, all or a layer index"); break;
    case F_INT: snprintf(buf, cap, "an integer in [%.0f, %.0f]", f->lo, f->hi); break;
    case F_DOUBLE: snprintf(buf, cap, "a number in [%g, %g]", f->lo, f->hi); break;
    }
}

// Shared by set and parse: `where` prefixes the error ("file:3: " or "").
static int set_field(EmxProfile *p, const char *key, const char *value, const char *where,
                     char *err, size_t errlen) {
    const Field *f = find_field(key);
    if (!f) {
        emx_seterr(err, errlen, "%sunknown key '%s'", where, key);
        return -1;
    }
    if (parse_value(f, value, p) != 0) {
        char expect[64];
        describe_type(f, expect, sizeof expect);
        emx_seterr(err, errlen, "%sbad value '%s' for %s (%s)", where, value, key, expect);
        return -1;
    }
    return 0;
}

int emx_profile_set(EmxProfile *p, const char *key, const char *value, char *err, size_t errlen) {
    return set_field(p, key, value, "", err, errlen);
}

// Trims spaces at both ends of the string s in place; returns the new start.
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

int emx_profile_parse(EmxProfile *p, const char *text, size_t len, const char *source, char *err,
                      size_t errlen) {
    char line[512], where[300];
    int line_no = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        line_no++;
        snprintf(where, sizeof where, "%s:%d: ", source, line_no);
        if (j - i >= sizeof line) {
            emx_seterr(err, errlen, "%sline longer than %zu bytes", where, sizeof line - 1);
            return -1;
        }
        if (memchr(text + i, 0, j - i)) {
            emx_seterr(err, errlen, "%sNUL byte in line", where);
            return -1;
        }
        memcpy(line, text + i, j - i);
        line[j - i] = 0;
        i = j + 1;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (*s == 0) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            emx_seterr(err, errlen, "%sexpected 'key = value', got '%s'", where, s);
            return -1;
        }
        *eq = 0;
        if (set_field(p, trim(s), trim(eq + 1), where, err, errlen) != 0) return -1;
    }
    return 0;
}

int emx_profile_load(EmxProfile *p, const char *name_or_path, char *err, size_t errlen) {
    if (emx_profile_builtin(p, name_or_path) == 0) return 0;
    FILE *f = fopen(name_or_path, "rb");
    if (!f) {
        emx_seterr(err, errlen,
                 "no profile '%s': not a built-in name (measured, classic, masked-bits) nor a readable file",
                 name_or_path);
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {  // fopen opens one; its read fails
        emx_seterr(err, errlen, "profile %s: is a directory, not a profile file", name_or_path);
        fclose(f);
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int rc = -1;
    if (!buf) {
        emx_seterr(err, errlen, "%s: out of memory", name_or_path);
    } else {
        errno = 0;
        len = fread(buf, 1, cap, f);
        if (ferror(f)) emx_seterr(err, errlen, "profile %s: %s", name_or_path, strerror(errno ? errno : EIO));
        else if (len == cap) emx_seterr(err, errlen, "%s: larger than %zu bytes", name_or_path, cap);
        else {
            emx_profile_classic(p);
            rc = emx_profile_parse(p, buf, len, name_or_path, err, errlen);
        }
    }
    free(buf);
    fclose(f);
    return rc;
}

// The shortest %g form that reads back as exactly v (0.666, not 0.66600000000000004).
static void write_double(FILE *f, const char *key, double v) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fprintf(f, "%s = %s\n", key, buf);
}

void emx_profile_write(FILE *f, const EmxProfile *p) {
    for (size_t i = 0; i < N_FIELDS; i++) {
        const Field *fd = &fields[i];
        const void *src = (const char *)p + fd->offset;
        if (fd->type == F_DOUBLE) {
            write_double(f, fd->key, *(const double *)src);
            continue;
        }
        int iv = *(const int *)src;  // every other type is an int field
        switch (fd->type) {
        case F_DOUBLE: break;
        case F_INT: fprintf(f, "%s = %d\n", fd->key, iv); break;
        case F_AVENT:
            fprintf(f, "%s = %s\n", fd->key, iv == EMX_ATTN_VARENTROPY_TRUE ? "true" : "heads");
            break;
        case F_LAYER:
            if (iv == EMX_ATTN_LAYER_LAST) fprintf(f, "%s = last\n", fd->key);
            else if (iv == EMX_ATTN_LAYERS_ALL) fprintf(f, "%s = all\n", fd->key);
            else fprintf(f, "%s = %d\n", fd->key, iv);
            break;
        }
    }
}
