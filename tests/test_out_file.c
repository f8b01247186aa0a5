// test_out_file.c — base/out_file.h on every kind of path, in a temporary folder of its own: a
// regular file, a new one, a missing folder, a symbolic link, a FIFO (with and without a
// reader), a directory, and /dev/null, which is only ever checked and opened in ways that
// cannot change it (the refusal is asserted first; its mode and device number after).
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/out_file.h"
#include "test_util.h"

typedef struct {
    char dir[64];
    char path[128];
} Tmp;

static void tmp_setup(Tmp *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/emx_out_XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/out.txt", t->dir);
}

static void tmp_cleanup(Tmp *t) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    cr_assert_eq(system(cmd), 0);
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static void expect_text(const char *path, const char *want) {
    size_t n = 0;
    char *got = test_read_file(path, &n);
    cr_assert_not_null(got, "cannot read %s", path);
    cr_expect_str_eq(got, want, "%s", path);
    free(got);
}

// Entries of the folder (no temporary file may be left behind).
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void expect_refused(const char *path, EmxOutKind kind, const char *needle) {
    char err[512] = "";
    cr_assert_eq(emx_out_check(path, kind, err, sizeof err), -1, "%s accepted (kind %d)", path, kind);
    cr_expect(strstr(err, needle) && !strchr(err, '\n') && !strncmp(err, path, strlen(path)), "%s: '%s' lacks '%s'",
              path, err, needle);
    EmxOut o;
    err[0] = 0;
    cr_assert_eq(emx_out_open(&o, path, kind, err, sizeof err), -1, "%s opened (kind %d)", path, kind);
    cr_expect(o.f == NULL && strstr(err, needle), "%s: '%s'", path, err);
}

Test(out_file, replace_a_new_file) {
    Tmp t;
    tmp_setup(&t);
    umask(022);
    EmxOut o;
    char err[256];
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_REPLACE, err, sizeof err), 0, "%s", err);
    cr_expect_neq(access(t.path, F_OK), 0, "the file appeared before it was complete");
    fputs("whole\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    expect_text(t.path, "whole\n");
    struct stat sb;
    cr_assert_eq(lstat(t.path, &sb), 0);
    cr_expect(S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0644, "mode %o: a plain create under umask 022 is 0644",
              sb.st_mode & 0777);
    cr_expect_eq(entries(t.dir), 1, "a temporary file was left");
    tmp_cleanup(&t);
}

Test(out_file, replace_keeps_the_old_file_until_close_and_its_mode) {
    Tmp t;
    tmp_setup(&t);
    put(t.path, "old\n");
    cr_assert_eq(chmod(t.path, 0604), 0);
    EmxOut o;
    char err[256];
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_REPLACE, err, sizeof err), 0, "%s", err);
    fputs("new\n", o.f);
    fflush(o.f);
    expect_text(t.path, "old\n");  // readers see the old file, whole, until the rename
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    expect_text(t.path, "new\n");
    struct stat sb;
    cr_assert_eq(stat(t.path, &sb), 0);
    cr_expect_eq(sb.st_mode & 0777, 0604);
    // discard: the file stays as it was, no temporary left
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_REPLACE, err, sizeof err), 0, "%s", err);
    fputs("half", o.f);
    emx_out_discard(&o);
    expect_text(t.path, "new\n");
    cr_expect_eq(entries(t.dir), 1);
    tmp_cleanup(&t);
}

Test(out_file, missing_folder_says_so) {
    Tmp t;
    tmp_setup(&t);
    char p[160];
    snprintf(p, sizeof p, "%s/no/such/out.txt", t.dir);
    for (int k = EMX_OUT_REPLACE; k <= EMX_OUT_APPEND; k++) expect_refused(p, (EmxOutKind)k, "the folder");
    char err[256];
    cr_assert_eq(emx_out_check(p, EMX_OUT_APPEND, err, sizeof err), -1);
    cr_expect(strstr(err, "does not exist"), "%s", err);
    snprintf(p, sizeof p, "%s/out.txt/x", t.dir);  // the "folder" is a file
    put(t.path, "x");
    expect_refused(p, EMX_OUT_REPLACE, "is not a folder");
    cr_expect_eq(entries(t.dir), 1);
    tmp_cleanup(&t);
}

