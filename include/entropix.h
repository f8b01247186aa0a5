/* entropix.h — the public C API of entropix.c: open a model, tokenize, run forward steps with
 * their logits and attention scores, measure the entropix metrics, sample, generate.
 *
 * The only header an embedding program includes; link with `pkg-config --cflags --libs entropix`
 * (libentropix.so.0; `pkg-config --static` for libentropix.a). Every handle is opaque; every
 * struct that may grow carries `size` (set by its _init function, or to sizeof by the caller),
 * so fields can be added at the end without breaking programs built against an older header.
 *
 * A parameter struct's size must hold at least the fields of its first version (the library
 * reads them, and a later field only when size holds it); a result struct's size at least its
 * first field after size (the library writes the first size bytes, so an older, shorter struct
 * gets the fields it has). A smaller size (0: a struct whose size was never set) fails with
 * ENTROPIX_ERR_ARGUMENT, the struct and the size named in the message, before anything runs.
 *
 * Errors. Every function that can fail returns an entropix_status (ENTROPIX_OK = 0, negative on
 * failure) and leaves a one-line message naming the problem (the file, the field, the value) in
 * entropix_error_last(), a per-thread string as libgit2's git_error_last: a failure of
 * entropix_model_open has no handle to hold its message, and a per-thread message lets several
 * threads use the library at once without one's error replacing another's. The library never
 * exits and never prints.
 *
 * Threads. A model and its tokenizer are immutable once open: any number of states and threads
 * may share them. A state, a sampler and a decoder are used by one thread at a time.
 *
 * Lifetimes. Pointers the library returns into its own memory (logits, attention scores, token
 * records in a callback) are valid until the next call on the same state (forward, generate,
 * free), a record of entropix_generation_next until the next call on its generation; a copy is
 * the caller's to make. Memory the library allocates for the caller
 * (entropix_chat_render, entropix_prompt_tokens) is freed with entropix_free. */
#ifndef ENTROPIX_H
#define ENTROPIX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(ENTROPIX_BUILDING)
#define ENTROPIX_API __attribute__((visibility("default")))
#else
#define ENTROPIX_API
#endif

#define ENTROPIX_VERSION_MAJOR 0
#define ENTROPIX_VERSION_MINOR 1
#define ENTROPIX_VERSION_PATCH 0

/* "0.1.0": the library's version (which may be newer than the header's macros). */
ENTROPIX_API const char *entropix_version(void);

/* ---- Errors --------------------------------------------------------------------------------- */

typedef enum {
    ENTROPIX_OK = 0,
    ENTROPIX_ERR_ARGUMENT = -1,    /* a bad argument: NULL, a bad id, a position past the context */
    ENTROPIX_ERR_FILE = -2,        /* a model or profile file missing, unreadable or invalid */
    ENTROPIX_ERR_DEVICE = -3,      /* a device this build or machine lacks, or a failure on it */
    ENTROPIX_ERR_MEMORY = -4,      /* out of memory */
    ENTROPIX_ERR_BUFFER = -5,      /* a caller's buffer too small (the size needed is returned) */
    ENTROPIX_ERR_RUNTIME = -6,     /* the runtime refused (the message says why) */
} entropix_status;

/* The message of the latest failed call on this thread ("" when none failed yet). Valid until
 * the next failing call on this thread. */
ENTROPIX_API const char *entropix_error_last(void);
/* "ok", "argument", "file", "device", "memory", "buffer", "runtime"; "unknown" otherwise. */
ENTROPIX_API const char *entropix_status_name(int status);
/* Frees memory the library allocated for the caller (NULL is fine). */
ENTROPIX_API void entropix_free(void *p);

/* ---- Models ----------------------------------------------------------------------------------- */

typedef struct entropix_model entropix_model;
typedef struct entropix_tokenizer entropix_tokenizer;

typedef struct {
    size_t size;          /* sizeof(entropix_model_params) */
    const char *device;   /* "cpu" (NULL, ""), "cuda:N", or "auto" (GPU 0 if the build and the
                             machine have one, else the CPU); the default of its states */
    int threads;          /* CPU threads of its states; <= 0: all cores */
    int mmap;             /* 1: map the file instead of copying it into memory */
    const char *gguf_cache; /* a GGUF's cache folder (below); NULL or "": $EMX_CACHE, else
                               $XDG_CACHE_HOME/entropix, else ~/.cache/entropix */
} entropix_model_params;

