// token_log.c — --metrics JSON lines and --color (token_log.h).
#include "runtime/token_log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_utf8.h"

static const char *action_name(EmxAction a) {
    switch (a) {
    case EMX_ACTION_ARGMAX: return "argmax";
    case EMX_ACTION_INSERT: return "insert";
    case EMX_ACTION_SAMPLE: return "sample";
    case EMX_ACTION_BEST_OF_N: return "best_of_n";
    }
    return "?";
}

// cJSON writes NaN and infinities as null, which is what a missing value should read as.
static void add_num(cJSON *o, const char *key, double v) { cJSON_AddNumberToObject(o, key, v); }

static int add_piece(cJSON *o, const char *piece, size_t len) {
    size_t clean_len = 0;
    char *clean = tok_utf8_sanitize(piece ? piece : "", piece ? len : 0, &clean_len);
    if (!clean) return -1;
    // A JSON string cannot hold NUL: a token of a NUL byte (byte-fallback <0x00>) would cut the
    // string, so it is replaced too and the bytes are listed.
    int replaced = clean_len != len || memcmp(clean, piece ? piece : "", len) != 0 ||
                   memchr(clean, 0, clean_len) != NULL;
    for (size_t i = 0; i < clean_len; i++)
        if (clean[i] == 0) clean[i] = '?';
    cJSON_AddStringToObject(o, "piece", clean);
    free(clean);
    if (!replaced) {
        cJSON_AddNullToObject(o, "piece_bytes");
        return 0;
    }
    cJSON *bytes = cJSON_AddArrayToObject(o, "piece_bytes");
    for (size_t i = 0; i < len; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    return 0;
}

void emx_logprobs_compute(const float *logits, int n_vocab, int n, EmxLogprobs *lp) {
    if (n > EMX_MAX_LOGPROBS) n = EMX_MAX_LOGPROBS;
    if (n > n_vocab) n = n_vocab;
    if (n < 0) n = 0;
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];  // NaN compares false: skipped
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] > -INFINITY) sum += exp((double)logits[i] - (double)mx);
    lp->lse = mx > -INFINITY ? (double)mx + log(sum) : NAN;
    lp->chosen = NAN;
    // Insertion into a sorted list of at most n: a later id goes after an equal logit, so ties
    // keep the lower id first. Most logits fail the first compare against the n-th best.
    int k = 0;
    float v[EMX_MAX_LOGPROBS];
    for (int i = 0; i < n_vocab && n > 0; i++) {
        const float x = logits[i] == logits[i] ? logits[i] : -INFINITY;
        if (k == n && !(x > v[k - 1])) continue;
        int j = k < n ? k++ : n - 1;
        while (j > 0 && x > v[j - 1]) {
            v[j] = v[j - 1];
            lp->id[j] = lp->id[j - 1];
            j--;
        }
        v[j] = x;
        lp->id[j] = i;
    }
    lp->n = k;
    for (int j = 0; j < k; j++) lp->logprob[j] = (float)((double)v[j] - lp->lse);
}

static int logprob_tap_choose(EmxSampler *self, EmxState *st, const float *logits, int n_vocab, int pos) {
    EmxLogprobTap *t = (EmxLogprobTap *)self;
    emx_logprobs_compute(logits, n_vocab, t->n, &t->last);
    const int id = t->inner->choose(t->inner, st, logits, n_vocab, pos);
    if (id >= 0 && id < n_vocab) t->last.chosen = emx_logprob_of(&t->last, logits, id);
    return id;
}

void emx_logprob_tap_init(EmxLogprobTap *t, EmxSampler *inner, int n) {
    memset(t, 0, sizeof *t);
    t->base.choose = logprob_tap_choose;
    t->inner = inner;
    t->n = n;
}

static int add_top_logprobs(cJSON *o, const EmxTokenRecord *r) {
    const EmxLogprobs *lp = r->logprobs;
    cJSON *arr = cJSON_AddArrayToObject(o, "top_logprobs");
    if (!arr) return -1;
    const int n = r->n_logprobs < lp->n ? r->n_logprobs : lp->n;
    for (int j = 0; j < n; j++) {
        cJSON *e = cJSON_CreateObject();
        if (!e) return -1;
        cJSON_AddItemToArray(arr, e);
        cJSON_AddNumberToObject(e, "id", lp->id[j]);
        size_t len = 0;
        const char *piece = r->tk ? emx_token_bytes_ref(r->tk, lp->id[j], &len) : NULL;
        if (piece) {
            char *clean = tok_utf8_sanitize(piece, len, &len);
            if (!clean) return -1;
            for (size_t i = 0; i < len; i++)
                if (clean[i] == 0) clean[i] = '?';  // a JSON string cannot hold NUL
            cJSON_AddStringToObject(e, "piece", clean);
            free(clean);
        } else {
            cJSON_AddNullToObject(e, "piece");
        }
        add_num(e, "logprob", lp->logprob[j]);
    }
    add_num(o, "logprob", lp->chosen);
    return 0;
}

