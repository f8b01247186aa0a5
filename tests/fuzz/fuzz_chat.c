// fuzz_chat.c — the chat-template renderer and detector (tokenizer/chat_template.c).
// Input: byte 0 the family (values past the enum included), byte 1 the options
// (bit 0 add_generation_prompt, bit 1 enable_thinking), then messages separated by NUL bytes:
// the first byte of each is its role ('s' system, 'u' user, 'a' assistant, 'n' a NULL role;
// any other byte: the role is the text up to the first ':', the content the rest). The whole
// input is also given to the detector as a Jinja template.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"
#include "fuzz_util.h"

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)emx_chat_template_detect((const char *)data, size);
    if (size < 2) return 0;
    uint32_t family = data[0] % 8;
    EmxChatOptions opt = {.add_generation_prompt = data[1] & 1, .enable_thinking = (data[1] >> 1) & 1};
    EmxChatMessage msgs[MAX_MSGS];
    char *owned[MAX_MSGS];
    int n = 0;
    size_t pos = 2, len;
    const uint8_t *part;
    while (n < MAX_MSGS && pos < size && fuzz_next_part(data, size, &pos, &part, &len)) {
        char *s = owned[n] = fuzz_strndup(part, len);
        EmxChatMessage *m = &msgs[n++];
        *m = (EmxChatMessage){0};  // no tool calls
        char r = len ? s[0] : 'u';
        const char *body = len ? s + 1 : s;
        if (r == 's' || r == 'u' || r == 'a') {
            m->role = r == 's' ? "system" : r == 'u' ? "user" : "assistant";
            m->content = body;
        } else if (r == 'n') {
            m->role = NULL;
            m->content = body;
        } else {
            char *colon = strchr(s + 1, ':');
            m->role = s + 1;
            m->content = colon ? (*colon = 0, colon + 1) : NULL;
        }
    }
    char err[512];
    char *text = emx_chat_render(family, msgs, n, &opt, err, sizeof err);
    char *text2 = emx_chat_render(family, msgs, n, NULL, NULL, 0);
    if (text && family < 5 && emx_chat_template_adds_bos(family) && strncmp(text, "<|begin_of_text|>", 17) != 0) {
        fprintf(stderr, "fuzz_chat: family %u adds BOS but the text does not start with it\n", family);
        abort();
    }
    free(text);
    free(text2);
    const char *name = emx_chat_template_name(family);
    if (name && emx_chat_template_from_name(name) != (int)family) {
        fprintf(stderr, "fuzz_chat: name '%s' does not map back to family %u\n", name, family);
        abort();
    }
    for (int i = 0; i < n; i++) free(owned[i]);
    return 0;
}
