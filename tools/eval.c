// eval.c — eval MODEL.bin TASKS.jsonl [...] [--config NAME[:k=v,...]]... : answer accuracy of
// sampler configurations, with statistics (docs/eval.md). Every task file and config is checked
// before the first generation; each result is appended to -o as it finishes, and a rerun skips
// what is there. Exit status: 0 ok, 1 runtime error, 2 bad flag, task file or config.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/errmsg.h"
#include "runtime/cli/run_pool.h"
#include "runtime/model.h"
#include "runtime/convert/gguf_cache.h"
#include "runtime/cli/run_io.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/eval/checks.h"
#include "tools/eval/cli.h"
#include "tools/eval/config.h"
#include "tools/eval/pages.h"
#include "tools/eval/report.h"
#include "tools/eval/results.h"
#include "tools/eval/runner.h"
#include "tools/eval/tasks.h"

typedef struct {
    EvalArgs a;
    EvalTaskFile files[EVAL_MAX_FILES];
    const EvalItem **items;  // --limit applied, files in order
    int n_items;
    EvalConfig configs[EVAL_MAX_CONFIGS];
    int n_configs;
} Eval;

// Progress on stderr: a \r-updated line on a terminal, a line every 5 s otherwise. The ETA
// prices what is left of each kind (single stream, agents: several times slower) at that
// kind's mean time per generation so far (the other kind's while it has none).
typedef struct {
    long total, done, resumed, generated;
    long left[2], gen[2];  // [0] single-stream, [1] agents: still to do / generated
    double spent[2];       // seconds of those generations
    double t0, last;
    int tty;
} Progress;

static void progress(Progress *p, const char *config, int final) {
    const double now = emx_now_s();
    if (!final && !p->tty && now - p->last < 5.0) return;
    p->last = now;
    const double el = now - p->t0, rate = el > 0 ? (double)p->generated / el : 0.0;
    const long left = p->total - p->done;
    double eta = 0;
    for (int k = 0; k < 2; k++) {
        const int from = p->gen[k] ? k : 1 - k;
        if (p->left[k] && !p->gen[from]) eta = -1;
        if (eta >= 0 && p->left[k]) eta += (double)p->left[k] * p->spent[from] / (double)p->gen[from];
    }
    char etas[32] = "?";
    if (eta >= 0) snprintf(etas, sizeof etas, "%.0fs", eta);
    fprintf(stderr, "%seval: %ld/%ld done (%ld from the results file), %.2f gen/s, ETA %s, %s%s", p->tty ? "\r" : "",
            p->done, p->total, p->resumed, rate, left ? etas : "0s", config, p->tty && !final ? "   " : "\n");
}

// Task files and configs, all checked before anything else. Returns 0 or 2 (said on stderr).
static int load_inputs(Eval *e, char *err, size_t errlen) {
    int cap = 0;
    for (int f = 0; f < e->a.n_tasks; f++) {
        if (eval_tasks_load(e->a.tasks[f], &e->files[f], err, errlen) != 0) return 2;
        cap += e->files[f].n;
    }
    if (!(e->items = malloc((size_t)cap * sizeof *e->items))) return 2;
    for (int f = 0; f < e->a.n_tasks; f++)
        for (int i = 0; i < e->files[f].n && (e->a.limit == 0 || i < e->a.limit); i++)
            e->items[e->n_items++] = &e->files[f].items[i];
    if (eval_items_unique(e->items, e->n_items, err, errlen) != 0) return 2;
    for (int c = 0; c < e->a.n_configs; c++) {
        for (int d = 0; d < c; d++)
            if (strcmp(e->a.configs[c], e->a.configs[d]) == 0)
                return emx_seterr(err, errlen, "config '%s' given twice", e->a.configs[c]), 2;
        if (eval_config_parse(e->a.configs[c], e->a.model, &e->configs[c], err, errlen) != 0) return 2;
        e->n_configs++;
        EmxRunPoolSetup ps;  // the pool's flags checked now, as ./run checks them, not at its first item
        char why[256];
        const EmxCliArgs *ca = &e->configs[c].args;
        const int bad = ca->sampler == EMX_SAMPLER_AGENTS ? emx_run_pool_setup(ca, &ps, why, sizeof why) : 0;
        if (bad) return emx_seterr(err, errlen, "config '%s': %s", e->a.configs[c], why), bad;
        if (ca->sampler == EMX_SAMPLER_BRANCH && e->a.report_dir)  // its branches are no single token stream
            return emx_seterr(err, errlen, "config '%s': --report-dir has no page for the branching decoder",
                              e->a.configs[c]), 2;
    }
    // every page's name fits and is its own, before the model is even loaded
    if (e->a.report_dir &&
        eval_pages_check(e->items, e->n_items, e->configs, e->n_configs, e->a.seeds, e->a.report_dir, err, errlen) != 0)
        return 2;
    return 0;
}

