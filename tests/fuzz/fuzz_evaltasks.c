// fuzz_evaltasks.c — the eval tool's task-file reader (tools/eval/tasks.c) on any bytes: the
// input is the task file. Asserted: a rejected file has a one-line reason; an accepted one has
// its items' ranges (a check, an answer unless the check is 'open', max_tokens in 1..4096, an
// answer alphabet of 1..256 entries holding the answer's text or value, at most 8 baselines).
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
        if (it->max_tokens < 1 || it->max_tokens > 4096 || !it->id || (!it->answer) != (it->check == EVAL_CHECK_OPEN)) abort();
        if (it->n_answer_alphabet < 0 || it->n_answer_alphabet > EVAL_MAX_ALPHABET || it->n_baselines > EVAL_MAX_BASELINES)
            abort();
        if (it->check == EVAL_CHECK_WORD && it->n_answer_alphabet < 1) abort();
    }
    eval_tasks_free(&tf);
    return 0;
}
