// checks.h — the answer checks of eval task items (docs/eval.md "Checks"): what is extracted
// from the generated text and whether it is correct.
#ifndef ENTROPIX_EVAL_CHECKS_H
#define ENTROPIX_EVAL_CHECKS_H

#include <stddef.h>

#include "tools/eval/tasks.h"

// The last number in text: optional sign ('-' or '+' not after a letter or digit), digits with
// optional ",ddd" groups ("1,234" is 1234), optional ".digits". Writes it without the commas to
// out. Returns 1 (found, *value set) or 0.
int eval_last_number(const char *text, double *value, char *out, size_t outlen);

// The choice letter: the first letter after the last "Answer:" (case-insensitive, spaces and
// one '(' skipped), else the first standalone capital A-E ("B", "(B)", "B)"). Returns 'A'..'Z'
// or 0.
int eval_choice_letter(const char *text);

// Applies the item's check to text. *extracted: malloc'd string, or NULL when nothing was
// extracted. Returns 1 (correct) or 0.
int eval_check(const EvalItem *it, const char *text, char **extracted);

#endif
