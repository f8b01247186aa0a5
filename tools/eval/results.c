// results.c — the results file: reading it back, appending to it (results.h).
#include "tools/eval/results.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "base/out_file.h"
#include "base/read_file.h"

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

// One stored line [s, s+n) into rs. Returns 0, 1 (not a result line) or -1 (another model).
static int load_line(EvalResults *rs, const char *s, size_t n, const char **other_model) {
    cJSON *o = cJSON_ParseWithLength(s, n);
    const char *model = str_field(o, "model"), *fam = str_field(o, "family"), *id = str_field(o, "id"),
               *cfg = str_field(o, "config");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed"), *ok = cJSON_GetObjectItemCaseSensitive(o, "correct");
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(o, "n_tokens"), *t = cJSON_GetObjectItemCaseSensitive(o, "time_s");
    int rc = 1;
    if (model && fam && id && cfg && cJSON_IsNumber(seed) && seed->valuedouble >= 0 && cJSON_IsBool(ok) &&
        cJSON_IsNumber(nt) && cJSON_IsNumber(t)) {
        if (strcmp(model, rs->model) != 0) {
            static char keep[256];
            snprintf(keep, sizeof keep, "%s", model);
            *other_model = keep;
            rc = -1;
        } else {
            EvalResult r = {.family = strdup(fam), .id = strdup(id), .config = strdup(cfg),
                            .seed = (uint64_t)seed->valuedouble, .correct = cJSON_IsTrue(ok),
                            .n_tokens = (int)nt->valuedouble, .time_s = t->valuedouble};
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
        const char *other = NULL;
        int rc = n == 0 ? 0 : load_line(rs, text + at, n, &other);
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

int eval_results_open(EvalResults *rs, const char *path, const char *model_path, char *err, size_t errlen) {
    memset(rs, 0, sizeof *rs);
    rs->path = path;
    rs->model = model_path;
    size_t len = 0, keep = 0;
    char why[512];
    if (emx_out_check(path, EMX_OUT_APPEND, why, sizeof why) != 0) return emx_seterr(err, errlen, "-o %s", why);
    char *text = emx_read_file(path, &len);
    if (!text && errno != ENOENT) return emx_seterr(err, errlen, "-o %s: %s", path, strerror(errno));
    if (text && load_existing(rs, text, len, &keep, err, errlen) != 0) {
        free(text);
        eval_results_close(rs, NULL, 0);
        return -1;
    }
    free(text);
    if (keep < len && truncate(path, (off_t)keep) != 0) {
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s: cutting the incomplete last line: %s", path, strerror(errno));
    }
    EmxOut out;  // appended to, opened in place (base/out_file.h)
    if (emx_out_open(&out, path, EMX_OUT_APPEND, why, sizeof why) != 0) {
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s", why);
    }
    rs->f = out.f;
    if (keep == len + 1 && (fputc('\n', rs->f) == EOF || fflush(rs->f) != 0)) {
        eval_results_close(rs, NULL, 0);
        return emx_seterr(err, errlen, "-o %s: %s", path, strerror(errno));
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

static cJSON *result_json(const EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed,
                          const EvalGen *g, const char *extracted, int correct) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", rs->model);
    cJSON_AddStringToObject(o, "family", it->family);
    cJSON_AddStringToObject(o, "id", it->id);
    cJSON_AddStringToObject(o, "config", c->spec);
    cJSON_AddNumberToObject(o, "seed", (double)seed);
    cJSON_AddStringToObject(o, "check", eval_check_name(it->check));
    cJSON_AddStringToObject(o, "answer", it->answer);
    if (extracted) cJSON_AddStringToObject(o, "extracted", extracted);
    else cJSON_AddNullToObject(o, "extracted");
    cJSON_AddBoolToObject(o, "correct", correct);
    cJSON_AddNumberToObject(o, "n_tokens", g->n_tokens);
    cJSON_AddNumberToObject(o, "time_s", g->time_s);
    cJSON *cases = cJSON_AddObjectToObject(o, "cases");
    for (int k = 0; k < EMX_CASE_COUNT; k++) cJSON_AddNumberToObject(cases, emx_case_name((EmxCase)k), (double)g->cases[k]);
    cJSON_AddNumberToObject(o, "n_inserted", (double)g->n_inserted);
    cJSON_AddStringToObject(o, "text", g->text ? g->text : "");
    return o;
}

int eval_results_add(EvalResults *rs, const EvalItem *it, const EvalConfig *c, uint64_t seed, const EvalGen *g,
                     const char *extracted, int correct, char *err, size_t errlen) {
    cJSON *o = result_json(rs, it, c, seed, g, extracted, correct);
    char *line = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!line) return emx_seterr(err, errlen, "out of memory");
    errno = 0;
    // one write of the whole line: a kill leaves at most one incomplete line, which a rerun drops
    int bad = fprintf(rs->f, "%s\n", line) < 0 || fflush(rs->f) != 0;
    free(line);
    if (bad) return emx_seterr(err, errlen, "-o %s: %s", rs->path, errno ? strerror(errno) : "write failed");
    EvalResult r = {.family = strdup(it->family), .id = strdup(it->id), .config = strdup(c->spec), .seed = seed,
                    .correct = correct, .n_tokens = g->n_tokens, .time_s = g->time_s};
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