Test(out_file, symbolic_link) {
    Tmp t;
    tmp_setup(&t);
    char target[160], link[160];
    snprintf(target, sizeof target, "%s/target.txt", t.dir);
    snprintf(link, sizeof link, "%s/link.txt", t.dir);
    put(target, "target\n");
    cr_assert_eq(symlink(target, link), 0);
    // written whole: the rename would replace the link by a file
    expect_refused(link, EMX_OUT_REPLACE, "is a symbolic link, not a regular file: refusing to replace it");
    struct stat sb;
    cr_assert_eq(lstat(link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode));
    expect_text(target, "target\n");
    // a stream opens what the link names, as the shell's > does; the link stays a link
    EmxOut o;
    char err[256];
    cr_assert_eq(emx_out_open(&o, link, EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    fputs("streamed\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lstat(link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode));
    expect_text(target, "streamed\n");
    tmp_cleanup(&t);
}

Test(out_file, fifo) {
    Tmp t;
    tmp_setup(&t);
    cr_assert_eq(mkfifo(t.path, 0600), 0);
    expect_refused(t.path, EMX_OUT_REPLACE, "is a FIFO, not a regular file");
    expect_refused(t.path, EMX_OUT_APPEND, "is a FIFO");
    // a stream to a FIFO nobody reads fails at once instead of waiting for a reader
    EmxOut o;
    char err[256];
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_STREAM, err, sizeof err), -1);
    cr_expect(strstr(err, "is a FIFO that nobody reads"), "%s", err);
    // with a reader, a stream writes into it
    const int rd = open(t.path, O_RDONLY | O_NONBLOCK);
    cr_assert(rd >= 0);
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    fputs("piped\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    char buf[16] = "";
    cr_expect_eq(read(rd, buf, sizeof buf - 1), 6);
    cr_expect_str_eq(buf, "piped\n");
    close(rd);
    struct stat sb;
    cr_assert_eq(lstat(t.path, &sb), 0);
    cr_expect(S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    tmp_cleanup(&t);
}

Test(out_file, directory) {
    Tmp t;
    tmp_setup(&t);
    expect_refused(t.dir, EMX_OUT_REPLACE, "is a directory");
    expect_refused(t.dir, EMX_OUT_STREAM, "is a directory");
    expect_refused(t.dir, EMX_OUT_APPEND, "is a directory");
    cr_expect_eq(entries(t.dir), 0);
    tmp_cleanup(&t);
}

// /dev/null: refused as a file to replace before anything is created (the check first, so a
// wrong open is never tried), accepted as a stream (writing there is harmless), and after all of
// it still the same character device.
Test(out_file, dev_null_is_never_replaced) {
    struct stat before, after;
    cr_assert_eq(lstat("/dev/null", &before), 0);
    cr_assert(S_ISCHR(before.st_mode));
    char err[256];
    cr_assert_eq(emx_out_check("/dev/null", EMX_OUT_REPLACE, err, sizeof err), -1, "/dev/null accepted for replacing");
    cr_expect(strstr(err, "/dev/null is a character device, not a regular file: refusing to replace it"), "%s", err);
    expect_refused("/dev/null", EMX_OUT_REPLACE, "is a character device");
    expect_refused("/dev/null", EMX_OUT_APPEND, "is a character device");
    EmxOut o;
    cr_assert_eq(emx_out_open(&o, "/dev/null", EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    fputs("gone\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lstat("/dev/null", &after), 0);
    cr_expect(S_ISCHR(after.st_mode) && after.st_rdev == before.st_rdev && after.st_ino == before.st_ino,
              "/dev/null changed");
}

// A stream truncates a regular file at open and reports a failed write at close.
Test(out_file, stream_and_append) {
    Tmp t;
    tmp_setup(&t);
    put(t.path, "a long earlier content\n");
    EmxOut o;
    char err[256];
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    expect_text(t.path, "");
    fputs("1\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(emx_out_open(&o, t.path, EMX_OUT_APPEND, err, sizeof err), 0, "%s", err);
    fputs("2\n", o.f);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    expect_text(t.path, "1\n2\n");
    cr_assert_eq(emx_out_open(&o, "-", EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    cr_expect(o.f == stdout && o.is_stdout);
    cr_assert_eq(emx_out_close(&o, err, sizeof err), 0, "%s", err);
    expect_refused("-", EMX_OUT_APPEND, "read back");
    cr_assert_eq(emx_out_open(&o, "/dev/full", EMX_OUT_STREAM, err, sizeof err), 0, "%s", err);
    fputs("x\n", o.f);
    cr_expect_eq(emx_out_close(&o, err, sizeof err), -1);
    cr_expect(strstr(err, "/dev/full: No space left on device"), "%s", err);
    tmp_cleanup(&t);
}
