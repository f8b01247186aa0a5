// test_read_file.c — emx_read_file / emx_read_stream: contents and length exact past the first
// buffer growth, a NUL after them, a pipe read to its end, errno on a missing file, a directory
// (EISDIR) and the bounded reads (EFBIG past the bound, /dev/zero included).
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/read_file.h"

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

Test(read_file, directory_is_eisdir) {
    errno = 0;
    cr_expect_null(emx_read_file("/tmp", NULL));
    cr_expect_eq(errno, EISDIR, "errno %d (%s), not EISDIR", errno, strerror(errno));
}

Test(read_file, bounded_read_stops_at_the_bound) {
    // /dev/zero never ends: the bounded read must stop after max + 1 bytes with EFBIG.
    errno = 0;
    cr_expect_null(emx_read_file_max("/dev/zero", 1 << 20, NULL));
    cr_expect_eq(errno, EFBIG);
    char path[] = "/tmp/emx_read_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    static char data[9000];
    memset(data, 'x', sizeof data);
    cr_assert_eq(write(fd, data, sizeof data), (ssize_t)sizeof data);
    close(fd);
    size_t len = 0;
    char *got = emx_read_file_max(path, sizeof data, &len);  // exactly the bound: fits
    cr_expect_not_null(got);
    cr_expect_eq(len, sizeof data);
    free(got);
    errno = 0;
    cr_expect_null(emx_read_file_max(path, sizeof data - 1, &len));  // one byte over
    cr_expect_eq(errno, EFBIG);
    unlink(path);
}
