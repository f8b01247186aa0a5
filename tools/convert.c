// convert — turn a HuggingFace directory, a GGUF file or a llama2.c checkpoint into an
// entropix.c model file (base/model_format.h).
//
//   build/tools/convert <source> <out.bin> [--dtype f32|bf16|f16|q8|q4|q4_1] [--keep-embeddings-q8]
//                       [--no-keep-embeddings-q8] [--chat-template none|qwen3|llama3|smollm2|chatml|qwen2.5|gemma3]
//                       [--tokenizer path]
//   build/tools/convert --check <model.bin>
//
// The source kind is detected: a directory is HuggingFace, a file starting with "GGUF" is
// GGUF, anything else is read as a llama2.c checkpoint (which needs --tokenizer tokenizer.bin).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer/chat_template.h"
#include "base/dtype.h"
#include "base/errmsg.h"
#include "base/out_file.h"
#include "runtime/model.h"
#include "runtime/model_verify.h"
#include "tools/convert/model_writer.h"
#include "tools/convert/source.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: convert <source> <out.bin> [options]\n"
            "  <source>                a HuggingFace model directory (config.json + *.safetensors),\n"
            "                          a .gguf file, or a llama2.c checkpoint (.bin, needs --tokenizer)\n"
            "  --dtype f32|bf16|f16|q8|q4|q4_1   weight matrices (default q8; norms are always f32;\n"
            "                          a matrix whose rows are not a multiple of 32 stays f32 in q8/q4/q4_1;\n"
            "                          q4_1 from a GGUF's Q4_1 tensors copies their blocks exactly)\n"
            "  --keep-embeddings-q8    q4/q4_1 only: keep tok_embeddings/output at q8 (the default)\n"
            "  --no-keep-embeddings-q8 q4/q4_1 only: quantise the embeddings to q4/q4_1 too\n"
            "  --chat-template none|qwen3|llama3|smollm2|chatml|qwen2.5|gemma3   override the detected template\n"
            "  --tokenizer path        llama2.c: tokenizer.bin (required); HuggingFace: a directory\n"
            "                          holding tokenizer.json to use instead of the model's\n"
            "usage: convert --check <model.bin>\n"
            "  loads a model file and recomputes the checksum convert recorded in it\n"
            "The model is written to a hidden temporary file beside <out.bin> (.<out.bin>.XXXXXX.tmp),\n"
            "checked, then renamed over <out.bin>; on an error <out.bin> is left as it was. A killed\n"
            "convert (kill -9, power loss) may leave that .tmp file behind: delete it.\n");
}

static const char *const chat_names[] = {"none", "qwen3", "llama3", "smollm2", "chatml", "qwen2.5", "gemma3"};

// The tensors a configuration needs, in file order.
typedef struct {
    char name[EMX_NAME_BYTES];
    uint64_t rows, cols;
    int is_vector;
} Want;

static size_t plan(const EmxConfig *c, const EmxConfigExt *e, Want *w) {
    size_t n = 0;
    uint64_t q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
#define WANT(nm, r, cl, v) (snprintf(w[n].name, EMX_NAME_BYTES, "%s", nm), w[n].rows = (r), w[n].cols = (cl), w[n].is_vector = (v), n++)
    WANT("tok_embeddings", c->vocab_size, c->dim, 0);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        char p[EMX_NAME_BYTES];
        const struct { const char *s; uint64_t r, cl; int v, need; } t[] = {
            {"attn_norm", c->dim, 1, 1, 1},      {"wq", q, c->dim, 0, 1},
            {"wk", kv, c->dim, 0, 1},            {"wv", kv, c->dim, 0, 1},
            {"wo", c->dim, q, 0, 1},             {"q_norm", c->head_dim, 1, 1, (int)c->qk_norm},
            {"k_norm", c->head_dim, 1, 1, (int)c->qk_norm}, {"ffn_norm", c->dim, 1, 1, 1},
            {"w_gate", c->hidden_dim, c->dim, 0, 1}, {"w_up", c->hidden_dim, c->dim, 0, 1},
            {"w_down", c->dim, c->hidden_dim, 0, 1},
            {"bq", q, 1, 1, (int)e->qkv_bias}, {"bk", kv, 1, 1, (int)e->qkv_bias}, {"bv", kv, 1, 1, (int)e->qkv_bias},
            {"post_attn_norm", c->dim, 1, 1, (int)e->sandwich_norms},
            {"post_ffn_norm", c->dim, 1, 1, (int)e->sandwich_norms},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].need) continue;
            snprintf(p, sizeof p, "layers.%u.%s", l, t[i].s);
            WANT(p, t[i].r, t[i].cl, t[i].v);
        }
    }
    WANT("norm", c->dim, 1, 1);
    if (!c->tied_output) WANT("output", c->vocab_size, c->dim, 0);
    if (c->rope_freq_factors) WANT("rope_freq_factors", c->head_dim / 2, 1, 1);
#undef WANT
    return n;
}

typedef struct {
    const char *source, *out, *tokenizer;
    const char *check;  // --check FILE
    int dtype;
    int keep_emb_q8;
    int chat_template;  // -1: detect
} Options;

