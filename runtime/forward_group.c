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
} Member;

struct EmxForwardGroup {
    pthread_mutex_t mu;
    pthread_cond_t cv;    // a step ended, a member left, a prefill started
    int cap;
    Member *m;            // [cap] places; a member keeps its place while it stays
    int running;          // a step is being run (outside the lock)
    int prefilling;       // members' multi-token calls running now
    int prefills_waiting; // exclusive: prefills waiting for the running step to end
    int exclusive;        // one pass at a time (forward_group.h)
    long steps, rows;     // steps run and rows in them, since the group was made
    long prefills, overlaps;
    // the running step's rows, built by its runner: [cap] each
    EmxState **states;
    int *tokens, *pos;
    const float **logits;
};

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
    pthread_cond_init(&g->cv, NULL);
    return g;
}

void emx_forward_group_free(EmxForwardGroup *g) {
    if (!g) return;
    for (int i = 0; i < g->cap; i++)
        if (g->m[i].s) g->m[i].s->group = NULL;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->m), free(g->states), free(g->tokens), free(g->pos), free(g->logits);
    free(g);
}

void emx_forward_group_set_exclusive(EmxForwardGroup *g, int exclusive) {
    pthread_mutex_lock(&g->mu);
    g->exclusive = exclusive != 0;
    pthread_mutex_unlock(&g->mu);
}

int emx_forward_group_join(EmxForwardGroup *g, EmxState *s, char *err, size_t errlen) {
    if (s->group) return emx_seterr(err, errlen, "forward group: the state is already in a group");
    if (!emx_forward_multi_batched(s))
        return emx_seterr(err, errlen, "forward group: device %s has no batched multi-sequence step",
                          emx_state_device(s));
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
    pthread_cond_broadcast(&g->cv);  // the step may have been waiting for s only
    pthread_mutex_unlock(&g->mu);
}

void emx_forward_group_stats(EmxForwardGroup *g, EmxForwardGroupStats *st) {
    pthread_mutex_lock(&g->mu);
    *st = (EmxForwardGroupStats){.steps = g->steps, .rows = g->rows, .prefills = g->prefills, .overlaps = g->overlaps};
    for (int i = 0; i < g->cap; i++) {
        st->members += g->m[i].s != NULL;
        st->waiting += g->m[i].s && g->m[i].submitted && !g->m[i].in_step;
    }
    pthread_mutex_unlock(&g->mu);
}

// The member whose thread runs the next step, or NULL while no step can run: one runs when no
// step is running, some row waits, and every member that holds the step has submitted. (Lock held.)
static Member *next_runner(EmxForwardGroup *g) {
    if (g->running) return NULL;
    if (g->exclusive && (g->prefilling || g->prefills_waiting)) return NULL;  // the prefill goes first
    Member *first = NULL;
    for (int i = 0; i < g->cap; i++) {
        Member *m = &g->m[i];
        if (!m->s) continue;
        if (m->holds && !m->submitted) return NULL;
        if (m->submitted && !first) first = m;
    }
    return first;
}

// Runs every submitted row as one step. Lock held on entry and on return, released meanwhile
// (members may join, leave, submit for the next step or start a prefill while it runs).
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
    if (emx_forward_multi(g->states, g->tokens, g->pos, n, g->logits) != 0)
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
    pthread_cond_broadcast(&g->cv);
}

// A member's multi-token call: alone, at once, the others' steps not waiting for it; in an
// exclusive group, after the running step and before the next one. (Lock held on entry, released
// on return.)
static const float *prefill(EmxForwardGroup *g, Member *me, const int *tokens, int n, int pos) {
    EmxState *s = me->s;
    if (g->exclusive) {
        g->prefills_waiting++;
        while (g->running || g->prefilling) pthread_cond_wait(&g->cv, &g->mu);
        g->prefills_waiting--;
    }
    me->holds = 0;
    g->overlaps += g->running || g->prefilling;
    g->prefilling++;
    g->prefills++;
    pthread_cond_broadcast(&g->cv);  // a step may have been waiting for this member only
    pthread_mutex_unlock(&g->mu);
    const float *r = s->backend->forward(s, tokens, n, pos);
    pthread_mutex_lock(&g->mu);
    g->prefilling--;
    me->holds = 1;
    pthread_cond_broadcast(&g->cv);  // exclusive: the steps (or another prefill) waited for it
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
    Member *runner = next_runner(g);
    if (runner && runner != me) pthread_cond_broadcast(&g->cv);  // this row completed the step: wake its runner
    while (me->submitted) {
        if (next_runner(g) == me) run_step(g);
        else pthread_cond_wait(&g->cv, &g->mu);
    }
    const float *r = me->logits;
    pthread_mutex_unlock(&g->mu);
    return r;
}