static cJSON *record_json(const EmxTokenRecord *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "index", r->index);
    cJSON_AddNumberToObject(o, "pos", r->pos);
    cJSON_AddNumberToObject(o, "id", r->id);
    if (add_piece(o, r->piece, r->piece_len) != 0) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddBoolToObject(o, "stop", r->is_stop);
    cJSON_AddStringToObject(o, "sampler", r->sampler ? r->sampler : "?");

    const EmxDecision *d = r->decision;
    int inserted = d && d->action == EMX_ACTION_INSERT;
    if (d) {
        cJSON_AddStringToObject(o, "case", emx_case_name(d->kase));
        cJSON_AddStringToObject(o, "action", action_name(d->action));
    } else {
        cJSON_AddNullToObject(o, "case");
        cJSON_AddStringToObject(o, "action", "sample");
    }
    cJSON_AddBoolToObject(o, "inserted", inserted);
    const EmxSamplerParams *p = d ? &d->params : r->params;
    if (p && !inserted) {
        cJSON_AddNumberToObject(o, "temperature", p->temperature);
        cJSON_AddNumberToObject(o, "top_k", p->top_k);
        cJSON_AddNumberToObject(o, "top_p", p->top_p);
        cJSON_AddNumberToObject(o, "min_p", p->min_p);
    } else {
        const char *keys[] = {"temperature", "top_k", "top_p", "min_p"};
        for (int i = 0; i < 4; i++) cJSON_AddNullToObject(o, keys[i]);
    }
    cJSON_AddNumberToObject(o, "n_samples", d && d->action == EMX_ACTION_BEST_OF_N ? d->n_samples : 1);
    add_num(o, "score", r->score);

    const EmxMetrics *m = r->metrics;
    const char *mkeys[] = {"logits_entropy_bits", "logits_varentropy_bits2", "attn_entropy_bits",
                           "attn_varentropy_heads_bits2", "attn_varentropy_true_bits2",
                           "attn_agreement", "attn_interaction_strength"};
    double mv[7] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    if (m) {
        mv[0] = m->logits_entropy_bits;
        mv[1] = m->logits_varentropy_bits2;
        mv[2] = m->attn_entropy_bits;
        mv[3] = m->attn_varentropy_heads_bits2;
        mv[4] = m->attn_varentropy_true_bits2;
        mv[5] = m->attn_agreement;
        mv[6] = m->attn_interaction_strength;
    }
    for (int i = 0; i < 7; i++) add_num(o, mkeys[i], mv[i]);
    if (r->is_agent) cJSON_AddNumberToObject(o, "agent", r->agent);
    else cJSON_AddNullToObject(o, "agent");
    add_num(o, "proposal_entropy_bits", r->is_agent ? r->proposal_entropy_bits : NAN);
    if (r->logprobs && add_top_logprobs(o, r) != 0) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *emx_token_log_string(const EmxTokenRecord *r) {
    cJSON *o = record_json(r);
    if (!o) return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int emx_token_log_json(FILE *f, const EmxTokenRecord *r) {
    char *line = emx_token_log_string(r);
    if (!line) return -1;
    int ok = fputs(line, f) >= 0 && fputc('\n', f) != EOF;
    free(line);
    return ok ? 0 : -1;
}

// Colours chosen to read on dark and light terminals: the common "flowing" case is the
// terminal's own colour so the text stays readable; the others stand out.
const char *emx_case_color(EmxCase c, int inserted) {
    if (inserted) return "\033[1;30;43m";  // black on yellow: a token the model did not sample
    switch (c) {
    case EMX_CASE_LELV: return "\033[0m";       // flowing: plain
    case EMX_CASE_HELV: return "\033[33m";      // treading carefully: yellow
    case EMX_CASE_LEHV: return "\033[36m";      // exploring forks: cyan
    case EMX_CASE_HEHV: return "\033[31m";      // resampling in the mist: red
    case EMX_CASE_ADAPTIVE: return "\033[35m";  // adaptive: magenta
    default: return "\033[0m";
    }
}

void emx_color_legend(FILE *f) {
    static const char *const labels[EMX_CASE_COUNT] = {
        "flowing (LELV, argmax)", "treading carefully (HELV)", "exploring forks (LEHV)",
        "resampling in the mist (HEHV)", "adaptive (best of N)"};
    fprintf(f, "colors:");
    for (int c = 0; c < EMX_CASE_COUNT; c++)
        fprintf(f, " %s%s%s", emx_case_color((EmxCase)c, 0), labels[c], EMX_COLOR_RESET);
    fprintf(f, " %s[inserted pause]%s\n", emx_case_color(EMX_CASE_HELV, 1), EMX_COLOR_RESET);
}