ENTROPIX_API void entropix_model_params_init(entropix_model_params *p);
/* The CUDA backend this library carries, as ./run --version names it ("cuda sm_80 sm_90"), or
 * NULL when the library is CPU-only (then "cuda:N" fails with ENTROPIX_ERR_DEVICE). */
ENTROPIX_API const char *entropix_cuda_backend(void);
/* Opens and validates a model file: a .bin from the converter, or a GGUF (known by its magic,
 * whatever its name), converted once into params->gguf_cache's folder (created when missing)
 * and reused while the GGUF's path, inode, size and modification time are unchanged, as ./run
 * does (docs/c-api.md). The conversion prints nothing. params NULL: the defaults. */
ENTROPIX_API int entropix_model_open(const char *path, const entropix_model_params *params, entropix_model **out);
ENTROPIX_API void entropix_model_close(entropix_model *m);

typedef struct {
    size_t size;          /* sizeof(entropix_model_info) */
    int vocab_size, dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, max_seq_len;
    const char *chat_template; /* the family's name ("chatml", "llama3", ...), or NULL: none */
} entropix_model_info;
ENTROPIX_API int entropix_model_get_info(const entropix_model *m, entropix_model_info *info);

/* ---- Tokenizer -------------------------------------------------------------------------------- */

/* The model's tokenizer (owned by the model, valid while it is open). */
ENTROPIX_API const entropix_tokenizer *entropix_model_tokenizer(const entropix_model *m);

enum {
    ENTROPIX_TOKENIZE_BOS = 1,      /* prepend BOS when the tokenizer asks for it */
    ENTROPIX_TOKENIZE_SPECIAL = 2,  /* special-token texts ("<|im_start|>") become their ids */
};
/* Encodes text[0..len) into ids[0..cap). *n_ids receives the number of ids; when it exceeds
 * cap, nothing useful is in ids and ENTROPIX_ERR_BUFFER is returned (call again with
 * *n_ids; ids NULL with cap 0 asks for the count). */
ENTROPIX_API int entropix_tokenize(const entropix_tokenizer *tk, const char *text, size_t len, int flags,
                                   int *ids, size_t cap, size_t *n_ids);
/* The raw bytes of token id (no UTF-8 completion): min(len, cap) bytes into buf, *len set. */
ENTROPIX_API int entropix_token_piece(const entropix_tokenizer *tk, int id, char *buf, size_t cap, size_t *len);
ENTROPIX_API int entropix_tokenizer_vocab_size(const entropix_tokenizer *tk);
ENTROPIX_API int entropix_token_bos(const entropix_tokenizer *tk);  /* -1 if none */
ENTROPIX_API int entropix_token_eos(const entropix_tokenizer *tk);  /* -1 if none */
/* The ids that end generation (eos, <|im_end|>, <|eot_id|>): up to cap into ids; returns the
 * count (which may exceed cap). */
ENTROPIX_API int entropix_token_stops(const entropix_tokenizer *tk, int *ids, int cap);
ENTROPIX_API int entropix_token_is_stop(const entropix_tokenizer *tk, int id);
ENTROPIX_API int entropix_token_is_control(const entropix_tokenizer *tk, int id);
/* The id of an exact token text (an added token "<|im_start|>", a piece as spelled "Ġthe");
 * -1 if none. */
ENTROPIX_API int entropix_token_find(const entropix_tokenizer *tk, const char *text);

/* Streaming detokeniser: releases only complete UTF-8 (a token ending inside a character is
 * held until the next completes it; invalid bytes become U+FFFD); skip_control drops control
 * tokens' text. */
