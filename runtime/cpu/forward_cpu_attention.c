// forward_cpu_attention.c — the attention of a CPU pass (forward_cpu_state.h: cpu_attention): the
// queries of each KV head in tasks over the spans of keys they see, from the sequence's cache, a
// branch's shared prefix and tail, or each row's own state; a local layer's sliding window (its
// ring of rows in the cache, the keys before a query's window -inf).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cpu/cpu_ops.h"
#include "runtime/cpu/forward_cpu_state.h"

// The keys of spans[0..n_spans) without their first `skip` ones, into out; returns the spans left.
static int spans_skip(const EmxKeySpan *spans, int n_spans, int skip, EmxKeySpan *out) {
    int n = 0;
    for (int i = 0; i < n_spans; i++) {
        EmxKeySpan sp = spans[i];
        if (skip >= sp.n) {
            skip -= sp.n;
            continue;
        }
        const size_t by = (size_t)skip * sp.stride;
        if (sp.k) sp.k += by, sp.v += by;
        else sp.k16 += by, sp.v16 += by;
        sp.n -= skip, skip = 0;
        out[n++] = sp;
    }
    return n;
}

// A local layer's queries, when one of them sees more than `window` keys: each alone over its
// last `window` keys (scores of the keys before them -inf: they take no probability). Returns 0
// when every query sees at most `window` keys (nothing done: the shared pass is exact).
static int window_attention(const EmxAttnQuery *qs, int m, const EmxKeySpan *spans, int n_spans, int hd, float scale,
                            int window) {
    int over = 0;
    for (int j = 0; j < m && window; j++) over |= qs[j].n_keys > window;
    if (!over) return 0;
    for (int j = 0; j < m; j++) {
        const int first = qs[j].n_keys > window ? qs[j].n_keys - window : 0;
        EmxKeySpan shifted[3];
        const int ns = spans_skip(spans, n_spans, first, shifted);
        EmxAttnQuery q = qs[j];
        for (int t = 0; t < first; t++) q.scores[t] = -INFINITY;
        q.scores += first, q.probs += first, q.n_keys -= first;
        emx_attention_group_spans(&q, 1, shifted, ns, hd, scale);
    }
    return 1;
}

// The keys [lo, hi) of layer's cache in state r, for the kv head at element offset head_off of a
// row, as spans into out (at most 2: a ring's keys wrap past its last row). Returns the count.
static int cache_spans(const CpuState *r, int layer, size_t head_off, int lo, int hi, EmxKeySpan *out) {
    const int rows = r->layers[layer].rows, a = lo % rows, n = hi - lo;
    const size_t row = (size_t)r->kv_row, base = (size_t)r->layers[layer].row0 * row + head_off;
    const int first = a + n <= rows ? n : rows - a;  // up to the ring's end
    out[0] = emx_key_span(r->key_cache, r->value_cache, r->kv_type, base + (size_t)a * row, row, first);
    if (first == n) return 1;
    out[1] = emx_key_span(r->key_cache, r->value_cache, r->kv_type, base, row, n - first);
    return 2;
}

// The first key a task's queries need: 0, or on a ring layer the oldest key of the window of the
// earliest query (keys before it are no longer held); `first_pos`: that query's position.
static int ring_base(const CpuState *r, int layer, int first_pos, int window) {
    return layer_is_ring(r, layer) && first_pos >= window ? first_pos - window + 1 : 0;
}

