// conns.c — open connections, their deadlines and the watcher (conns.h).
#define _GNU_SOURCE  // POLLRDHUP
#include "tools/server/conns.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"

struct SrvConnRec {
    int used;
    int fd;
    int reserve;
    double deadline;  // monotonic seconds; 0: none
};

struct SrvConns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watcher;
    int stop;
    int max_conn, cap, n_open;
    double header_s, body_s;
    long timed_out;
    SrvConnRec *rec;  // [cap]
};

// Every 100 ms: a connection past its deadline has its socket shut down (once).
static void *watch(void *arg) {
    SrvConns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&t->cv, &t->mu, &until);
        const double now = emx_now_s();
        for (int i = 0; i < t->cap; i++) {
            SrvConnRec *r = &t->rec[i];
            if (!r->used || r->deadline == 0 || now < r->deadline) continue;
            r->deadline = 0;
            (void)shutdown(r->fd, SHUT_RDWR);  // still libmicrohttpd's open descriptor (conns.h)
            t->timed_out++;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

SrvConns *srv_conns_new(int max_conn, double header_s, double body_s) {
    SrvConns *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->max_conn = max_conn;
    t->cap = max_conn + SRV_CONN_RESERVE;
    t->header_s = header_s, t->body_s = body_s;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (!(t->rec = calloc((size_t)t->cap, sizeof *t->rec)) || pthread_create(&t->watcher, NULL, watch, t) != 0) {
        free(t->rec);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free(t);
        return NULL;
    }
    return t;
}

void srv_conns_free(SrvConns *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->watcher, NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t->rec);
    free(t);
}

SrvConnRec *srv_conns_open(SrvConns *t, int fd) {
    SrvConnRec *r = NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->cap && !r; i++)
        if (!t->rec[i].used) r = &t->rec[i];
    if (r) {
        *r = (SrvConnRec){.used = 1, .fd = fd, .reserve = t->n_open >= t->max_conn, .deadline = emx_now_s() + t->header_s};
        t->n_open++;
    }
    pthread_mutex_unlock(&t->mu);
    return r;
}

void srv_conns_close(SrvConns *t, SrvConnRec *r) {
    if (!r) return;
    pthread_mutex_lock(&t->mu);
    r->used = 0;
    r->deadline = 0;
    t->n_open--;
    pthread_mutex_unlock(&t->mu);
}

void srv_conns_phase(SrvConns *t, SrvConnRec *r, SrvConnPhase p) {
    if (!r) return;
    const double limit = p == SRV_CONN_HEADERS ? t->header_s : p == SRV_CONN_BODY ? t->body_s
                         : p == SRV_CONN_IDLE  ? SRV_KEEPALIVE_S : 0;
    pthread_mutex_lock(&t->mu);
    if (r->used) r->deadline = limit > 0 ? emx_now_s() + limit : 0;
    pthread_mutex_unlock(&t->mu);
}

int srv_conns_is_reserve(const SrvConnRec *r) { return r && r->reserve; }

void srv_conns_counts(SrvConns *t, int *open, long *timed_out) {
    pthread_mutex_lock(&t->mu);
    *open = t->n_open;
    *timed_out = t->timed_out;
    pthread_mutex_unlock(&t->mu);
}

int srv_client_gone(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}
