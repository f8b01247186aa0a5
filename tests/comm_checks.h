// comm_checks.h — the checks every implementation of runtime/pool/comm.h must pass, written once and
// run by tests/test_comm.c (threads, host memory) and tests/kernels/test_comm_nccl.cpp (NCCL
// under the CUDA emulator, device memory). Plain C that also compiles as C++.
//
// A check runs on every rank of a group, one host thread per rank (comm_run_ranks), and
// returns 0 or -1 with a message naming the rank, the call and the first wrong byte. Threads
// cannot use Criterion's asserts (they longjmp out of the test's own thread): the test asserts
// on the results once every thread has joined.
//
// Data pattern: byte i of rank r's contribution to collective number k is comm_pattern(r, k, i),
// different for every rank, every call and along the buffer (no period of 256 bytes), so a
// byte from the wrong rank, from an earlier call or from the wrong offset is seen.
#ifndef ENTROPIX_COMM_CHECKS_H
#define ENTROPIX_COMM_CHECKS_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pool/comm.h"

// Where the buffers passed to the collectives live: host memory, or the rank's GPU.
typedef struct CommMem CommMem;
struct CommMem {
    // On the rank's own thread before the check (NCCL: cudaSetDevice). NULL: nothing to do.
    int (*enter_rank)(const CommMem *m, int rank);
    void *(*alloc)(const CommMem *m, size_t bytes);  // NULL on failure
    void (*release)(const CommMem *m, void *p);
    int (*put)(const CommMem *m, void *dst, const void *host, size_t bytes); // host -> buffer; 0 or -1
    int (*get)(const CommMem *m, void *host, const void *src, size_t bytes); // buffer -> host; 0 or -1
    const void *ctx;
};

typedef struct {
    int failed;
    char msg[320];
} CommRankResult;

// A check for one rank: 0, or -1 with a message in msg.
typedef int (*CommCheck)(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen);

static inline uint8_t comm_pattern(int rank, int call, size_t i) {
    return (uint8_t)(rank * 151 + call * 29 + i * 7 + (i >> 8) * 3 + 1);
}

// Fills host[bytes] with rank's pattern for call.
static inline void comm_fill(uint8_t *host, size_t bytes, int rank, int call) {
    for (size_t i = 0; i < bytes; i++) host[i] = comm_pattern(rank, call, i);
}

// Index of the first byte of host[bytes] that is not rank's pattern for call, or bytes.
static inline size_t comm_first_wrong(const uint8_t *host, size_t bytes, int rank, int call) {
    for (size_t i = 0; i < bytes; i++)
        if (host[i] != comm_pattern(rank, call, i)) return i;
    return bytes;
}

// ---------------------------------------------------------------------------------------------
// Collectives with host-side checking. Each returns 0 or -1 with a message.

// One all_gather of `bytes` per rank, in place or not, checked on this rank. `call` numbers it.
static inline int comm_check_one_all_gather(EmxComm *c, const CommMem *m, size_t bytes, int in_place, int call,
                                            char *msg, size_t msglen) {
    size_t total = (size_t)c->size * bytes;
    uint8_t *host = (uint8_t *)malloc(total ? total : 1);
    uint8_t *recv = (uint8_t *)m->alloc(m, total ? total : 1);
    uint8_t *send = in_place ? recv + (size_t)c->rank * bytes : (uint8_t *)m->alloc(m, bytes ? bytes : 1);
    int rc = -1;
    if (!host || !recv || !send) {
        snprintf(msg, msglen, "rank %d: out of memory for %zu bytes", c->rank, total);
        goto done;
    }
    // recv starts as 0xEE everywhere (our own part too when not in place): a part that is never
    // written stays wrong.
    memset(host, 0xEE, total);
    if (in_place) comm_fill(host + (size_t)c->rank * bytes, bytes, c->rank, call);
    if (total && m->put(m, recv, host, total)) goto copy_failed;
    if (!in_place) {
        comm_fill(host, bytes, c->rank, call);
        if (bytes && m->put(m, send, host, bytes)) goto copy_failed;
    }
    if (c->all_gather(c, send, recv, bytes)) {
        snprintf(msg, msglen, "rank %d of %d: all_gather #%d (%zu bytes%s) returned -1", c->rank, c->size, call, bytes,
                 in_place ? ", in place" : "");
        goto done;
    }
    if (total && m->get(m, host, recv, total)) goto copy_failed;
    for (int r = 0; r < c->size; r++) {
        size_t wrong = comm_first_wrong(host + (size_t)r * bytes, bytes, r, call);
        if (wrong < bytes) {
            snprintf(msg, msglen, "rank %d of %d: all_gather #%d (%zu bytes%s): byte %zu of rank %d's part is 0x%02x, "
                     "want 0x%02x", c->rank, c->size, call, bytes, in_place ? ", in place" : "", wrong, r,
                     host[(size_t)r * bytes + wrong], comm_pattern(r, call, wrong));
            goto done;
        }
    }
    rc = 0;
    goto done;
copy_failed:
    snprintf(msg, msglen, "rank %d: copying %zu bytes to or from the buffers failed", c->rank, total);
done:
    if (send && !in_place) m->release(m, send);
    if (recv) m->release(m, recv);
    free(host);
    return rc;
}