// Every (item, config) prompt renders and fits the context before the first generation.
static int check_prompts(const Eval *e, const EvalRunner *r, char *err, size_t errlen) {
    const int has_template = r->m->cfg.chat_template != EMX_CHAT_NONE;
    for (int i = 0; i < e->n_items; i++) {
        const EvalItem *it = e->items[i];
        const char *file = it->file;
        if (it->chat && !has_template)
            return emx_seterr(err, errlen, "%s:%d: field 'messages': %s has no chat template (use 'prompt')", file, it->line,
                            e->a.model), 2;
        for (int c = 0; c < e->n_configs; c++) {
            int *ids = NULL, n_ids = 0;
            char why[256];
            if (eval_prompt_ids(r, it, &e->configs[c], &ids, &n_ids, why, sizeof why) != 0)
                return emx_seterr(err, errlen, "%s:%d: %s", file, it->line, why), 2;
            free(ids);
            const EvalConfig *cf = &e->configs[c];
            if (cf->commit_item && it->n_answer_alphabet == 0 && !cf->args.answer_alphabet)
                return emx_seterr(err, errlen, "%s:%d: config '%s' (commit=1) needs the item's answer_alphabet", file,
                                  it->line, cf->spec), 2;
            const int ctx = eval_runner_ctx(r, &e->configs[c]);
            if (n_ids >= ctx)
                return emx_seterr(err, errlen, "%s:%d: the prompt is %d tokens, the context is %d", file, it->line, n_ids,
                                ctx), 2;
        }
    }
    return 0;
}

static int is_agents(const EvalConfig *c) { return c->args.sampler == EMX_SAMPLER_AGENTS; }

// One (item, config, seed): skipped when the results file has it, else generated, checked and
// appended. Returns 0 or 1 (said in err).
static int run_one(EvalRunner *r, EvalResults *res, Progress *p, const EvalItem *it, const EvalConfig *cfg, int s,
                   char *err, size_t errlen) {
    const int k = is_agents(cfg);
    p->done++, p->left[k]--;
    if (eval_results_find(res, it->family, it->id, cfg->spec, (uint64_t)s)) {
        p->resumed++;
        return 0;
    }
    EvalGen g;
    char why[512];
    if (eval_generate(r, cfg, it, (uint64_t)s, &g, why, sizeof why) != 0)
        return emx_seterr(err, errlen, "%s, config '%s', seed %d: %s", it->id, cfg->spec, s, why), 1;
    char *extracted = NULL;
    int ok = eval_check(it, g.text, &extracted);
    int rc = eval_results_add(res, it, cfg, (uint64_t)s, &g, extracted, ok, err, errlen);
    free(extracted);
    const double spent = g.time_s;
    eval_gen_free(&g);
    if (rc) return 1;
    p->generated++, p->gen[k]++, p->spent[k] += spent;
    progress(p, cfg->spec, 0);
    return 0;
}

// Every (item, config, seed) not in the results file yet. The single-stream configs run
// item-major: every (config, seed) of an item follows the others, so the item's prompt is
// prefilled once and each generation runs only its last token (runner.c, cache_prefix). The
// agents configs run after, config-major: each has replicas of its own and keeps its critic
// across its items. Returns 0 or 1 (said in err).
static int run_all(Eval *e, EvalRunner *r, EvalResults *res, char *err, size_t errlen) {
    Progress p = {.t0 = emx_now_s(), .tty = isatty(STDERR_FILENO)};
    for (int c = 0; c < e->n_configs; c++) {
        const long n = (long)(e->configs[c].deterministic ? 1 : e->a.seeds) * e->n_items;
        p.total += n, p.left[is_agents(&e->configs[c])] += n;
    }
    for (int i = 0; i < e->n_items; i++)
        for (int c = 0; c < e->n_configs; c++)
            for (int s = 0; !is_agents(&e->configs[c]) && s < (e->configs[c].deterministic ? 1 : e->a.seeds); s++)
                if (run_one(r, res, &p, e->items[i], &e->configs[c], s, err, errlen)) return 1;
    for (int c = 0; c < e->n_configs; c++)
        for (int s = 0; is_agents(&e->configs[c]) && s < (e->configs[c].deterministic ? 1 : e->a.seeds); s++)
            for (int i = 0; i < e->n_items; i++)
                if (run_one(r, res, &p, e->items[i], &e->configs[c], s, err, errlen)) return 1;
    progress(&p, "finished", 1);
    return 0;
}

