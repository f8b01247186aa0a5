// results.c — the results file: reading it back, appending to it (results.h).
#include "tools/eval/results.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "base/file_lock.h"
#include "base/out_file.h"
#include "base/read_file.h"
#include "tools/eval/checks.h"
#include "tools/eval/textstats.h"

static int push(EvalResults *rs, const EvalResult *r) {
    if (rs->n == rs->cap) {
        int cap = rs->cap ? rs->cap * 2 : 64;
        EvalResult *g = realloc(rs->r, (size_t)cap * sizeof *g);
        if (!g) return -1;
        rs->r = g;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *r;
    return 0;
}

static const char *str_field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_field(const cJSON *o, const char *k, double absent) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : absent;
}

// A result with nothing recorded beyond the always-present fields.
static EvalResult blank_result(void) {
    return (EvalResult){.answer_margin = NAN, .mean_entropy_bits = NAN, .mean_logprob_nats = NAN, .n_not_argmax = -1,
                        .oracle = -1, .repetition_loop = -1, .distinct_1 = NAN, .distinct_2 = NAN};
}

// The optional recorded fields of a stored line (absent: left as blank_result has them).
static void load_measures(const cJSON *o, EvalResult *r) {
    r->answer_margin = num_field(o, "answer_margin", NAN);
    r->mean_entropy_bits = num_field(o, "mean_entropy_bits", NAN);
    r->mean_logprob_nats = num_field(o, "mean_logprob_nats", NAN);
    r->n_not_argmax = (long)num_field(o, "n_not_argmax", -1);
    r->n_paths = (int)num_field(o, "n_paths", 0);
    const cJSON *oracle = cJSON_GetObjectItemCaseSensitive(o, "oracle"), *loop = cJSON_GetObjectItemCaseSensitive(o, "repetition_loop");
    r->oracle = r->n_paths > 0 && cJSON_IsBool(oracle) ? cJSON_IsTrue(oracle) : -1;
    r->repetition_loop = cJSON_IsBool(loop) ? cJSON_IsTrue(loop) : -1;
    r->distinct_1 = num_field(o, "distinct_1", NAN);
    r->distinct_2 = num_field(o, "distinct_2", NAN);
}

// One stored line [s, s+n) into rs. Returns 0, 1 (not a result line) or -1 (another model: its
// path into other_model[0..cap)).
static int load_line(EvalResults *rs, const char *s, size_t n, char *other_model, size_t cap) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    const char *model = str_field(o, "model"), *fam = str_field(o, "family"), *id = str_field(o, "id"),
               *cfg = str_field(o, "config");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed"), *ok = cJSON_GetObjectItemCaseSensitive(o, "correct");
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(o, "n_tokens"), *t = cJSON_GetObjectItemCaseSensitive(o, "time_s");
    int rc = 1;
    if (model && fam && id && cfg && cJSON_IsNumber(seed) && seed->valuedouble >= 0 && (cJSON_IsBool(ok) || cJSON_IsNull(ok)) &&
        cJSON_IsNumber(nt) && cJSON_IsNumber(t)) {
        if (strcmp(model, rs->model) != 0) {
            snprintf(other_model, cap, "%s", model);
            rc = -1;
        } else {
            EvalResult r = blank_result();
            r.family = strdup(fam), r.id = strdup(id), r.config = strdup(cfg), r.seed = (uint64_t)seed->valuedouble;
            r.correct = cJSON_IsNull(ok) ? -1 : cJSON_IsTrue(ok);
            r.n_tokens = (int)nt->valuedouble, r.time_s = t->valuedouble;
            load_measures(o, &r);
            const cJSON *cases = cJSON_GetObjectItemCaseSensitive(o, "cases");
            for (int c = 0; c < EMX_CASE_COUNT; c++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(cases, emx_case_name((EmxCase)c));
                r.cases[c] = cJSON_IsNumber(v) ? (long)v->valuedouble : 0;
            }
            rc = r.family && r.id && r.config && push(rs, &r) == 0 ? 0 : 1;
        }
    }
    cJSON_Delete(o);
    return rc;
}

