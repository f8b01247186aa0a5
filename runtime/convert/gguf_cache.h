// gguf_cache.h — a GGUF file given where a model file is expected (./run, the server, eval,
// bench, perplexity): converted once into a cache folder, and the cached model file opened
// instead, as long as the GGUF is unchanged.
//
// The cache folder: the caller's choice (--gguf-cache, entropix_model_params.gguf_cache), else $EMX_CACHE, else
// $XDG_CACHE_HOME/entropix, else ~/.cache/entropix (created when missing). Never beside the
// GGUF: a read-only model folder works, and nothing appears beside the model.
//
// The cache file is "<gguf name>.<path key>-<state key>.bin": the path key hashes the GGUF's
// real path, the state key its device, inode, size and modification time (and this build's
// model-format version). A GGUF that is replaced, rewritten or touched gets a new state key:
// converted again, and the file it replaces (same path key) removed. The conversion keeps
// each matrix's own type (conv_plan.h's CONV_DTYPE_KEEP) and writes through model_writer.h:
// a temporary file renamed into place, so a failed or killed conversion leaves no cache file
// (a kill -9 may leave a hidden .tmp). Two processes opening the same GGUF at once: the second
// waits on a lock (a hidden ".NAME.lock" beside the cache file while a conversion runs) and
// then reuses the first's file.
#ifndef ENTROPIX_GGUF_CACHE_H
#define ENTROPIX_GGUF_CACHE_H

#include <stddef.h>

// The environment variable naming the cache folder (llama.cpp's is LLAMA_CACHE).
#define EMX_CACHE_ENV "EMX_CACHE"

// 1 if the file at path begins with GGUF's magic, else 0 (unreadable included).
int emx_is_gguf(const char *path);

// The model file to open for `path`, into out (cap bytes): path itself unless it is a GGUF
// (by its magic, whatever its name); for a GGUF, the cache file, converted first when there is
// none for its present state ("PROG: converting X -> CACHE (once; reused while X is unchanged)"
// once on stderr; prog NULL: nothing printed, as the library wants). cache_dir NULL: the
// default above. Returns 0, or -1 with a one-line reason in err (the GGUF reader's for a
// damaged file).
int emx_gguf_model_path(const char *path, const char *cache_dir, const char *prog, char *out, size_t cap, char *err,
                        size_t errlen);

#endif
