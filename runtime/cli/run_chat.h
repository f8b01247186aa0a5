// run_chat.h — ./run -cnv: a conversation on one state, read from stdin a message at a time,
// each answer streamed to stdout as it is generated (llama-cli's conversation mode).
#ifndef ENTROPIX_RUN_CHAT_H
#define ENTROPIX_RUN_CHAT_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "runtime/cli/cli_args.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/profile.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    const EmxCliArgs *a;               // the sampler, -n (per answer), --system, --no-think, -s
    const EmxModel *model;             // has a chat template
    const EmxTokenizer *tk;
    EmxState *st;                      // its context holds the conversation
    const EmxProfile *profile;         // --sampler entropix's, or NULL
    const char *first;                 // -p's (or -f's) text: the first message; NULL: read it
    size_t first_len;
    const char *system;                // --system's text, or NULL
    volatile sig_atomic_t *interrupt;  // set by Ctrl-C: the answer ends after its token
    void (*catch_interrupt)(void);     // arms the handler that sets *interrupt
} EmxChatRun;

// The conversation until the end of `in` (Ctrl-D). Each turn renders the whole conversation
// through the model's chat template and runs only the tokens the state's cache does not hold
// already. When the conversation outgrows the context, its oldest exchanges are left out
// (said on stderr); a message that alone does not fit is refused and the chat goes on. Ctrl-C
// ends the answer being generated (what was said stays in the conversation); at the prompt it
// ends the program, as the default signal does. Returns the exit status: 0, or 1 after an
// error it has told on stderr (a failed write to stdout, a forward pass that failed).
int emx_run_chat(const EmxChatRun *c, FILE *in);

#endif