// Output dtype of one tensor: vectors are f32; a matrix follows --dtype, except q8/q4/q4_1 need
// rows that split into 32-weight groups, and a q4/q4_1 file keeps its embeddings at q8 unless
// told not to.
static uint32_t pick_dtype(const Options *o, const Want *w) {
    if (w->is_vector) return EMX_F32;
    uint32_t d = (uint32_t)o->dtype;
    if ((d == EMX_Q4 || d == EMX_Q4_1) && o->keep_emb_q8 && (!strcmp(w->name, "tok_embeddings") || !strcmp(w->name, "output"))) d = EMX_Q8;
    if ((d == EMX_Q8 || d == EMX_Q4 || d == EMX_Q4_1) && w->cols % EMX_GROUP_SIZE) {
        printf("  %s: %llu columns are not a multiple of %u: kept f32\n", w->name, (unsigned long long)w->cols,
               EMX_GROUP_SIZE);
        d = EMX_F32;
    }
    return d;
}

static int parse_args(int argc, char **argv, Options *o) {
    memset(o, 0, sizeof *o);
    o->dtype = EMX_Q8;
    o->keep_emb_q8 = 1;
    o->chat_template = -1;
    const char *pos[2];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--keep-embeddings-q8")) {
            o->keep_emb_q8 = 1;
        } else if (!strcmp(a, "--no-keep-embeddings-q8")) {
            o->keep_emb_q8 = 0;
        } else if (!strcmp(a, "--dtype") || !strcmp(a, "--chat-template") || !strcmp(a, "--tokenizer") ||
                   !strcmp(a, "--check")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "convert: %s needs a value\n", a);
                return -1;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--tokenizer")) {
                o->tokenizer = v;
            } else if (!strcmp(a, "--check")) {
                o->check = v;
            } else if (!strcmp(a, "--dtype")) {
                if ((o->dtype = emx_dtype_from_name(v)) < 0) {
                    fprintf(stderr, "convert: --dtype %s is not one of f32, bf16, f16, q8, q4, q4_1\n", v);
                    return -1;
                }
            } else {
                o->chat_template = -1;
                for (int k = 0; k < (int)(sizeof chat_names / sizeof chat_names[0]); k++)
                    if (!strcmp(v, chat_names[k])) o->chat_template = k;
                if (o->chat_template < 0) {
                    fprintf(stderr, "convert: --chat-template %s is not one of none, qwen3, llama3, smollm2, chatml, qwen2.5, gemma3\n", v);
                    return -1;
                }
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "convert: unknown option %s (try --help)\n", a);
            return -1;
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "convert: unexpected argument %s (try --help)\n", a);
            return -1;
        }
    }
    if (o->check && n_pos == 0) return 0;
    if (o->check || n_pos != 2) {
        if (o->check) fprintf(stderr, "convert: --check takes one model file and no other argument\n");
        else usage(stderr);
        return -1;
    }
    o->source = pos[0];
    o->out = pos[1];
    return 0;
}

static int open_source(ConvSource *s, const Options *o, char *err, size_t errlen) {
    struct stat st;
    if (stat(o->source, &st) != 0) {
        emx_seterr(err, errlen, "%s: no such file or directory", o->source);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return src_open_hf(s, o->source, o->tokenizer, err, errlen);
    char magic[4] = {0};
    FILE *f = fopen(o->source, "rb");
    if (!f) {
        emx_seterr(err, errlen, "%s: cannot open", o->source);
        return -1;
    }
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && !memcmp(magic, "GGUF", 4)) return src_open_gguf(s, o->source, err, errlen);
    return src_open_llama2c(s, o->source, o->tokenizer, err, errlen);
}

// The output names an input (by device and inode): refused.
static int check_not_input(const ConvSource *s, const char *out, const struct stat *st, char *err, size_t errlen) {
    for (int i = 0; i < s->n_in; i++)
        if (s->in[i].dev == (uint64_t)st->st_dev && s->in[i].ino == (uint64_t)st->st_ino) {
            emx_seterr(err, errlen, "%s: the output is %s, an input of this conversion: refusing to replace it", out,
                     s->in[i].path);
            return -1;
        }
    return 0;
}

// The output may not be an input of the conversion (same device and inode, whatever the path:
// "convert x.gguf x.gguf", a link to the safetensors, a hard link), nor anything a rename must
// not replace (a symbolic link, a directory, a device, a FIFO: base/out_file.h), and its folder
// must exist: refused before anything is written.
static int check_out(const ConvSource *s, const char *out, char *err, size_t errlen) {
    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && check_not_input(s, out, &st, err, errlen) != 0) return -1;
    return emx_out_check(out, EMX_OUT_REPLACE, err, errlen);
}
// convert --check FILE: 0 when the file loads and its checksum matches (or it has none).
static int check_file(const char *path) {
    char msg[768];
    int rc = emx_model_verify(path, msg, sizeof msg);
    if (rc < 0) {
        fprintf(stderr, "convert: %s\n", msg);
        return 1;
    }
    if (rc == 0) printf("%s: ok (%s)\n", path, msg);
    else printf("%s\n", msg);
    return 0;
}

