// result.c — benchmark results as JSON (result.h).
#include "tools/bench/result.h"
#include "base/errmsg.h"
#include "base/out_file.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int emx_bench_result_save(const char *path, const EmxBenchResult *r, char *err, size_t errlen) {
    cJSON *o = cJSON_CreateObject();
    if (!o) goto oom;
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddStringToObject(o, "device_desc", r->device_desc);
    cJSON_AddStringToObject(o, "cpu", r->cpu);
    cJSON_AddStringToObject(o, "simd", r->simd);
    cJSON_AddNumberToObject(o, "threads", r->threads);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "depth", r->depth);
    cJSON_AddStringToObject(o, "cache_type", r->cache_type[0] ? r->cache_type : "f32");
    cJSON_AddNumberToObject(o, "prefill_tps", r->prefill_tps);
    cJSON_AddNumberToObject(o, "decode_tps", r->decode_tps);
    cJSON_AddNumberToObject(o, "memcpy_gbs", r->memcpy_gbs);
    cJSON_AddNumberToObject(o, "read_gbs", r->read_gbs);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) goto oom;
    EmxOut out;  // written whole: a temporary file beside it, renamed over it (base/out_file.h)
    char why[512];
    int ok = emx_out_open(&out, path, EMX_OUT_REPLACE, why, sizeof why) == 0;
    if (ok) {
        fputs(text, out.f);
        fputc('\n', out.f);
        ok = emx_out_close(&out, why, sizeof why) == 0;
    }
    free(text);
    if (!ok) return emx_seterr(err, errlen, "--save %s", why);
    return 0;
oom:
    emx_seterr(err, errlen, "--save %s: out of memory", path);
    return -1;
}

static int get_num(const cJSON *o, const char *key, double *v, const char *path, char *err,
                   size_t errlen) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) {
        emx_seterr(err, errlen, "%s: field '%s' is missing or not a number", path, key);
        return -1;
    }
    *v = x->valuedouble;
    return 0;
}

static void get_str(const cJSON *o, const char *key, char *out, size_t cap) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    snprintf(out, cap, "%s", cJSON_IsString(x) ? x->valuestring : "");
}

int emx_bench_result_load(const char *path, EmxBenchResult *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) {
        emx_seterr(err, errlen, "%s: cannot open", path);
        return -1;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        emx_seterr(err, errlen, "%s: not a benchmark result (JSON object)", path);
        return -1;
    }
    double th, np, ng;
    int rc = get_num(o, "threads", &th, path, err, errlen) || get_num(o, "n_prompt", &np, path, err, errlen) ||
             get_num(o, "n_gen", &ng, path, err, errlen) ||
             get_num(o, "prefill_tps", &r->prefill_tps, path, err, errlen) ||
             get_num(o, "decode_tps", &r->decode_tps, path, err, errlen) ||
             get_num(o, "memcpy_gbs", &r->memcpy_gbs, path, err, errlen);
    if (rc == 0) {
        r->threads = (int)th;
        r->n_prompt = (int)np;
        r->n_gen = (int)ng;
        const cJSON *rd = cJSON_GetObjectItemCaseSensitive(o, "read_gbs");  // absent in older files
        r->read_gbs = cJSON_IsNumber(rd) ? rd->valuedouble : 0.0;
        const cJSON *dp = cJSON_GetObjectItemCaseSensitive(o, "depth");  // absent in older files
        r->depth = cJSON_IsNumber(dp) ? (int)dp->valuedouble : 0;
        get_str(o, "cache_type", r->cache_type, sizeof r->cache_type);
        if (!r->cache_type[0]) snprintf(r->cache_type, sizeof r->cache_type, "f32");  // saved before the option
        get_str(o, "model", r->model, sizeof r->model);
        get_str(o, "device", r->device, sizeof r->device);
        if (!r->device[0]) snprintf(r->device, sizeof r->device, "cpu");  // saved before devices
        get_str(o, "device_desc", r->device_desc, sizeof r->device_desc);
        get_str(o, "cpu", r->cpu, sizeof r->cpu);
        get_str(o, "simd", r->simd, sizeof r->simd);
    }
    cJSON_Delete(o);
    return rc ? -1 : 0;
}

static void compare_line(FILE *f, const char *what, double now, double base) {
    if (base <= 0 || now <= 0) {
        fprintf(f, "  %-8s no figure to compare\n", what);
        return;
    }
    double r = now / base;
    fprintf(f, "  %-8s %9.2f tok/s vs %9.2f: %.3f× (%s%.1f%%)\n", what, now, base, r,
            r >= 1 ? "+" : "", 100.0 * (r - 1.0));
}

static const char *cache_of(const EmxBenchResult *r) { return r->cache_type[0] ? r->cache_type : "f32"; }

void emx_bench_result_compare(FILE *f, const EmxBenchResult *now, const EmxBenchResult *base) {
    fprintf(f, "against the baseline:\n");
    compare_line(f, "prefill", now->prefill_tps, base->prefill_tps);
    compare_line(f, "decode", now->decode_tps, base->decode_tps);
    const char *dn = now->device[0] ? now->device : "cpu", *db = base->device[0] ? base->device : "cpu";
    if (strcmp(now->model, base->model) || strcmp(dn, db) || strcmp(now->device_desc, base->device_desc) ||
        now->threads != base->threads || now->n_prompt != base->n_prompt || now->n_gen != base->n_gen ||
        now->depth != base->depth || strcmp(cache_of(now), cache_of(base)) || strcmp(now->cpu, base->cpu))
        fprintf(f, "  warning: the baseline ran %s, %d threads, pp%d/tg%d on %s (%s), %s, depth %d, %s KV cache: "
                   "not the same run\n",
                base->model, base->threads, base->n_prompt, base->n_gen, db, base->device_desc, base->cpu,
                base->depth, cache_of(base));
}