// The existing file's lines. *keep: the bytes to keep (a partial last line is not). Returns 0 or -1.
static int load_existing(EvalResults *rs, const char *text, size_t len, size_t *keep, char *err, size_t errlen) {
    int line = 1;
    *keep = len;
    for (size_t at = 0; at < len; line++) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        char other[256] = "";
        int rc = n == 0 ? 0 : load_line(rs, text + at, n, other, sizeof other);
        if (rc == 1 && !nl) {  // killed mid-write: the last line has no newline and does not parse
            fprintf(stderr, "eval: warning: %s:%d: dropping an incomplete last line (%zu bytes; a run killed while writing it)\n",
                    rs->path, line, n);
            *keep = at;
            return 0;
        }
        if (rc == 1) return emx_seterr(err, errlen, "%s:%d: not an eval result line", rs->path, line);
        if (rc == -1)
            return emx_seterr(err, errlen, "%s:%d: a result of model '%s', this run's is '%s' (use another -o)", rs->path,
                              line, other, rs->model);
        if (!nl) *keep = len + 1;  // complete but unterminated: the newline is added before appending
        at += n + 1;
    }
    return 0;
}

// Opens -o for appending (created if missing) and locks it: a second eval on the same file
// would read the same results, redo the same generations and interleave its lines with ours.
// Returns 0 or -1 (said in err; nothing read or changed).
static int open_locked(EvalResults *rs, char *err, size_t errlen) {
    EmxOut out;  // appended to, opened in place (base/out_file.h)
    char why[512];
    if (emx_out_open(&out, rs->path, EMX_OUT_APPEND, why, sizeof why) != 0) return emx_seterr(err, errlen, "-o %s", why);
    rs->f = out.f;
    long holder = 0;
    const int held = emx_file_lock(fileno(rs->f), &holder);
    if (held == 1 && holder > 0)
        return emx_seterr(err, errlen, "-o %s: another eval is writing it (pid %ld)", rs->path, holder);
    if (held == 1) return emx_seterr(err, errlen, "-o %s: another eval is writing it", rs->path);
    if (held != 0) return emx_seterr(err, errlen, "-o %s: cannot lock it: %s", rs->path, strerror(errno));
    return 0;
}

int eval_results_open(EvalResults *rs, const char *path, const char *model_path, char *err, size_t errlen) {
    memset(rs, 0, sizeof *rs);
    rs->path = path;
    rs->model = model_path;
    size_t len = 0, keep = 0;
    char why[512];
    if (emx_out_check(path, EMX_OUT_APPEND, why, sizeof why) != 0) return emx_seterr(err, errlen, "-o %s", why);
    if (open_locked(rs, err, errlen) != 0) {  // before reading: what we read stays what is there
        eval_results_close(rs, NULL, 0);
        return -1;
    }
    char *text = emx_read_file(path, &len);  // another descriptor: closing it keeps the lock (flock's is rs->f's)
    if (!text && errno != ENOENT) {
        const int e = errno;
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s: %s", path, strerror(e));
    }
    if (text && load_existing(rs, text, len, &keep, err, errlen) != 0) {
        free(text);
        eval_results_close(rs, NULL, 0);
        return -1;
    }
    free(text);
    if (keep < len && (fflush(rs->f) != 0 || truncate(path, (off_t)keep) != 0)) {
        const int e = errno;
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s: cutting the incomplete last line: %s", path, strerror(e));
    }
    if (keep == len + 1 && (fputc('\n', rs->f) == EOF || fflush(rs->f) != 0)) {
        const int e = errno;
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s: %s", path, strerror(e));
    }
    return 0;
}

const EvalResult *eval_results_find(const EvalResults *rs, const char *family, const char *id, const char *config,
                                    uint64_t seed) {
    for (int i = rs->n - 1; i >= 0; i--) {
        const EvalResult *r = &rs->r[i];
        if (r->seed == seed && !strcmp(r->id, id) && !strcmp(r->family, family) && !strcmp(r->config, config)) return r;
    }
    return NULL;
}

void eval_measure(const EvalItem *it, const EvalGen *g, EvalResult *r) {
    char *x = NULL;
    EvalSpan span = {0};
    if (g->text) eval_check_at(it, g->text, &x, &span);
    free(x);
    EvalConfidence conf;
    if (eval_confidence(&g->trace, &span, &conf) == 0) {
        r->answer_margin = conf.answer_margin;
        r->mean_entropy_bits = conf.mean_entropy_bits;
        r->mean_logprob_nats = conf.mean_logprob_nats;
        r->n_not_argmax = conf.n_not_argmax;
    }
    r->n_paths = g->n_paths > 0 ? g->n_paths : 0;
    r->oracle = r->n_paths > 0 ? 0 : -1;
    for (int p = 0; p < r->n_paths; p++) {
        char *px = NULL;
        if (g->paths[p] && eval_check(it, g->paths[p], &px)) r->oracle = 1;
        free(px);
    }
    int *ids = g->trace.n > 0 && !g->trace.oom ? malloc((size_t)g->trace.n * sizeof *ids) : NULL;
    if (it->check == EVAL_CHECK_OPEN && ids) {
        const int n = eval_trace_text_ids(&g->trace, ids, g->trace.n);
        const double d1 = eval_distinct_n(ids, n, 1), d2 = eval_distinct_n(ids, n, 2);
        r->repetition_loop = eval_repetition_loop(ids, n);
        r->distinct_1 = d1 >= 0 ? d1 : NAN;  // -1: out of memory
        r->distinct_2 = d2 >= 0 ? d2 : NAN;
    }
    free(ids);
}

