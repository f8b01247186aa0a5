// bandwidth_model.c — the decode step's bytes per kernel and the bound they imply
// (bandwidth_model.h).
#include "tools/bench/bandwidth_model.h"

#include <string.h>

#include "base/dtype.h"

// Peak memory bandwidth from the vendors' datasheets (GB/s = 1e9 B/s): NVIDIA H100 Tensor Core
// GPU datasheet (SXM5 80GB HBM3 3.35 TB/s, PCIe 80GB HBM2e 2 TB/s), H200 datasheet (141GB HBM3e
// 4.8 TB/s), A100 datasheet (80GB SXM HBM2e 2,039 GB/s, 40GB HBM2 1,555 GB/s), L40S datasheet
// (48GB GDDR6 864 GB/s), GeForce RTX 4090 specifications (24GB GDDR6X, 1,008 GB/s).
static const EmxBwDevice DEVICES[] = {
    {"h100-sxm", "H100 SXM", 3350},   {"h100-pcie", "H100 PCIe", 2000}, {"h200", "H200", 4800},
    {"a100-80gb", "A100 80GB", 2039}, {"a100-40gb", "A100 40GB", 1555}, {"l40s", "L40S", 864},
    {"rtx4090", "RTX 4090", 1008},
};
enum { N_DEVICES = sizeof DEVICES / sizeof DEVICES[0] };

const EmxBwDevice *emx_bw_device(const char *name) {
    for (int i = 0; i < N_DEVICES; i++)
        if (!strcmp(DEVICES[i].name, name)) return &DEVICES[i];
    return NULL;
}

void emx_bw_device_names(char *buf, size_t cap) {
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < N_DEVICES && at < cap; i++) {
        int n = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", DEVICES[i].name);
        if (n < 0) break;
        at += (size_t)n;
    }
}

double emx_bw_us(uint64_t bytes, double gbps) { return (double)bytes / (gbps * 1e3); }

uint64_t emx_bw_kv_bytes_per_position(const EmxConfig *c, int kv_elem_bytes) {
    return (uint64_t)c->n_layers * c->n_kv_heads * c->head_dim * 2 * (kv_elem_bytes == 2 ? 2 : 4);
}

static uint64_t tbytes(const EmxTensor *t) { return t->data ? emx_tensor_bytes(t->dtype, t->rows, t->cols) : 0; }

static EmxBwRow *row(EmxBwModel *bm, EmxPhase phase, const char *kernel, uint32_t n_layers) {
    for (int i = 0; i < bm->n_rows; i++)
        if (!strcmp(bm->rows[i].kernel, kernel)) return &bm->rows[i];
    EmxBwRow *r = &bm->rows[bm->n_rows++];
    r->kernel = kernel;
    r->phase = phase;
    r->n_layers = n_layers;
    return r;
}

static void add(EmxBwModel *bm, EmxPhase phase, const char *kernel, uint32_t n_layers, uint64_t w, uint64_t kv,
                uint64_t act) {
    EmxBwRow *r = row(bm, phase, kernel, n_layers);
    r->weight_bytes += w;
    r->kv_bytes += kv;
    r->act_bytes += act;
}

// The kernels of one layer, as run_layers launches them for a single row. Activations are
// counted as f32 vectors read once per kernel that reads them and written once; the q8 copy of
// an activation that quantised matvecs read (quantize_acts) is not counted apart: it is smaller
// than the f32 vector counted as the matvec's input.
static void add_layer(EmxBwModel *bm, const EmxModel *m, const EmxLayer *L, uint64_t keys) {
    const EmxConfig *c = &m->cfg;
    const uint64_t F = sizeof(float), E = (uint64_t)bm->kv_elem_bytes, dim = c->dim, hid = c->hidden_dim;
    const uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    add(bm, EMX_PHASE_ATTN_IN, "rmsnorm (attention input)", c->n_layers, tbytes(&L->attn_norm), 0, 2 * dim * F);
    // three matvecs, each reads xb [dim]; writes q [q], k and v [kv]
    add(bm, EMX_PHASE_ATTN_IN, "q/k/v matvecs", c->n_layers, tbytes(&L->wq) + tbytes(&L->wk) + tbytes(&L->wv), 0,
        (3 * dim + q + 2 * kv) * F);
    // reads q, k, v, writes q in place and k, v into the cache row of pos (E bytes an element)
    add(bm, EMX_PHASE_ATTN, "rope + KV write", c->n_layers, tbytes(&L->q_norm) + tbytes(&L->k_norm), 2 * kv * E,
        (2 * q + 2 * kv) * F);
    // keys and values of positions 0..pos; q in, att out, the score rows [n_heads][keys]
    // recorded for the samplers
    add(bm, EMX_PHASE_ATTN, "attention", c->n_layers, 0, 2 * keys * kv * E,
        (2 * q + (uint64_t)c->n_heads * keys) * F);
    add(bm, EMX_PHASE_ATTN_OUT, "o matvec (+ residual)", c->n_layers, tbytes(&L->wo), 0, (q + 2 * dim) * F);
    add(bm, EMX_PHASE_FFN_IN, "rmsnorm (FFN input)", c->n_layers, tbytes(&L->ffn_norm), 0, 2 * dim * F);
    add(bm, EMX_PHASE_FFN_IN, "gate/up matvec + swiglu", c->n_layers, tbytes(&L->w_gate) + tbytes(&L->w_up), 0,
        (2 * dim + hid) * F);
    add(bm, EMX_PHASE_FFN_OUT, "down matvec (+ residual)", c->n_layers, tbytes(&L->w_down), 0, (hid + 2 * dim) * F);
}