typedef struct entropix_decoder entropix_decoder;
ENTROPIX_API int entropix_decoder_new(const entropix_tokenizer *tk, int skip_control, entropix_decoder **out);
ENTROPIX_API void entropix_decoder_free(entropix_decoder *d);
/* Bytes one push or flush may write at most (a buffer of this size is never too small). */
ENTROPIX_API size_t entropix_decoder_max_out(const entropix_decoder *d);
/* The text that id (push) or the end of the stream (flush: held bytes as U+FFFD) releases:
 * *n_out bytes into out[0..cap), not NUL-terminated. When they exceed cap, nothing is written,
 * the decoder is left as it was and ENTROPIX_ERR_BUFFER is returned with the size needed in
 * *n_out: the same call with a buffer that large gives every byte (out NULL with cap 0 asks for
 * the size; 0 with ENTROPIX_OK when there is no text). */
ENTROPIX_API int entropix_decoder_push(entropix_decoder *d, int id, char *out, size_t cap, size_t *n_out);
ENTROPIX_API int entropix_decoder_flush(entropix_decoder *d, char *out, size_t cap, size_t *n_out);

/* Chat. */
typedef struct {
    const char *role;     /* "system", "user", "assistant", "tool" */
    const char *content;  /* UTF-8, NUL-terminated */
} entropix_message;
typedef struct {
    size_t size;                 /* sizeof(entropix_chat_params) */
    int add_generation_prompt;   /* end with the assistant header (default 1) */
    int enable_thinking;         /* Qwen3: 0 renders enable_thinking=False (default 1) */
} entropix_chat_params;
ENTROPIX_API void entropix_chat_params_init(entropix_chat_params *p);
/* The conversation rendered through the model's chat template: *text is malloc'd
 * (entropix_free). params NULL: the defaults. */
ENTROPIX_API int entropix_chat_render(const entropix_model *m, const entropix_message *msgs, int n_msgs,
                                      const entropix_chat_params *params, char **text);
/* The ids ./run gives a prompt: raw text (chat 0) with special tokens parsed and BOS when the
 * tokenizer asks ([BOS] for an empty text), or (chat 1) text as the user message, after the
 * system message when not NULL, through the chat template. *ids malloc'd (entropix_free). */
ENTROPIX_API int entropix_prompt_tokens(const entropix_model *m, const char *text, size_t len, int chat,
                                        const char *system, int **ids, int *n_ids);
/* The same for a whole conversation (rendered as entropix_chat_render does). */
ENTROPIX_API int entropix_chat_tokens(const entropix_model *m, const entropix_message *msgs, int n_msgs,
                                      const entropix_chat_params *params, int **ids, int *n_ids);

/* ---- States and the forward step -------------------------------------------------------------- */

typedef struct entropix_state entropix_state;

typedef struct {
    size_t size;             /* sizeof(entropix_state_params) */
    int ctx;                 /* KV cache positions; <= 0: min(the model's, 4096) */
    const char *cache_type;  /* "auto" (NULL), "f32", "f16" */
    const char *device;      /* NULL: the model's */
    int threads;             /* 0: the model's */
} entropix_state_params;
ENTROPIX_API void entropix_state_params_init(entropix_state_params *p);
/* One sequence of m (its KV cache and activations). params NULL: the defaults. */
ENTROPIX_API int entropix_state_new(entropix_model *m, const entropix_state_params *params, entropix_state **out);
ENTROPIX_API void entropix_state_free(entropix_state *s);
ENTROPIX_API int entropix_state_ctx(const entropix_state *s);
ENTROPIX_API const char *entropix_state_device(const entropix_state *s);  /* "cpu", "cuda:0" */
ENTROPIX_API entropix_model *entropix_state_model(const entropix_state *s);

typedef struct {
    size_t size;             /* sizeof(entropix_step) */
    const float *logits;     /* [n_vocab] of the last position fed; the state's memory */
    int n_vocab;
    int pos;                 /* the last position fed */
} entropix_step;
/* Runs ids[0..n) at positions pos..pos+n-1 as one batch (a prefill when n > 1); positions >= pos
 * of the cache are overwritten (calling again with an earlier pos rolls back). out->logits are
 * the last position's. Fails (ENTROPIX_ERR_ARGUMENT) for n < 1, an id outside the vocabulary, or
 * pos + n > ctx. */
ENTROPIX_API int entropix_forward(entropix_state *s, const int *ids, int n, int pos, entropix_step *out);
/* Like entropix_forward, with every position's logits written to logits [n][n_vocab] (caller's
 * buffer). */
