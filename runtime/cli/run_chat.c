// run_chat.c — ./run -cnv (run_chat.h): messages from stdin, answers to stdout, one KV cache.
//
// A turn renders [system] + the kept history + the new message, with the assistant header at
// the end, and compares its ids with those the cache holds (the previous turn's prompt and the
// answer's tokens that were fed back): only the ids after the common prefix run. The template
// decides what the model sees of earlier answers (Qwen3 drops their thinking), so the prefix
// ends wherever the rendering differs, and the text is the one a fresh run of the whole
// conversation would give (a row's result does not depend on its batch: generate.h n_cached).
#define _POSIX_C_SOURCE 200809L  // getline
#include "runtime/cli/run_chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cli/run_setup.h"
#include "runtime/generate.h"

typedef struct {
    EmxChatMessage *msgs;   // the kept history: user, assistant, user, ... (contents malloc'd)
    int n, cap;
    int *cached;            // [ctx] the ids the state's cache holds at positions 0..n_cached-1
    int n_cached;
    int *answer;            // [ctx] a turn's generated ids
    EmxGenerateStats total; // summed over the turns, for the closing timings
} Chat;

typedef struct {
    volatile sig_atomic_t *interrupt;
    int out_errno;          // the write to stdout that failed (0: none)
    int interrupted;
} AnswerSink;

// Prints each piece of the answer as it comes; stops the answer after Ctrl-C or a failed write.
static int on_answer_token(void *user, int index, int id, int pos, const char *text, size_t len, int is_stop) {
    (void)index, (void)id, (void)pos, (void)is_stop;
    AnswerSink *s = user;
    errno = 0;
    if (len && (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0)) return s->out_errno = errno ? errno : EIO, -1;
    if (*s->interrupt) return s->interrupted = 1, -1;
    return 0;
}

// The next message: a line, and the lines after it while one ends in '\' (the backslash becomes
// a newline). NULL at the end of the input with nothing read. *len: its bytes.
static char *read_message(FILE *in, int show_prompt, size_t *len) {
    if (show_prompt) fputs("> ", stderr), fflush(stderr);
    char *msg = NULL, *line = NULL;
    size_t n = 0, cap = 0;
    ssize_t k;
    while ((k = getline(&line, &cap, in)) > 0) {
        if (line[k - 1] == '\n') line[--k] = 0;
        const int more = k > 0 && line[k - 1] == '\\';
        if (more) line[k - 1] = '\n';
        char *grown = realloc(msg, n + (size_t)k + 1);
        if (!grown) break;
        msg = grown;
        memcpy(msg + n, line, (size_t)k + 1);
        n += (size_t)k;
        if (!more) break;
        if (show_prompt) fputs(". ", stderr), fflush(stderr);
    }
    free(line);
    *len = n;
    return msg;
}

// Appends a message (its content copied). 0, or -1: out of memory.
static int add_message(Chat *ch, const char *role, const char *text, size_t len) {
    if (ch->n == ch->cap) {
        const int cap = ch->cap ? 2 * ch->cap : 16;
        EmxChatMessage *m = realloc(ch->msgs, (size_t)cap * sizeof *m);
        if (!m) return -1;
        ch->msgs = m, ch->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, text, len);
    copy[len] = 0;
    ch->msgs[ch->n++] = (EmxChatMessage){.role = role, .content = copy};
    return 0;
}

// Drops the oldest k messages of the history.
static void drop_messages(Chat *ch, int k) {
    if (k <= 0) return;  // (an empty history has no array: memmove's NULL is undefined)
    for (int i = 0; i < k; i++) free((char *)ch->msgs[i].content);
    memmove(ch->msgs, ch->msgs + k, (size_t)(ch->n - k) * sizeof *ch->msgs);
    ch->n -= k;
}

// The turn's ids: the conversation with `text` as its new message, its oldest exchanges left
// out until the answer has room (-n, at most half the context; -n -1: a quarter). 0; 1 when
// the message alone leaves no room (said; the chat goes on); -1 on an error (said).
static int turn_ids(Chat *ch, const EmxChatRun *c, const char *text, size_t len, int **ids, int *n_ids) {
    const int ctx = emx_state_ctx(c->st), np = c->a->n_predict;
    const int want = np > 0 ? (np < ctx / 2 ? np : ctx / 2) : ctx / 4;
    char err[512];
    int first = 0;
    for (;;) {
        EmxPromptSpec ps = {.text = text, .len = len, .chat = 1, .system = c->system, .history = ch->msgs + first,
                            .n_history = ch->n - first, .enable_thinking = !c->a->no_think};
        if (emx_prompt_ids(c->model, c->tk, &ps, ids, n_ids, err, sizeof err) != 0) {
            fprintf(stderr, "run: %s\n", err);
            return -1;
        }
        if (ctx - *n_ids + 1 >= want || first + 2 > ch->n) break;
        free(*ids);
        first += 2;  // an exchange: a message and its answer
    }
    if (*n_ids >= ctx) {
        fprintf(stderr, "run: this message makes a prompt of %d tokens; the context holds %d (-c): not sent\n", *n_ids, ctx);
        free(*ids);
        return 1;
    }
    if (first) {
        fprintf(stderr, "run: the conversation outgrew the context (-c %d): its oldest %d exchange%s left out\n", ctx,
                first / 2, first > 2 ? "s are" : " is");
        drop_messages(ch, first);
    }
    return 0;
}

