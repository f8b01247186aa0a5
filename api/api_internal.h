// api_internal.h — what the files of api/ share: the handles behind include/entropix.h's opaque
// types, and the per-thread error message every public function leaves on failure.
#ifndef ENTROPIX_API_INTERNAL_H
#define ENTROPIX_API_INTERNAL_H

#define ENTROPIX_BUILDING 1
#include "include/entropix.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>  // memcpy: API_COPY_OUT

#include "runtime/forward.h"
#include "runtime/model.h"
#include "sampler/grammar_mask.h"
#include "tokenizer/tokenizer.h"

#define API_ERRLEN 512
#define API_DEVICE_LEN 32

struct entropix_model {
    EmxModel model;
    EmxTokenizer *tk;
    char device[API_DEVICE_LEN];  // the default of its states
    int threads;
    // The tokens' trie a grammar's mask walks (grammar_mask.h): made at the first generation with
    // a grammar or schema (tens of ms, megabytes: not every user wants it), then only read, by
    // any number of states. The lock guards that first build: states in several threads share
    // one model.
    pthread_mutex_t trie_lock;
    EmxTokenTrie *trie;
};

struct entropix_state {
    entropix_model *owner;
    EmxState *st;
    int last_pos;      // the last position fed; -1 before the first forward
    double *scratch;   // [ctx] the attention metrics' head-mean row
    const float *logits; // [vocab] the latest forward's last row (the state's, or last_row)
    float *last_row;   // [vocab] entropix_forward_all's last row, copied
    int generating;    // an entropix_generation runs on it (begin..end): forward and generate refuse
    int *held;         // [ctx] the ids at positions 0..n_held-1 of the cache, as the forwards and
    int n_held;        // generations left them (reuse_prefix reads them)
};

// The calling thread's message buffer (API_ERRLEN bytes).
char *api_errbuf(void);
// Sets the thread's message with a printf format and returns status (a negative
// entropix_status), so that `return api_fail(ENTROPIX_ERR_ARGUMENT, "...", ...)` reads as one.
__attribute__((format(printf, 2, 3))) int api_fail(int status, const char *fmt, ...);

// The bytes a caller's struct needs to hold `field` and every field before it.
#define API_FIELD_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

// The size check of every caller's struct, parameters and results alike: p->size must hold at
// least the fields up to first_field, or the call fails with ENTROPIX_ERR_ARGUMENT and "fn:
// p->size N is too small for type (at least M)". A parameter struct's first_field is the last of
// its first version (the library reads them all; a newer field is read only when size holds it);
// a result struct's is its first field after size, since the library only writes a result and a
// caller's older, shorter struct gets the fields it holds: a size too small for any field (0: the
// caller did not set it) would make the call succeed and tell nothing.
int api_check_size(const char *fn, const char *name, const char *type, size_t size, size_t need);
#define API_CHECK_SIZE(fn, p, type, first_field) \
    api_check_size(fn, #p, #type, (p)->size, API_FIELD_END(type, first_field))

// Copies a result into the caller's struct out (its size checked by API_CHECK_SIZE): the fields
// that size holds, so an older, shorter struct gets the ones it knows.
#define API_COPY_OUT(out, res) memcpy((out), &(res), (out)->size < sizeof(res) ? (out)->size : sizeof(res))
// Its twin for a parameter struct: the caller's p over dst, which holds the defaults (the fields
// an older, shorter struct lacks keep them); p's size checked by API_CHECK_SIZE first.
#define API_COPY_IN(dst, p) memcpy(&(dst), (p), (p)->size < sizeof(dst) ? (p)->size : sizeof(dst))

// m's token trie, made on the first call (NULL with the thread's message: out of memory).
const EmxTokenTrie *api_model_trie(entropix_model *m);

// The cache now holds ids[0..n) at positions pos..pos+n-1: what it held from pos on is replaced
// (after a gap, past n_held, nothing more is known).
void api_state_hold(entropix_state *s, const int *ids, int n, int pos);
// The leading ids of prompt[0..n) that the cache holds at their positions, at most n - 1.
int api_state_prefix(const entropix_state *s, const int *prompt, int n);

// The metrics of the latest forward of s into out (computed as emx_step_metrics does).
void api_fill_metrics(const EmxMetrics *in, entropix_metrics *out);

#endif
