// run_setup.c — the profile and the sampler ./run builds from its flags (run_setup.h).
#include "runtime/cli/run_setup.h"
#include "base/errmsg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/read_file.h"
#include "sampler/json_schema.h"

#define EMX_GRAMMAR_MAX_BYTES (1 << 20)  // a grammar or schema file: read no further

int emx_run_load_profile(const EmxCliArgs *a, EmxProfile *p, char *err, size_t errlen) {
    if (emx_profile_load(p, a->profile, err, errlen) != 0) return -1;
    for (int i = 0; i < a->n_profile_sets; i++) {
        char key[128];
        const char *set = a->profile_sets[i], *eq = strchr(set, '=');
        size_t klen = (size_t)(eq - set);
        if (klen >= sizeof key) klen = sizeof key - 1;
        memcpy(key, set, klen);
        key[klen] = 0;
        char why[256];
        if (emx_profile_set(p, key, eq + 1, why, sizeof why) != 0) {
            emx_seterr(err, errlen, "--profile-set %s: %s", set, why);
            return -1;
        }
    }
    return 0;
}

void emx_run_profile_flags(const EmxCliArgs *a, EmxProfile *p) {
    if (a->metric_layer_given) p->attn_layer = a->metric_layer;
    if (a->temp_given) p->temperature = a->sampling.temperature;
    if (a->top_k_given) p->top_k = a->sampling.top_k;
    if (a->top_p_given) p->top_p = a->sampling.top_p;
    if (a->min_p_given) p->min_p = a->sampling.min_p;
}

int emx_run_build_profile(const EmxCliArgs *a, EmxProfile *p, char *err, size_t errlen) {
    if (emx_run_load_profile(a, p, err, errlen) != 0) return -1;
    emx_run_profile_flags(a, p);
    return 0;
}

// The sampler of a->sampler without the logit rules.
static int init_inner(EmxRunSampler *rs, const EmxCliArgs *a, const EmxProfile *profile, const EmxModel *m,
                      const EmxTokenizer *tk, int ctx, uint64_t seed, int want_metrics, char *err, size_t errlen) {
    const int entropix = a->sampler == EMX_SAMPLER_ENTROPIX;
    rs->entropix = entropix;
    rs->params = entropix ? (EmxSamplerParams){.temperature = (float)profile->temperature,
                                               .top_k = profile->top_k,
                                               .top_p = (float)profile->top_p,
                                               .min_p = (float)profile->min_p}
                          : emx_cli_effective_sampling(a);
    if (entropix) {
        if (emx_entropix_sampler_init(&rs->es, profile, m, tk, ctx, seed, err, errlen) != 0) return -1;
        rs->sampler = &rs->es.base;
        rs->es.spec.want_metrics = want_metrics;  // on a GPU the metrics come back only for the log
        return 0;
    }
    if (emx_basic_sampler_init(&rs->basic, &rs->params, seed, (int)m->cfg.vocab_size, err, errlen) != 0) return -1;
    rs->sampler = &rs->basic.base;
    if (want_metrics) {  // the metrics are computed beside the basic sampler, for the log
        char why[256];
        if (emx_metrics_tap_init(&rs->tap, &rs->basic.base, m, ctx, a->metric_layer, why, sizeof why) != 0) {
            emx_seterr(err, errlen, "--metric-layers: %s", why);
            return -1;
        }
        rs->sampler = &rs->tap.base;
        rs->tapped = 1;
    }
    return 0;
}

