// forward_group.c — the rendezvous of forward_group.h: members' one-token calls become one
// emx_forward_multi step.
#include "runtime/forward_group.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/errmsg.h"
#include "runtime/forward_backend.h"

typedef struct {
    EmxState *s;          // NULL: a free place
    int holds;            // the step waits for this member (forward_group.h's rule)
    int submitted;        // its row waits for a step (token, pos); cleared with the result
    int in_step;          // its row is in the step being run
    int token, pos;
    const float *logits;  // the result of its row (NULL: the row failed)
    // a prefill handed to the group's thread (exclusive groups), and its result
    const int *pf_tokens;
    int pf_n, pf_pos;
    long pf_ticket;       // > 0: queued; prefills run in the order they were queued
    int pf_done;
    const float *pf_result;
} Member;

struct EmxForwardGroup {
    pthread_mutex_t mu;
    pthread_cond_t work;  // to the group's thread: a step or a prefill may be ready, or stop
    pthread_cond_t done;  // to the members: a step or a prefill ended, a member left
    pthread_t thread;     // the group's own: it runs every step and an exclusive group's prefills
    int stopping;
    int cap;
    Member *m;            // [cap] places; a member keeps its place while it stays
    int running;          // a step is being run (outside the lock)
    int prefilling;       // prefills running now
    long tickets;         // prefills queued so far (their order)
    int exclusive;        // one pass at a time (forward_group.h)
    long steps, rows;     // steps run and rows in them, since the group was made
    long prefills, overlaps, passes_elsewhere;
    // the running step's rows: [cap] each
    EmxState **states;
    int *tokens, *pos;
    const float **logits;
};

static void *group_main(void *arg);

EmxForwardGroup *emx_forward_group_new(int max_members, char *err, size_t errlen) {
    if (max_members < 1) {
        emx_seterr(err, errlen, "forward group: %d members (at least 1)", max_members);
        return NULL;
    }
    EmxForwardGroup *g = calloc(1, sizeof *g);
    if (g) {
        g->cap = max_members;
        g->m = calloc((size_t)max_members, sizeof *g->m);
        g->states = calloc((size_t)max_members, sizeof *g->states);
        g->tokens = calloc((size_t)max_members, sizeof *g->tokens);
        g->pos = calloc((size_t)max_members, sizeof *g->pos);
        g->logits = calloc((size_t)max_members, sizeof *g->logits);
    }
    if (!g || !g->m || !g->states || !g->tokens || !g->pos || !g->logits) {
        if (g) free(g->m), free(g->states), free(g->tokens), free(g->pos), free(g->logits);
        free(g);
        emx_seterr(err, errlen, "forward group: out of memory");
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->work, NULL);
    pthread_cond_init(&g->done, NULL);
    if (pthread_create(&g->thread, NULL, group_main, g) != 0) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->work), pthread_cond_destroy(&g->done);
        free(g->m), free(g->states), free(g->tokens), free(g->pos), free(g->logits);
        free(g);
        emx_seterr(err, errlen, "forward group: cannot start its thread");
        return NULL;
    }
    return g;
}

void emx_forward_group_free(EmxForwardGroup *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    for (int i = 0; i < g->cap; i++)
        if (g->m[i].s) g->m[i].s->group = NULL;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->work), pthread_cond_destroy(&g->done);
    free(g->m), free(g->states), free(g->tokens), free(g->pos), free(g->logits);
    free(g);
}

void emx_forward_group_set_exclusive(EmxForwardGroup *g, int exclusive) {
    pthread_mutex_lock(&g->mu);
    g->exclusive = exclusive != 0;
    pthread_mutex_unlock(&g->mu);
}

// An exclusive group's queued prefill that goes next (the first queued), or NULL. (Lock held.)
static Member *next_prefill(const EmxForwardGroup *g) {
    Member *first = NULL;
    for (int i = 0; i < g->cap; i++) {
        Member *m = &g->m[i];
        if (m->s && m->pf_ticket > 0 && (!first || m->pf_ticket < first->pf_ticket)) first = m;
    }
    return first;
}

