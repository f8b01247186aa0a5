// source.h — the sources only the converter reads: a HuggingFace directory and a llama2.c
// checkpoint (ConvSource and the GGUF reader, which the runtime uses too, are in
// runtime/convert/source.h).
#ifndef ENTROPIX_CONVERT_SOURCE_H
#define ENTROPIX_CONVERT_SOURCE_H

#include <stddef.h>

#include "runtime/convert/source.h"

// Fill `s` (zeroed first) or return -1 with a one-line reason in err; src_free releases what
// they opened, also after an error. `tokenizer` is the --tokenizer option (NULL when not given).
int src_open_hf(ConvSource *s, const char *dir, const char *tokenizer, char *err, size_t errlen);
int src_open_llama2c(ConvSource *s, const char *path, const char *tokenizer, char *err, size_t errlen);

#endif
