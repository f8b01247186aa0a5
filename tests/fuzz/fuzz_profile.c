// fuzz_profile.c — the entropix profile parser (sampler/profile.c). Input: a profile text.
// A text the parser accepts must write back (emx_profile_write) to a text that parses to the
// same profile, bit for bit (profile.h promises "reads back exactly"). The first line, split
// at '=', also goes through emx_profile_set (the --profile-set KEY=VALUE form).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "sampler/profile.h"

static void round_trip(const EmxProfile *p) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) abort();
    emx_profile_write(f, p);
    fclose(f);
    EmxProfile q;
    memset(&q, 0, sizeof q);  // padding bytes compare equal in the memcmp below
    emx_profile_classic(&q);
    char err[512];
    if (emx_profile_parse(&q, text, len, "written", err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_profile: the written profile does not parse: %s\n---\n%s---\n", err, text);
        abort();
    }
    if (memcmp(p, &q, sizeof q) != 0) {
        fprintf(stderr, "fuzz_profile: the written profile reads back different:\n%s", text);
        abort();
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    EmxProfile p;
    // Zeroed first: padding bytes compare equal in round_trip's memcmp.
    memset(&p, 0, sizeof p);
    emx_profile_classic(&p);
    if (emx_profile_parse(&p, (const char *)data, size, "fuzz.profile", err, sizeof err) == 0) round_trip(&p);

    const uint8_t *nl = memchr(data, '\n', size);
    char *line = fuzz_strndup(data, nl ? (size_t)(nl - data) : size);
    char *eq = strchr(line, '=');
    if (eq) {
        *eq = 0;
        memset(&p, 0, sizeof p);
        emx_profile_classic(&p);
        if (emx_profile_set(&p, line, eq + 1, err, sizeof err) == 0) round_trip(&p);
    }
    free(line);
    return 0;
}
