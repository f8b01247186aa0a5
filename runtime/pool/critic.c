// critic.c — the agent pool's critic (semantics in critic.h).
#include "runtime/pool/critic.h"
#include "runtime/pool/pool_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"
#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/forward.h"

// Stands for the user message while the template is rendered once at creation; the text
// around it is the head and tail of every prompt. Plain ASCII without whitespace, so Llama 3's
// trim of the content leaves it alone.
#define USER_MARK "@@EMX_CRITIC_USER_MESSAGE@@"
#define TEXT_PREFIX "Text: "

struct EmxCritic {
    const EmxModel *m;
    const EmxTokenizer *tk;
    EmxModel own_model;        // emx_critic_open only (owns_model): m points here
    EmxTokenizer *own_tk;      // emx_critic_open only
    int owns_model;
    EmxState *st;              // the critic's own sequence: KV cache and buffers
    int ctx;
    float margin;
    int good_id, bad_id;
    int *head, n_head;         // [n_head] template text before the user message (BOS, headers)
    int *tail, n_tail;         // [n_tail] after it (end of turn, generation prompt)
    char *suffix;              // "\nQuestion: " + question (+ "\nAnswer:" without a template)
    size_t suffix_len;
    int *cache_ids, n_cache;   // [ctx] the ids whose K/V sit at positions 0..n_cache-1 of st
    uint64_t tokens_fed;
};

// ---------------------------------------------------------------------------------------------
// The verdict rule.

int emx_critic_verdict_pair(const EmxLogitPair *p, float margin, EmxVerdict *v) {
    memset(v, 0, sizeof *v);
    int good_ok = isfinite(p->logit_a), bad_ok = isfinite(p->logit_b);
    if (isnan(margin) || (!good_ok && !bad_ok)) return -1;  // else a candidate is finite: so is max
    // (l - max) - log(sum), not l - (max + log(sum)): with logits of 1e30 the latter would
    // round log(sum) away.
    double log_sum = log(p->sum);
    v->logp_good = good_ok ? ((double)p->logit_a - (double)p->max) - log_sum : -INFINITY;
    v->logp_bad = bad_ok ? ((double)p->logit_b - (double)p->max) - log_sum : -INFINITY;
    // The difference of the log-probs is the difference of the logits: taken directly, the
    // comparison with the margin is exact (no log-sum-exp rounding on either side).
    if (good_ok && bad_ok) v->diff = (double)p->logit_b - (double)p->logit_a;
    else v->diff = good_ok ? -INFINITY : INFINITY;
    v->bad = v->diff > (double)margin;  // a tie stays GOOD
    return 0;
}

int emx_critic_verdict(const float *logits, int n_vocab, int good_id, int bad_id, float margin,
                       EmxVerdict *v) {
    memset(v, 0, sizeof *v);
    EmxLogitPair p;
    if (emx_logit_pair(logits, n_vocab, good_id, bad_id, &p) != 0) return -1;
    return emx_critic_verdict_pair(&p, margin, v);
}

// ---------------------------------------------------------------------------------------------
// Prompt construction.

// "[12 345 6]" into buf (truncated to cap): token ids of an encoding, for error messages.
static const char *ids_str(const int *ids, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        int w = snprintf(buf + k, cap - k, "%s%d", i ? " " : "[", ids[i]);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (k + 1 < cap) snprintf(buf + k, cap - k, n ? "]" : "[]");
    return buf;
}

// The candidate token of one answer: the first token of its encoding (no BOS, no special
// tokens). *enc receives the whole encoding (caller frees) for the error message.
static int answer_token(const EmxTokenizer *tk, const char *answer, int *id, int **enc,
                        size_t *n_enc, char *err, size_t errlen) {
    const TokenizerData *td = emx_tokenizer_data(tk);
    // An SPM tokenizer with a dummy prefix puts the space before the first piece itself;
    // encoding " GOOD" would give two spaces ("▁▁GOOD") instead of the in-context "▁GOOD".
    if (td->kind == EMX_TOK_SPM && (td->flags & EMX_TOKF_ADD_SPACE_PREFIX) && answer[0] == ' ')
        answer++;
    if (emx_encode(tk, answer, strlen(answer), 0, enc, n_enc, err, errlen) != 0) return -1;
    if (*n_enc == 0) return emx_seterr(err, errlen, "critic: answer \"%s\" encodes to no token", answer);
    *id = (*enc)[0];
    return 0;
}

