// subprocess.h — running the comparison runtime (llama-bench, or any command) as a child
// process and capturing what it prints. stdout and stderr go to temporary files, so no pipe can
// fill up and block the child.
#ifndef ENTROPIX_BENCH_SUBPROCESS_H
#define ENTROPIX_BENCH_SUBPROCESS_H

#include <stddef.h>

typedef struct {
    char *out, *err;  // NUL-terminated captures (free with emx_bench_proc_free)
    int status;       // waitpid status
} EmxBenchProc;

// Runs the program at `path` with argv (NULL-terminated, argv[0] included) and envp (NULL: this
// process's environment), waits for it. Returns 0 once it ran (whatever its exit status: see
// emx_bench_proc_failed), or -1 with a reason naming `what` when it cannot be started.
int emx_bench_proc_run(const char *what, const char *path, const char *const *argv, char *const *envp,
                       EmxBenchProc *p, char *err, size_t errlen);

// 1 when it did not exit with status 0; err then says how it ended, with its last stderr line
// (which usually names the problem: model not found, bad GGUF, command not found).
int emx_bench_proc_failed(const EmxBenchProc *p, const char *what, char *err, size_t errlen);

void emx_bench_proc_free(EmxBenchProc *p);

#endif
