// slots.c — jobs, the queue, the slot threads, streams and the drain (http_internal.h).
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/errmsg.h"
#include "base/mem_available.h"
#include "tools/server/access_log.h"
#include "tools/server/http_internal.h"

SrvJob *srv_job_new(SrvServer *s) {
    SrvJob *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->s = s;
    j->fd = -1;
    j->stalled = &s->n_stalled;
    return j;
}

void srv_job_release(SrvJob *j) {
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    if (j->log_status)  // nginx's 499: the client closed the request before its answer was whole
        srv_access_log("POST", j->path, j->gone ? 499 : j->log_status, j->log_prompt, j->log_completion, j->t0);
    srv_request_free(&j->req);
    free(j->ids);
    free(j->out);
    free(j->body);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_count_error(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    s->n_errors++;
    pthread_mutex_unlock(&s->mu);
}

// The job's answer (status, body) and its log line's (srv_job_release writes it): a stream's
// status is 200, its headers went out before its tokens; n_prompt -1: no generation ran.
static void job_finish(SrvJob *j, int status, char *body, int n_prompt, int n_completion) {
    pthread_mutex_lock(&j->mu);
    j->log_status = j->req.stream ? 200 : status;
    j->log_prompt = n_prompt, j->log_completion = n_completion;
    j->status = status;
    j->body = body;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

// A stream no longer waits for its connection (ended, cut, or its client gone): out of the
// count the drain waits for. Not under j->mu (the order is the server's mu, then a job's).
static void stream_settle(SrvJob *j) {
    SrvServer *s = j->s;
    pthread_mutex_lock(&s->mu);
    if (j->req.stream && !j->settled) j->settled = 1, s->n_streams--;
    pthread_mutex_unlock(&s->mu);
}

// The agent pool's reserved memory given back (under the server's mu).
static void unreserve(SrvServer *s, SrvJob *j) {
    s->mem_reserved -= j->mem;
    j->mem = 0;
}

// A stream's bytes that the connection has not taken yet, at most (the bound is what makes a
// client's reading pace the generation).
#define SRV_STREAM_PENDING (64 * 1024)

// len more bytes would pass the bound (an empty buffer takes any event whole).
static int job_full(const SrvJob *j, size_t len) {
    return j->out_len > j->out_pos && j->out_len - j->out_pos + len > SRV_STREAM_PENDING;
}

// SrvWrite for a streaming job: the bytes wait for the connection's reader. Back-pressure: while
// the buffer is full, the slot waits too (its generation paused, the slot held) until the reader
// takes some, the client goes away (stream_free cancels) or the server stops (then a full buffer
// cancels: that client is not reading, and must not keep the server from exiting).
static int job_write(void *user, const char *data, size_t len) {
    SrvJob *j = user;
    pthread_mutex_lock(&j->mu);
    if (job_full(j, len) && !atomic_load(&j->cancel) && !j->stopping) {
        atomic_fetch_add(j->stalled, 1);  // /metrics shows it: entropix_slots_stalled
        // The other slots' decode steps must not wait for a client that does not read: out of
        // the group while waiting (we are between two forward calls of this slot's thread),
        // back in before the next one. A member's place is kept free for it, so the rejoin holds.
        if (j->group) emx_forward_group_leave(j->st);
        while (job_full(j, len) && !atomic_load(&j->cancel) && !j->stopping) pthread_cond_wait(&j->cv, &j->mu);
        if (j->group && emx_forward_group_join(j->group, j->st, NULL, 0) != 0) j->group = NULL;  // decodes alone
        atomic_fetch_sub(j->stalled, 1);
    }
    const int abandoned = job_full(j, len) && !atomic_load(&j->cancel);  // the server stops; nobody reads
    if (job_full(j, len)) atomic_store(&j->cancel, 1), atomic_store(&j->stop, 1);
    int rc = atomic_load(&j->cancel) ? -1 : 0;
    if (!rc && j->out_pos) {  // what was read makes room: the buffer stays under 2 x the bound
        memmove(j->out, j->out + j->out_pos, j->out_len - j->out_pos);
        j->out_len -= j->out_pos;
        j->out_pos = 0;
    }
    if (!rc && j->out_len + len > j->out_cap) {
        size_t cap = (j->out_len + len) * 2;
        char *o = realloc(j->out, cap);
        if (o) j->out = o, j->out_cap = cap;
        else rc = -1;
    }
    if (!rc) {
        memcpy(j->out + j->out_len, data, len);
        j->out_len += len;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    if (abandoned) stream_settle(j);
    return rc;
}

// The answer of a generation that the drain's deadline stopped: a stream ends as one that hit a
// length limit, marked (entropix.shutdown); a plain request gets the 503 error object.
static char *cut_answer(SrvJob *j, SrvResponse *resp, SrvGenResult *res, int *status) {
    if (j->req.stream) {
        res->finish_reason = "length";
        res->cut = 1;
        srv_response_stream_end(resp, res);
        return NULL;
    }
    SrvError e;
    srv_fail(&e, 503, NULL, "shutting_down",
             "the server is shutting down: the generation was stopped after %d tokens (--drain-timeout)",
             res->n_completion);
    *status = 503;
    return srv_error_json(&e);
}

// Generates the request's best_of candidates (its n choices, or more to rank: response.c) one
// after another on the slot's state: the prompt's rows are
// computed once (the later choices find them in the slot's cache: only the last prompt token
// runs again). Stops early on an error, a cut or a client that left. *total: the completion
// tokens of all choices; res: the last choice's result.
static int run_choices(SrvSlot *slot, SrvJob *j, SrvResponse *resp, SrvGenResult *res, SrvError *e, int *total) {
    SrvServer *s = slot->s;
    const int n = j->req.best_of > 1 ? j->req.best_of : 1;
    SrvRequest one = j->req;  // a shallow copy: only its seed differs; nothing of it is freed
    if (n > 1) one.has_seed = 1, one.seed = srv_request_seed(s->sm, &j->req);  // choice i draws with it + i
    if (j->req.best_of > j->req.n) one.logprobs = 1;  // the ranking reads the tokens' logprobs (not returned)
    *total = 0;
    for (int i = 0;; i++) {
        const int rc = srv_generate(s->sm, slot->st, &slot->cache, &one, j->ids, j->n_ids, &j->stop, srv_response_emit,
                                    resp, res, e);
        if (rc == 0) *total += res->n_completion;
        if (rc != 0 || i == n - 1 || atomic_load(&j->stop)) return rc;
        if (srv_response_next_choice(resp, res) != 0) return 0;  // a stream's client left: nothing more to send
        cJSON_Delete(res->branch);
        one.seed++;
    }
}

static void run_job(SrvSlot *slot, SrvJob *j) {
    SrvServer *s = slot->s;
    SrvResponse resp;
    pthread_mutex_lock(&s->mu);
    const unsigned long serial = ++s->serial;
    pthread_mutex_unlock(&s->mu);
    srv_response_init(&resp, &j->req, s->sm->id, serial);
    resp.write = job_write, resp.write_user = j;
    SrvGenResult res;
    SrvError e;
    int total = 0;
    const int rc = run_choices(slot, j, &resp, &res, &e, &total);
    pthread_mutex_lock(&j->mu);
    const int cut = j->cut && !atomic_load(&j->cancel);
    pthread_mutex_unlock(&j->mu);
    char *body = NULL;
    int status = 200;
    if (rc == 0 && cut) {
        body = cut_answer(j, &resp, &res, &status);
    } else if (j->req.stream) {
        if (rc == 0) srv_response_stream_end(&resp, &res);
        else srv_response_stream_error(&resp, &e);
    } else {
        body = rc == 0 ? srv_response_body(&resp, &res) : srv_error_json(&e);
        status = rc == 0 ? (body ? 200 : 500) : e.status;
    }
    srv_response_free(&resp);
    cJSON_Delete(res.branch);
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        s->n_prompt_tokens += (unsigned long)res.n_prompt;
        s->n_cached_tokens += (unsigned long)res.n_cached;
        s->n_completion_tokens += (unsigned long)total;
        s->decode_s += res.decode_s;
        if (res.decode_s > 0) s->last_tok_s = res.n_completion / res.decode_s;
    }
    if (rc != 0 || status >= 400) s->n_errors++;
    pthread_mutex_unlock(&s->mu);
    job_finish(j, status, body, rc == 0 ? res.n_prompt : -1, total);
}

// Gives queued requests, first come first served, to idle slots (under s->mu): each to the idle
// slot whose cache shares the longest prefix with its prompt, so a chat that goes on finds the
// slot that ran its previous turn. A prefix shorter than half of what the slot holds and half
// of the prompt (two chats that share only the template's start or a short system message) does
// not count: that slot holds another conversation, which an empty or less useful slot spares.
// Ties: the slot holding the least (nothing lost), then the first.
static void dispatch(SrvServer *s) {
    while (s->head) {
        SrvJob *j = s->head;
        SrvSlot *best = NULL;
        int best_k = -1;
        for (int i = 0; i < s->n_slots; i++) {
            SrvSlot *sl = &s->slots[i];
            if (sl->job) continue;
            int k = srv_cache_match(&sl->cache, j->ids, j->n_ids);
            if (2 * k < sl->cache.n && 2 * k < j->n_ids) k = 0;
            if (k > best_k || (k == best_k && sl->cache.n < best->cache.n)) best = sl, best_k = k;
        }
        if (!best) return;  // every slot busy: the request waits
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        j->next = NULL;
        s->n_queued--;
        s->n_busy++;
        best->job = j;
        pthread_cond_broadcast(&s->cv);
    }
}

static void *slot_main(void *arg) {
    SrvSlot *slot = arg;
    SrvServer *s = slot->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!slot->job && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        SrvJob *j = slot->job;
        pthread_mutex_unlock(&s->mu);
        if (!j) return NULL;
        if (atomic_load(&j->stop)) {
            job_finish(j, 499, NULL, -1, 0);  // its client left while it waited: nothing to run, nobody to answer
            pthread_mutex_lock(&j->mu);
            j->log_status = 499;  // a stream's too
            pthread_mutex_unlock(&j->mu);
        } else {
            // decode in one batched step with the other busy slots (forward_group.h); refused only
            // when the state is already in a group, which a slot's is not after leaving below. The
            // agent pool runs replicas of its own, never this state: as a member it would hold up
            // every other slot's step until it ended; the branching decoder's forks are passes of
            // their own, over rows the step does not know.
            char gerr[160];
            const int grouped = s->group && !srv_request_runs_alone(s->sm, &j->req) &&
                                emx_forward_group_join(s->group, slot->st, gerr, sizeof gerr) == 0;
            if (grouped) j->group = s->group, j->st = slot->st;
            run_job(slot, j);
            if (grouped) emx_forward_group_leave(slot->st);  // error and cancel included: run_job has returned
        }
        pthread_mutex_lock(&s->mu);
        slot->job = NULL;  // before the release: the drain may reach the job through the slot
        s->n_busy--;
        unreserve(s, j);
        dispatch(s);
        pthread_mutex_unlock(&s->mu);
        srv_job_release(j);
    }
}

// Would need bytes of pool replicas (or branch tails) fit, beside the requests already admitted?
// (under s->mu) 0, or -1 with e: 400 when they could never fit (./run's message), 503 when others
// hold the room.
static int admit_memory(SrvServer *s, SrvJob *j, SrvError *e) {
    const uint64_t need = j->mem, avail = emx_mem_available();
    j->mem = 0;
    if (!need || !avail) return 0;  // no pool, or the machine's memory unknown (./run's rule)
    const int branch = j->req.sampler == EMX_SAMPLER_BRANCH;
    const char *what = branch ? "the branching decoder" : "the agent pool";
    if (need > avail)
        return srv_fail(e, 400, "entropix", "insufficient_memory",
                        "entropix: %s does not fit: its %s need %.1f MiB, the machine has %.1f MiB available (%s may)",
                        what, branch ? "branch tails" : "replicas", need / 1048576.0, avail / 1048576.0,
                        branch ? "a smaller k or max_tokens" : "fewer workers");
    if (need + s->mem_reserved > avail)
        return srv_fail(e, 503, "entropix", "insufficient_memory",
                        "entropix: %s needs %.1f MiB; the pools and branches running hold %.1f of the %.1f MiB "
                        "available: try again later", what, need / 1048576.0, s->mem_reserved / 1048576.0,
                        avail / 1048576.0);
    j->mem = need;
    s->mem_reserved += need;
    return 0;
}

int srv_enqueue(SrvServer *s, SrvJob *j, SrvError *e) {
    pthread_mutex_lock(&s->mu);
    // A free slot takes the request at once; --queue counts only those that must wait.
    if (s->stopping || s->n_queued >= s->o.queue + (s->n_slots - s->n_busy)) {
        const int stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        return srv_fail(e, 503, NULL, stopping ? "shutting_down" : "queue_full",
                        stopping ? "the server is shutting down" : "the queue is full (%d requests waiting); try again later",
                        s->o.queue);
    }
    if (admit_memory(s, j, e) != 0) return pthread_mutex_unlock(&s->mu), -1;
    j->refs = 2;  // the slot's reference
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_queued++;
    if (j->req.stream) s->n_streams++;
    dispatch(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Streams: the connection's thread reads the job's bytes as the slot writes them.

// How often a waiting connection looks at its client's socket (a client that left is noticed
// within this, whether or not the generation has written anything).
#define SRV_WATCH_NS (250 * 1000 * 1000)

static void wait_a_while(SrvJob *j) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += SRV_WATCH_NS;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &until);
}

// The client is gone: its generation stops at the next token or round (under j->mu). Before a
// stream's end was read (or a plain answer was ready: srv_job_wait), it left mid-answer: 499.
static void client_gone(SrvJob *j) {
    if (!j->delivered) j->gone = 1;
    atomic_store(&j->cancel, 1);
    atomic_store(&j->stop, 1);
    pthread_cond_broadcast(&j->cv);  // a slot waiting for room in job_write stops
}

ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    SrvJob *j = cls;
    pthread_mutex_lock(&j->mu);
    int gone = 0;
    while (j->out_pos == j->out_len && !j->done && !(gone = j->fd >= 0 && srv_client_gone(j->fd))) wait_a_while(j);
    ssize_t n = gone ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    if (gone) client_gone(j);
    else if (j->out_pos < j->out_len) {
        size_t k = j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max;
        memcpy(buf, j->out + j->out_pos, k);
        j->out_pos += k;
        n = (ssize_t)k;
        pthread_cond_broadcast(&j->cv);  // room for a slot waiting in job_write
    } else {
        j->delivered = 1;  // done, and every byte taken: the stream's end
    }
    pthread_mutex_unlock(&j->mu);
    if (n < 0) stream_settle(j);
    return n;
}

