// test_read_file.c — emx_read_file / emx_read_stream: contents and length exact past the first
// buffer growth, a NUL after them, a pipe read to its end, errno on a missing file.
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "read_file.h"

Test(read_file, contents_length_and_nul) {
    char path[] = "/tmp/emx_read_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    enum { N = 10000 };  // more than the first 4096-byte buffer, twice grown
    static char want[N];
    for (int i = 0; i < N; i++) want[i] = (char)(i * 7 + 1);
    want[5000] = 0;  // an embedded NUL is data
    cr_assert_eq(write(fd, want, N), N);
    close(fd);
    size_t len = 0;
    char *got = emx_read_file(path, &len);
    cr_assert_not_null(got);
    cr_expect_eq(len, (size_t)N);
    cr_expect(memcmp(got, want, N) == 0);
    cr_expect_eq(got[N], 0);
    free(got);
    unlink(path);
    errno = 0;
    cr_expect_null(emx_read_file(path, &len));
    cr_expect_eq(errno, ENOENT);
}

Test(read_file, pipe_to_its_end) {
    FILE *p = popen("printf 'abc\\ndef'", "r");
    cr_assert_not_null(p);
    size_t len = 0;
    char *got = emx_read_stream(p, &len);
    pclose(p);
    cr_assert_not_null(got);
    cr_expect_eq(len, 7);
    cr_expect_str_eq(got, "abc\ndef");
    free(got);
}
