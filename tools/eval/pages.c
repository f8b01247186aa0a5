// pages.c — eval's --report-dir page names and the check before the run (pages.h).
#include "tools/eval/pages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errmsg.h"

static int kept_byte(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
           ch == '-';
}

// 32-bit FNV-1a of s's bytes.
static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

// One part of a name (pages.h) appended at out[*n] (cut at cap - 1); *n grows by its whole length.
static void put_part(char *out, size_t cap, size_t *n, const char *s) {
    int changed = 0;
    for (const char *p = s; *p; p++, (*n)++) {
        changed |= !kept_byte(*p);
        if (*n + 1 < cap) out[*n] = kept_byte(*p) ? *p : '_';
    }
    if (changed) {  // the original's hash keeps "a/b" and "a?b" apart
        char h[16];
        snprintf(h, sizeof h, "~%08x", fnv1a(s));
        for (const char *p = h; *p; p++, (*n)++)
            if (*n + 1 < cap) out[*n] = *p;
    }
    if (cap) out[*n + 1 < cap ? *n : cap - 1] = 0;
}

static void put_text(char *out, size_t cap, size_t *n, const char *s) {
    for (; *s; s++, (*n)++)
        if (*n + 1 < cap) out[*n] = *s;
    if (cap) out[*n + 1 < cap ? *n : cap - 1] = 0;
}

// FAMILY-ID-CONFIG, the name without its seed.
static size_t page_prefix(char *out, size_t cap, const EvalItem *it, const EvalConfig *c) {
    size_t n = 0;
    put_part(out, cap, &n, it->family);
    put_text(out, cap, &n, "-");
    put_part(out, cap, &n, it->id);
    put_text(out, cap, &n, "-");
    put_part(out, cap, &n, c->spec);
    return n;
}

size_t eval_page_name(char *out, size_t cap, const EvalItem *it, const EvalConfig *c, uint64_t seed) {
    size_t n = page_prefix(out, cap, it, c);
    char tail[40];
    snprintf(tail, sizeof tail, "-s%llu.html", (unsigned long long)seed);
    put_text(out, cap, &n, tail);
    return n;
}

int eval_report_path(char *out, size_t cap, const char *dir, const EvalItem *it, const EvalConfig *c, uint64_t seed) {
    char name[EVAL_PAGE_NAME_MAX + 1];
    if (eval_page_name(name, sizeof name, it, c, seed) > EVAL_PAGE_NAME_MAX) return -1;
    const int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap || n > EVAL_PAGE_PATH_MAX ? -1 : 0;
}

typedef struct {
    char *prefix;
    int item, config;
} Page;

static int page_cmp(const void *a, const void *b) {
    const Page *x = a, *y = b;
    const int d = strcmp(x->prefix, y->prefix);
    return d ? d : x->item != y->item ? x->item - y->item : x->config - y->config;
}

// The name and path of (it, c) at its largest seed fit. Returns 0 or -1 (said in err).
static int check_fits(const EvalItem *it, const EvalConfig *c, int seeds, const char *dir, char *err, size_t errlen) {
    char name[EVAL_PAGE_NAME_MAX + 1], esc[160];
    const size_t n = eval_page_name(name, sizeof name, it, c, c->deterministic ? 0 : (uint64_t)(seeds - 1));
    const size_t path = strlen(dir) + 1 + n;
    if (n <= EVAL_PAGE_NAME_MAX && path <= EVAL_PAGE_PATH_MAX) return 0;
    emx_escape(name, strlen(name) < 60 ? strlen(name) : 60, esc, sizeof esc);
    if (n > EVAL_PAGE_NAME_MAX)
        return emx_seterr(err, errlen, "%s:%d: field 'id': the --report-dir page's name '%s...' (config '%s') is %zu bytes,"
                          " at most %d (a shorter id, family or config)", it->file, it->line, esc, c->spec, n,
                          EVAL_PAGE_NAME_MAX);
    return emx_seterr(err, errlen, "%s:%d: field 'id': the --report-dir page's path is %zu bytes, at most %d (a shorter "
                      "--report-dir, id, family or config)", it->file, it->line, path, EVAL_PAGE_PATH_MAX);
}

// Two pages share a name: the later item (files in order, lines in order) is named. Returns -1.
static int collision(const Page *a, const Page *b, const EvalItem *const *items, const EvalConfig *configs, char *err,
                     size_t errlen) {
    if (a->item > b->item) {
        const Page *t = a;
        a = b, b = t;
    }
    const EvalItem *x = items[a->item], *y = items[b->item];
    char id[128], fam[128], xid[128], xfam[128], name[EVAL_PAGE_NAME_MAX + 1];
    eval_page_name(name, sizeof name, y, &configs[b->config], 0);
    return emx_seterr(err, errlen, "%s:%d: field 'id': '%s' (family '%s') and %s:%d's '%s' (family '%s') would write the "
                      "same --report-dir page for config '%s': %s", y->file, y->line,
                      emx_escape(y->id, strlen(y->id), id, sizeof id), emx_escape(y->family, strlen(y->family), fam, sizeof fam),
                      x->file, x->line, emx_escape(x->id, strlen(x->id), xid, sizeof xid),
                      emx_escape(x->family, strlen(x->family), xfam, sizeof xfam), configs[b->config].spec, name);
}

int eval_pages_check(const EvalItem *const *items, int n_items, const EvalConfig *configs, int n_configs, int seeds,
                     const char *dir, char *err, size_t errlen) {
    for (int i = 0; i < n_items; i++)
        for (int c = 0; c < n_configs; c++)
            if (check_fits(items[i], &configs[c], seeds, dir, err, errlen) != 0) return -1;
    // Every name holds its seed as its "-sN.html" end (N digits only, so the last "-s" starts it):
    // two names are equal exactly when their prefixes and seeds are, and every config has seed 0.
    const size_t n = (size_t)n_items * (size_t)n_configs;
    Page *pages = calloc(n ? n : 1, sizeof *pages);
    if (!pages) return emx_seterr(err, errlen, "--report-dir: out of memory");
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        Page *p = &pages[k];
        p->item = (int)(k / (size_t)n_configs), p->config = (int)(k % (size_t)n_configs);
        const size_t len = page_prefix(NULL, 0, items[p->item], &configs[p->config]);
        if (!(p->prefix = malloc(len + 1))) rc = emx_seterr(err, errlen, "--report-dir: out of memory");
        else page_prefix(p->prefix, len + 1, items[p->item], &configs[p->config]);
    }
    if (rc == 0) qsort(pages, n, sizeof *pages, page_cmp);
    for (size_t k = 1; k < n && rc == 0; k++)
        if (strcmp(pages[k - 1].prefix, pages[k].prefix) == 0)
            rc = collision(&pages[k - 1], &pages[k], items, configs, err, errlen);
    for (size_t k = 0; k < n; k++) free(pages[k].prefix);
    free(pages);
    return rc;
}