// libmicrohttpd is done with the response: finished, or the client went away (a failed
// write). Either way the generation has nobody to send to: cancel it.
void srv_stream_free(void *cls) {
    SrvJob *j = cls;
    pthread_mutex_lock(&j->mu);
    client_gone(j);
    pthread_mutex_unlock(&j->mu);
    stream_settle(j);
    srv_job_release(j);
}

int srv_job_wait(SrvJob *j) {
    pthread_mutex_lock(&j->mu);
    int gone = 0;
    while (!j->done && !(gone = j->fd >= 0 && srv_client_gone(j->fd))) wait_a_while(j);
    if (gone) {
        client_gone(j);
        while (!j->done) pthread_cond_wait(&j->cv, &j->mu);  // it stops within a token or a round
    }
    pthread_mutex_unlock(&j->mu);
    return gone ? -1 : 0;
}

// ---------------------------------------------------------------------------------------------
// The slots' start, the drain and the stop.

int srv_slots_start(SrvServer *s, char *err, size_t errlen) {
    const SrvHttpOptions *o = &s->o;
    SrvModel *sm = s->sm;
    if (!(s->slots = calloc((size_t)o->parallel, sizeof *s->slots))) return emx_seterr(err, errlen, "out of memory");
    s->n_slots = o->parallel;
    for (int i = 0; i < s->n_slots; i++) {  // one state (KV cache) per slot, all of one context
        // a GPU's slots use slot 0's uploaded weights: one copy, and the batched step needs that
        EmxStateOptions so = {.n_threads = o->threads, .ctx = sm->ctx, .device = o->device,
                              .share_weights = i ? s->slots[0].st : NULL};
        s->slots[i] = (SrvSlot){.s = s, .index = i, .st = emx_state_new(&sm->model, &so, err, errlen)};
        if (!s->slots[i].st) return -1;
        // the prompt and every chosen token (the last one is recorded but not fed): ctx + 1
        s->slots[i].cache = (SrvCache){.ids = malloc((size_t)(sm->ctx + 1) * sizeof(int)), .cap = sm->ctx + 1};
        if (!s->slots[i].cache.ids) return emx_seterr(err, errlen, "out of memory");
    }
    if (s->n_slots > 1 && emx_forward_multi_batched(s->slots[0].st) &&
        !(s->group = emx_forward_group_new(s->n_slots, err, errlen)))
        return -1;
    // A pass that takes more than half the cores runs alone (a new request's prefill waits for
    // the step): two such passes at once share cores, and their OpenMP teams wait on each other.
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (s->group && 2L * (o->threads > 0 ? o->threads : cores) > cores) emx_forward_group_set_exclusive(s->group, 1);
    for (int i = 0; i < s->n_slots; i++)
        if (pthread_create(&s->slots[i].thread, NULL, slot_main, &s->slots[i]) != 0) {
            s->slots[i].thread = 0;
            srv_slots_drain(s);
            srv_slots_join(s);
            return emx_seterr(err, errlen, "cannot start slot thread %d", i);
        }
    return 0;
}