// One turn: the message's answer streamed to stdout, then both kept in the conversation.
// 0; 1 when the message was not sent; -1 on an error (said).
static int chat_turn(Chat *ch, const EmxChatRun *c, const char *text, size_t len) {
    int *ids = NULL, n_ids = 0, rc = turn_ids(ch, c, text, len, &ids, &n_ids);
    if (rc != 0) return rc;
    const int ctx = emx_state_ctx(c->st), room = ctx - n_ids + 1;
    int n_cached = 0;
    while (n_cached < ch->n_cached && n_cached < n_ids - 1 && ch->cached[n_cached] == ids[n_cached]) n_cached++;
    char err[512];
    EmxRunSampler rs;
    memset(&rs, 0, sizeof rs);  // init reads what a caller set (a shared trie): nothing here
    if (emx_run_sampler_init(&rs, c->a, c->profile, c->model, c->tk, ctx, c->a->seed, 0, err, sizeof err) != 0) {
        fprintf(stderr, "run: %s\n", err);
        free(ids);
        return -1;
    }
    emx_run_sampler_prompt(&rs, ids, n_ids);
    AnswerSink sink = {.interrupt = c->interrupt};
    const int np = c->a->n_predict;
    EmxGenerateOptions go = {.n_predict = np < 0 || np > room ? -1 : np, .out = stdout, .out_name = "stdout",
                             .ids_out = ch->answer, .ids_cap = ctx, .on_token = on_answer_token,
                             .on_token_user = &sink, .n_cached = n_cached};
    EmxGenerateStats st;
    *c->interrupt = 0;
    c->catch_interrupt();
    rc = emx_generate(c->st, c->tk, ids, n_ids, rs.sampler, &go, &st, err, sizeof err);
    signal(SIGINT, SIG_DFL);  // at the prompt, Ctrl-C ends the program
    emx_run_sampler_free(&rs);
    errno = 0;
    if (!sink.out_errno && (fputc('\n', stdout) == EOF || fflush(stdout) != 0)) sink.out_errno = errno ? errno : EIO;
    if (sink.out_errno) fprintf(stderr, "run: writing the answer to stdout: %s\n", strerror(sink.out_errno));
    else if (rc != 0 && !sink.interrupted) fprintf(stderr, "run: %s\n", err);
    if (sink.out_errno || (rc != 0 && !sink.interrupted)) return free(ids), -1;
    if (sink.interrupted) fprintf(stderr, "run: answer interrupted (Ctrl-C); Ctrl-D or Ctrl-C here ends the chat\n");
    // The cache holds the prompt and every generated token but the last (never fed back).
    const int fed = st.n_generated > 0 ? st.n_generated - 1 : 0;
    memcpy(ch->cached, ids, (size_t)n_ids * sizeof *ids);
    memcpy(ch->cached + n_ids, ch->answer, (size_t)fed * sizeof *ids);
    ch->n_cached = n_ids + fed;
    free(ids);
    size_t k;
    // The answer as the conversation keeps it: its text without the stop token (or control tokens).
    int n_answer = st.n_generated < ctx ? st.n_generated : ctx;
    if (n_answer > 0 && emx_is_stop(c->tk, ch->answer[n_answer - 1])) n_answer--;
    char *answer = emx_decode_ids(c->tk, ch->answer, n_answer, 1, &k);
    rc = !answer || add_message(ch, "user", text, len) || add_message(ch, "assistant", answer, k) ? -1 : 0;
    free(answer);
    if (rc) return fprintf(stderr, "run: out of memory\n"), -1;
    ch->total.n_prompt += st.n_prompt, ch->total.n_generated += st.n_generated;
    ch->total.prefill_s += st.prefill_s, ch->total.decode_s += st.decode_s, ch->total.sample_s += st.sample_s;
    return 0;
}

int emx_run_chat(const EmxChatRun *c, FILE *in) {
    const int ctx = emx_state_ctx(c->st), show_prompt = isatty(fileno(in));
    Chat ch = {.cached = malloc((size_t)ctx * sizeof(int)), .answer = malloc((size_t)ctx * sizeof(int))};
    int status = 0;
    if (!ch.cached || !ch.answer) status = 1, fprintf(stderr, "run: out of memory\n");
    signal(SIGINT, SIG_DFL);
    for (int turn = 0; status == 0; turn++) {
        size_t len = 0;
        char *owned = NULL;
        const char *msg = turn == 0 && c->first && c->first_len ? c->first : (owned = read_message(in, show_prompt, &len));
        if (msg == c->first) len = c->first_len;
        if (!msg) break;  // the end of the input
        if (memchr(msg, 0, len)) fprintf(stderr, "run: this message holds a NUL byte, which a chat message cannot: not sent\n");
        else if (len && chat_turn(&ch, c, msg, len) < 0) status = 1;
        free(owned);
    }
    if (ch.total.n_generated) emx_generate_print_stats(stderr, &ch.total, emx_sampler_kind_name(c->a->sampler));
    drop_messages(&ch, ch.n);
    free(ch.msgs);
    free(ch.cached);
    free(ch.answer);
    return status;
}
