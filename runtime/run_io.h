// run_io.h — what ./run checks about its files and its memory before it writes or allocates:
// the standard streams, output paths that would overwrite an input, the bound on a prompt file,
// and whether the CPU states' KV caches fit the memory there is.
#ifndef ENTROPIX_RUN_IO_H
#define ENTROPIX_RUN_IO_H

#include <stddef.h>
#include <stdint.h>

#include "base/out_file.h"
#include "runtime/forward.h"
#include "runtime/model.h"

// Makes sure fds 0 and 2 are open (on /dev/null when closed), so a file ./run opens later cannot
// become its stdin or stderr; then whether fd 1 is open. Returns 0, or the errno (EBADF) of a
// closed stdout: the text would be lost, and a file opened later would receive it.
int emx_run_check_stdio(void);

// One file the run names: the flag (for the message) and the path; NULL paths are skipped.
typedef struct {
    const char *flag;  // "--metrics", "the model", "-f"
    const char *path;
} EmxRunPath;

// Refuses an output that is one of the inputs (same device and inode, symlinks followed; only
// regular files: /dev/null may be both), and two outputs naming the same file (an existing one
// by inode, a new one by its directory's inode and its name). Checks before anything is opened
// for writing. Returns 0, or -1 with a one-line reason:
//   "--metrics m.bin is the model file (model.bin): an output may not overwrite an input"
int emx_run_check_outputs(const EmxRunPath *inputs, int n_in, const EmxRunPath *outputs, int n_out,
                          char *err, size_t errlen);

// Each output of a run against its kind's policy (base/out_file.h: kinds[i] for outputs[i]; NULL
// paths skipped), before anything runs: a file written whole must be a regular file or a new one,
// a stream may also be a character device or a FIFO, and every folder must exist. Returns 0, or
// -1 with the first refusal, the flag first: "--report /dev/null is a character device, not a
// regular file: refusing to replace it".
int emx_run_check_output_kinds(const EmxRunPath *outputs, const EmxOutKind *kinds, int n_out, char *err,
                               size_t errlen);

// The prompt bytes that a context of ctx tokens can possibly hold, generously: no token covers
// more than the tokenizer's longest piece (max_piece bytes) of the text, times 4 for what a
// tokenizer's normalisation may drop, plus 64 KiB. A longer prompt is refused before it is read
// in full or tokenised.
size_t emx_prompt_byte_bound(int ctx, size_t max_piece);

// Bytes one CPU state of model c at ctx positions allocates: the KV cache (keys and values,
// [n_layers][ctx][kv_dim] each, of 4 bytes an element, or 2 with an f16 cache), the last
// position's attention scores, the softmax scratch of n_threads threads and the activations of a
// batched pass. kv_bytes (optional): the KV cache part.
uint64_t emx_cpu_state_bytes(const EmxConfig *c, int ctx, int n_threads, EmxKvType cache, uint64_t *kv_bytes);

// Memory a new allocation can count on, in bytes: MemAvailable of /proc/meminfo (or free pages
// from sysconf when it is missing), capped by RLIMIT_AS's room when a limit is set. The
// environment variable EMX_MEMAVAILABLE_MB, when set, replaces the figure: a test hook, so a
// test of the check does not depend on the machine's memory. 0: unknown (no check).
uint64_t emx_mem_available(void);

// Refuses need bytes of CPU states (kv of them the KV caches) when more than avail (0 = unknown:
// accepted). `what`: "2 worker states and a critic state". One line, in the wording of the CUDA
// backend's "does not fit":
//   "cpu: the KV cache does not fit: it needs 8448.0 MiB (KV cache 8192.0, activations ... at ctx
//    65536, 1 state), the machine has 3012.0 MiB available (a smaller --ctx-size may)"
int emx_mem_check(uint64_t need, uint64_t kv, uint64_t avail, int ctx, const char *what, char *err,
                  size_t errlen);

#endif