// The grammar a's flags give, compiled into *g (NULL when none). 0, or -1 with a reason that
// names the flag.
static int load_grammar(const EmxCliArgs *a, EmxGrammar **g, char *err, size_t errlen) {
    *g = NULL;
    if (a->json_object) return emx_grammar_json_object(g, err, errlen);
    const int schema = a->json_schema || a->json_schema_file;
    const char *text = a->grammar ? a->grammar : a->json_schema, *path = a->grammar_file ? a->grammar_file : a->json_schema_file;
    const char *flag = a->grammar ? "--grammar" : a->json_schema ? "--json-schema" : a->grammar_file ? "--grammar-file"
                                                                                                    : "--json-schema-file";
    if (!text && !path) return 0;
    size_t len = text ? strlen(text) : 0;
    char *owned = NULL, why[384];
    if (path && !(text = owned = emx_read_file_max(path, EMX_GRAMMAR_MAX_BYTES, &len)))
        return emx_seterr(err, errlen, "%s %s: %s", flag, path,
                          errno == EFBIG ? "larger than 1 MiB, more than a grammar needs" : strerror(errno));
    const int rc = schema ? emx_grammar_from_json_schema(text, len, g, why, sizeof why)
                          : emx_grammar_parse(text, len, g, why, sizeof why);
    free(owned);
    if (rc != 0) return emx_seterr(err, errlen, "%s%s%s: %s", flag, path ? " " : "", path ? path : "", why);
    return 0;
}

int emx_run_grammar_check(const EmxCliArgs *a, char *err, size_t errlen) {
    EmxGrammar *g = NULL;
    const int rc = load_grammar(a, &g, err, errlen);
    if (g) emx_grammar_free(g);
    return rc;
}

int emx_run_sampler_init(EmxRunSampler *rs, const EmxCliArgs *a, const EmxProfile *profile, const EmxModel *m,
                         const EmxTokenizer *tk, int ctx, uint64_t seed, int want_metrics, char *err, size_t errlen) {
    if (init_inner(rs, a, profile, m, tk, ctx, seed, want_metrics, err, errlen) != 0) return -1;
    if (load_grammar(a, &rs->grammar, err, errlen) != 0) return -1;
    if (!emx_logit_rules_active(&a->rules) && !rs->grammar) return 0;
    EmxLogitRules rules = a->rules;
    if (rs->grammar) {
        if (!rs->trie && !(rs->trie = rs->own_trie = emx_token_trie_new(tk, err, errlen))) return -1;
        rules.grammar = rs->grammar, rules.trie = rs->trie, rules.tk = tk;
    }
    if (emx_logit_filter_init(&rs->filter, rs->sampler, &rules, (int)m->cfg.vocab_size, ctx, err, errlen) != 0)
        return -1;
    rs->sampler = &rs->filter.base;
    return 0;
}

void emx_run_sampler_prompt(EmxRunSampler *rs, const int *ids, int n) {
    if (rs->sampler == &rs->filter.base) emx_logit_filter_prompt(&rs->filter, ids, n);
}

void emx_run_sampler_free(EmxRunSampler *rs) {
    emx_logit_filter_free(&rs->filter);
    if (rs->grammar) emx_grammar_free(rs->grammar);
    if (rs->own_trie) emx_token_trie_free(rs->own_trie);
    rs->grammar = NULL, rs->own_trie = NULL;
    emx_metrics_tap_free(&rs->tap);
    emx_entropix_sampler_free(&rs->es);
    emx_basic_sampler_free(&rs->basic);
    rs->sampler = NULL;
}

EmxTokenRecord emx_run_sampler_record(const EmxRunSampler *rs, const EmxTokenizer *tk, const char *sampler_name,
                                      int index, int id, int pos, int is_stop) {
    EmxTokenRecord r = {.index = index, .id = id, .pos = pos, .is_stop = is_stop, .sampler = sampler_name,
                        .score = NAN};
    r.piece = emx_token_bytes_ref(tk, id, &r.piece_len);
    if (rs->entropix) {
        r.metrics = &rs->es.last_metrics;
        r.decision = &rs->es.last_decision;
        r.score = rs->es.last_score;
    } else {
        r.params = &rs->params;
        if (rs->tapped) r.metrics = &rs->tap.last_metrics;
    }
    return r;
}
