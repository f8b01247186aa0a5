// comm_threads.c — the collective interface of comm.h for ranks that are host threads of one
// process (the CPU agent pool).
//
// Every collective goes through one staging area owned by the group:
//   all_gather: each rank copies its send[bytes] to staging + rank * bytes, barrier,
//               each rank copies staging[size * bytes] to its recv, barrier;
//   broadcast:  root copies buf to staging, barrier, the others copy it out, barrier;
//   barrier:    one barrier.
// The second barrier keeps the next collective from overwriting the staging area while a slow
// rank is still copying out of it. Copy-in reads send before copy-out writes recv (same
// thread, in that order), so an in-place all_gather (send == recv + rank * bytes) just works.
//
// The barrier counts generations: a rank waits until the generation it arrived in is over, so
// a fast rank that leaves one barrier and arrives at the next cannot be confused with a slow
// one that has not left the first yet. It is a mutex + condition variable (not a
// pthread_barrier_t) so that abort() can wake every waiter.
//
// The first rank to enter a collective records what it is (kind, bytes, root) and grows the
// staging area if needed: nobody is using it then, because every rank left the previous
// collective through its final barrier. The others check that they called the same thing: a
// mismatch (a bug in the caller) aborts the group with a one-line message instead of copying
// out of bounds.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pool/comm.h"
#include "base/errmsg.h"

enum { COMM_MAX_RANKS = 64 };

typedef enum { KIND_ALL_GATHER, KIND_BROADCAST, KIND_BARRIER } CollectiveKind;

static const char *kind_name(CollectiveKind k) {
    return k == KIND_ALL_GATHER ? "all_gather" : k == KIND_BROADCAST ? "broadcast" : "barrier";
}

// One rank's handle: the public part first, so an EmxComm * is a ThreadsRank *.
typedef struct {
    EmxComm comm;
    EmxCommThreads *group;
} ThreadsRank;

struct EmxCommThreads {
    int size;
    pthread_mutex_t mutex;   // guards everything below; `aborted` is atomic so calls may check it unlocked
    pthread_cond_t wake;     // a barrier generation ended, or the group was aborted
    int arrived;             // ranks waiting in the current barrier generation
    unsigned long generation;
    atomic_int aborted;      // set once, never cleared; written under the mutex

    // The collective in progress, as the first rank to enter it described it.
    int entered;             // ranks that entered it and have not passed its first barrier
    unsigned long number;    // collectives started so far (for messages)
    CollectiveKind kind;
    size_t bytes;
    int root;

    unsigned char *staging;  // [staging_cap] grow-only, freed with the group
    size_t staging_cap;

    ThreadsRank ranks[];     // [size]
};

static EmxCommThreads *group_of(EmxComm *c) { return ((ThreadsRank *)c)->group; }

// Wakes every rank blocked in a call; all later calls return -1. Mutex held.
static void abort_locked(EmxCommThreads *g) {
    atomic_store(&g->aborted, 1);
    pthread_cond_broadcast(&g->wake);
}

// Waits until every rank has arrived in this generation. Mutex held (released while waiting).
// Returns 0, or -1 if the group is aborted before the generation ends.
static int wait_all_locked(EmxCommThreads *g) {
    if (atomic_load(&g->aborted)) return -1;
    unsigned long mine = g->generation;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->generation++;
        g->entered = 0; // the collective's first barrier: nobody can enter a new one before the next
        pthread_cond_broadcast(&g->wake);
        return 0;
    }
    // Spurious wake-ups and wake-ups for other reasons just loop.
    while (g->generation == mine && !atomic_load(&g->aborted)) pthread_cond_wait(&g->wake, &g->mutex);
    return g->generation != mine ? 0 : -1;
}

static int wait_all(EmxCommThreads *g) {
    pthread_mutex_lock(&g->mutex);
    int rc = wait_all_locked(g);
    pthread_mutex_unlock(&g->mutex);
    return rc;
}

// A rank enters a collective that needs `staging_bytes` of staging. Mutex held. The first rank
// describes it and grows the staging area; the others must match. Returns 0 or -1 (aborted).
static int enter_locked(EmxCommThreads *g, int rank, CollectiveKind kind, size_t bytes, int root,
                        size_t staging_bytes) {
    if (atomic_load(&g->aborted)) return -1;
    if (g->entered == 0) {
        g->number++;
        g->kind = kind;
        g->bytes = bytes;
        g->root = root;
        if (staging_bytes > g->staging_cap) {
            // Contents need not survive: free + malloc instead of realloc's copy.
            free(g->staging);
            g->staging = malloc(staging_bytes);
            g->staging_cap = g->staging ? staging_bytes : 0;
            if (!g->staging) {
                fprintf(stderr, "comm: rank %d: %s of %zu bytes: out of memory for %zu bytes of staging\n",
                        rank, kind_name(kind), bytes, staging_bytes);
                abort_locked(g);
                return -1;
            }
        }
    } else if (kind != g->kind || bytes != g->bytes || root != g->root) {
        fprintf(stderr, "comm: collective #%lu: rank %d called %s(bytes %zu, root %d) but another rank called "
                        "%s(bytes %zu, root %d): aborting the group\n",
                g->number, rank, kind_name(kind), bytes, root, kind_name(g->kind), g->bytes, g->root);
        abort_locked(g);
        return -1;
    }
    g->entered++;
    return 0;
}

