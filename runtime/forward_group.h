// forward_group.h — a rendezvous that decodes several sequences together (continuous batching)
// without changing their generation loops: each thread keeps calling emx_forward on its own
// state, and the group turns the one-token calls of its members into one emx_forward_multi.
//
// The rule:
//   - A member holds the step up from the moment it joins (about to start, decoding, or sampling
//     between two steps), except while it runs a multi-token call (a prefill: that runs alone,
//     at once, on its own state) and once it has left.
//   - A one-token emx_forward of a member submits its row and waits. When every member that
//     holds the step has submitted, the submitted rows run as one emx_forward_multi on the
//     group's own thread, and every submitter gets its own logits back. A row submitted while a
//     step runs goes into the next step.
//   - Leaving (and a prefill starting) wakes the waiters: the step no longer waits for that member.
//   - One pass at a time (emx_forward_group_set_exclusive): a prefill then waits for the running
//     step and runs with no step beside it, and a waiting prefill goes before the next step. For
//     passes that each use every core: two at once would put two OpenMP teams on the same cores,
//     where a thread spinning at a barrier waits for one that is not running, and both passes slow
//     down many times over. Passes of one thread each leave it off: side by side they use two cores.
//     An exclusive group's prefills run on the group's thread too, so that all its passes share
//     one OpenMP team. (libgomp gives each thread that opens a parallel region a pool of its own;
//     with more pooled threads than cores, its workers stop spinning between regions and sleep,
//     and each of a step's hundred-odd regions then waits for a futex wake. Four slots' prefills
//     on their own threads made a 4-row step 3x slower than emx_forward_multi alone.)
// Results are bitwise those of running each state alone (emx_forward_multi's guarantee), so the
// grouping changes the speed only, never a text. If the batched step refuses the rows (a bad
// token or position, states of different models), each row runs alone, so a bad row gets its
// own NULL and the others their logits.
//
// A state's own calls must come from one thread at a time, as without a group. A member must
// not block on another member between its forward calls (the step would wait for it forever).
// Several groups may live in one process; a group has no global state.
#ifndef ENTROPIX_FORWARD_GROUP_H
#define ENTROPIX_FORWARD_GROUP_H

#include <stddef.h>

#include "runtime/forward.h"

typedef struct EmxForwardGroup EmxForwardGroup;

// A group of at most max_members states. Returns NULL with a one-line reason.
EmxForwardGroup *emx_forward_group_new(int max_members, char *err, size_t errlen);
// Members still in it are let go (no thread may be inside one of their forward calls).
void emx_forward_group_free(EmxForwardGroup *g);

// Turns the one-pass-at-a-time rule on (1) or off (0, the default). Set it before members join.
void emx_forward_group_set_exclusive(EmxForwardGroup *g, int exclusive);

// s decodes in g from now on (it holds the step up: join as its generation starts). Refused
// (-1 with a one-line reason) when s is already in a group, g is full, or s's backend has no
// batched step (emx_forward_multi_batched: the rows would run in turn, each waiting for the
// others, which is slower than alone).
int emx_forward_group_join(EmxForwardGroup *g, EmxState *s, char *err, size_t errlen);
// s leaves its group (nothing when it is in none); waiting members no longer wait for it. Called
// by s's own thread, not inside one of its forward calls; emx_state_free calls it.
void emx_forward_group_leave(EmxState *s);
// What the group is doing now, and has done (rows / steps: the mean batch). For tests, metrics.
typedef struct {
    int members;        // states in the group now
    int waiting;        // rows submitted and not yet run (their threads are waiting)
    long steps, rows;   // steps run since the group was made, and rows in them
    long prefills;      // multi-token calls of members run since the group was made
    long overlaps;      // passes (steps or prefills) that started while another one ran
    long passes_elsewhere; // passes run on a member's thread, not the group's (prefills of a
                        // group that is not exclusive)
} EmxForwardGroupStats;
void emx_forward_group_stats(EmxForwardGroup *g, EmxForwardGroupStats *st);

// emx_forward for a member (runtime/forward.c calls it): one token joins the step, more run alone.
const float *emx_forward_group_forward(EmxState *s, const int *tokens, int n, int pos);

#endif