static int pick_candidates(EmxCritic *c, int chat, char *err, size_t errlen) {
    const char *good = chat ? "GOOD" : " GOOD", *bad = chat ? "BAD" : " BAD";
    int *eg = NULL, *eb = NULL;
    size_t ng = 0, nb = 0;
    int rc = -1;
    if (answer_token(c->tk, good, &c->good_id, &eg, &ng, err, errlen) != 0) goto done;
    if (answer_token(c->tk, bad, &c->bad_id, &eb, &nb, err, errlen) != 0) goto done;
    if (c->good_id == c->bad_id) {
        char sg[128], sb[128];
        emx_seterr(err, errlen,
                   "critic: answers \"%s\" %s and \"%s\" %s start with the same token %d: the first "
                   "token cannot tell them apart",
                   good, ids_str(eg, ng, sg, sizeof sg), bad, ids_str(eb, nb, sb, sizeof sb), c->good_id);
        goto done;
    }
    if (c->good_id >= (int)c->m->cfg.vocab_size || c->bad_id >= (int)c->m->cfg.vocab_size) {
        emx_seterr(err, errlen, "critic: answer tokens %d/%d are outside the model's vocabulary (%u)",
                   c->good_id, c->bad_id, c->m->cfg.vocab_size);
        goto done;
    }
    rc = 0;
done:
    free(eg);
    free(eb);
    return rc;
}

static int encode_ints(const EmxTokenizer *tk, const char *text, size_t len, int flags, int **ids,
                       int *n, char *err, size_t errlen) {
    size_t k = 0;
    if (emx_encode(tk, text, len, flags, ids, &k, err, errlen) != 0) return -1;
    *n = (int)k;  // template fragments: a few dozen tokens
    return 0;
}

// Head, tail and the fixed end of the body: the template rendered once around USER_MARK.
static int build_frame(EmxCritic *c, const char *question, char *err, size_t errlen) {
    uint32_t family = c->m->cfg.chat_template;
    int chat = family != EMX_CHAT_NONE;
    size_t qlen = strlen(question);
    // Without a template the model sees a plain question and answer; "Answer:" is where a
    // base model's next token is the answer.
    const char *after = chat ? "" : "\nAnswer:";
    c->suffix_len = strlen("\nQuestion: ") + qlen + strlen(after);
    c->suffix = malloc(c->suffix_len + 1);
    if (!c->suffix) return emx_seterr(err, errlen, "critic: out of memory");
    snprintf(c->suffix, c->suffix_len + 1, "\nQuestion: %s%s", question, after);

    if (!chat) {
        // The raw prompt is the body alone, with BOS when the tokenizer adds one.
        if (encode_ints(c->tk, "", 0, EMX_ENC_BOS, &c->head, &c->n_head, err, errlen) != 0) return -1;
        c->tail = malloc(sizeof(int));
        if (!c->tail) return emx_seterr(err, errlen, "critic: out of memory");
        c->n_tail = 0;
        return pick_candidates(c, 0, err, errlen);
    }
    EmxChatMessage msg = {.role = "user", .content = USER_MARK};
    // Qwen3: no thinking, so the answer is the next token after the empty <think></think>.
    EmxChatOptions co = {.add_generation_prompt = 1, .enable_thinking = 0};
    char *r = emx_chat_render(family, &msg, 1, &co, err, errlen);
    if (!r) return -1;
    char *at = strstr(r, USER_MARK);
    int rc = -1;
    if (!at || strstr(at + 1, USER_MARK)) {
        emx_seterr(err, errlen, "critic: the %s chat template does not render the user message once",
                   emx_chat_template_name(family));
        goto done;
    }
    // The template's BOS wins (no second one), as in emx_prompt_ids.
    int head_flags = EMX_ENC_SPECIAL | (emx_chat_template_adds_bos(family) ? 0 : EMX_ENC_BOS);
    if (encode_ints(c->tk, r, (size_t)(at - r), head_flags, &c->head, &c->n_head, err, errlen) != 0)
        goto done;
    const char *t = at + strlen(USER_MARK);
    if (encode_ints(c->tk, t, strlen(t), EMX_ENC_SPECIAL, &c->tail, &c->n_tail, err, errlen) != 0)
        goto done;
    rc = pick_candidates(c, 1, err, errlen);
done:
    free(r);
    return rc;
}