void cpu_attention(CpuState *s, int layer, int n, int pos, const RowLayout *rows, int record_last) {
    const EmxConfig *c = &s->m->cfg;
    const int hd = (int)c->head_dim, n_heads = (int)c->n_heads, n_kv = (int)c->n_kv_heads, ctx = s->ctx;
    const int group = n_heads / n_kv;  // query heads per kv head
    const float scale = s->m->ext.attn_scale > 0 ? s->m->ext.attn_scale : 1.0f / sqrtf((float)hd);
    // a local layer's query sees at most the last `window` of its keys (0: all of them)
    const int window = emx_layer_is_local(&s->m->ext, (uint32_t)layer) ? (int)s->m->ext.sliding_window : 0;
    // The queries of kv head kvh, u = row * group + head in the group, go by tasks of `per`
    // consecutive ones that share one pass over the keys (read from memory once, not once per
    // query). A prefill with enough tasks: 32 queries, several rows (Qwen3: 16 rows x 2 heads),
    // each seeing its own keys (row i: pos + i + 1): every task reads its keys again, so fewer
    // tasks pay (pp512 -t 2, Qwen3 with unpadded cache rows: 8 queries a task 321-330 tok/s, 32
    // queries 337-362). Branches (every row its own tail): the group's heads of one row. Few
    // tasks (decode): one query each, to balance the threads. Each query's bits are those of the
    // query alone with its own keys (emx_attention_group_spans), so the tasks change no result.
    // Tasks go kv head by kv head, so that a thread's next task reads the same keys and values,
    // from L2 where they fit.
    const int n_q = n * group;  // queries per kv head
    const int own_keys = rows->is_branches || rows->states;  // every row its own keys: a task per row at most
    const int by_rows = !own_keys && n_kv * ((n_q + PASS - 1) / PASS) >= 4 * s->n_threads;
    const int per = by_rows ? PASS : n * n_kv >= 4 * s->n_threads ? group : 1;
    const int chunks = (n_q + per - 1) / per, tasks = n_kv * chunks;
    int keys = rows->is_branches ? rows->prefix + rows->step + 1 : pos + n;  // most keys of a row
    if (rows->states) {
        keys = 0;
        for (int i = 0; i < n; i++) keys = rows->at[i] + 1 > keys ? rows->at[i] + 1 : keys;
    }
    // multiply-adds of q·k and p·v; at short contexts a parallel region costs more than it saves
    const int64_t work = (int64_t)n * n_heads * keys * hd * 2;
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1) if (work > 32768)
    for (int task = 0; task < tasks; task++) {
        const int kvh = task / chunks, u0 = task % chunks * per, u1 = u0 + per < n_q ? u0 + per : n_q;
        float *tmp = s->att_tmp + (size_t)omp_get_thread_num() * PASS * ctx;
        // the keys of the task's last row (the most); the rows before see fewer of them. They start
        // at key `base`: 0, or on a local layer's ring the oldest its first query's window holds.
        const int last_row = (u1 - 1) / group;
        EmxKeySpan spans[3];
        int n_spans, base;
        if (rows->is_branches) {  // the shared prefix, then the branch's own rows 0..step (one row per task)
            base = ring_base(s, layer, rows->prefix + rows->step, window);
            base = base < rows->prefix ? base : rows->prefix;
            n_spans = base < rows->prefix ? cache_spans(s, layer, (size_t)kvh * hd, base, rows->prefix, spans) : 0;
            const size_t tail_row = (size_t)s->br_max * s->kv_dim;  // one step of every branch
            const size_t first =
                (size_t)layer * s->br_tail * tail_row + (size_t)last_row * s->kv_dim + (size_t)kvh * hd;
            spans[n_spans++] = emx_key_span(s->br_key, s->br_value, s->kv_type, first, tail_row, rows->step + 1);
        } else if (rows->states) {  // the row's own state's cache (one row per task)
            const CpuState *r = row_state(rows, last_row);
            base = ring_base(r, layer, rows->at[last_row], window);
            n_spans = cache_spans(r, layer, (size_t)kvh * hd, base, rows->at[last_row] + 1, spans);
        } else {
            base = ring_base(s, layer, pos + u0 / group, window);
            n_spans = cache_spans(s, layer, (size_t)kvh * hd, base, pos + last_row + 1, spans);
        }
        for (int v0 = u0; v0 < u1; v0 += PASS) {
            EmxAttnQuery qs[PASS];
            const int m = u1 - v0 < PASS ? u1 - v0 : PASS;
            for (int j = 0; j < m; j++) {
                const int i = (v0 + j) / group, h = kvh * group + (v0 + j) % group;
                float *probs = tmp + (size_t)j * ctx;
                // the last row's scores go straight into the persistent buffer the samplers read;
                // with several states, every row's into its own state's
                float *scores = record_last && i == n - 1 ? s->att_scores + ((size_t)layer * n_heads + h) * ctx : probs;
                int n_keys = rows->is_branches ? rows->prefix + rows->step + 1 : pos + i + 1;
                if (rows->states) {
                    CpuState *r = row_state(rows, i);
                    scores = r->att_scores + ((size_t)layer * n_heads + h) * r->ctx;
                    n_keys = rows->at[i] + 1;
                }
                for (int t = 0; t < base && scores != probs; t++) scores[t] = -INFINITY;  // outside the window
                qs[j] = (EmxAttnQuery){s->q + (size_t)i * s->q_dim + (size_t)h * hd,
                                       s->att + (size_t)i * s->q_dim + (size_t)h * hd, scores + base, probs + base,
                                       n_keys - base};
            }
            if (window_attention(qs, m, spans, n_spans, hd, scale, window)) continue;
            emx_attention_group_spans(qs, m, spans, n_spans, hd, scale);
        }
    }
}