ENTROPIX_API int entropix_forward_all(entropix_state *s, const int *ids, int n, int pos, float *logits);

typedef struct {
    size_t size;             /* sizeof(entropix_attention) */
    const float *scores;     /* [n_heads][row_stride]: head h's score of key k at
                                scores[h * row_stride + k], k < n_keys; the state's memory */
    int n_heads;
    int n_keys;              /* keys 0..pos of the last forward (its own key included) */
    int row_stride;          /* floats between heads' rows (the state's ctx) */
} entropix_attention;
/* Layer `layer`'s attention scores (q·k/sqrt(head_dim), before the softmax) of the last
 * position of the latest forward. */
ENTROPIX_API int entropix_attention_scores(entropix_state *s, int layer, entropix_attention *out);

/* ---- Metrics ---------------------------------------------------------------------------------- */

enum {
    ENTROPIX_ATTN_LAYER_LAST = -1,  /* the last layer's attention (the default) */
    ENTROPIX_ATTN_LAYERS_ALL = -2,  /* every layer's metrics, averaged */
};
typedef struct {
    size_t size;                        /* sizeof(entropix_metrics) */
    double logits_entropy;              /* bits: entropy of softmax(logits) */
    double logits_varentropy;           /* bits²: variance of -log2 p under p */
    double attn_entropy;                /* bits: mean over heads of each head's entropy */
    double attn_varentropy;             /* bits²: variance across heads of that entropy */
    double attn_agreement;              /* mean |A_h(k) - mean_h A_h(k)| */
    double attn_interaction_strength;   /* mean |score| */
} entropix_metrics;
/* The metrics of the latest forward of s (its logits, and the attention of attn_layer: an
 * index or ENTROPIX_ATTN_LAYER_LAST / _ALL). */
ENTROPIX_API int entropix_state_metrics(entropix_state *s, int attn_layer, entropix_metrics *out);
/* The logits' metrics of any row (the attention fields 0). */
ENTROPIX_API int entropix_logits_metrics(const float *logits, int n, entropix_metrics *out);

/* ---- Samplers --------------------------------------------------------------------------------- */

typedef struct entropix_sampler entropix_sampler;

typedef enum {
    ENTROPIX_SAMPLER_GREEDY = 0,    /* argmax (the lowest id on ties) */
    ENTROPIX_SAMPLER_COMBINED = 1,  /* top-k -> top-p -> min-p -> temperature, one Philox draw */
    ENTROPIX_SAMPLER_ENTROPIX = 2,  /* the entropix switch with a profile */
} entropix_sampler_kind;

typedef struct {
    size_t size;          /* sizeof(entropix_sampler_params) */
    int kind;             /* entropix_sampler_kind */
    float temperature;    /* COMBINED (defaults: 0.8, 40, 0.95, 0.05, as ./run): >= 0 */
    int top_k;            /* >= 0; 0: off */
    float top_p;          /* [0, 1]; 1: off */
    float min_p;          /* [0, 1]; 0: off */
    uint64_t seed;        /* the draws: Philox(seed, position) — the same seed, the same text */
    const char *profile;  /* ENTROPIX: NULL or "default", a built-in profile's name, or a file */
    /* The logit rules, applied to each step's logits before the sampler chooses, as ./run's
     * flags of the same names (the logprobs a generation reports stay the model's). Read only when size holds them: a struct
     * that ends at profile has none. entropix_sampler_params_init sets them all off. */
    const char *grammar;       /* GBNF text the generated text follows (docs/grammar.md), or NULL */
    const char *json_schema;   /* a JSON Schema the text is valid JSON for, or NULL; not with grammar */
    float repeat_penalty;      /* (0, 100]; 1: off */
    int repeat_last_n;         /* tokens the repeat penalty looks back over; -1: all, 0: off */
    float presence_penalty;    /* [-2, 2]; 0: off */
    float frequency_penalty;   /* [-2, 2]; 0: off */
    const int *logit_bias_ids; /* n_logit_bias token ids (copied by entropix_sampler_new) ... */
    const float *logit_bias;   /* ... and what is added to each one's logit: [-100, 100], or
                                  -INFINITY (never chosen) */
    int n_logit_bias;          /* [0, 300] */
} entropix_sampler_params;
ENTROPIX_API void entropix_sampler_params_init(entropix_sampler_params *p, int kind);
/* Fails with ENTROPIX_ERR_ARGUMENT for a value out of its range or a grammar or schema that
 * does not parse ("grammar: 1:10: unclosed '('"); a logit bias id past the vocabulary fails
 * the generation that uses the sampler. */