void srv_slots_drain(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    // Queued requests get 503 (a stream: an error event): they never started.
    SrvError e;
    srv_fail(&e, 503, NULL, "shutting_down", "the server is shutting down");
    while (s->head) {
        SrvJob *j = s->head;
        s->head = j->next;
        s->n_queued--;
        unreserve(s, j);
        if (!atomic_load(&j->stop)) s->n_errors++;  // one its client is still there for
        if (j->req.stream) {
            SrvResponse resp;
            srv_response_init(&resp, &j->req, s->sm->id, 0);
            resp.write = job_write, resp.write_user = j;
            srv_response_stream_error(&resp, &e);
            srv_response_free(&resp);
        }
        job_finish(j, 503, j->req.stream ? NULL : srv_error_json(&e), -1, 0);
        srv_job_release(j);
    }
    s->tail = NULL;
    for (int i = 0; i < s->n_slots; i++) {  // a running stream whose client stopped reading must not hold us
        SrvJob *j = s->slots[i].job;
        if (!j) continue;
        pthread_mutex_lock(&j->mu);
        j->stopping = 1;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_slots_cut(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) {
        SrvJob *j = s->slots[i].job;
        if (!j) continue;
        pthread_mutex_lock(&j->mu);
        j->cut = 1;
        atomic_store(&j->stop, 1);
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

int srv_slots_settled(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    const int settled = s->n_queued == 0 && s->n_busy == 0 && s->n_streams == 0;
    pthread_mutex_unlock(&s->mu);
    return settled;
}

void srv_slots_join(SrvServer *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].thread) pthread_join(s->slots[i].thread, NULL), s->slots[i].thread = 0;
}

void srv_slots_free(SrvServer *s) {
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].st) emx_state_free(s->slots[i].st);
        free(s->slots[i].cache.ids);
    }
    emx_forward_group_free(s->group);  // after the states: freeing one leaves its group
    free(s->slots);
    s->slots = NULL;
    s->n_slots = 0;
}
