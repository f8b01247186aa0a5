// report_template.c — runtime/report/report_template.html built into the program as the string
// emx_report_template (report.h), NUL-terminated. The assembler's .incbin reads the file at
// build time (its path is from the repository root, where every build runs), so the page stays
// a real HTML file to edit and open, with no generator step; the Makefile names it as a
// prerequisite of this object so an edit rebuilds it.
__asm__(".section .rodata\n"
        ".global emx_report_template\n"
        ".type emx_report_template, @object\n"
        ".balign 16\n"
        "emx_report_template:\n"
        ".incbin \"runtime/report/report_template.html\"\n"
        ".byte 0\n"
        ".size emx_report_template, . - emx_report_template\n"
        ".previous\n");