// One broadcast of `bytes` from `root`, checked on this rank.
static inline int comm_check_one_broadcast(EmxComm *c, const CommMem *m, size_t bytes, int root, int call, char *msg,
                                           size_t msglen) {
    uint8_t *host = (uint8_t *)malloc(bytes ? bytes : 1);
    uint8_t *buf = (uint8_t *)m->alloc(m, bytes ? bytes : 1);
    int rc = -1;
    if (!host || !buf) {
        snprintf(msg, msglen, "rank %d: out of memory for %zu bytes", c->rank, bytes);
        goto done;
    }
    if (c->rank == root)
        comm_fill(host, bytes, root, call);
    else
        memset(host, 0xEE, bytes);
    if (bytes && m->put(m, buf, host, bytes)) goto copy_failed;
    if (c->broadcast(c, buf, bytes, root)) {
        snprintf(msg, msglen, "rank %d of %d: broadcast #%d (%zu bytes from root %d) returned -1", c->rank, c->size,
                 call, bytes, root);
        goto done;
    }
    if (bytes && m->get(m, host, buf, bytes)) goto copy_failed;
    { // (a block: C++ forbids the gotos above to jump over an initialisation)
        size_t wrong = comm_first_wrong(host, bytes, root, call);
        if (wrong < bytes) {
            snprintf(msg, msglen, "rank %d of %d: broadcast #%d (%zu bytes from root %d): byte %zu is 0x%02x, "
                     "want 0x%02x", c->rank, c->size, call, bytes, root, wrong, host[wrong],
                     comm_pattern(root, call, wrong));
            goto done;
        }
    }
    rc = 0;
    goto done;
copy_failed:
    snprintf(msg, msglen, "rank %d: copying %zu bytes to or from the buffer failed", c->rank, bytes);
done:
    if (buf) m->release(m, buf);
    free(host);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// The checks (CommCheck), run by comm_run_ranks on every rank.

// all_gather of odd byte counts and 1 MiB, not in place then in place.
static inline int comm_check_all_gather(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)arg;
    static const size_t sizes[] = {1, 7, 4099, (size_t)1 << 20};
    int call = 0;
    for (int in_place = 0; in_place <= 1; in_place++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            if (comm_check_one_all_gather(c, m, sizes[i], in_place, call++, msg, msglen)) return -1;
    return 0;
}

// broadcast from every root, of an odd byte count and of 1 MiB.
static inline int comm_check_broadcast(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)arg;
    static const size_t sizes[] = {1, 4099, (size_t)1 << 20};
    int call = 0;
    for (int root = 0; root < c->size; root++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            if (comm_check_one_broadcast(c, m, sizes[i], root, call++, msg, msglen)) return -1;
    return 0;
}

// Byte counts that grow and shrink between calls (the threads' staging area grows on demand;
// a stale size or a part of the previous call's data must not show), zero included.
static inline int comm_check_changing_sizes(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)arg;
    static const size_t sizes[] = {3, 1000, 0, 2, 70001, 5, 300007, 1, 65536, 9};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    for (int k = 0; k < n; k++) {
        int rc = k % 2 ? comm_check_one_broadcast(c, m, sizes[k], k % c->size, k, msg, msglen)
                       : comm_check_one_all_gather(c, m, sizes[k], k % 4 == 2, k, msg, msglen);
        if (rc) return -1;
    }
    return 0;
}

