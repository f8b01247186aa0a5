// branch_track.c — what the branching decoder's loop (branch_decode.c) and its answer
// commitment (branch_commit.c) both use, below them both: a track growing by one token, the
// check that a hook stopped the run, the error of a forward pass that failed.
#include <stdlib.h>

#include "base/errmsg.h"
#include "runtime/branch/branch_internal.h"

int branch_track_push(Track *t, int id, double logp, double ent, double mar) {
    if (t->len == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 16;
        int *tok = realloc(t->tok, (size_t)cap * sizeof *tok);
        if (tok) t->tok = tok;
        double *a = realloc(t->logp, (size_t)cap * sizeof *a);
        if (a) t->logp = a;
        double *b = realloc(t->ent, (size_t)cap * sizeof *b);
        if (b) t->ent = b;
        double *c = realloc(t->mar, (size_t)cap * sizeof *c);
        if (c) t->mar = c;
        if (!tok || !a || !b || !c) return -1;
        t->cap = cap;
    }
    t->tok[t->len] = id, t->logp[t->len] = logp, t->ent[t->len] = ent, t->mar[t->len] = mar;
    t->len++;
    return 0;
}

int branch_halted(Dec *d) {
    const EmxBranchHooks *h = d->hooks;
    if (!d->halted && h && h->should_stop && h->should_stop(h->user)) d->halted = 1;
    return d->halted;
}

int branch_fail_forward(Dec *d, int pos) {
    return emx_seterr(d->err, d->errlen, "forward pass failed at position %d (context %d): %s", pos, d->ctx,
                      emx_state_error(d->st));
}
