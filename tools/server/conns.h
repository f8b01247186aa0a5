// conns.h — the server's open connections and the deadlines that keep a few slow or idle
// clients from holding them all (slowloris: a request sent a byte every few seconds keeps
// libmicrohttpd's inactivity timeout from ever firing).
//
// Each connection has a phase and, in the phases where the client must send, a deadline:
//   HEADERS  from its start: the request line and headers within --header-timeout;
//   BODY     from the headers: the whole body within --body-timeout;
//   SERVING  the request is answered (a stream may last long): no deadline here (libmicrohttpd's
//            inactivity timeout and the stream's back-pressure apply);
//   IDLE     after an answer, on a kept-alive connection: the next request's headers within
//            SRV_KEEPALIVE_S.
// A watcher thread closes a connection past its deadline (shutdown(2) of its socket: its
// libmicrohttpd thread then sees the end and frees it), without an answer: it was not served.
// The socket stays ours to shut down until libmicrohttpd's "closed" notice, which comes before
// it closes the descriptor, so a reused descriptor is never touched.
//
// Admission: past --max-conn open connections, a new one is a reserve connection (up to
// SRV_CONN_RESERVE more): it is served /health and /metrics only, so that a server full of
// clients can still be watched. libmicrohttpd enforces the total and the per-address limit.
#ifndef ENTROPIX_SERVER_CONNS_H
#define ENTROPIX_SERVER_CONNS_H

#define SRV_CONN_RESERVE 4
#define SRV_KEEPALIVE_S 30

typedef enum { SRV_CONN_HEADERS, SRV_CONN_BODY, SRV_CONN_SERVING, SRV_CONN_IDLE } SrvConnPhase;

typedef struct SrvConns SrvConns;
typedef struct SrvConnRec SrvConnRec;

// A table for max_conn + SRV_CONN_RESERVE connections and its watcher thread. NULL: out of
// memory or no thread.
SrvConns *srv_conns_new(int max_conn, double header_s, double body_s);
void srv_conns_free(SrvConns *t);  // stops the watcher

// A connection opened on socket fd (its record, for libmicrohttpd's socket context; NULL when
// the table is full, which libmicrohttpd's own limit prevents) and closed.
SrvConnRec *srv_conns_open(SrvConns *t, int fd);
void srv_conns_close(SrvConns *t, SrvConnRec *r);

// The connection enters phase p (its deadline from now).
void srv_conns_phase(SrvConns *t, SrvConnRec *r, SrvConnPhase p);

// 1 when the connection came in past --max-conn (served /health and /metrics only).
int srv_conns_is_reserve(const SrvConnRec *r);

// Connections open now, and closed at a deadline since the start.
void srv_conns_counts(SrvConns *t, int *open, long *timed_out);

// 1 when the client of socket fd has closed its side or the connection failed (a peer that
// went away while its request was answered: nothing will read the answer).
int srv_client_gone(int fd);

#endif