// `*(int *)arg` collectives, cycling all_gather, broadcast (root turning), barrier, on
// buffers allocated once. A rank that ran ahead into the next collective while another is
// still in this one would show as a value from the wrong call.
static inline int comm_check_alternating(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    const int calls = *(const int *)arg;
    const size_t bytes = 13; // odd, not a multiple of anything
    size_t total = (size_t)c->size * bytes;
    uint8_t *host = (uint8_t *)malloc(total);
    uint8_t *recv = (uint8_t *)m->alloc(m, total);
    uint8_t *send = (uint8_t *)m->alloc(m, bytes);
    int rc = -1;
    if (!host || !recv || !send) {
        snprintf(msg, msglen, "rank %d: out of memory", c->rank);
        goto done;
    }
    for (int k = 0; k < calls; k++) {
        const char *what = k % 3 == 0 ? "all_gather" : k % 3 == 1 ? "broadcast" : "barrier";
        int root = (k / 3) % c->size, want_rank = -1;
        size_t got_bytes = 0;
        if (k % 3 == 0) {
            comm_fill(host, bytes, c->rank, k);
            if (m->put(m, send, host, bytes)) goto copy_failed;
            if (c->all_gather(c, send, recv, bytes)) goto returned_error;
            got_bytes = total;
        } else if (k % 3 == 1) {
            if (c->rank == root)
                comm_fill(host, bytes, root, k);
            else
                memset(host, 0xEE, bytes);
            if (m->put(m, send, host, bytes)) goto copy_failed;
            if (c->broadcast(c, send, bytes, root)) goto returned_error;
            want_rank = root;
            got_bytes = bytes;
        } else {
            if (c->barrier(c)) goto returned_error;
            continue;
        }
        if (m->get(m, host, k % 3 == 0 ? recv : send, got_bytes)) goto copy_failed;
        for (int r = 0; r < (want_rank < 0 ? c->size : 1); r++) {
            int who = want_rank < 0 ? r : want_rank;
            size_t wrong = comm_first_wrong(host + (size_t)r * bytes, bytes, who, k);
            if (wrong < bytes) {
                snprintf(msg, msglen, "rank %d of %d: call %d (%s): byte %zu of rank %d's data is 0x%02x, want 0x%02x",
                         c->rank, c->size, k, what, wrong, who, host[(size_t)r * bytes + wrong],
                         comm_pattern(who, k, wrong));
                goto done;
            }
        }
        continue;
    returned_error:
        snprintf(msg, msglen, "rank %d of %d: call %d (%s) returned -1", c->rank, c->size, k, what);
        goto done;
    }
    rc = 0;
    goto done;
copy_failed:
    snprintf(msg, msglen, "rank %d: copying to or from the buffers failed", c->rank);
done:
    if (send) m->release(m, send);
    if (recv) m->release(m, recv);
    free(host);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Running a check on every rank, one thread each.

typedef struct {
    EmxComm *comm;
    const CommMem *mem;
    CommCheck check;
    void *arg;
    CommRankResult *result;
} CommRankJob;

static inline void *comm_rank_thread(void *p) {
    CommRankJob *job = (CommRankJob *)p;
    CommRankResult *res = job->result;
    res->msg[0] = 0;
    if (job->mem->enter_rank && job->mem->enter_rank(job->mem, job->comm->rank)) {
        snprintf(res->msg, sizeof res->msg, "rank %d: could not be set up on its thread", job->comm->rank);
        res->failed = 1;
        return NULL;
    }
    res->failed = job->check(job->comm, job->mem, job->arg, res->msg, sizeof res->msg) != 0;
    return NULL;
}

// Runs check on ranks[0..size) at once, one thread per rank; results[r] says how rank r did.
// Returns 0, or -1 if a thread could not be started (results then say which).
static inline int comm_run_ranks(EmxComm *const *ranks, int size, const CommMem *mem, CommCheck check, void *arg,
                                 CommRankResult *results) {
    CommRankJob jobs[64];
    pthread_t threads[64];
    int started = 0, rc = 0;
    if (size < 1 || size > 64) return -1;
    for (int r = 0; r < size; r++) {
        jobs[r].comm = ranks[r];
        jobs[r].mem = mem;
        jobs[r].check = check;
        jobs[r].arg = arg;
        jobs[r].result = &results[r];
        results[r].failed = 1;
        snprintf(results[r].msg, sizeof results[r].msg, "rank %d: thread not started", r);
    }
    for (; started < size; started++)
        if (pthread_create(&threads[started], NULL, comm_rank_thread, &jobs[started])) {
            // The started ranks wait for this one for ever: abort the group so they come back.
            ranks[0]->abort(ranks[0]);
            rc = -1;
            break;
        }
    for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
    return rc;
}

#endif
