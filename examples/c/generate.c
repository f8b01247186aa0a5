// generate.c — a first program against the public C API (include/entropix.h): generates text
// from a prompt as `./run MODEL -p PROMPT --raw` does, and prints the prompt then the text.
//
//   cc generate.c $(pkg-config --cflags --libs entropix) -o generate
//   ./generate MODEL.bin "Once upon a time" [-n N] [--sampler greedy|combined|entropix]
//              [--temp T] [--top-k K] [--top-p P] [--min-p P] [-s SEED] [-c CTX] [-t THREADS] [-dev DEVICE]
//              [--steps 1]
// --steps 1 runs the generation step by step (entropix_generation_next) instead of through the
// callback: the same text.
#include <entropix.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int print_token(void *user, const entropix_token *tok) {
    (void)user;
    fwrite(tok->text, 1, tok->text_len, stdout);
    fflush(stdout);
    return 0;  // go on
}

static int fail(const char *what) {
    fprintf(stderr, "generate: %s: %s\n", what, entropix_error_last());
    return 1;
}

// The generation one token per call, the loop ours: what entropix_generate does with the callback.
static int generate_steps(entropix_state *state, entropix_sampler *sampler, const int *ids, int n_ids,
                          const entropix_generate_params *gp, entropix_generate_result *res) {
    entropix_generation *g = NULL;
    int rc = entropix_generation_begin(state, sampler, ids, n_ids, gp, &g);
    const entropix_token *tok = NULL;
    while (rc == ENTROPIX_OK && (rc = entropix_generation_next(g, &tok)) == ENTROPIX_OK && tok) print_token(NULL, tok);
    if (rc == ENTROPIX_OK) entropix_generation_result(g, res);
    entropix_generation_end(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.bin PROMPT [-n N] [--sampler greedy|combined|entropix] [--temp T] "
                        "[--top-k K] [--top-p P] [--min-p P] [-s SEED] [-c CTX] [-t THREADS] [-dev cpu|cuda:N|auto] "
                        "[--steps 1]\n", argv[0]);
        return 2;
    }
    entropix_sampler_params sp;
    entropix_sampler_params_init(&sp, ENTROPIX_SAMPLER_GREEDY);
    entropix_model_params mp;
    entropix_model_params_init(&mp);
    entropix_state_params stp;
    entropix_state_params_init(&stp);
    entropix_generate_params gp;
    entropix_generate_params_init(&gp);
    gp.max_tokens = 256;
    gp.on_token = print_token;
    int steps = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "-n")) gp.max_tokens = atoi(v);
        else if (!strcmp(f, "--sampler"))
            sp.kind = !strcmp(v, "greedy") ? ENTROPIX_SAMPLER_GREEDY
                      : !strcmp(v, "combined") ? ENTROPIX_SAMPLER_COMBINED : ENTROPIX_SAMPLER_ENTROPIX;
        else if (!strcmp(f, "--temp")) sp.temperature = (float)atof(v);
        else if (!strcmp(f, "--top-k")) sp.top_k = atoi(v);
        else if (!strcmp(f, "--top-p")) sp.top_p = (float)atof(v);
        else if (!strcmp(f, "--min-p")) sp.min_p = (float)atof(v);
        else if (!strcmp(f, "-s")) sp.seed = strtoull(v, NULL, 10);
        else if (!strcmp(f, "-c")) stp.ctx = atoi(v);
        else if (!strcmp(f, "-t")) mp.threads = atoi(v);
        else if (!strcmp(f, "-dev")) mp.device = v;
        else if (!strcmp(f, "--steps")) steps = atoi(v);
        else {
            fprintf(stderr, "generate: unknown flag %s\n", f);
            return 2;
        }
    }
    entropix_model *model = NULL;
    entropix_state *state = NULL;
    entropix_sampler *sampler = NULL;
    int *ids = NULL, n_ids = 0, rc = 1;
    if (entropix_model_open(argv[1], &mp, &model) != ENTROPIX_OK) return fail("model");
    if (entropix_state_new(model, &stp, &state) != ENTROPIX_OK) rc = fail("state");
    else if (entropix_sampler_new(&sp, &sampler) != ENTROPIX_OK) rc = fail("sampler");
    else if (entropix_prompt_tokens(model, argv[2], strlen(argv[2]), 0, NULL, &ids, &n_ids) != ENTROPIX_OK)
        rc = fail("prompt");
    else {
        fputs(argv[2], stdout);  // the prompt, echoed as ./run --raw does
        entropix_generate_result res = {.size = sizeof res};
        const int grc = steps ? generate_steps(state, sampler, ids, n_ids, &gp, &res)
                              : entropix_generate(state, sampler, ids, n_ids, &gp, &res);
        rc = grc != ENTROPIX_OK ? fail("generate") : 0;
        putchar('\n');  // as ./run ends its text
        if (!rc)
            fprintf(stderr, "generate: %d prompt tokens, %d generated on %s\n", res.n_prompt, res.n_generated,
                    entropix_state_device(state));
    }
    entropix_free(ids);
    entropix_sampler_free(sampler);
    entropix_state_free(state);
    entropix_model_close(model);
    return rc;
}