// Every tensor the configuration needs, with the shape it implies, and nothing else.
static int collect(const ConvSource *s, const Options *o, ModelWriter *w, char *err, size_t errlen) {
    size_t cap = 4 + (size_t)s->cfg.n_layers * 16;
    Want *want = calloc(cap, sizeof *want);
    if (!want) return emx_seterr(err, errlen, "out of memory"), -1;
    size_t n = plan(&s->cfg, &s->ext, want);
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        const Want *wt = &want[i];
        const SrcTensor *t = src_find(s, wt->name);
        if (!t) {
            emx_seterr(err, errlen, "%s: tensor %s is missing (the configuration needs it)", s->path, wt->name);
            goto out;
        }
        if (t->ndim != (wt->is_vector ? 1u : 2u) || t->rows != wt->rows || t->cols != wt->cols) {
            if (wt->is_vector)
                emx_seterr(err, errlen, "%s: tensor %s: shape [%llu, %llu] but the configuration implies [%llu]", s->path,
                         t->src_name, (unsigned long long)t->rows, (unsigned long long)t->cols,
                         (unsigned long long)wt->rows);
            else
                emx_seterr(err, errlen, "%s: tensor %s: shape [%llu, %llu] but the configuration implies [%llu, %llu]",
                         s->path, t->src_name, (unsigned long long)t->rows, (unsigned long long)t->cols,
                         (unsigned long long)wt->rows, (unsigned long long)wt->cols);
            goto out;
        }
        if (mw_add(w, wt->name, pick_dtype(o, wt), t->ndim, t->rows, t->cols, t->type, t->data, err, errlen)) goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        int used = 0;
        for (size_t k = 0; k < n && !used; k++) used = !strcmp(s->t[i].name, want[k].name);
        if (!used) {
            emx_seterr(err, errlen, "%s: tensor %s does not belong to this configuration", s->path, s->t[i].src_name);
            goto out;
        }
    }
    rc = 0;
out:
    free(want);
    return rc;
}

int main(int argc, char **argv) {
    Options o;
    if (parse_args(argc, argv, &o)) return 2;
    if (o.check) return check_file(o.check);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char err[512];
    ConvSource s;
    memset(&s, 0, sizeof s);
    ModelWriter w;
    mw_init(&w);
    int rc = 1;
    if (open_source(&s, &o, err, sizeof err) || check_out(&s, o.out, err, sizeof err)) goto fail;
    s.cfg.chat_template = EMX_CHAT_NONE;
    if (o.chat_template >= 0)
        s.cfg.chat_template = (uint32_t)o.chat_template;
    else if (s.chat_template)
        s.cfg.chat_template = emx_chat_template_detect(s.chat_template, strlen(s.chat_template));
    const EmxConfig *c = &s.cfg;
    printf("%s: %s\n", o.source, s.kind);
    printf("  dim %u, hidden %u, layers %u, heads %u/%u, head_dim %u, vocab %u, ctx %u, eps %g, theta %g,\n"
           "  rope %s%s%s%s, chat template %s\n",
           c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size, c->max_seq_len,
           (double)c->norm_eps, (double)c->rope_theta, c->rope_style == EMX_ROPE_HALF ? "half" : "interleaved",
           c->rope_freq_factors ? " + freq factors" : "", c->qk_norm ? ", qk_norm" : "", c->tied_output ? ", tied" : "",
           c->chat_template < 5 ? chat_names[c->chat_template] : "?");
    const EmxConfigExt *e = &s.ext;
    if (e->qkv_bias || e->sandwich_norms || e->ffn_act || e->sliding_window || e->embed_scale != 1.0f) {
        int n_local = 0;
        for (uint32_t l = 0; l < c->n_layers; l++) n_local += emx_layer_is_local(e, l);
        printf("  %s%s%s, embed scale %g, attn scale %g, window %u (%d of %u layers local, theta %g), "
               "global rope linear %g\n", e->qkv_bias ? "qkv bias, " : "", e->sandwich_norms ? "sandwich norms, " : "",
               e->ffn_act == EMX_ACT_GELU_TANH ? "GeGLU" : "SwiGLU", (double)e->embed_scale, (double)e->attn_scale,
               e->sliding_window, n_local, c->n_layers, (double)e->rope_theta_local, (double)e->rope_linear_global);
    }
    if (collect(&s, &o, &w, err, sizeof err)) goto fail;
    printf("writing %s (%s)\n", o.out, emx_dtype_name((uint32_t)o.dtype));
    // The writer checks the file with the runtime's own validation before it replaces o.out.
    if (mw_write(&w, o.out, &s.cfg, &s.ext, &s.tok, stdout, err, sizeof err)) goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct stat st;
    double mb = stat(o.out, &st) == 0 ? (double)st.st_size / 1e6 : 0;
    printf("wrote %s: %.2f MB in %.2f s\n", o.out, mb, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    rc = 0;
    goto done;
fail:
    fflush(stdout);
    fprintf(stderr, "convert: %s\n", err);
done:
    mw_free(&w);
    src_free(&s);
    return rc;
}