void emx_bw_model(const EmxModel *m, int pos, int kv_elem_bytes, EmxBwModel *out) {
    memset(out, 0, sizeof *out);
    out->pos = pos;
    out->kv_elem_bytes = kv_elem_bytes == 2 ? 2 : 4;
    const EmxConfig *c = &m->cfg;
    const uint64_t F = sizeof(float), dim = c->dim, vocab = c->vocab_size, keys = (uint64_t)pos + 1;
    const EmxTensor *e = &m->tok_embeddings;
    // one row of the table: its share of the stored bytes (as emx_model_weight_bytes_per_token)
    add(out, EMX_PHASE_EMBED, "embedding row", 0, tbytes(e) / (e->rows ? e->rows : 1), 0, dim * F);
    for (uint32_t l = 0; l < c->n_layers; l++) add_layer(out, m, &m->layers[l], keys);
    add(out, EMX_PHASE_CLASSIFIER, "final rmsnorm", 0, tbytes(&m->norm), 0, 2 * dim * F);
    add(out, EMX_PHASE_CLASSIFIER, "classifier matvec", 0, tbytes(&m->output), 0, (dim + vocab) * F);
    // the logits [vocab] read once: copied to the host (emx_forward, what `bench speed` times) or
    // read by the on-device greedy choice / logits metrics (a sampler reads them more)
    add(out, EMX_PHASE_TAIL, "logits read (copy out or argmax)", 0, 0, 0, vocab * F);
    for (int i = 0; i < out->n_rows; i++) {
        const EmxBwRow *r = &out->rows[i];
        out->weight_bytes += r->weight_bytes;
        out->kv_bytes += r->kv_bytes;
        out->act_bytes += r->act_bytes;
    }
    out->total_bytes = out->weight_bytes + out->kv_bytes + out->act_bytes;
}

int emx_bw_mean_pos(int depth, int n_gen) { return depth + (n_gen > 0 ? (n_gen - 1) / 2 : 0); }

uint64_t emx_bw_phase_bytes(const EmxBwModel *bm, EmxPhase p) {
    uint64_t b = 0;
    for (int i = 0; i < bm->n_rows; i++)
        if (bm->rows[i].phase == p) b += bm->rows[i].weight_bytes + bm->rows[i].kv_bytes + bm->rows[i].act_bytes;
    return b;
}

void emx_bw_model_print(FILE *f, const EmxBwModel *bm, const EmxBwDevice *d, const char *what) {
    fprintf(f, "bandwidth model (a lower bound at %s's peak %.0f GB/s, not a measurement): decode step at position %d%s\n",
            d->label, d->peak_gbps, bm->pos, what);
    fprintf(f, "  %-40s %14s %13s\n", "kernel", "bytes/step", "µs at peak");
    for (int i = 0; i < bm->n_rows; i++) {
        const EmxBwRow *r = &bm->rows[i];
        char name[64];
        if (r->n_layers)
            snprintf(name, sizeof name, "%s x %u layers", r->kernel, r->n_layers);
        else
            snprintf(name, sizeof name, "%s", r->kernel);
        const uint64_t b = r->weight_bytes + r->kv_bytes + r->act_bytes;
        fprintf(f, "  %-40s %14llu %12.3f\n", name, (unsigned long long)b, emx_bw_us(b, d->peak_gbps));
    }
    fprintf(f, "%-18s %llu = weights %llu + KV cache %llu (%s) + activations %llu\n", "model bytes/step:",
            (unsigned long long)bm->total_bytes, (unsigned long long)bm->weight_bytes,
            (unsigned long long)bm->kv_bytes, bm->kv_elem_bytes == 2 ? "f16" : "f32", (unsigned long long)bm->act_bytes);
    const double us = emx_bw_us(bm->total_bytes, d->peak_gbps);
    fprintf(f, "%-18s %.3f µs/step at %.0f GB/s (a lower bound, not a measurement)\n", "model bound:", us,
            d->peak_gbps);
    fprintf(f, "%-18s %.1f tok/s (1e6 / bound)\n", "model ceiling:", 1e6 / us);
}