// Whether the next step can run now: no pass in the way, some row waits, and every member that
// holds the step has submitted. (Lock held.)
static int step_ready(const EmxForwardGroup *g) {
    if (g->running) return 0;
    if (g->exclusive && (g->prefilling || next_prefill(g))) return 0;  // the prefill goes first
    int some = 0;
    for (int i = 0; i < g->cap; i++) {
        const Member *m = &g->m[i];
        if (!m->s) continue;
        if (m->holds && !m->submitted) return 0;
        some |= m->submitted;
    }
    return some;
}

// Wakes the group's thread when the change just made (under the lock) may have given it work.
static void poke(EmxForwardGroup *g) {
    if (next_prefill(g) || step_ready(g)) pthread_cond_signal(&g->work);
}

// emx_forward_multi through the table (see emx_forward_group_join): one batched pass when every
// row's state is of the first's backend, whose forward_multi a member's join checked; else -1.
static int multi_step(EmxState *const *states, const int *tokens, const int *pos, int n, const float **logits) {
    if (n < 1) return -1;
    const EmxBackend *b = states[0]->backend;
    for (int i = 1; i < n; i++)
        if (states[i]->backend != b) return -1;
    return b->forward_multi(states, tokens, pos, n, logits);
}

int emx_forward_group_join(EmxForwardGroup *g, EmxState *s, char *err, size_t errlen) {
    if (s->group) return emx_seterr(err, errlen, "forward group: the state is already in a group");
    // the backend's table, not forward.h's functions: forward.c calls this file (emx_forward of a
    // member), so this file calls no function of forward.c
    if (!s->backend->forward_multi)
        return emx_seterr(err, errlen, "forward group: device %s has no batched multi-sequence step",
                          s->backend->device ? s->backend->device(s) : s->backend->name);
    pthread_mutex_lock(&g->mu);
    int at = -1;
    for (int i = 0; i < g->cap && at < 0; i++)
        if (!g->m[i].s) at = i;
    if (at >= 0) {
        // holds from now on: a generation joins as it starts, and the first step of members that
        // join together waits for all of them (their prefills release it)
        g->m[at] = (Member){.s = s, .holds = 1};
        s->group = g;
    }
    pthread_mutex_unlock(&g->mu);
    if (at < 0) return emx_seterr(err, errlen, "forward group: full (%d members)", g->cap);
    return 0;
}

static Member *member_of(EmxForwardGroup *g, const EmxState *s) {
    for (int i = 0; i < g->cap; i++)
        if (g->m[i].s == s) return &g->m[i];
    return NULL;
}

void emx_forward_group_leave(EmxState *s) {
    EmxForwardGroup *g = s->group;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    Member *me = member_of(g, s);
    if (me) *me = (Member){0};
    s->group = NULL;
    poke(g);  // the step may have been waiting for s only
    pthread_mutex_unlock(&g->mu);
}

void emx_forward_group_stats(EmxForwardGroup *g, EmxForwardGroupStats *st) {
    pthread_mutex_lock(&g->mu);
    *st = (EmxForwardGroupStats){.steps = g->steps, .rows = g->rows, .prefills = g->prefills, .overlaps = g->overlaps,
                                 .passes_elsewhere = g->passes_elsewhere};
    for (int i = 0; i < g->cap; i++) {
        st->members += g->m[i].s != NULL;
        st->waiting += g->m[i].s && g->m[i].submitted && !g->m[i].in_step;
    }
    pthread_mutex_unlock(&g->mu);
}

