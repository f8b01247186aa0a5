// access_log.c — the per-request log line (access_log.h).
#include "tools/server/access_log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "tools/server/guard.h"

void srv_access_log(const char *method, const char *path, int status, int n_prompt, int n_completion, double t0) {
    char when[32], m[24], p[160], counts[64], line[320];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    // the method and path are the client's bytes: quoted so a line stays one line
    srv_quote(method, strlen(method), 16, m, sizeof m);
    srv_quote(path, strlen(path), 120, p, sizeof p);
    if (n_prompt >= 0) snprintf(counts, sizeof counts, "prompt=%d completion=%d", n_prompt, n_completion);
    else snprintf(counts, sizeof counts, "prompt=- completion=-");
    const int n = snprintf(line, sizeof line, "%s %s %s %d %s ms=%.0f\n", when, m, p, status, counts,
                           1e3 * (emx_now_s() - t0));
    if (n > 0) (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}
