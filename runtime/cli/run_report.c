// run_report.c — ./run's --report and --logprobs hooks (run_report.h).
#include "runtime/cli/run_report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/out_file.h"
#include "sampler/profile.h"

int emx_run_logprobs_wanted(const EmxCliArgs *a) {
    int n = a->logprobs;  // -1: not given
    if (a->report_path && n < EMX_REPORT_TOP) n = EMX_REPORT_TOP;
    return n;
}


EmxReport *emx_run_report_new(const EmxCliArgs *a, const EmxProfile *profile, const EmxTokenizer *tk,
                              const int *ids, int n_ids, uint64_t seed, const EmxAgentParams *agents, int n_agents) {
    if (!a->report_path) return NULL;
    // The page is written at the end, whole: a path it cannot go to is said now, before the run.
    char bad[512];
    if (emx_out_check(a->report_path, EMX_OUT_REPLACE, bad, sizeof bad) != 0) {
        fprintf(stderr, "run: --report %s\n", bad);
        return NULL;
    }
    EmxProfile own;
    char why[256];
    if (!profile && emx_profile_load(&own, a->profile, why, sizeof why) != 0) emx_profile_builtin(&own, EMX_PROFILE_DEFAULT);
    size_t len = 0;
    char *prompt = emx_decode_ids(tk, ids, n_ids, 0, &len);  // control tokens included: what the model read
    EmxReportInfo info = {.model = a->model_path, .prompt = prompt, .prompt_len = prompt ? len : 0,
                          .sampler = emx_sampler_kind_name(a->sampler), .entropix = a->sampler == EMX_SAMPLER_ENTROPIX,
                          .profile = profile ? profile : &own, .profile_name = a->profile, .seed = seed,
                          .n_prompt = n_ids, .agents = agents, .n_agents = n_agents};
    EmxReport *r = emx_report_new(&info, tk);
    free(prompt);
    if (!r) fprintf(stderr, "run: --report %s: out of memory\n", a->report_path);
    return r;
}

int emx_run_report_finish(EmxReport **r, const char *path) {
    if (!*r) return 0;
    char err[512];
    int rc = emx_report_write(*r, path, err, sizeof err);
    if (rc != 0) fprintf(stderr, "run: --report %s\n", err);
    emx_report_free(*r);
    *r = NULL;
    return rc;
}
