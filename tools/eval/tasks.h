// tasks.h — eval task files (docs/eval.md "Task files"): one JSON object per line, each an item
// with a prompt (raw) or messages (chat), an answer and how to check it. A file is validated
// whole when it is loaded, so a mistake on line 900 stops the run before anything is generated.
#ifndef ENTROPIX_EVAL_TASKS_H
#define ENTROPIX_EVAL_TASKS_H

#include <stddef.h>

enum eval_check_kind {
    EVAL_CHECK_NUMBER, EVAL_CHECK_EXACT, EVAL_CHECK_CHOICE, EVAL_CHECK_REGEX, EVAL_CHECK_CONTAINS,
    EVAL_CHECK_WORD,   // the first whole-word entry of answer_alphabet in the text
    EVAL_CHECK_OPEN,   // open-ended: no answer, no accuracy (the summary's open-ended metrics)
    EVAL_CHECK_COUNT
};

#define EVAL_MAX_TOKENS_LIMIT 4096
#define EVAL_MAX_ALPHABET 256   // answer_alphabet entries at most
#define EVAL_MAX_BASELINES 8    // named baselines per item at most
#define EVAL_MAX_LINE_BYTES 65536  // a task line's bytes at most (its newline not counted): a longer
                                   // one is refused before it is parsed, let alone tokenized

typedef struct {
    char *id;
    char *family;        // the item's, or the file's basename without .jsonl
    int chat;            // 1: messages (rendered with the chat template), 0: prompt (raw)
    char *prompt;        // raw: the prompt; chat: the user message
    char *system;        // chat: the system message, or NULL
    char *answer;        // as text (a JSON number as %.17g); NULL for check 'open'
    double answer_num;   // number: the answer's value
    int check;           // enum eval_check_kind
    double tolerance;    // number: |extracted - answer| allowed (default 0)
    char *pattern;       // regex: the PCRE2 pattern
    void *re;            // regex: the compiled pcre2_code
    int max_tokens;      // 1..4096, default 64
    int line;            // 1-based line in its file
    const char *file;    // its task file's path (the EvalTaskFile's, which owns it)
    char *answer_cue;    // optional: the words before the answer ("The answer is"), or NULL; the
                         // branching decoder's cue (commit=1)
    char **answer_alphabet;  // optional: the allowed answers [n_answer_alphabet] (required by 'word';
                             // the branching decoder's alphabet with commit=1)
    int n_answer_alphabet;
    char **baseline_names;   // optional "baselines": {NAME: ANSWER}, a fixed answer per named
    char **baseline_answers; // rule, scored like a generation [n_baselines]
    int n_baselines;
} EvalItem;

typedef struct {
    char *path;
    EvalItem *items;
    int n;
} EvalTaskFile;

// Reads and validates the whole file. Returns 0, or -1 with one line in err naming the file,
// line and field: "tasks/arith.jsonl:17: field 'check': unknown check 'numbr' (number, ...)".
int eval_tasks_load(const char *path, EvalTaskFile *tf, char *err, size_t errlen);
void eval_tasks_free(EvalTaskFile *tf);

// No two of the items (from one file or several) have the same family and id: the results
// file knows a result by them. Returns 0, or -1 naming the later one's file, line and id.
int eval_items_unique(const EvalItem *const *items, int n_items, char *err, size_t errlen);

// The name of a check kind ("number", ...).
const char *eval_check_name(int kind);

// The index of name in the item's baselines, or -1.
int eval_item_baseline(const EvalItem *it, const char *name);

#endif
