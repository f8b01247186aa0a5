// msg_esc.h — names read from a file (tensor names, dtypes, vocabulary pieces, link targets)
// as they go into a one-line error message: a CR, LF or other control byte in a name must not
// split the line or move the cursor.
#ifndef ENTROPIX_CONVERT_MSG_ESC_H
#define ENTROPIX_CONVERT_MSG_ESC_H

#include <stddef.h>

// Copies the first n bytes of s into buf (cap bytes, NUL-terminated) with control bytes, DEL
// and backslash escaped as \r \n \t \\ \xNN; a name that does not fit ends in "...". Returns buf.
const char *emx_escn(char *buf, size_t cap, const char *s, size_t n);
const char *emx_esc(char *buf, size_t cap, const char *s);  // s NUL-terminated (NULL: "(null)")

// ESC(s): the escaped name in a buffer that lives until the end of the enclosing block, for
// use directly as a printf argument.
#define EMX_ESC_BYTES 200
#define ESC(s) emx_esc((char[EMX_ESC_BYTES]){0}, EMX_ESC_BYTES, (s))
#define ESCN(s, n) emx_escn((char[EMX_ESC_BYTES]){0}, EMX_ESC_BYTES, (const char *)(s), (n))

#endif