static int enter(EmxCommThreads *g, int rank, CollectiveKind kind, size_t bytes, int root, size_t staging_bytes) {
    pthread_mutex_lock(&g->mutex);
    int rc = enter_locked(g, rank, kind, bytes, root, staging_bytes);
    pthread_mutex_unlock(&g->mutex);
    return rc;
}

static int threads_all_gather(EmxComm *c, const void *send, void *recv, size_t bytes) {
    EmxCommThreads *g = group_of(c);
    if (atomic_load(&g->aborted)) return -1;
    if (g->size == 1) { // alone: nothing to wait for
        if (send != recv && bytes) memcpy(recv, send, bytes);
        return 0;
    }
    if (bytes > SIZE_MAX / (size_t)g->size) {
        fprintf(stderr, "comm: rank %d: all_gather of %zu bytes from %d ranks overflows size_t\n", c->rank, bytes,
                g->size);
        pthread_mutex_lock(&g->mutex);
        abort_locked(g);
        pthread_mutex_unlock(&g->mutex);
        return -1;
    }
    size_t total = (size_t)g->size * bytes;
    if (enter(g, c->rank, KIND_ALL_GATHER, bytes, -1, total)) return -1;
    if (bytes) memcpy(g->staging + (size_t)c->rank * bytes, send, bytes);
    if (wait_all(g)) return -1;
    if (bytes) memcpy(recv, g->staging, total);
    return wait_all(g);
}

static int threads_broadcast(EmxComm *c, void *buf, size_t bytes, int root) {
    EmxCommThreads *g = group_of(c);
    if (atomic_load(&g->aborted)) return -1;
    if (root < 0 || root >= g->size) {
        fprintf(stderr, "comm: rank %d: broadcast from root %d, but the group has %d ranks\n", c->rank, root, g->size);
        pthread_mutex_lock(&g->mutex);
        abort_locked(g);
        pthread_mutex_unlock(&g->mutex);
        return -1;
    }
    if (g->size == 1) return 0; // the root's buffer is the only one
    if (enter(g, c->rank, KIND_BROADCAST, bytes, root, bytes)) return -1;
    if (c->rank == root && bytes) memcpy(g->staging, buf, bytes);
    if (wait_all(g)) return -1;
    if (c->rank != root && bytes) memcpy(buf, g->staging, bytes);
    return wait_all(g);
}

static int threads_barrier(EmxComm *c) {
    EmxCommThreads *g = group_of(c);
    if (atomic_load(&g->aborted)) return -1;
    if (g->size == 1) return 0;
    pthread_mutex_lock(&g->mutex);
    int rc = enter_locked(g, c->rank, KIND_BARRIER, 0, -1, 0);
    if (rc == 0) rc = wait_all_locked(g);
    pthread_mutex_unlock(&g->mutex);
    return rc;
}

static void threads_abort(EmxComm *c) {
    EmxCommThreads *g = group_of(c);
    pthread_mutex_lock(&g->mutex);
    abort_locked(g);
    pthread_mutex_unlock(&g->mutex);
}

EmxCommThreads *emx_comm_threads_new(int size, char *err, size_t errlen) {
    if (size < 1 || size > COMM_MAX_RANKS) {
        emx_seterr(err, errlen, "comm: group size %d is out of range 1..%d", size, COMM_MAX_RANKS);
        return NULL;
    }
    EmxCommThreads *g = calloc(1, sizeof *g + (size_t)size * sizeof g->ranks[0]);
    if (!g) {
        emx_seterr(err, errlen, "comm: out of memory for a group of %d ranks", size);
        return NULL;
    }
    g->size = size;
    atomic_init(&g->aborted, 0);
    if (pthread_mutex_init(&g->mutex, NULL)) {
        free(g);
        emx_seterr(err, errlen, "comm: pthread_mutex_init failed");
        return NULL;
    }
    if (pthread_cond_init(&g->wake, NULL)) {
        pthread_mutex_destroy(&g->mutex);
        free(g);
        emx_seterr(err, errlen, "comm: pthread_cond_init failed");
        return NULL;
    }
    for (int r = 0; r < size; r++) {
        g->ranks[r].group = g;
        g->ranks[r].comm = (EmxComm){
            .rank = r,
            .size = size,
            .all_gather = threads_all_gather,
            .broadcast = threads_broadcast,
            .barrier = threads_barrier,
            .abort = threads_abort,
        };
    }
    return g;
}

EmxComm *emx_comm_threads_rank(EmxCommThreads *g, int rank) {
    if (!g || rank < 0 || rank >= g->size) return NULL;
    return &g->ranks[rank].comm;
}

void emx_comm_threads_free(EmxCommThreads *g) {
    if (!g) return;
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->mutex);
    free(g->staging);
    free(g);
}
