// checks.h — the answer checks of eval task items (docs/eval.md "Checks"): what is extracted
// from the generated text and whether it is correct.
#ifndef ENTROPIX_EVAL_CHECKS_H
#define ENTROPIX_EVAL_CHECKS_H

#include <stddef.h>

#include "tools/eval/tasks.h"

// Where in the text the extracted value was found: bytes [start, end) (found 0: nothing was).
typedef struct {
    int found;
    size_t start, end;
} EvalSpan;

// The last number in text: optional sign ('-' or '+' not after a letter or digit), digits with
// optional ",ddd" groups ("1,234" is 1234), optional ".digits". Writes it without the commas to
// out. Returns 1 (found, *value set) or 0. span (NULL: not wanted): the number's bytes in text,
// its sign included when it counts.
int eval_last_number(const char *text, double *value, char *out, size_t outlen);
int eval_last_number_at(const char *text, double *value, char *out, size_t outlen, EvalSpan *span);

// The choice letter: the first letter after the last "Answer:" (case-insensitive, spaces and
// one '(' skipped), else the first standalone capital A-E ("B", "(B)", "B)"). Returns 'A'..'Z'
// or 0. span (NULL: not wanted): the letter's byte.
int eval_choice_letter(const char *text);
int eval_choice_letter_at(const char *text, EvalSpan *span);

// The 'word' check's extraction: the first whole-word occurrence (ASCII case-insensitive, no
// letter or digit right before or after it) of any of alphabet[0..n) in text; of the entries
// that start at that byte, the longest. Returns the entry's index, or -1. span: its bytes.
int eval_first_word(const char *text, char *const *alphabet, int n, EvalSpan *span);

// Applies the item's check to text. *extracted: malloc'd string, or NULL when nothing was
// extracted. Returns 1 (correct) or 0 ('open' items: always 0, nothing extracted).
int eval_check(const EvalItem *it, const char *text, char **extracted);

// The same, with where the extracted value stands in text (span->found 0 when nothing was
// extracted; for 'contains', the first occurrence of the answer).
int eval_check_at(const EvalItem *it, const char *text, char **extracted, EvalSpan *span);

#endif
