// llama_bench.c — llama-bench as a subprocess (llama_bench.h).
#include "tools/bench/llama_bench.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "base/errmsg.h"
#include "tools/bench/subprocess.h"

int emx_llama_bench_parse(const char *jsonl, EmxForwardSpeed *out, char *err, size_t errlen) {
    out->prefill_tps = out->decode_tps = 0.0;
    int found = 0;
    const char *s = jsonl;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        cJSON *j = cJSON_ParseWithLength(s, len);
        if (j) {
            const cJSON *np = cJSON_GetObjectItem(j, "n_prompt"), *ng = cJSON_GetObjectItem(j, "n_gen");
            const cJSON *ts = cJSON_GetObjectItem(j, "avg_ts");
            if (cJSON_IsNumber(np) && cJSON_IsNumber(ng) && cJSON_IsNumber(ts)) {
                if (np->valuedouble > 0 && ng->valuedouble == 0) out->prefill_tps = ts->valuedouble, found++;
                if (np->valuedouble == 0 && ng->valuedouble > 0) out->decode_tps = ts->valuedouble, found++;
            }
            cJSON_Delete(j);
        }
        s += len + (nl ? 1 : 0);
    }
    if (!found) {
        emx_seterr(err, errlen, "llama-bench: no result in its output (expected -o jsonl lines with n_prompt, n_gen, avg_ts)");
        return -1;
    }
    return 0;
}

int emx_llama_bench_run(const char *llama_bench, const char *gguf, int threads, int n_gpu_layers,
                        int n_prompt, int n_gen, EmxForwardSpeed *out, char *err, size_t errlen) {
    char t[16], g[16], p[16], n[16];
    snprintf(t, sizeof t, "%d", threads);
    snprintf(g, sizeof g, "%d", n_gpu_layers);
    snprintf(p, sizeof p, "%d", n_prompt);
    snprintf(n, sizeof n, "%d", n_gen);
    const char *argv[] = {llama_bench, "-m", gguf, "-t", t, "-ngl", g, "-p", p, "-n", n, "-r", "1",
                          "-o", "jsonl", NULL};
    EmxBenchProc proc;
    if (emx_bench_proc_run("llama-bench", llama_bench, argv, NULL, &proc, err, errlen) != 0) return -1;
    int rc = emx_bench_proc_failed(&proc, "llama-bench", err, errlen)
                 ? -1
                 : emx_llama_bench_parse(proc.out, out, err, errlen);
    emx_bench_proc_free(&proc);
    return rc;
}
