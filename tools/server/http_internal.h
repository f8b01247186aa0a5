// http_internal.h — what the HTTP glue (http.c, http_reply.c) and the slots (slots.c) share: a
// request's job, the slots that run jobs, and the server that holds both.
#ifndef ENTROPIX_SERVER_HTTP_INTERNAL_H
#define ENTROPIX_SERVER_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/forward_group.h"
#include "tools/server/conns.h"
#include "tools/server/guard.h"
#include "tools/server/http.h"
#include "tools/server/response.h"

typedef struct SrvServer SrvServer;

// One request's generation, shared by its connection and the slot that runs it (refs: 2 while
// both hold it; the last release frees it).
typedef struct SrvJob {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    SrvServer *s;
    SrvRequest req;
    int *ids, n_ids;
    int fd;                // the client's socket: watched for a client that went away
    uint64_t mem;          // bytes reserved for this request's agent pool (0: none; under the server's mu)
    atomic_int stop;       // the engine stops at its next token or pool round (what srv_generate polls)
    atomic_int cancel;     // the client is gone: nothing more is written (implies stop)
    int cut;               // the drain's deadline stopped it: it ends with its final event (under mu)
    int done;
    int stopping;          // the server is stopping: a full stream buffer cancels, no more waiting
    int settled;           // a stream counted out of the server's pending streams (under the server's mu)
    atomic_int *stalled;   // the server's count of slots waiting in job_write
    EmxForwardGroup *group;  // the forward group the slot's state is in for this job (NULL: none)
    EmxState *st;            // that state (job_write leaves the group while it waits)
    char *out;             // stream: SSE bytes [out_len], the connection has read out_pos
    size_t out_len, out_cap, out_pos;
    int status;            // non-stream: the answer
    char *body;
    double t0;             // the request's arrival (access_log.h)
    char path[128];        // its path as the client sent it (/completions or /v1/completions), for the log line
    // The request's log line, written by the last release (the slot's or the connection's, so a
    // stream's is written once its client has read it or left): its status (0: none to write),
    // logged 499 instead when the client left before the answer was whole (`gone`). A plain
    // answer's line is taken by its connection (status 0 here), which writes it once the answer is sent
    int log_status, log_prompt, log_completion;
    int gone;              // the client left before its answer was complete (under mu)
    int delivered;         // a stream's reader reached its end: a close after that is no departure
    struct SrvJob *next;
} SrvJob;

typedef struct {
    SrvServer *s;
    int index;
    EmxState *st;
    SrvCache cache;        // the ids whose rows st holds (read by dispatch while the slot is idle)
    SrvJob *job;           // the request given to this slot (under the server's mu); NULL: idle
    pthread_t thread;
} SrvSlot;

struct SrvServer {
    SrvModel *sm;
    SrvHttpOptions o;
    SrvGuard guard;
    SrvConns *conns;
    struct MHD_Daemon *d;
    int listen_fd;         // after the drain began: the quiesced listening socket, closed at the stop
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    SrvJob *head, *tail;
    int n_queued, n_busy, stopping;
    int n_streams;         // streams whose last bytes have not been taken by their connection
    uint64_t mem_reserved; // the running and queued agent pools' replicas, bytes
    SrvSlot *slots;
    int n_slots;
    EmxForwardGroup *group;  // the busy slots' decode steps, batched (NULL: one slot, or no batched step)
    unsigned long serial;
    // /metrics counters (under mu): every generation request counts once in n_requests, and at
    // most once in n_errors; refusals of other requests count in n_http_errors
    unsigned long n_requests, n_errors, n_http_errors, n_prompt_tokens, n_cached_tokens, n_completion_tokens;
    atomic_int n_stalled;  // slots waiting for a streaming client to read (job_write)
    double decode_s, last_tok_s;
};

// slots.c: jobs, the queue and the slot threads.
SrvJob *srv_job_new(SrvServer *s);
void srv_job_release(SrvJob *j);
// Starts the slots' states and threads. 0, or -1 with a one-line reason (the caller frees).
int srv_slots_start(SrvServer *s, char *err, size_t errlen);
void srv_slots_free(SrvServer *s);  // after srv_slots_join
// Queues j (taking the slot's reference) or refuses it: 503 when stopping or the queue is full.
int srv_enqueue(SrvServer *s, SrvJob *j, SrvError *e);
// The drain begins: queued jobs are answered 503 (a stream: an error event), a stream whose
// client stopped reading is cut; running generations go on.
void srv_slots_drain(SrvServer *s);
// The drain's deadline: every running generation stops at its next token or round and ends with
// its final event (finish_reason and [DONE]; non-stream: a 503 error object).
void srv_slots_cut(SrvServer *s);
// 1 when nothing is queued, running, or waiting in a stream buffer for its connection.
int srv_slots_settled(SrvServer *s);
void srv_slots_join(SrvServer *s);
// A streaming response's reader and its end (libmicrohttpd callbacks; cls: the job).
ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void srv_stream_free(void *cls);
// A non-stream request's wait for its answer while watching its client: 0 when done, -1 when
// the client went away (the generation was stopped, and has ended).
int srv_job_wait(SrvJob *j);
// Counts j's error in /metrics once.
void srv_count_error(SrvServer *s);

#endif
