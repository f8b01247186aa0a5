// http.h — the HTTP side of tools/server: libmicrohttpd (one thread per connection), the
// request queue and the generation slots.
//
// Slots: --parallel N worker threads, each with its own EmxState (KV cache) over the one
// mmapped model, each running one generation at a time. On the CPU the busy slots decode
// together (continuous batching, runtime/forward_group.h): one batched forward per step over
// one row per decoding slot, each weight read once for all; a new request prefills alone and
// joins at the next step. Backends without a batched step (CUDA) run the slots side by side.
// A request waits in a FIFO queue of at most --queue entries; past that it gets 503.
//
// Prompt cache: each slot keeps the ids its KV cache holds (engine.h SrvCache); a request goes
// to the idle slot sharing the longest prefix with its prompt (a prefix under half of both the
// slot's ids and the prompt does not count: another conversation; ties: the slot holding the
// least) and runs only what follows the prefix.
//
// Back-pressure: a stream's pending bytes are bounded (64 KiB, plus a 64 KiB socket send
// buffer); a slot whose client stops reading waits, holding the slot, until the client reads,
// disconnects (libmicrohttpd frees the response: cancelled at once) or the server stops (cut).
#ifndef ENTROPIX_SERVER_HTTP_H
#define ENTROPIX_SERVER_HTTP_H

#include <stddef.h>

#include "tools/server/engine.h"

typedef struct {
    const char *host;      // listen address (numeric IPv4)
    int port;              // 0: an ephemeral port (srv_http_port tells which)
    const char *api_key;   // NULL: no authentication
    int parallel;          // slots
    int queue;             // requests waiting at most
    size_t max_body;       // bytes of a request body at most
    int threads;           // OpenMP threads per forward (-t; 0: all cores)
    const char *device;
} SrvHttpOptions;

typedef struct SrvServer SrvServer;

// Starts the slots and the listener. Returns NULL with a one-line reason.
SrvServer *srv_http_start(SrvModel *sm, const SrvHttpOptions *o, char *err, size_t errlen);
int srv_http_port(const SrvServer *s);
// Stops accepting, answers queued requests 503, lets running generations finish, joins.
void srv_http_stop(SrvServer *s);

#endif
