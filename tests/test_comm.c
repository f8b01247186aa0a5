// test_comm.c — the threads implementation of runtime/pool/comm.h (suite comm): the shared checks of
// tests/comm_checks.h with 1, 2, 3 and 5 ranks, one pthread each and host buffers; abort
// while the others wait; argument errors. The NCCL implementation runs the same checks in
// tests/kernels/test_comm_nccl.cpp.
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/pool/comm.h"
#include "comm_checks.h"

// Host memory: the threads implementation's buffers.
static void *host_alloc(const CommMem *m, size_t bytes) {
    (void)m;
    return malloc(bytes);
}
static void host_release(const CommMem *m, void *p) {
    (void)m;
    free(p);
}
static int host_copy(const CommMem *m, void *dst, const void *src, size_t bytes) {
    (void)m;
    memcpy(dst, src, bytes);
    return 0;
}
static const CommMem host_mem = {NULL, host_alloc, host_release, host_copy, host_copy, NULL};

// Runs check on every rank of a fresh group of `size` threads and asserts that all passed.
static void run_check(int size, CommCheck check, void *arg) {
    char err[200] = "";
    EmxCommThreads *g = emx_comm_threads_new(size, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    EmxComm *ranks[64];
    for (int r = 0; r < size; r++) {
        ranks[r] = emx_comm_threads_rank(g, r);
        cr_assert_not_null(ranks[r]);
        cr_assert_eq(ranks[r]->rank, r);
        cr_assert_eq(ranks[r]->size, size);
    }
    CommRankResult results[64];
    int started = comm_run_ranks(ranks, size, &host_mem, check, arg, results);
    emx_comm_threads_free(g);
    cr_assert_eq(started, 0, "could not start %d threads", size);
    for (int r = 0; r < size; r++) cr_expect_eq(results[r].failed, 0, "%s", results[r].msg);
}

// Groups of 1 (the no-locking path), 2, 3 and 5 ranks (odd sizes: nothing may assume pairs).
static void run_check_all_sizes(CommCheck check, void *arg) {
    static const int sizes[] = {1, 2, 3, 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) run_check(sizes[i], check, arg);
}

Test(comm, all_gather_odd_sizes_and_in_place, .timeout = 300) {
    run_check_all_sizes(comm_check_all_gather, NULL);
}

Test(comm, broadcast_from_every_root, .timeout = 300) {
    run_check_all_sizes(comm_check_broadcast, NULL);
}

Test(comm, byte_counts_change_between_calls, .timeout = 300) {
    run_check_all_sizes(comm_check_changing_sizes, NULL);
}

// A generation-counting mistake shows as a rank reading another call's data, or as a hang.
Test(comm, thousand_alternating_collectives, .timeout = 300) {
    int calls = 1000;
    run_check_all_sizes(comm_check_alternating, &calls);
}

// ---------------------------------------------------------------------------------------------
// abort

// What the ranks are doing when the last rank aborts.
typedef enum { WAIT_IN_BARRIER, WAIT_IN_ALL_GATHER, WAIT_IN_BROADCAST } PendingCall;

// The last rank lets the others block in `*(PendingCall *)arg` (after one collective that
// works), then aborts: every pending call must return -1, and every later call on every rank
// too. A pending call that is never woken hangs the test until its timeout (no clock here: a
// loaded machine may delay any thread by seconds).
static int check_abort(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)m;
    PendingCall pending = *(const PendingCall *)arg;
    unsigned char send[5] = {1, 2, 3, 4, 5}, recv[5 * 64];
    if (c->barrier(c)) {
        snprintf(msg, msglen, "rank %d: the barrier before the abort returned -1", c->rank);
        return -1;
    }
    if (c->rank == c->size - 1) {
        usleep(100 * 1000); // long enough for the others to be waiting
        c->abort(c);
    } else {
        int rc = pending == WAIT_IN_BARRIER      ? c->barrier(c)
                 : pending == WAIT_IN_ALL_GATHER ? c->all_gather(c, send, recv, sizeof send)
                                                 : c->broadcast(c, send, sizeof send, c->size - 1);
        if (rc != -1) {
            snprintf(msg, msglen, "rank %d: the pending call returned %d, want -1", c->rank, rc);
            return -1;
        }
    }
    // Later calls, on every rank, the aborting one included.
    for (int k = 0; k < 3; k++) {
        int rc[4] = {c->all_gather(c, send, recv, sizeof send), c->all_gather(c, recv + c->rank * 5, recv, 5),
                     c->broadcast(c, send, sizeof send, 0), c->barrier(c)};
        if (rc[0] != -1 || rc[1] != -1 || rc[2] != -1 || rc[3] != -1) {
            snprintf(msg, msglen, "rank %d: a call after the abort did not return -1", c->rank);
            return -1;
        }
    }
    return 0;
}