ENTROPIX_API int entropix_sampler_new(const entropix_sampler_params *params, entropix_sampler **out);

/* A sampler of the caller's: choose() gets the logits [n_vocab] of the step, its metrics (the
 * last layer's attention) and the position the token will take; it returns a token id, or -1 to
 * fail the generation. */
typedef int (*entropix_choose_fn)(void *user, const float *logits, int n_vocab, const entropix_metrics *metrics,
                                  int pos);
ENTROPIX_API int entropix_sampler_new_custom(entropix_choose_fn choose, void *user, entropix_sampler **out);
ENTROPIX_API void entropix_sampler_free(entropix_sampler *smp);

/* ---- Generation ------------------------------------------------------------------------------- */

enum { ENTROPIX_MAX_TOP = 20 };

/* One generated token, as the callback sees it (the library's memory, valid in the callback). */
typedef struct {
    size_t size;               /* sizeof(entropix_token) as the library was built */
    int index;                 /* 0, 1, ...; -1 for the final record of held-back text */
    int id;                    /* the chosen id; -1 for that final record */
    int pos;                   /* its position */
    const char *text;          /* text_len bytes the streaming detokeniser released (may be
                                  empty, may hold an earlier token's held bytes) */
    size_t text_len;
    int is_stop;               /* a stop token (its text is empty) */
    double logprob;            /* ln p(id) under softmax(raw logits) */
    int n_top;                 /* the most likely alternatives, descending: top_ids/top_logprobs */
    const int *top_ids;
    const float *top_logprobs;
    const entropix_metrics *metrics; /* the step's metrics (NULL when not measured) */
    int entropix_case;         /* ENTROPIX: 0 flowing (LELV), 1 HELV, 2 LEHV, 3 HEHV, 4 adaptive;
                                  -1 for other samplers */
    const char *case_name;     /* "LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE"; NULL when -1 */
} entropix_token;

/* Returns 0 to go on, anything else to stop the generation (entropix_generate then returns
 * ENTROPIX_OK with stop ENTROPIX_STOP_CALLBACK). */
typedef int (*entropix_token_fn)(void *user, const entropix_token *tok);

typedef struct {
    size_t size;              /* sizeof(entropix_generate_params) */
    int max_tokens;           /* < 0: until a stop token or the end of the context */
    int n_top;                /* alternatives per token, 0..ENTROPIX_MAX_TOP */
    int metrics;              /* 1: measure each step's metrics for non-entropix samplers too */
    int ignore_stop;          /* a stop token is fed back like any other */
    int print_control;        /* control tokens' text is released too */
    entropix_token_fn on_token;
    void *user;
    /* 1: the prompt's leading ids that this state's cache holds already at the same positions
     * (from its last generation, or the forwards since) are not run again: a chat's earlier
     * turns, a shared document. The last prompt id always runs (its logits choose the first
     * token). On the CPU the text is the same as with 0 (a row's result does not depend on its
     * batch); on a GPU, where a prefill and a decode step round differently, it may differ as
     * it would between two runtimes. 0 (the default, and a struct that ends at user): the whole
     * prompt runs. */
    int reuse_prefix;
} entropix_generate_params;
ENTROPIX_API void entropix_generate_params_init(entropix_generate_params *p);

typedef enum {
    ENTROPIX_STOP_TOKEN = 1,     /* a stop token was chosen */
    ENTROPIX_STOP_MAX_TOKENS,    /* max_tokens were generated */
    ENTROPIX_STOP_CONTEXT,       /* the context is full */
    ENTROPIX_STOP_CALLBACK,      /* the callback asked to stop */
} entropix_stop_reason;

typedef struct {
    size_t size;              /* sizeof(entropix_generate_result) */
    int n_prompt;             /* the prompt's ids: n_cached of them taken from the cache, the rest prefilled */
    int n_generated;          /* tokens chosen (a final stop token included) */
    int stop;                 /* entropix_stop_reason */
    double prefill_s, decode_s;
    int n_cached;             /* reuse_prefix: the prompt's leading ids the cache held already */
} entropix_generate_result;

