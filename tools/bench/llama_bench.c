// llama_bench.c — llama-bench as a subprocess (llama_bench.h).
#include "llama_bench.h"

#include <cjson/cJSON.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "read_file.h"

extern char **environ;

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
        snprintf(err, errlen, "llama-bench: no result in its output (expected -o jsonl lines with n_prompt, n_gen, avg_ts)");
        return -1;
    }
    return 0;
}

int emx_llama_bench_run(const char *llama_bench, const char *gguf, int threads, int n_prompt,
                        int n_gen, EmxForwardSpeed *out, char *err, size_t errlen) {
    char t[16], p[16], n[16];
    snprintf(t, sizeof t, "%d", threads);
    snprintf(p, sizeof p, "%d", n_prompt);
    snprintf(n, sizeof n, "%d", n_gen);
    const char *argv[] = {llama_bench, "-m", gguf, "-t", t, "-p", p, "-n", n, "-r", "1",
                          "-o", "jsonl", NULL};
    FILE *o = tmpfile(), *e = tmpfile();
    if (!o || !e) {
        if (o) fclose(o);
        if (e) fclose(e);
        snprintf(err, errlen, "llama-bench: cannot create temporary files");
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fileno(o), 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(e), 2);
    pid_t pid;
    int rc = posix_spawn(&pid, llama_bench, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        snprintf(err, errlen, "llama-bench: cannot run %s: %s", llama_bench, strerror(rc));
        fclose(o);
        fclose(e);
        return -1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    rewind(o);
    rewind(e);
    char *text = emx_read_stream(o, NULL), *etext = emx_read_stream(e, NULL);
    fclose(o);
    fclose(e);
    int result = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        // Its last stderr line usually names the problem (model not found, bad GGUF).
        char *last = etext ? etext + strlen(etext) : NULL;
        while (last && last > etext && (last[-1] == '\n')) *--last = 0;
        char *line = last ? strrchr(etext, '\n') : NULL;
        snprintf(err, errlen, "llama-bench failed (status %d): %s", status,
                 line ? line + 1 : etext && *etext ? etext : "no message");
    } else if (text) {
        result = emx_llama_bench_parse(text, out, err, errlen);
    } else {
        snprintf(err, errlen, "llama-bench: out of memory reading its output");
    }
    free(text);
    free(etext);
    return result;
}
