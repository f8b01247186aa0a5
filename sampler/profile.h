// profile.h — named sets of the entropix switch's constants (EmxProfile, entropix.h), and their
// text form.
//
// Text form: one `key = value` per line; `#` starts a comment; blank lines are ignored; keys are
// the EmxProfile field names; a key given twice keeps the last value. Values: numbers (integer
// fields take integers), attn_layer = last | all | N, attn_varentropy_def = heads | true.
// A file is read on top of the classic profile, so it may set every field or just override a
// few. Errors are one line naming the source, the line and the key or value:
//   "my.profile:7: unknown key 'top_kk'"
//   "my.profile:3: bad value 'abc' for top_k (an integer in [0, 1000000])"
//
// Built-in profiles (also shipped as sampler/profiles/<name>.profile):
//   measured     the default: classic's switch with the temperatures, the draws and the min-p
//                gate that measured answer accuracy chose (profile.c says why)
//   classic      the sources' constants (docs/entropix.md)
//   masked-bits  classic re-tuned for masked attention metrics (profile.c says why)
#ifndef ENTROPIX_PROFILE_H
#define ENTROPIX_PROFILE_H

#include <stddef.h>
#include <stdio.h>

#include "sampler/entropix.h"

// The profile ./run, the server, eval, bench and calibrate use when none is named.
#define EMX_PROFILE_DEFAULT "measured"

void emx_profile_classic(EmxProfile *p);

// A built-in profile by name. Returns 0, or -1 if there is none of that name.
int emx_profile_builtin(EmxProfile *p, const char *name);

// Sets one field from its text value (the --profile-set key=value form). Returns 0, or -1 with a
// one-line reason (unknown key, bad value).
int emx_profile_set(EmxProfile *p, const char *key, const char *value, char *err, size_t errlen);

// Applies the lines of text[0..len) to *p. `source` names the text in errors (a file name).
// Returns 0, or -1 with a one-line reason; *p may then be partly updated.
int emx_profile_parse(EmxProfile *p, const char *text, size_t len, const char *source, char *err,
                      size_t errlen);

// `--profile NAME|FILE`: a built-in name, otherwise a file read on top of classic. Returns 0, or
// -1 with a one-line reason (no such profile or file, or a parse error).
int emx_profile_load(EmxProfile *p, const char *name_or_path, char *err, size_t errlen);

// Writes every field as `key = value` lines, in a form emx_profile_parse reads back exactly.
void emx_profile_write(FILE *f, const EmxProfile *p);

#endif
