// page.h — the chat page served at GET / (tools/server/page.html, docs/server.md "The page"),
// built into the program so the server needs no file at run time.
#ifndef ENTROPIX_SERVER_PAGE_H
#define ENTROPIX_SERVER_PAGE_H

// The page's bytes, NUL-terminated (UTF-8 HTML with its CSS and script inline).
extern const char srv_page_html[];

#endif
