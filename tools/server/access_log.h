// access_log.h — one line per request on the server's stderr, as it ends:
//   2026-11-29T07:40:01Z POST /v1/chat/completions 200 prompt=12 completion=30 ms=842
// the time it ended (UTC), the method, the path, the status (a stream's is 200 once its headers
// are sent), the prompt and completion tokens of a generation that ran ('-' otherwise) and the
// milliseconds since its headers arrived. Never the key, the prompt or the answer.
#ifndef ENTROPIX_SERVER_ACCESS_LOG_H
#define ENTROPIX_SERVER_ACCESS_LOG_H

// n_prompt < 0: not a generation that ran (no token counts). Thread-safe: one write a line.
// t0: the request's arrival, emx_now_s() (base/clock.h).
void srv_access_log(const char *method, const char *path, int status, int n_prompt, int n_completion, double t0);

#endif
