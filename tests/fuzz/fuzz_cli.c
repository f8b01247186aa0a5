// fuzz_cli.c — the ./run command line (runtime/cli/cli_args.c). Input: the arguments after argv[0],
// separated by NUL bytes. A command line that parses must give sampler settings in range, and -e's
// unescaped prompt and system text no longer than they were written.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli_args.h"
#include "fuzz_util.h"

#define MAX_ARGS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = fuzz_strndup((const uint8_t *)"run", 3);
    size_t pos = 0, len;
    const uint8_t *part;
    while (argc <= MAX_ARGS && size && fuzz_next_part(data, size, &pos, &part, &len))
        argv[argc++] = fuzz_strndup(part, len);
    argv[argc] = NULL;
    EmxCliArgs a;
    char err[512];
    int rc = emx_cli_parse(argc, argv, &a, err, sizeof err);
    if (rc != 0 && rc != 2) {
        fprintf(stderr, "fuzz_cli: emx_cli_parse returned %d (0 or 2 expected)\n", rc);
        abort();
    }
    if (rc == 0 && !a.help && !a.version) {
        EmxSamplerParams sp = emx_cli_effective_sampling(&a);
        (void)emx_sampler_kind_name(a.sampler);
        if (!(sp.temperature >= 0) || !isfinite(sp.temperature) || !(sp.top_p >= 0 && sp.top_p <= 1) || !(sp.min_p >= 0 && sp.min_p <= 1) ||
            sp.top_k < 0) {
            fprintf(stderr, "fuzz_cli: accepted sampler settings out of range: temp %g top_k %d top_p %g min_p %g\n",
                    (double)sp.temperature, sp.top_k, (double)sp.top_p, (double)sp.min_p);
            abort();
        }
        const char *texts[] = {a.prompt, a.system};
        for (int k = 0; k < 2 && a.escape; k++) {
            size_t n = 0;
            char *u = texts[k] ? emx_cli_unescape(texts[k], &n) : NULL;
            if (u && n > strlen(texts[k])) {
                fprintf(stderr, "fuzz_cli: -e made %zu bytes of %zu\n", n, strlen(texts[k]));
                abort();
            }
            free(u);
        }
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