// Prompt ids for text[0..len) as is: head + encode("Text: " + text + suffix) + tail.
static int assemble(const EmxCritic *c, const char *text, size_t len, int **ids, int *n_ids,
                    char *err, size_t errlen) {
    size_t pre = strlen(TEXT_PREFIX), blen = pre + len + c->suffix_len;
    char *body = malloc(blen);
    if (!body) return emx_seterr(err, errlen, "critic: out of memory for a %zu-byte text", len);
    memcpy(body, TEXT_PREFIX, pre);
    if (len) memcpy(body + pre, text, len);
    memcpy(body + pre + len, c->suffix, c->suffix_len);
    int *b = NULL;
    size_t nb = 0;
    // No special-token parsing: generated text is data, not markup.
    int rc = emx_encode(c->tk, body, blen, 0, &b, &nb, err, errlen);
    free(body);
    if (rc != 0) return -1;
    size_t n = (size_t)c->n_head + nb + (size_t)c->n_tail;
    if (n > (size_t)1 << 30) {
        free(b);
        return emx_seterr(err, errlen, "critic: prompt of %zu tokens is too long", n);
    }
    int *out = malloc(n * sizeof(int));
    if (!out) {
        free(b);
        return emx_seterr(err, errlen, "critic: out of memory");
    }
    memcpy(out, c->head, (size_t)c->n_head * sizeof(int));
    memcpy(out + c->n_head, b, nb * sizeof(int));
    memcpy(out + c->n_head + nb, c->tail, (size_t)c->n_tail * sizeof(int));
    free(b);
    *ids = out;
    *n_ids = (int)n;
    return 0;
}

static int is_utf8_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

int emx_critic_prompt_ids(const EmxCritic *c, const char *text, size_t len, int **ids, int *n_ids,
                          size_t *dropped_bytes, char *err, size_t errlen) {
    *ids = NULL;
    *n_ids = 0;
    *dropped_bytes = 0;
    if (!text) {
        text = "";
        len = 0;
    }
    if (assemble(c, text, len, ids, n_ids, err, errlen) != 0) return -1;
    if (*n_ids <= c->ctx) return 0;
    // Too long: drop whole characters from the front. The frame alone must fit; then binary
    // search the smallest drop (at a character start) that fits: lo never fits, hi always does.
    free(*ids);
    if (assemble(c, text + len, 0, ids, n_ids, err, errlen) != 0) return -1;
    if (*n_ids > c->ctx) {
        int frame = *n_ids;
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
        return emx_seterr(err, errlen,
                          "critic: the prompt without any text is %d tokens, more than the critic's context (%d)",
                          frame, c->ctx);
    }
    free(*ids);
    *ids = NULL;
    size_t lo = 0, hi = len;
    const unsigned char *u = (const unsigned char *)text;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, m = mid;
        while (m > lo && is_utf8_continuation(u[m])) m--;
        if (m == lo) {
            m = mid;
            while (m < hi && is_utf8_continuation(u[m])) m++;
            if (m == hi) break;  // no character starts strictly between lo and hi
        }
        int *t = NULL, nt = 0;
        if (assemble(c, text + m, len - m, &t, &nt, err, errlen) != 0) return -1;
        free(t);
        if (nt <= c->ctx) hi = m;
        else lo = m;
    }
    *dropped_bytes = hi;
    return assemble(c, text + hi, len - hi, ids, n_ids, err, errlen);
}

// ---------------------------------------------------------------------------------------------
// Lifetime.

static int critic_init(EmxCritic *c, const EmxModel *m, const EmxTokenizer *tk,
                       const EmxCriticOptions *opt, char *err, size_t errlen) {
    EmxCriticOptions o = opt ? *opt : (EmxCriticOptions){0};
    c->m = m;
    c->tk = tk;
    if (!isfinite(o.margin)) return emx_seterr(err, errlen, "critic: margin %g is not a finite number", o.margin);
    c->margin = o.margin;
    const char *question = o.question ? o.question : EMX_CRITIC_QUESTION;
    int max_ctx = m->cfg.max_seq_len > 0 && m->cfg.max_seq_len < 2048 ? (int)m->cfg.max_seq_len : 2048;
    EmxStateOptions so = {.n_threads = o.n_threads, .ctx = o.ctx > 0 ? o.ctx : max_ctx, .device = o.device};
    c->st = emx_state_new(m, &so, err, errlen);
    if (!c->st) return -1;
    c->ctx = emx_state_ctx(c->st);
    c->cache_ids = malloc((size_t)c->ctx * sizeof(int));
    if (!c->cache_ids) return emx_seterr(err, errlen, "critic: out of memory");
    return build_frame(c, question, err, errlen);
}

