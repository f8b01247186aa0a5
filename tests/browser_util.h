// browser_util.h — headless chromium for the tests that render pages (test_report.c, test_page.c): its full
// path (posix_spawn does not search PATH), or a skip that says why, unless EMX_REQUIRE_BROWSER=1
// (make check), where a missing chromium fails.
#ifndef ENTROPIX_BROWSER_UTIL_H
#define ENTROPIX_BROWSER_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The first of names[0..n) that is an executable in a PATH folder, into buf; NULL if none.
static inline const char *find_on_path(char *buf, size_t cap, const char *const *names, int n) {
    const char *path = getenv("PATH");
    for (int k = 0; k < n && path; k++)
        for (const char *s = path; *s;) {
            const char *e = strchr(s, ':');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            snprintf(buf, cap, "%.*s/%s", (int)len, s, names[k]);
            if (len && access(buf, X_OK) == 0) return buf;
            s += len + (e ? 1 : 0);
        }
    return NULL;
}

static inline const char *find_browser(char *buf, size_t cap) {
    static const char *const names[] = {"chromium", "chromium-browser"};
    if (find_on_path(buf, cap, names, 2)) return buf;
    const char *req = getenv("EMX_REQUIRE_BROWSER");
    if (req && strcmp(req, "1") == 0)
        cr_assert_fail("EMX_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)");
    cr_skip_test("no chromium on PATH: the page is not rendered (apt-get install chromium; EMX_REQUIRE_BROWSER=1 makes this a failure)");
    return NULL;
}

#endif
