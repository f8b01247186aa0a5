// convert — turn a HuggingFace directory, a GGUF file or a llama2.c checkpoint into an
// entropix.c model file (base/model_format.h).
//
//   build/tools/convert <source> <out.bin> [--dtype f32|bf16|f16|q8|q4|q4_1|q4_1f|keep] [--keep-embeddings-q8]
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
#include "runtime/convert/conv_plan.h"
#include "runtime/convert/model_writer.h"
#include "tools/convert/source.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: convert <source> <out.bin> [options]\n"
            "  <source>                a HuggingFace model directory (config.json + *.safetensors),\n"
            "                          a .gguf file, or a llama2.c checkpoint (.bin, needs --tokenizer)\n"
            "  --dtype f32|bf16|f16|q8|q4|q4_1|q4_1f   weight matrices (default q8; norms are always f32;\n"
            "                          a matrix whose rows are not a multiple of 32 stays f32 in the\n"
            "                          quantised types; q8/q4/q4_1/q4_1f from a GGUF's Q8_0/Q4_0/Q4_1/Q4_K\n"
            "                          tensors copy their blocks exactly)\n"
            "  --dtype keep            GGUF: each matrix in the type that holds its own: F32/F16/BF16 as\n"
            "                          they are, Q8_0 q8, Q4_0 q4, Q4_1 q4_1, Q4_K q4_1f (exact), other\n"
            "                          types q8 (requantised: the added error is printed)\n"
            "  --keep-embeddings-q8    q4/q4_1/q4_1f only: keep tok_embeddings/output at q8 (the default)\n"
            "  --no-keep-embeddings-q8 q4/q4_1/q4_1f only: quantise the embeddings to the 4-bit type too\n"
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

typedef struct {
    const char *source, *out, *tokenizer;
    const char *check;  // --check FILE
    int dtype;
    int keep_emb_q8;
    int chat_template;  // -1: detect
} Options;

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
                if (!strcmp(v, "keep")) {
                    o->dtype = CONV_DTYPE_KEEP;
                } else if ((o->dtype = emx_dtype_from_name(v)) < 0) {
                    fprintf(stderr, "convert: --dtype %s is not one of f32, bf16, f16, q8, q4, q4_1, q4_1f, keep\n", v);
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
    conv_set_chat_template(&s, o.chat_template);
    const EmxConfig *c = &s.cfg;
    printf("%s: %s\n", o.source, s.kind);
    printf("  dim %u, hidden %u, layers %u, heads %u/%u, head_dim %u, vocab %u, ctx %u, eps %g, theta %g,\n"
           "  rope %s%s%s%s, chat template %s\n",
           c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size, c->max_seq_len,
           (double)c->norm_eps, (double)c->rope_theta, c->rope_style == EMX_ROPE_HALF ? "half" : "interleaved",
           c->rope_freq_factors ? " + freq factors" : "", c->qk_norm ? ", qk_norm" : "", c->tied_output ? ", tied" : "",
           c->chat_template < sizeof chat_names / sizeof chat_names[0] ? chat_names[c->chat_template] : "?");
    const EmxConfigExt *e = &s.ext;
    if (e->qkv_bias || e->sandwich_norms || e->ffn_act || e->sliding_window || e->embed_scale != 1.0f) {
        int n_local = 0;
        for (uint32_t l = 0; l < c->n_layers; l++) n_local += emx_layer_is_local(e, l);
        printf("  %s%s%s, embed scale %g, attn scale %g, window %u (%d of %u layers local, theta %g), "
               "global rope linear %g\n", e->qkv_bias ? "qkv bias, " : "", e->sandwich_norms ? "sandwich norms, " : "",
               e->ffn_act == EMX_ACT_GELU_TANH ? "GeGLU" : "SwiGLU", (double)e->embed_scale, (double)e->attn_scale,
               e->sliding_window, n_local, c->n_layers, (double)e->rope_theta_local, (double)e->rope_linear_global);
    }
    const ConvPlanOptions po = {.dtype = o.dtype, .keep_emb_q8 = o.keep_emb_q8, .log = stdout};
    if (conv_collect(&s, &po, &w, err, sizeof err)) goto fail;
    printf("writing %s (%s)\n", o.out, o.dtype == CONV_DTYPE_KEEP ? "keep" : emx_dtype_name((uint32_t)o.dtype));
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
