// page.c — tools/server/page.html built into the program as the string srv_page_html (page.h),
// NUL-terminated, as runtime/report/report_template.c does for the --report page: the
// assembler's .incbin reads the file at build time (its path is from the repository root,
// where every build runs), so the page stays a real HTML file to edit and open, with no
// generator step; the Makefile names it as a prerequisite of this object so an edit rebuilds it.
__asm__(".section .rodata\n"
        ".global srv_page_html\n"
        ".type srv_page_html, @object\n"
        ".balign 16\n"
        "srv_page_html:\n"
        ".incbin \"tools/server/page.html\"\n"
        ".byte 0\n"
        ".size srv_page_html, . - srv_page_html\n"
        ".previous\n");