EmxCritic *emx_critic_new(const EmxModel *m, const EmxTokenizer *tk, const EmxCriticOptions *opt,
                          char *err, size_t errlen) {
    if (!m || !tk) {
        emx_seterr(err, errlen, "critic: no model or tokenizer given");
        return NULL;
    }
    EmxCritic *c = calloc(1, sizeof *c);
    if (!c) {
        emx_seterr(err, errlen, "critic: out of memory");
        return NULL;
    }
    if (critic_init(c, m, tk, opt, err, errlen) != 0) {
        emx_critic_free(c);
        return NULL;
    }
    return c;
}

EmxCritic *emx_critic_open(const char *path, const EmxCriticOptions *opt, char *err, size_t errlen) {
    EmxCritic *c = calloc(1, sizeof *c);
    if (!c) {
        emx_seterr(err, errlen, "critic: out of memory");
        return NULL;
    }
    if (emx_model_open(&c->own_model, path, err, errlen) != 0) {
        free(c);
        return NULL;
    }
    c->owns_model = 1;
    c->own_tk = emx_tokenizer_new(&c->own_model.tok, err, errlen);
    if (!c->own_tk || critic_init(c, &c->own_model, c->own_tk, opt, err, errlen) != 0) {
        emx_critic_free(c);
        return NULL;
    }
    return c;
}

void emx_critic_free(EmxCritic *c) {
    if (!c) return;
    emx_state_free(c->st);
    free(c->cache_ids);
    free(c->head);
    free(c->tail);
    free(c->suffix);
    if (c->owns_model) {
        emx_tokenizer_free(c->own_tk);
        emx_model_close(&c->own_model);
    }
    free(c);
}

// ---------------------------------------------------------------------------------------------
// Judging.

int emx_critic_judge(EmxCritic *c, const char *text, size_t len, EmxVerdict *v, char *err,
                     size_t errlen) {
    double t0 = emx_now_s();
    int *ids = NULL, n = 0;
    size_t dropped = 0;
    if (emx_critic_prompt_ids(c, text, len, &ids, &n, &dropped, err, errlen) != 0) return -1;
    // Reuse the cached K/V of the longest common prefix; the last token is always fed, since
    // its logits are the answer.
    int reuse = 0;
    while (reuse < n && reuse < c->n_cache && ids[reuse] == c->cache_ids[reuse]) reuse++;
    if (reuse == n) reuse = n - 1;
    // Only the two answers' logits and the row's max and sum come back (on a GPU the row stays
    // there, and a short suffix is one captured graph).
    EmxLogitPair pair;
    if (emx_forward_pair(c->st, ids + reuse, n - reuse, reuse, c->good_id, c->bad_id, &pair) != 0) {
        c->n_cache = reuse;  // positions before `reuse` were not touched
        free(ids);
        return emx_seterr(err, errlen, "critic: forward pass refused %d tokens at position %d (context %d): %s",
                          n - reuse, reuse, c->ctx, emx_state_error(c->st));
    }
    memcpy(c->cache_ids, ids, (size_t)n * sizeof(int));
    c->n_cache = n;
    c->tokens_fed += (uint64_t)(n - reuse);
    free(ids);
    if (emx_critic_verdict_pair(&pair, c->margin, v) != 0)
        return emx_seterr(err, errlen, "critic: no verdict: the logits of GOOD (id %d: %g) and BAD (id %d: %g) are both non-finite",
                          c->good_id, (double)pair.logit_a, c->bad_id, (double)pair.logit_b);
    v->n_prompt = n;
    v->n_fed = n - reuse;
    v->dropped_bytes = dropped;
    v->seconds = emx_now_s() - t0;
    return 0;
}

void emx_critic_candidates(const EmxCritic *c, int *good_id, int *bad_id) {
    if (good_id) *good_id = c->good_id;
    if (bad_id) *bad_id = c->bad_id;
}

const EmxTokenizer *emx_critic_tokenizer(const EmxCritic *c) { return c->tk; }
int emx_critic_ctx(const EmxCritic *c) { return c->ctx; }
uint64_t emx_critic_tokens_fed(const EmxCritic *c) { return c->tokens_fed; }
const EmxState *emx_critic_state(const EmxCritic *c) { return c->st; }
const EmxModel *emx_critic_model(const EmxCritic *c) { return c->m; }
