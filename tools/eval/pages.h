// pages.h — the names of eval's --report-dir pages (docs/eval.md "Reports"), and the check made
// before the first generation that every page's name fits and that no two generations share one.
//
// A page is DIR/FAMILY-ID-CONFIG-sSEED.html. Each of FAMILY, ID and CONFIG is written with every
// byte outside [A-Za-z0-9._-] as '_' and, when a byte was so replaced, '~' and the 8 hex digits of
// the original string's 32-bit FNV-1a hash after it: "a/b" is "a_b~<hash of a/b>", "a?b" is
// "a_b~<hash of a?b>", "a_b" stays "a_b" ('~' is never a kept byte, so a changed name cannot equal
// an unchanged one). The '-' between the parts can still join two tuples into one name ("t" and
// "a-b", "t-a" and "b"): eval_pages_check finds those before anything runs.
#ifndef ENTROPIX_EVAL_PAGES_H
#define ENTROPIX_EVAL_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "tools/eval/config.h"
#include "tools/eval/tasks.h"

// A page's file name at most: NAME_MAX (255) less what the temporary file written beside it adds
// (".NAME.XXXXXX.tmp", base/out_file.h: 12 bytes). Its whole path at most: 4095 less the same 12.
#define EVAL_PAGE_NAME_MAX 243
#define EVAL_PAGE_PATH_MAX 4083

// The page's file name of (it, c, seed) into out (cut to cap - 1 bytes); returns its whole
// length, as snprintf does.
size_t eval_page_name(char *out, size_t cap, const EvalItem *it, const EvalConfig *c, uint64_t seed);

// dir/<the page's name>. Returns 0, or -1 when the name is longer than EVAL_PAGE_NAME_MAX or the
// path than EVAL_PAGE_PATH_MAX (or cap).
int eval_report_path(char *out, size_t cap, const char *dir, const EvalItem *it, const EvalConfig *c, uint64_t seed);

// Before the first generation: every (item, config, seed < seeds; seed 0 for a deterministic
// config) page name and path fits, and no two (family, id, config) pairs share a page. Returns 0,
// or -1 with one line naming the task file, line and field: "t.jsonl:2: field 'id': 'b' (family
// 't-a') and t.jsonl:1's 'a-b' (family 't') would write the same --report-dir page for config
// 'greedy': t-a-b-greedy-s0.html".
int eval_pages_check(const EvalItem *const *items, int n_items, const EvalConfig *configs, int n_configs, int seeds,
                     const char *dir, char *err, size_t errlen);

#endif
