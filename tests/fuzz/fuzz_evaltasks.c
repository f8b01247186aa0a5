// fuzz_evaltasks.c — the eval tool's task-file reader (tools/eval/tasks.c) on any bytes: the
// input is the task file. Asserted: a rejected file has a one-line reason; an accepted one has
// its items' ranges (a check, an answer, max_tokens in 1..4096, a prompt or messages).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tools/eval/tasks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[160], err[512];
    fuzz_write("in.bin", data, size, path, sizeof path);
    EvalTaskFile tf;
    if (eval_tasks_load(path, &tf, err, sizeof err) != 0) {
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    for (int i = 0; i < tf.n; i++) {
        const EvalItem *it = &tf.items[i];
        if (it->max_tokens < 1 || it->max_tokens > 4096 || !it->id || !it->answer) abort();
    }
    eval_tasks_free(&tf);
    return 0;
}
