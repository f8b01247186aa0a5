// srv_error.h — an error as the server answers it (the OpenAI API's error object and the HTTP
// status), and the client's bytes quoted inside its message: below every file that parses or
// checks a request (request*.c, guard.c) and every file that answers one.
#ifndef ENTROPIX_SERVER_SRV_ERROR_H
#define ENTROPIX_SERVER_SRV_ERROR_H

#include <stddef.h>

// An error as the OpenAI API reports it: the HTTP status and the error object's fields.
typedef struct {
    int status;               // 400, 401, 404, 413, 503, ...
    char message[320];        // one line
    const char *type;         // "invalid_request_error", ...
    const char *param;        // the field at fault, or NULL
    char param_path[128];     // a field's path built for this error (messages[2].content), when param
                              // is not a constant: param points here (srv_error_json reads this
                              // copy, so a copied SrvError keeps it)
    const char *code;         // NULL or a code ("model_not_found", ...)
} SrvError;

// When a client should try again after a 503 (a full queue, the connection limit, memory held by
// running pools, a stopping server) or a 429 (none today), in seconds: the Retry-After header of
// such an answer, and a stream's error event's retry fields once its status line has gone out
// (the openai client honours the header). 1 second: the server cannot tell when a slot frees (a
// generation's length is the client's max_tokens), a retry refused again costs it only the
// request's parse, and a longer wait would leave slots idle when short generations free them.
#define SRV_RETRY_AFTER_S 1

// Sets e and returns -1 (`return srv_fail(e, 400, "temperature", NULL, "...", ...)`).
__attribute__((format(printf, 5, 6)))
int srv_fail(SrvError *e, int status, const char *param, const char *code, const char *fmt, ...);

// s[0..n) (NUL ends it early) for a message, in out[cap]: at most `max` bytes of it, never cut
// inside a UTF-8 character, an invalid byte or a control byte written as \xNN (a backslash as
// \\), "..." after a cut. Returns out.
char *srv_quote(const char *s, size_t n, size_t max, char *out, size_t cap);

#endif
