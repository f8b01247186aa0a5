// subprocess.c — a child process with captured output (subprocess.h).
#include "tools/bench/subprocess.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/errmsg.h"
#include "base/read_file.h"

extern char **environ;

int emx_bench_proc_run(const char *what, const char *path, const char *const *argv, char *const *envp,
                       EmxBenchProc *p, char *err, size_t errlen) {
    p->out = p->err = NULL;
    p->status = 0;
    FILE *o = tmpfile(), *e = tmpfile();
    if (!o || !e) {
        if (o) fclose(o);
        if (e) fclose(e);
        emx_seterr(err, errlen, "%s: cannot create temporary files", what);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fileno(o), 1);
    posix_spawn_file_actions_adddup2(&fa, fileno(e), 2);
    pid_t pid;
    int rc = posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        emx_seterr(err, errlen, "%s: cannot run %s: %s", what, path, strerror(rc));
        fclose(o);
        fclose(e);
        return -1;
    }
    waitpid(pid, &p->status, 0);
    rewind(o);
    rewind(e);
    p->out = emx_read_stream(o, NULL);
    p->err = emx_read_stream(e, NULL);
    fclose(o);
    fclose(e);
    if (!p->out || !p->err) {
        emx_bench_proc_free(p);
        emx_seterr(err, errlen, "%s: out of memory reading its output", what);
        return -1;
    }
    return 0;
}

int emx_bench_proc_failed(const EmxBenchProc *p, const char *what, char *err, size_t errlen) {
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0) return 0;
    // The last non-empty stderr line, without its newline.
    const char *t = p->err ? p->err : "";
    size_t end = strlen(t);
    while (end > 0 && (t[end - 1] == '\n' || t[end - 1] == '\r')) end--;
    size_t start = end;
    while (start > 0 && t[start - 1] != '\n') start--;
    char how[48];
    if (WIFEXITED(p->status))
        snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(p->status));
    else
        snprintf(how, sizeof how, "signal %d", WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0);
    emx_seterr(err, errlen, "%s failed (%s): %.*s", what, how, (int)(end - start),
             end > start ? t + start : "no message");
    if (end == start) emx_seterr(err, errlen, "%s failed (%s): no message", what, how);
    return 1;
}

void emx_bench_proc_free(EmxBenchProc *p) {
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
}
