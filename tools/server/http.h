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
//
// A client that goes away is noticed whether or not its generation writes anything (its
// connection looks at the socket every 250 ms while it waits): the generation stops at its next
// token or pool round. Connections are admitted and timed as conns.h says; requests pass
// guard.h's checks (origin, key, media type) before anything is done for them.
//
// The drain (SIGTERM, SIGINT): srv_http_drain stops accepting connections and answers queued
// requests 503; running generations go on until srv_http_settled says all is sent, or the
// caller's deadline calls srv_http_cut, which stops each at its next token or round with its
// final event (a stream: finish_reason "length", entropix.shutdown, [DONE]; otherwise a 503
// error object); srv_http_stop then closes what is left.
#ifndef ENTROPIX_SERVER_HTTP_H
#define ENTROPIX_SERVER_HTTP_H

#include <stddef.h>

#include "tools/server/engine.h"

typedef struct {
    const char *host;      // listen address (numeric IPv4)
    int port;              // 0: an ephemeral port (srv_http_port tells which)
    const char *api_key;   // NULL: no authentication
    const char *cors[8];   // origins a web page may call from (--cors; "*": any)
    int n_cors;
    int parallel;          // slots
    int queue;             // requests waiting at most
    size_t max_body;       // bytes of a request body at most
    int max_conn;          // connections open at most (a reserve of conns.h's SRV_CONN_RESERVE beyond)
    int max_conn_per_addr; // connections from one client address at most
    double header_timeout; // seconds for a request's line and headers (conns.h)
    double body_timeout;   // seconds for its body
    int idle_timeout;      // seconds without any traffic before libmicrohttpd closes a connection
    int threads;           // OpenMP threads per forward (-t; 0: all cores)
    const char *device;
} SrvHttpOptions;

typedef struct SrvServer SrvServer;

// Starts the slots and the listener. Returns NULL with a one-line reason.
SrvServer *srv_http_start(SrvModel *sm, const SrvHttpOptions *o, char *err, size_t errlen);
int srv_http_port(const SrvServer *s);
// The drain: no new connections, queued requests answered 503, running generations go on.
void srv_http_drain(SrvServer *s);
// 1 when nothing is queued, generating, or waiting in a stream's buffer for its client.
int srv_http_settled(SrvServer *s);
// The drain's deadline: every running generation stops at its next token or round and ends
// with its final event.
void srv_http_cut(SrvServer *s);
// Joins the slots, closes every connection, frees (after srv_http_drain).
void srv_http_stop(SrvServer *s);

#endif