Test(comm, abort_wakes_ranks_waiting_in_a_barrier, .timeout = 300) {
    PendingCall p = WAIT_IN_BARRIER;
    run_check_all_sizes(check_abort, &p);
}

Test(comm, abort_wakes_ranks_waiting_in_all_gather, .timeout = 300) {
    PendingCall p = WAIT_IN_ALL_GATHER;
    run_check_all_sizes(check_abort, &p);
}

Test(comm, abort_wakes_ranks_waiting_in_broadcast, .timeout = 300) {
    PendingCall p = WAIT_IN_BROADCAST;
    run_check_all_sizes(check_abort, &p);
}

// Ranks that disagree on a collective (a caller bug) must not copy out of bounds: the group is
// aborted with a message and everybody gets -1.
static int check_mismatch(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)m;
    (void)arg;
    unsigned char buf[64 * 64] = {0};
    // Rank 0 gathers 8 bytes, the others 16: whoever comes second sees the difference.
    size_t bytes = c->rank == 0 ? 8 : 16;
    int rc = c->all_gather(c, buf, buf + 64 * 32, bytes);
    if (rc != -1 || c->barrier(c) != -1) {
        snprintf(msg, msglen, "rank %d: mismatched all_gather returned %d, want -1 on every rank", c->rank, rc);
        return -1;
    }
    return 0;
}

Test(comm, mismatched_byte_counts_abort_the_group, .timeout = 300) {
    run_check(2, check_mismatch, NULL);
    run_check(3, check_mismatch, NULL);
}

static int check_bad_root(EmxComm *c, const CommMem *m, void *arg, char *msg, size_t msglen) {
    (void)m;
    (void)arg;
    unsigned char buf[4] = {0};
    if (c->broadcast(c, buf, sizeof buf, c->size) != -1) {
        snprintf(msg, msglen, "rank %d: broadcast from root %d of %d did not return -1", c->rank, c->size, c->size);
        return -1;
    }
    return 0;
}

Test(comm, broadcast_root_out_of_range_is_an_error, .timeout = 300) {
    run_check_all_sizes(check_bad_root, NULL);
}

Test(comm, group_size_out_of_range) {
    char err[200] = "";
    cr_assert_null(emx_comm_threads_new(0, err, sizeof err));
    cr_assert(strstr(err, "group size 0") != NULL, "%s", err);
    cr_assert_null(emx_comm_threads_new(65, err, sizeof err));
    cr_assert(strstr(err, "group size 65") != NULL, "%s", err);
    EmxCommThreads *g = emx_comm_threads_new(64, err, sizeof err);
    cr_assert_not_null(g, "%s", err);
    cr_assert_null(emx_comm_threads_rank(g, 64));
    cr_assert_null(emx_comm_threads_rank(g, -1));
    cr_assert_eq(emx_comm_threads_rank(g, 63)->rank, 63);
    emx_comm_threads_free(g);
    emx_comm_threads_free(NULL);
}

// Two groups in one process share nothing: both run at once, and aborting one leaves the other
// working.
Test(comm, two_groups_at_once, .timeout = 300) {
    EmxCommThreads *a = emx_comm_threads_new(2, NULL, 0), *b = emx_comm_threads_new(3, NULL, 0);
    cr_assert(a && b);
    EmxComm *ranks[5] = {emx_comm_threads_rank(a, 0), emx_comm_threads_rank(a, 1), emx_comm_threads_rank(b, 0),
                         emx_comm_threads_rank(b, 1), emx_comm_threads_rank(b, 2)};
    CommRankResult res[5];
    int calls = 300;
    cr_assert_eq(comm_run_ranks(ranks, 5, &host_mem, comm_check_alternating, &calls, res), 0);
    for (int r = 0; r < 5; r++) cr_expect_eq(res[r].failed, 0, "%s", res[r].msg);
    ranks[0]->abort(ranks[0]);
    cr_assert_eq(ranks[1]->barrier(ranks[1]), -1);
    cr_assert_eq(comm_run_ranks(ranks + 2, 3, &host_mem, comm_check_alternating, &calls, res), 0);
    for (int r = 0; r < 3; r++) cr_expect_eq(res[r].failed, 0, "%s", res[r].msg);
    emx_comm_threads_free(a);
    emx_comm_threads_free(b);
}