// The summary to stdout and --json. Returns 0 or 1.
static int summarize(const Eval *e, const EvalResults *res, char *err, size_t errlen) {
    EvalSummaryInput in = {.items = e->items, .n_items = e->n_items, .configs = e->configs,
                           .n_configs = e->n_configs, .n_seeds = e->a.seeds, .results = res};
    if (eval_summary_print(stdout, &in) != 0) return emx_seterr(err, errlen, "the summary: out of memory"), 1;
    if (!e->a.json) return 0;
    EmxOut out;  // written whole (base/out_file.h)
    char why[512];
    if (emx_out_open(&out, e->a.json, EMX_OUT_REPLACE, why, sizeof why) != 0) return emx_seterr(err, errlen, "--json %s", why), 1;
    if (eval_summary_json(out.f, &in, e->a.model) != 0)
        return emx_out_discard(&out), emx_seterr(err, errlen, "--json %s: write failed", e->a.json), 1;
    if (emx_out_close(&out, why, sizeof why) != 0) return emx_seterr(err, errlen, "--json %s", why), 1;
    return 0;
}

// --report-dir: made if missing (its parent must exist), and writable. Returns 0 or 1.
static int report_dir(const char *dir, char *err, size_t errlen) {
    struct stat sb;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return emx_seterr(err, errlen, "--report-dir %s: %s", dir, strerror(errno)), 1;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return emx_seterr(err, errlen, "--report-dir %s: not a folder", dir), 1;
    if (access(dir, W_OK | X_OK) != 0) return emx_seterr(err, errlen, "--report-dir %s: %s", dir, strerror(errno)), 1;
    return 0;
}

static int run_eval(Eval *e, char *err, size_t errlen) {
    EmxRunPath in[EVAL_MAX_FILES + 1] = {{"the model file", e->a.model}};
    for (int f = 0; f < e->a.n_tasks; f++) in[f + 1] = (EmxRunPath){"a task file", e->a.tasks[f]};
    const EmxRunPath out[] = {{"-o", e->a.out}, {"--json", e->a.json}};
    const EmxOutKind kinds[] = {EMX_OUT_APPEND, EMX_OUT_REPLACE};  // -o is appended to and read back
    if (emx_run_check_outputs(in, e->a.n_tasks + 1, out, 2, err, errlen) != 0 ||
        emx_run_check_output_kinds(out, kinds, 2, err, errlen) != 0)
        return 2;
    char why[4200];  // --report-dir checked before the model opens, made only after it has
    if (e->a.report_dir && emx_out_check_folder(e->a.report_dir, why, sizeof why) != 0)
        return emx_seterr(err, errlen, "--report-dir %s", why), 2;
    int rc = load_inputs(e, err, errlen);
    if (rc) return rc;
    EmxModel m;
    char file[4096];  // the model path, or a GGUF's converted cache file (gguf_cache.h)
    if (emx_gguf_model_path(e->a.model, NULL, "eval", file, sizeof file, err, errlen) ||
        emx_model_open_load(&m, file, emx_load_for_device(e->a.device, 0), err, errlen) != 0)
        return 1;
    EmxTokenizer *tk = emx_tokenizer_new(&m.tok, err, errlen);
    EvalRunner r = {0};
    EvalResults res = {0};
    rc = 1;
    if (tk && eval_runner_init(&r, &m, tk, e->a.device, e->a.threads, err, errlen) == 0) {
        rc = check_prompts(e, &r, err, errlen);
        if (!rc && e->a.report_dir) rc = report_dir(e->a.report_dir, err, errlen);
        if (!rc) rc = eval_results_open(&res, e->a.out, e->a.model, err, errlen) ? 2 : 0;
        r.report_dir = e->a.report_dir;
        if (!rc) rc = run_all(e, &r, &res, err, errlen);
        if (!rc) rc = summarize(e, &res, err, errlen);
        char why[256];
        if (eval_results_close(&res, why, sizeof why) != 0 && !rc) rc = (emx_seterr(err, errlen, "%s", why), 1);
    }
    eval_runner_free(&r);
    if (tk) emx_tokenizer_free(tk);
    emx_model_close(&m);
    return rc;
}

int main(int argc, char **argv) {
    char err[1024] = {0};
    Eval *e = calloc(1, sizeof *e);
    if (!e) return 1;
    int rc = eval_parse_args(argc, argv, &e->a, err, sizeof err);
    if (rc == 0 && e->a.help) eval_usage(stdout);
    else if (rc == 0 && e->a.version) emx_cli_version(stdout, "eval");
    else if (rc == 0) rc = run_eval(e, err, sizeof err);
    if (rc) fprintf(stderr, "eval: %s\n", err);
    for (int c = 0; c < e->n_configs; c++) eval_config_free(&e->configs[c]);
    for (int f = 0; f < e->a.n_tasks; f++) eval_tasks_free(&e->files[f]);
    free(e->items);
    free(e);
    return rc;
}
