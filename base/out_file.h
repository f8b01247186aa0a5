// out_file.h — the one way every program of the project writes an output file: ./run's
// --report, --metrics and --log, calibrate -o, eval -o and --json, convert's model, bench --save.
//
// An output is of one of three kinds, and each kind has one policy:
//
//   EMX_OUT_REPLACE  a file written whole (a report page, a profile, a summary, a model): the
//                    bytes go to a temporary file beside it (".NAME.XXXXXX.tmp", same folder so
//                    the rename stays on one filesystem), which is flushed, fsynced, renamed over
//                    PATH, and the folder fsynced: PATH holds the old file or the whole new one,
//                    never a part. PATH must be a regular file or not exist: a symbolic link, a
//                    FIFO, a device, a socket or a directory is refused (a rename would put a
//                    regular file in its place: `--report /dev/null` run as root would replace
//                    /dev/null). A replaced file keeps its permission bits; a new one gets
//                    0666 less the umask, as a plain create.
//   EMX_OUT_STREAM   a file written as the run goes (a --metrics log): opened in place and
//                    truncated, so it can be followed while it grows. "-" is stdout. PATH is
//                    opened as the shell's `>` opens it (symbolic links followed) and what it
//                    names must be a regular file, a new file, or what a stream is named for on
//                    purpose: a character device (/dev/null) or a FIFO that has a reader (a pipe);
//                    a directory, a socket, a block device or a FIFO nobody reads is refused.
//   EMX_OUT_APPEND   a file appended to and read back by its program (eval's -o, resumable): a
//                    regular file or a new one only ("-", a FIFO or a device cannot be read back).
//
// Every refusal is made before a byte is written, in one line that names the path and what it
// is ("/dev/null is a character device, not a regular file: refusing to replace it"); the
// caller puts its program and flag first ("run: --report "). emx_out_check says the same
// without opening anything, for a check before a long run.
#ifndef ENTROPIX_OUT_FILE_H
#define ENTROPIX_OUT_FILE_H

#include <stddef.h>
#include <stdio.h>

typedef enum { EMX_OUT_REPLACE, EMX_OUT_STREAM, EMX_OUT_APPEND } EmxOutKind;

typedef struct {
    FILE *f;            // where to write (stdout for a STREAM named "-")
    EmxOutKind kind;
    const char *path;   // the caller's path (not copied: it must outlive the EmxOut)
    char tmp[4096];     // REPLACE: the temporary file being written; "" otherwise
    int is_stdout;
} EmxOut;

// What kind of file an lstat/stat mode is, for messages: "a regular file", "a directory",
// "a symbolic link", "a FIFO", "a character device", "a block device", "a socket".
const char *emx_out_kind_name(unsigned mode);

// Whether path may be written as kind, opening nothing: for REPLACE and for a new file, its
// folder must exist and be writable. 0, or -1 with a one-line reason starting with the path.
int emx_out_check(const char *path, EmxOutKind kind, char *err, size_t errlen);

// Whether dir may hold a program's output files (eval's --report-dir), opening and making
// nothing: an existing folder that takes new entries, or a name that does not exist yet in one
// (the program makes it later). A trailing '/' is allowed. 0, or -1 with a one-line reason
// starting with the path ("pages is a regular file, not a folder").
int emx_out_check_folder(const char *dir, char *err, size_t errlen);

// Opens path as kind (o is filled; o->f is NULL on failure). 0, or -1 with a one-line reason
// starting with the path; nothing is created or changed at path on a refusal.
int emx_out_open(EmxOut *o, const char *path, EmxOutKind kind, char *err, size_t errlen);

// Flushes and closes. REPLACE: fsync, rename over path, fsync the folder (the temporary file
// is removed on any failure and path left as it was). STREAM/APPEND: flush and close (stdout is
// flushed, not closed). 0, or -1 with a one-line reason (a write error included: "out.html: No
// space left on device"). o->f is NULL afterwards either way.
int emx_out_close(EmxOut *o, char *err, size_t errlen);

// Gives up: REPLACE removes the temporary file (path untouched); a stream is closed as it is.
// Safe on a zeroed EmxOut or one already closed.
void emx_out_discard(EmxOut *o);

#endif