/* Runs prompt[0..n_prompt) from position 0 of s, then generates with smp (reset for this run:
 * the same seed gives the same text), calling params->on_token per token. result may be NULL. */
ENTROPIX_API int entropix_generate(entropix_state *s, entropix_sampler *smp, const int *prompt, int n_prompt,
                                   const entropix_generate_params *params, entropix_generate_result *result);

/* ---- Step-wise generation --------------------------------------------------------------------- */

/* entropix_generate's loop one token per call, in the caller's thread and without a callback: a
 * caller with a loop of its own (an iterator, an event loop) takes each token when it wants it
 * and may stop after any. The same state, sampler, prompt and params give entropix_generate's
 * tokens, records and text. */
typedef struct entropix_generation entropix_generation;

/* Starts a generation of prompt[0..n_prompt) (copied) from position 0 of s with smp (reset for
 * it: the same seed gives the same text); nothing runs before the first entropix_generation_next.
 * params as entropix_generate's, on_token and user unused (NULL: the defaults). Until
 * entropix_generation_end, the generation owns s and smp: they must stay alive, and s refuses
 * entropix_forward, entropix_forward_all and other generations (ENTROPIX_ERR_ARGUMENT). */
ENTROPIX_API int entropix_generation_begin(entropix_state *s, entropix_sampler *smp, const int *prompt, int n_prompt,
                                           const entropix_generate_params *params, entropix_generation **out);
/* Runs one step: the prefill and the first choice on the first call, then one forward and one
 * choice per call. *tok is set to the token's record (the generation's memory, valid until the
 * next call on g), the final record of held-back text (id -1, as entropix_generate's last
 * callback), or NULL once the generation has ended (a stop token, max_tokens, the context).
 * A failure (the forward pass, a custom sampler's -1) returns its status with *tok NULL and ends
 * the generation: later calls return the same status and message. */
ENTROPIX_API int entropix_generation_next(entropix_generation *g, const entropix_token **tok);
/* The counts so far, as entropix_generate's result: stop is 0 while the generation runs, and
 * decode_s runs to the latest token (the caller's time between calls included). */
ENTROPIX_API int entropix_generation_result(const entropix_generation *g, entropix_generate_result *result);
/* Ends g wherever it is and frees it (NULL is fine); s and smp are the caller's again. */
ENTROPIX_API void entropix_generation_end(entropix_generation *g);

/* ---- The agent pool (docs/agents.md) ----------------------------------------------------------- */

/* A pool of sampling agents proposes every next token; the proposal of lowest entropy wins. On
 * the CPU, without the critic (./run --sampler agents's default). */
typedef struct {
    size_t size;       /* sizeof(entropix_agents_params) */
    int n_agents;      /* 1..64 (default 8: temperatures 0.3..1.5, top-k 5..100, as ./run) */
    int lookahead;     /* tokens of each agent's branch before the choice, 1..16 (default 1) */
    int workers;       /* threads with a model replica each, 1..n_agents (default 1) */
    int threads;       /* OpenMP threads of all workers together; 0: the model's (all cores) */
    int ctx;           /* each replica's context; <= 0: min(the model's, 4096) */
    uint64_t seed;     /* the agents' draws: the same seed, the same text */
} entropix_agents_params;
ENTROPIX_API void entropix_agents_params_init(entropix_agents_params *p);
/* Runs prompt[0..n_prompt) on fresh replicas of m, then generates with the pool, calling
 * gp->on_token per committed token as entropix_generate does (n_top at most 5; metrics: the
 * logits' entropy and varentropy, the attention fields NAN; entropix_case -1). A non-zero return
 * from the callback stops the pool after its current round. gp->max_tokens < 0: until a stop
 * token or the end of the context. */
ENTROPIX_API int entropix_generate_agents(entropix_model *m, const entropix_agents_params *ap, const int *prompt,
                                          int n_prompt, const entropix_generate_params *gp,
                                          entropix_generate_result *result);

#ifdef __cplusplus
}
#endif
#endif