// A finite number as a key (NaN / absent: no key).
static void add_finite(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
}

static void add_measures(cJSON *o, const EvalResult *m) {
    add_finite(o, "answer_margin", m->answer_margin);
    add_finite(o, "mean_entropy_bits", m->mean_entropy_bits);
    add_finite(o, "mean_logprob_nats", m->mean_logprob_nats);
    if (m->n_not_argmax >= 0) cJSON_AddNumberToObject(o, "n_not_argmax", (double)m->n_not_argmax);
    if (m->n_paths > 0) {
        cJSON_AddNumberToObject(o, "n_paths", m->n_paths);
        cJSON_AddBoolToObject(o, "oracle", m->oracle == 1);
    }
    if (m->repetition_loop >= 0) cJSON_AddBoolToObject(o, "repetition_loop", m->repetition_loop);
    add_finite(o, "distinct_1", m->distinct_1);
    add_finite(o, "distinct_2", m->distinct_2);
}

static cJSON *result_json(const EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed,
                          const EvalGen *g, const char *extracted, int correct, const EvalResult *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", rs->model);
    cJSON_AddStringToObject(o, "family", it->family);
    cJSON_AddStringToObject(o, "id", it->id);
    cJSON_AddStringToObject(o, "config", c->spec);
    cJSON_AddNumberToObject(o, "seed", (double)seed);
    cJSON_AddStringToObject(o, "check", eval_check_name(it->check));
    if (it->answer) cJSON_AddStringToObject(o, "answer", it->answer);
    else cJSON_AddNullToObject(o, "answer");
    if (extracted) cJSON_AddStringToObject(o, "extracted", extracted);
    else cJSON_AddNullToObject(o, "extracted");
    if (it->check == EVAL_CHECK_OPEN) cJSON_AddNullToObject(o, "correct");
    else cJSON_AddBoolToObject(o, "correct", correct);
    cJSON_AddNumberToObject(o, "n_tokens", g->n_tokens);
    cJSON_AddNumberToObject(o, "time_s", g->time_s);
    cJSON *cases = cJSON_AddObjectToObject(o, "cases");
    for (int k = 0; k < EMX_CASE_COUNT; k++) cJSON_AddNumberToObject(cases, emx_case_name((EmxCase)k), (double)g->cases[k]);
    cJSON_AddNumberToObject(o, "n_inserted", (double)g->n_inserted);
    add_measures(o, m);
    cJSON_AddStringToObject(o, "text", g->text ? g->text : "");
    return o;
}

int eval_results_add(EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed, const EvalGen *g,
                     const char *extracted, int correct, char *err, size_t errlen) {
    EvalResult r = blank_result();
    eval_measure(it, g, &r);
    cJSON *o = result_json(rs, it, c, seed, g, extracted, correct, &r);
    char *line = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!line) return emx_seterr(err, errlen, "out of memory");
    errno = 0;
    // one write of the whole line: a kill leaves at most one incomplete line, which a rerun drops
    int bad = fprintf(rs->f, "%s\n", line) < 0 || fflush(rs->f) != 0;
    free(line);
    if (bad) return emx_seterr(err, errlen, "-o %s: %s", rs->path, errno ? strerror(errno) : "write failed");
    r.family = strdup(it->family), r.id = strdup(it->id), r.config = strdup(c->spec), r.seed = seed;
    r.correct = it->check == EVAL_CHECK_OPEN ? -1 : correct;
    r.n_tokens = g->n_tokens, r.time_s = g->time_s;
    memcpy(r.cases, g->cases, sizeof r.cases);
    if (!r.family || !r.id || !r.config || push(rs, &r) != 0) return emx_seterr(err, errlen, "out of memory");
    return 0;
}

int eval_results_close(EvalResults *rs, char *err, size_t errlen) {
    int rc = 0;
    errno = 0;
    if (rs->f && (ferror(rs->f) || fclose(rs->f) != 0))
        rc = emx_seterr(err, errlen, "-o %s: %s", rs->path, errno ? strerror(errno) : "write failed");
    for (int i = 0; i < rs->n; i++) {
        free(rs->r[i].family);
        free(rs->r[i].id);
        free(rs->r[i].config);
    }
    free(rs->r);
    memset(rs, 0, sizeof *rs);
    return rc;
}
