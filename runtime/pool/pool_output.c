// pool_output.c — the agent pool's output on rank 0: the generated text as it becomes final,
// the --log lines of each round, --metrics records and the observer's events.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/generate.h"
#include "runtime/pool/pool_internal.h"
#include "runtime/token_log.h"

// Tells the observer (opt->on_event), if any.
void pool_notify(const Pool *p, EmxPoolEvent ev) {
    if (!p->opt->on_event) return;
    ev.round = p->n_rounds;
    p->opt->on_event(p->opt->on_event_user, &ev);
}

// Flushes f and keeps the first failure's errno in *slot: a full disk or a closed stdout ends the
// run with an error rather than losing the text and the log while it goes on.
void pool_flush_checked(FILE *f, int *slot) {
    if (!f) return;
    if ((fflush(f) != 0 || ferror(f)) && !*slot) *slot = errno ? errno : EIO;
}

// A token's text for a one-line log entry: control bytes escaped.
static void log_piece(FILE *f, const EmxTokenizer *tk, int id) {
    size_t len = 0;
    const char *s = emx_token_bytes_ref(tk, id, &len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
}

void pool_log_round(Pool *p, const Branch *all, int n, int win, int pos) {
    FILE *f = p->opt->log;
    if (!f) return;
    const EmxAgentParams *ag = p->opt->agents;
    const Branch *wb = &all[win];
    const int L = p->opt->lookahead, step = pos - p->n_prompt + 1;
    if (L > 1)
        fprintf(f, "Round %d (steps %d-%d): agent %d wins (mean entropy=%.3f)\n", p->n_rounds, step,
                step + wb->len - 1, wb->agent, wb->score);
    for (int j = 0; j < wb->len; j++) {
        fprintf(f, "Step %d: chosen=", step + j);
        log_piece(f, p->tk, wb->tokens[j]);
        fprintf(f, " (entropy=%.3f)\n", wb->entropy[j]);
        if (L > 1) continue;
        for (int i = 0; i < n; i++) {  // L = 1: every agent's proposal for this step
            const Branch *b = &all[i];
            if (b->agent < 0) continue;
            fprintf(f, "  agent %d (T=%.2f k=%d): ", b->agent, (double)ag[b->agent].temperature, ag[b->agent].top_k);
            if (b->len < 1) {
                fprintf(f, "no token\n");
                continue;
            }
            log_piece(f, p->tk, b->tokens[0]);
            fprintf(f, " (entropy=%.3f)%s\n", b->entropy[0], i == win ? " *" : "");
        }
    }
    if (L > 1)
        for (int i = 0; i < n; i++) {  // every agent's branch: tokens, entropies, mean
            const Branch *b = &all[i];
            if (b->agent < 0) continue;
            fprintf(f, "  agent %d (T=%.2f k=%d):", b->agent, (double)ag[b->agent].temperature, ag[b->agent].top_k);
            for (int j = 0; j < b->len; j++) {
                fputs(j ? " | " : " ", f);
                log_piece(f, p->tk, b->tokens[j]);
                fprintf(f, " %.3f", b->entropy[j]);
            }
            fprintf(f, b->len ? " (mean=%.3f)%s\n" : " no token%.0f%s\n", b->len ? b->score : 0.0, i == win ? " *" : "");
        }
    pool_flush_checked(f, &p->log_errno);
}

void pool_notify_round(const Pool *p, const Branch *all, int n, int win, int pos) {
    if (!p->opt->on_event) return;
    double score[EMX_POOL_MAX_AGENTS];
    int first[EMX_POOL_MAX_AGENTS];
    for (int i = 0; i < n; i++) {
        const Branch *b = &all[i];
        if (b->agent < 0) continue;
        score[b->agent] = b->len ? b->score : NAN;
        first[b->agent] = b->len ? b->tokens[0] : -1;
    }
    const Branch *wb = &all[win];
    pool_notify(p, (EmxPoolEvent){.kind = EMX_POOL_EVENT_ROUND, .pos = pos, .winner = wb->agent,
                             .n_agents = p->opt->n_agents, .agent_score = score, .agent_token = first,
                             .n_tokens = wb->len, .tokens = wb->tokens, .entropy = wb->entropy,
                             .logits_entropy = wb->logits_entropy, .logits_varentropy = wb->logits_varentropy,
                             .logprobs = wb->lp});
}

// Prints (and writes --metrics lines for) the positions that became final: [printed, upto).
void pool_emit_final(Pool *p, const int *seq, int upto) {
    const EmxPoolOptions *o = p->opt;
    const size_t cap = emx_decoder_max_out(p->tk);
    errno = 0;
    for (int pos = p->printed; pos < upto; pos++) {
        const int id = seq[pos], stop = emx_is_stop(p->tk, id);
        if (o->out && !stop) {
            size_t n = emx_decoder_push(&p->dec, id, p->decbuf, cap);
            fwrite(p->decbuf, 1, n, o->out);
        }
        if (o->metrics && !p->metrics_failed) {
            const TokenInfo *ti = &p->info[pos];
            const EmxAgentParams *a = &o->agents[ti->agent];
            EmxSamplerParams sp = {.temperature = a->temperature, .top_k = a->top_k, .top_p = 1.0f, .min_p = 0.0f};
            EmxMetrics mm = {.logits_entropy_bits = ti->logits_entropy, .logits_varentropy_bits2 = ti->logits_varentropy,
                             .logits_lse_nats = NAN, .attn_entropy_bits = NAN, .attn_varentropy_heads_bits2 = NAN,
                             .attn_varentropy_true_bits2 = NAN, .attn_agreement = NAN, .attn_interaction_strength = NAN};
            EmxTokenRecord r = {.index = pos - p->n_prompt, .id = id, .pos = pos, .is_stop = stop, .sampler = "agents",
                                .metrics = &mm, .params = &sp, .score = ti->score, .is_agent = 1, .agent = ti->agent,
                                .proposal_entropy_bits = ti->entropy};
            if (o->want_logprobs) r.logprobs = &ti->lp, r.n_logprobs = o->n_logprobs, r.tk = p->tk;
            r.piece = emx_token_bytes_ref(p->tk, id, &r.piece_len);
            if (emx_token_log_json(o->metrics, &r) != 0) {
                p->metrics_failed = 1;
                if (!p->metrics_errno) p->metrics_errno = errno ? errno : EIO;
            }
        }
    }
    if (upto > p->printed) {
        pool_flush_checked(o->out, &p->out_errno);
        pool_flush_checked(o->metrics, &p->metrics_errno);
        p->printed = upto;
    }
}

// The generated text of seq[from..to), decoded (control tokens skipped). malloc'd.
char *pool_decode_text(const Pool *p, const int *seq, int from, int to, size_t *len) {
    const size_t cap = emx_decoder_max_out(p->tk);
    char *text = malloc((size_t)(to - from + 1) * cap + 1);
    if (!text) return NULL;
    EmxDecoder d;
    emx_decoder_init(&d, p->tk, 1);
    size_t n = 0;
    for (int i = from; i < to; i++)
        if (!emx_is_stop(p->tk, seq[i])) n += emx_decoder_push(&d, seq[i], text + n, cap);
    n += emx_decoder_flush(&d, text + n, cap);
    text[n] = 0;
    *len = n;
    return text;
}

void pool_write_final(Pool *p, Worker *w, int interrupted) {
    const EmxPoolOptions *o = p->opt;
    pool_emit_final(p, w->seq, w->n_seq);  // an interrupted run shows what it had, accepted or not
    if (o->out) {
        size_t n = emx_decoder_flush(&p->dec, p->decbuf, emx_decoder_max_out(p->tk));
        errno = 0;
        fwrite(p->decbuf, 1, n, o->out);
        pool_flush_checked(o->out, &p->out_errno);
    }
    if (o->log) {
        size_t len = 0;
        char *text = pool_decode_text(p, w->seq, p->n_prompt, w->n_seq, &len);
        fprintf(o->log, "=== Final text%s (%d tokens) ===\n", interrupted ? " (interrupted)" : "", w->n_seq - p->n_prompt);
        if (text) fwrite(text, 1, len, o->log);
        fputc('\n', o->log);
        pool_flush_checked(o->log, &p->log_errno);
        free(text);
    }
}