// Runs every submitted row as one step, on the group's thread. Lock held on entry and on return,
// released meanwhile (members may join, leave, submit for the next step or start a prefill).
static void run_step(EmxForwardGroup *g) {
    int n = 0;
    for (int i = 0; i < g->cap; i++) {
        Member *m = &g->m[i];
        if (!m->s || !m->submitted) continue;
        m->in_step = 1;
        g->states[n] = m->s, g->tokens[n] = m->token, g->pos[n] = m->pos;
        n++;
    }
    g->running = 1;
    g->overlaps += g->prefilling > 0;
    g->steps++;
    g->rows += n;
    pthread_mutex_unlock(&g->mu);
    if (multi_step(g->states, g->tokens, g->pos, n, g->logits) != 0)
        for (int i = 0; i < n; i++)  // refused as a whole: each row alone gets its own answer
            g->logits[i] = g->states[i]->backend->forward(g->states[i], &g->tokens[i], 1, g->pos[i]);
    pthread_mutex_lock(&g->mu);
    // the step's members are waiting in it: none could leave, their places are unchanged
    for (int i = 0, k = 0; i < g->cap; i++) {
        Member *m = &g->m[i];
        if (!m->s || !m->in_step) continue;
        m->logits = g->logits[k++];
        m->in_step = m->submitted = 0;
    }
    g->running = 0;
    pthread_cond_broadcast(&g->done);
}

// Runs a member's multi-token call on the calling thread. Lock held on entry and on return.
static const float *run_prefill(EmxForwardGroup *g, Member *me, const int *tokens, int n, int pos) {
    EmxState *s = me->s;
    g->overlaps += g->running || g->prefilling;
    g->passes_elsewhere += !pthread_equal(pthread_self(), g->thread);
    g->prefilling++;
    g->prefills++;
    pthread_mutex_unlock(&g->mu);
    const float *r = s->backend->forward(s, tokens, n, pos);
    pthread_mutex_lock(&g->mu);
    g->prefilling--;
    me->holds = 1;
    return r;
}

// The group's thread: prefills first (exclusive groups queue theirs here), then steps, until
// the group is freed. Every pass of an exclusive group runs on this one thread.
static void *group_main(void *arg) {
    EmxForwardGroup *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        Member *pf = next_prefill(g);
        if (pf) {
            pf->pf_ticket = 0;
            pf->pf_result = run_prefill(g, pf, pf->pf_tokens, pf->pf_n, pf->pf_pos);
            pf->pf_done = 1;
            pthread_cond_broadcast(&g->done);
        } else if (step_ready(g)) {
            run_step(g);
        } else {
            pthread_cond_wait(&g->work, &g->mu);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

// A member's multi-token call: its row does not hold the steps meanwhile. An exclusive group
// hands it to the group's thread, which runs it after the running step and before the next;
// otherwise it runs at once on the member's thread, beside the steps. (Lock held on entry,
// released on return.)
static const float *prefill(EmxForwardGroup *g, Member *me, const int *tokens, int n, int pos) {
    me->holds = 0;
    const float *r;
    if (g->exclusive) {
        me->pf_tokens = tokens, me->pf_n = n, me->pf_pos = pos;
        me->pf_ticket = ++g->tickets;
        me->pf_done = 0;
        pthread_cond_signal(&g->work);
        while (!me->pf_done) pthread_cond_wait(&g->done, &g->mu);
        r = me->pf_result;
    } else {
        poke(g);  // a step may have been waiting for this member only
        r = run_prefill(g, me, tokens, n, pos);
    }
    pthread_mutex_unlock(&g->mu);
    return r;
}

const float *emx_forward_group_forward(EmxState *s, const int *tokens, int n, int pos) {
    EmxForwardGroup *g = s->group;
    pthread_mutex_lock(&g->mu);
    Member *me = member_of(g, s);
    if (n != 1) return prefill(g, me, tokens, n, pos);
    me->holds = 1;
    me->submitted = 1;
    me->token = tokens[0], me->pos = pos;
    poke(g);  // this row may complete the step
    while (me->submitted) pthread_cond_wait(&g->done, &g->mu);
    const float *r = me->logits;
    pthread_mutex_unlock(&g->mu);
    return r;
}
