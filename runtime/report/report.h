// report.h — ./run --report FILE.html: one self-contained HTML page of a generation (inline CSS,
// JS and SVG; no network, no external fonts), for ./run and for any tool that generates (the eval
// tool calls the same API per generation). docs/report.md describes the page.
//
// Use:
//   EmxReport *r = emx_report_new(&info, tk);            // once per generation
//   emx_report_add_token(r, &record);                    // single stream: per generated token
//   pool.on_event = emx_report_pool_event, pool.on_event_user = r;  // agents: the pool's rounds,
//                                                        // verdicts and rollbacks add the tokens
//   emx_report_write(r, "out.html", err, sizeof err);    // at the end (also after an interrupt)
//   emx_report_free(r);
//
// The page embeds the data as one JSON blob in a <script type="application/json"> element:
//   {"meta": {...}, "tokens": [token, ...], "state": [[rolled_back, round], ...], "events": [...]}
// where each token is the --metrics line of that token (token_log.h) with top_logprobs holding at
// least the five most likely alternatives, and state[i] says whether token i was later rolled
// back by the critic (agents) and in which round it was committed (0: single stream). Every '<',
// '>' and '&' of the blob is written as a \u escape, so no token text can close the script
// element; the page sets token text with textContent only, never as HTML.
//
// The HTML/CSS/JS template is runtime/report/report_template.html, built into the program
// (report_template.c). The file is written to a temporary file beside FILE and renamed over it,
// so a run killed while writing never leaves half a page.
#ifndef ENTROPIX_REPORT_H
#define ENTROPIX_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/pool/pool_generate.h"
#include "runtime/token_log.h"
#include "sampler/entropix.h"
#include "tokenizer/tokenizer.h"

#define EMX_REPORT_TOP 5  // alternatives the page shows per token

typedef struct {
    const char *model;              // the model file, as the page's title
    const char *prompt;             // the prompt text [prompt_len] (shown above the output)
    size_t prompt_len;
    const char *sampler;            // "entropix", "agents", "greedy", ...
    int entropix;                   // 1: the entropix cases chose the tokens; 0: the metrics were
                                    // measured beside another sampler and not used (the page says so)
    const EmxProfile *profile;      // thresholds drawn on the entropy/varentropy plots; NULL: none
    const char *profile_name;
    uint64_t seed;
    int n_prompt;                   // prompt tokens (agents: positions before the first generated)
    const EmxAgentParams *agents;   // agents mode: [n_agents] (their T and top-k go in the tokens)
    int n_agents;
} EmxReportInfo;

typedef struct EmxReport EmxReport;

// A new, empty report. Strings are copied. tk names the alternatives' pieces; it must outlive the
// report. NULL when out of memory.
EmxReport *emx_report_new(const EmxReportInfo *info, const EmxTokenizer *tk);

// Appends one generated token (its --metrics record; r->logprobs should hold at least
// EMX_REPORT_TOP entries for the alternatives). Returns 0, or -1 when out of memory (the report
// then writes what it had and says it is incomplete).
int emx_report_add_token(EmxReport *rep, const EmxTokenRecord *r);

// An EmxPoolEventFn (user: the EmxReport): rounds add their tokens (agent, proposal entropy, logits
// metrics, top logprobs), verdicts and rollbacks are marked; rolled-back tokens stay, struck out.
void emx_report_pool_event(void *user, const EmxPoolEvent *ev);

// Writes the page to path (temporary file beside it, then rename). Returns 0, or -1 with a
// one-line reason naming the file ("out.html: No space left on device").
int emx_report_write(EmxReport *rep, const char *path, char *err, size_t errlen);

void emx_report_free(EmxReport *rep);

// The page's template (report_template.c): the HTML with one "/*EMX_REPORT_DATA*/" where the
// JSON goes. NUL-terminated.
extern const char emx_report_template[];

#endif
