// chat_template.c — each family's official Jinja chat template, rewritten as plain C that
// produces the same bytes for system/user/assistant conversations (see chat_template.h).
// The string operations the templates use (Python's str.strip(), split(), `in`) are mirrored
// exactly, because a single stray newline changes the tokens the model sees.
#include "tokenizer/chat_template.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/errmsg.h"

// ---------------------------------------------------------------------------------------------
// Growing output buffer. `failed` latches an allocation failure so callers check once at the end.

typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} OutBuf;

static void out_put(OutBuf *b, const char *s, size_t n) {
    if (b->failed || n == 0) return;
    if (n > SIZE_MAX / 4 - b->len) {  // keeps the doubling below from overflowing
        b->failed = 1;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

static void out_str(OutBuf *b, const char *s) { out_put(b, s, strlen(s)); }

// A byte range of a message's content; the template's string methods return such views.
typedef struct {
    const char *p;
    size_t n;
} Span;

static Span span_of(const char *s) { return (Span){s, strlen(s)}; }
static void out_span(OutBuf *b, Span s) { out_put(b, s.p, s.n); }


// ---------------------------------------------------------------------------------------------
// Python string semantics used by the templates.

// Offset of the first / last occurrence of pat in s, or -1.
static long span_find(Span s, const char *pat) {
    size_t m = strlen(pat);
    if (m > s.n) return -1;
    for (size_t i = 0; i + m <= s.n; i++)
        if (memcmp(s.p + i, pat, m) == 0) return (long)i;
    return -1;
}

static long span_rfind(Span s, const char *pat) {
    size_t m = strlen(pat);
    if (m > s.n) return -1;
    for (size_t i = s.n - m + 1; i-- > 0;)
        if (memcmp(s.p + i, pat, m) == 0) return (long)i;
    return -1;
}

static int span_starts(Span s, const char *pat) {
    size_t m = strlen(pat);
    return s.n >= m && memcmp(s.p, pat, m) == 0;
}

static int span_ends(Span s, const char *pat) {
    size_t m = strlen(pat);
    return s.n >= m && memcmp(s.p + s.n - m, pat, m) == 0;
}

// str.lstrip('\n') / str.rstrip('\n'): only newline characters, as Qwen3's template asks.
static Span lstrip_nl(Span s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}

static Span rstrip_nl(Span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

// Python's str.isspace() for one code point: the characters Jinja's `trim` filter
// (Python str.strip()) removes. Includes the C0 separators 0x1C..0x1F and U+0085, which C's
// isspace() does not know; excludes U+200B and U+FEFF, which are not whitespace in Python.
static int py_isspace(unsigned cp) {
    if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return 1;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return 1;
    if (cp >= 0x2000 && cp <= 0x200A) return 1;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the UTF-8 sequence at s[0..n) into *cp; returns its length, or 0 if it is not a
// valid sequence (such bytes are never whitespace, so stripping stops there).
static size_t utf8_decode(const unsigned char *s, size_t n, unsigned *cp) {
    if (n == 0) return 0;
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    unsigned v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

// Jinja's `trim` filter = Python str.strip() with no argument: Unicode whitespace both ends.
static Span py_strip(Span s) {
    const unsigned char *p = (const unsigned char *)s.p;
    unsigned cp;
    size_t len;
    while (s.n && (len = utf8_decode(p, s.n, &cp)) && py_isspace(cp)) p += len, s.n -= len;
    while (s.n) {
        size_t start = s.n - 1;  // back up over continuation bytes to the sequence's first byte
        while (start > 0 && s.n - start < 4 && (p[start] & 0xC0) == 0x80) start--;
        len = utf8_decode(p + start, s.n - start, &cp);
        if (len != s.n - start || !py_isspace(cp)) break;
        s.n = start;
    }
    s.p = (const char *)p;
    return s;
}

// ---------------------------------------------------------------------------------------------
// The families.

static int is_role(const EmxChatMessage *m, const char *role) { return strcmp(m->role, role) == 0; }

// <|im_start|>role\ncontent<|im_end|>\n — the ChatML turn every ChatML family uses.
static void chatml_turn(OutBuf *b, const char *role, Span content) {
    out_str(b, "<|im_start|>");
    out_str(b, role);
    out_str(b, "\n");
    out_span(b, content);
    out_str(b, "<|im_end|>\n");
}

static void render_chatml(OutBuf *b, const EmxChatMessage *msgs, int n, const EmxChatOptions *opt,
                          const char *default_system) {
    // Qwen2.5's template writes messages[0]'s system turn itself, or its default one: the same
    // bytes as SmolLM2's rule (its loop then skips the first system message).
    // SmolLM2: `loop.first and messages[0]['role'] != 'system'` inserts its default system turn.
    if (default_system && n > 0 && !is_role(&msgs[0], "system"))
        chatml_turn(b, "system", span_of(default_system));
    for (int i = 0; i < n; i++) chatml_turn(b, msgs[i].role, span_of(msgs[i].content));
    if (opt->add_generation_prompt) out_str(b, "<|im_start|>assistant\n");
}

// True for the user turns that Qwen3's template does not count as a query: tool results that a
// client passed in a user message wrapped in <tool_response>...</tool_response>.
static int qwen3_is_tool_response(Span c) {
    return span_starts(c, "<tool_response>") && span_ends(c, "</tool_response>");
}

// With tools, the first system turn carries the system message (if any) and the tool list.
static void qwen3_tools_block(OutBuf *b, const EmxChatMessage *msgs, const EmxChatOptions *opt) {
    out_str(b, "<|im_start|>system\n");
    if (is_role(&msgs[0], "system")) {
        out_str(b, msgs[0].content);
        out_str(b, "\n\n");
    }
    out_str(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (int t = 0; t < opt->n_tools; t++) {
        out_str(b, "\n");
        out_str(b, opt->tools[t]);
    }
    out_str(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
               "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

static int render_qwen3(OutBuf *b, const EmxChatMessage *msgs, int n, const EmxChatOptions *opt,
                        char *err, size_t errlen) {
    if (n == 0) {  // the template reads messages[0].role and raises on an empty list
        emx_seterr(err, errlen, "qwen3 chat template: the conversation has no messages");
        return -1;
    }
    if (opt->n_tools > 0) {
        qwen3_tools_block(b, msgs, opt);
    } else if (is_role(&msgs[0], "system")) {
        chatml_turn(b, "system", span_of(msgs[0].content));
    }

    // The last real user query: reasoning is kept only for assistant turns after it.
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        if (is_role(&msgs[i], "user") && !qwen3_is_tool_response(span_of(msgs[i].content))) {
            last_query = i;
            break;
        }
    }

    for (int i = 0; i < n; i++) {
        const EmxChatMessage *m = &msgs[i];
        Span content = span_of(m->content);
        if (is_role(m, "user") || (is_role(m, "system") && i > 0)) {
            chatml_turn(b, m->role, content);
            continue;
        }
        if (is_role(m, "tool")) {  // consecutive tool results share one user turn
            if (i == 0 || !is_role(&msgs[i - 1], "tool")) out_str(b, "<|im_start|>user");
            out_str(b, "\n<tool_response>\n");
            out_span(b, content);
            out_str(b, "\n</tool_response>");
            if (i == n - 1 || !is_role(&msgs[i + 1], "tool")) out_str(b, "<|im_end|>\n");
            continue;
        }
        if (!is_role(m, "assistant")) continue;  // the first system turn, written above
        // content.split('</think>')[-1].lstrip('\n') is the answer;
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') the reasoning.
        Span reasoning = {m->content, 0};
        long close_last = span_rfind(content, "</think>");
        if (close_last >= 0) {
            Span whole = content;
            content = lstrip_nl((Span){whole.p + close_last + 8, whole.n - (size_t)close_last - 8});
            Span before = rstrip_nl((Span){whole.p, (size_t)span_find(whole, "</think>")});
            long open_last = span_rfind(before, "<think>");
            if (open_last >= 0) before = (Span){before.p + open_last + 7, before.n - (size_t)open_last - 7};
            reasoning = lstrip_nl(before);
        }
        out_str(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
            out_str(b, "<think>\n");
            out_span(b, rstrip_nl(lstrip_nl(reasoning)));  // reasoning_content.strip('\n')
            out_str(b, "\n</think>\n\n");
            out_span(b, lstrip_nl(content));
        } else {
            out_span(b, content);
        }
        for (int k = 0; k < m->n_tool_calls; k++) {  // after the content, each on its own line
            if (k > 0 || content.n > 0) out_str(b, "\n");
            out_str(b, "<tool_call>\n{\"name\": \"");
            out_str(b, m->tool_calls[k].name);
            out_str(b, "\", \"arguments\": ");
            out_str(b, m->tool_calls[k].arguments);
            out_str(b, "}\n</tool_call>");
        }
        out_str(b, "<|im_end|>\n");
    }
    if (opt->add_generation_prompt) {
        out_str(b, "<|im_start|>assistant\n");
        if (!opt->enable_thinking) out_str(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

// A string as Python's json.dumps(s, ensure_ascii=False) writes it (the templates' tojson).
static void out_json_string(OutBuf *b, const char *s) {
    out_str(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *map = *p == '"' ? "\\\"" : *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '\r' ? "\\r"
                        : *p == '\t' ? "\\t" : *p == '\b' ? "\\b" : *p == '\f' ? "\\f" : NULL;
        if (map) {
            out_str(b, map);
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            out_str(b, esc);
        } else {
            out_put(b, (const char *)p, 1);
        }
    }
    out_str(b, "\"");
}

// Llama 3.2's tools in the first user turn (its default tools_in_user_message).
static int llama3_tools_turn(OutBuf *b, const EmxChatMessage *m, const EmxChatOptions *opt, char *err, size_t errlen) {
    if (!m) {
        emx_seterr(err, errlen, "llama3 chat template: tools need a first user message to go in");
        return -1;
    }
    out_str(b, "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a "
               "JSON for a function call with its proper arguments that best answers the given prompt.\n\n"
               "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
               "its value}.Do not use variables.\n\n");
    for (int t = 0; t < opt->n_tools; t++) {
        out_str(b, opt->tools[t]);
        out_str(b, "\n\n");
    }
    out_span(b, py_strip(span_of(m->content)));
    out_str(b, "<|eot_id|>");
    return 0;
}

// Llama 3.1/3.2 Instruct. The system block is always there, carrying the template's knowledge
// cutoff and its default date_string; every content is `trim`med. With tools, 3.2's form: the
// list in the first user turn, a call as {"name": N, "parameters": A}, results as ipython turns.
static int render_llama3(OutBuf *b, const EmxChatMessage *msgs, int n, const EmxChatOptions *opt,
                         char *err, size_t errlen) {
    if (n == 0) {  // the template reads messages[0]['role'] and raises on an empty list
        emx_seterr(err, errlen, "llama3 chat template: the conversation has no messages");
        return -1;
    }
    int first = 0;
    Span system = {"", 0};
    if (is_role(&msgs[0], "system")) {
        system = py_strip(span_of(msgs[0].content));
        first = 1;
    }
    out_str(b, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
    if (opt->n_tools > 0) out_str(b, "Environment: ipython\n");
    out_str(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    out_span(b, system);
    out_str(b, "<|eot_id|>");
    if (opt->n_tools > 0 && llama3_tools_turn(b, first < n ? &msgs[first++] : NULL, opt, err, errlen) != 0) return -1;
    for (int i = first; i < n; i++) {
        const EmxChatMessage *m = &msgs[i];
        if (m->n_tool_calls > 0) {
            if (m->n_tool_calls != 1) {
                emx_seterr(err, errlen, "llama3 chat template: message %d has %d tool calls; the model takes one at a time",
                           i, m->n_tool_calls);
                return -1;
            }
            out_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            out_str(b, m->tool_calls[0].name);
            out_str(b, "\", \"parameters\": ");
            out_str(b, m->tool_calls[0].arguments);
            out_str(b, "}<|eot_id|>");
        } else if (is_role(m, "tool")) {  // a string is iterable to Jinja: tojson quotes it
            out_str(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            out_json_string(b, m->content);
            out_str(b, "<|eot_id|>");
        } else {
            out_str(b, "<|start_header_id|>");
            out_str(b, m->role);
            out_str(b, "<|end_header_id|>\n\n");
            out_span(b, py_strip(span_of(m->content)));
            out_str(b, "<|eot_id|>");
        }
    }
    if (opt->add_generation_prompt) out_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

// Gemma 3: "<bos>", a leading system message's content (untrimmed) + "\n\n" opens the first
// turn's text, roles must alternate user / other from the first non-system message (the template
// raises otherwise: a system message at an odd place passes as a turn of role "system"),
// assistant is "model", every content is trimmed (Python str.strip()).
static int render_gemma3(OutBuf *b, const EmxChatMessage *msgs, int n, const EmxChatOptions *opt,
                         char *err, size_t errlen) {
    if (n == 0) {  // the template reads messages[0]['role'] and raises on an empty list
        emx_seterr(err, errlen, "gemma3 chat template: the conversation has no messages");
        return -1;
    }
    int first = is_role(&msgs[0], "system") ? 1 : 0;
    for (int i = first; i < n; i++)
        if (is_role(&msgs[i], "user") != ((i - first) % 2 == 0)) {
            emx_seterr(err, errlen, "gemma3 chat template: message %d (%s) breaks the user/assistant alternation the template requires",
                       i, msgs[i].role);
            return -1;
        }
    out_str(b, "<bos>");
    for (int i = first; i < n; i++) {
        out_str(b, "<start_of_turn>");
        out_str(b, is_role(&msgs[i], "assistant") ? "model" : msgs[i].role);
        out_str(b, "\n");
        if (i == first && first) {
            out_str(b, msgs[0].content);
            out_str(b, "\n\n");
        }
        out_span(b, py_strip(span_of(msgs[i].content)));
        out_str(b, "<end_of_turn>\n");
    }
    if (opt->add_generation_prompt) out_str(b, "<start_of_turn>model\n");
    return 0;
}

static int tools_family(uint32_t family) { return family == EMX_CHAT_QWEN3 || family == EMX_CHAT_LLAMA3; }

static const char SMOLLM2_DEFAULT_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char QWEN25_DEFAULT_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

char *emx_chat_render(uint32_t family, const EmxChatMessage *msgs, int n_msgs,
                      const EmxChatOptions *opt, char *err, size_t errlen) {
    const EmxChatOptions defaults = EMX_CHAT_OPTIONS_DEFAULT;
    if (!opt) opt = &defaults;
    if (!emx_chat_template_name(family)) {
        emx_seterr(err, errlen, "chat template: unknown family %u", family);
        return NULL;
    }
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) {
        emx_seterr(err, errlen, "chat template: invalid message list (n_msgs %d)", n_msgs);
        return NULL;
    }
    // The three roles every template treats alike, and Qwen3's tool results: the official
    // templates would drop (Qwen3) or specially format (Llama 3 "ipython"/"tool") anything else.
    for (int i = 0; i < n_msgs; i++) {
        const char *role = msgs[i].role;
        if (!role || !msgs[i].content) {
            emx_seterr(err, errlen, "chat template: message %d has no %s", i, role ? "content" : "role");
            return NULL;
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            (strcmp(role, "tool") || !tools_family(family))) {
            emx_seterr(err, errlen, "chat template: message %d has unknown role \"%.40s\" (expected system, user or assistant%s)",
                    i, role, tools_family(family) ? " or tool" : "");
            return NULL;
        }
        if (msgs[i].n_tool_calls > 0 && (!tools_family(family) || strcmp(role, "assistant"))) {
            emx_seterr(err, errlen, "chat template: message %d has tool calls, which only qwen3's and llama3's assistant turns carry", i);
            return NULL;
        }
        for (int k = 0; k < msgs[i].n_tool_calls; k++)
            if (!msgs[i].tool_calls || !msgs[i].tool_calls[k].name || !msgs[i].tool_calls[k].arguments) {
                emx_seterr(err, errlen, "chat template: message %d has a tool call without name or arguments", i);
                return NULL;
            }
    }
    if (opt->n_tools > 0 && (!tools_family(family) || !opt->tools)) {
        emx_seterr(err, errlen, "chat template: %s has no tool calling (qwen3's and llama3's have)", emx_chat_template_name(family));
        return NULL;
    }
    for (int t = 0; t < opt->n_tools; t++)
        if (!opt->tools[t]) {
            emx_seterr(err, errlen, "chat template: tool %d is NULL", t);
            return NULL;
        }

    OutBuf b = {0};
    int rc = 0;
    switch (family) {
    case EMX_CHAT_NONE:  // base model: the text as given
        for (int i = 0; i < n_msgs; i++) out_str(&b, msgs[i].content);
        break;
    case EMX_CHAT_QWEN3: rc = render_qwen3(&b, msgs, n_msgs, opt, err, errlen); break;
    case EMX_CHAT_LLAMA3: rc = render_llama3(&b, msgs, n_msgs, opt, err, errlen); break;
    case EMX_CHAT_SMOLLM2: render_chatml(&b, msgs, n_msgs, opt, SMOLLM2_DEFAULT_SYSTEM); break;
    case EMX_CHAT_CHATML: render_chatml(&b, msgs, n_msgs, opt, NULL); break;
    case EMX_CHAT_QWEN25:
        if (n_msgs == 0) {  // the template reads messages[0]['role'] and raises on an empty list
            emx_seterr(err, errlen, "qwen2.5 chat template: the conversation has no messages");
            rc = -1;
        } else {
            render_chatml(&b, msgs, n_msgs, opt, QWEN25_DEFAULT_SYSTEM);
        }
        break;
    case EMX_CHAT_GEMMA3: rc = render_gemma3(&b, msgs, n_msgs, opt, err, errlen); break;
    }
    if (rc == 0 && !b.data) {  // nothing written yet: an empty result still needs its buffer
        b.data = calloc(1, 1);
        b.failed = !b.data;
    }
    if (rc == 0 && b.failed) {
        emx_seterr(err, errlen, "chat template: out of memory");
        rc = -1;
    }
    if (rc != 0) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

// ---------------------------------------------------------------------------------------------
// Detection and names.

static int has(const char *t, size_t len, const char *pat) { return span_find((Span){t, len}, pat) >= 0; }

// A ChatML template that writes a system turn with literal text of its own (Qwen2.5's "You are
// Qwen..."): "<|im_start|>system" then a newline, written as the two characters \n or as a real
// one, then text rather than the end of the string literal or an expression.
static int has_builtin_system_text(const char *t, size_t len) {
    static const char tag[] = "<|im_start|>system";
    Span s = {t, len};
    long at;
    while ((at = span_find(s, tag)) >= 0) {
        Span rest = {s.p + at + sizeof tag - 1, s.n - (size_t)at - (sizeof tag - 1)};
        size_t skip = span_starts(rest, "\\n") ? 2 : span_starts(rest, "\n") ? 1 : 0;
        if (skip && rest.n > skip && !strchr("'\"{", rest.p[skip])) return 1;
        s = rest;
    }
    return 0;
}

// Detection looks for fragments that decide how each official template renders a
// system/user/assistant chat, so that look-alikes which render differently (Qwen3.5 and QwQ open
// a <think> block in every generation prompt; functionary and firefunction put their own text
// in the Llama 3 system block) stay unrecognised rather than get a wrong prompt.
uint32_t emx_chat_template_detect(const char *t, size_t len) {
    if (!t || len == 0) return EMX_CHAT_NONE;
    int chatml = has(t, len, "<|im_start|>") && has(t, len, "<|im_end|>");
    // Qwen3 (hybrid thinking): reasoning kept after the last query only, stripped of newlines,
    // and the empty think block for enable_thinking=false.
    if (chatml && has(t, len, "ns.last_query_index") && has(t, len, "reasoning_content.strip('\\n')") &&
        has(t, len, "enable_thinking is defined and enable_thinking is false") &&
        !has(t, len, "<think>\\n' }}"))
        return EMX_CHAT_QWEN3;
    int llama_headers = has(t, len, "<|start_header_id|>") && has(t, len, "<|end_header_id|>") &&
                        has(t, len, "<|eot_id|>");
    // Llama 3.1/3.2/3.3 Instruct: the knowledge-cutoff system block with its default date.
    if (llama_headers && has(t, len, "Cutting Knowledge Date: December 2023") && has(t, len, "26 Jul 2024"))
        return EMX_CHAT_LLAMA3;
    // Llama 3.0-style template (headers, trimmed contents, nothing else). It renders no date
    // block; we map it to the nearest family, which renders the 3.1/3.2 form (see header).
    if (llama_headers && has(t, len, "| trim") && !has(t, len, "Knowledge") && !has(t, len, "tool") &&
        !has(t, len, "function"))
        return EMX_CHAT_LLAMA3;
    // Qwen2.5's default system prompt (QwQ's and Qwen3's templates have reasoning tags).
    if (chatml && has(t, len, QWEN25_DEFAULT_SYSTEM) && !has(t, len, "think")) return EMX_CHAT_QWEN25;
    // Gemma 3: the system message folded into the first user turn, alternation enforced, "model"
    // for assistant (Gemma 2's template raises on a system message instead).
    if (has(t, len, "<start_of_turn>") && has(t, len, "<end_of_turn>") && has(t, len, "first_user_prefix") &&
        has(t, len, "loop.index0 % 2 == 0") && has(t, len, "| trim") && has(t, len, "bos_token"))
        return EMX_CHAT_GEMMA3;
    // SmolLM2's default system prompt (SmolLM3's template reuses the sentence, with reasoning
    // modes and metadata around it).
    if (chatml && has(t, len, SMOLLM2_DEFAULT_SYSTEM) && !has(t, len, "think")) return EMX_CHAT_SMOLLM2;
    // Plain ChatML only: a template that adds a BOS, reasoning tags or a default system prompt
    // of its own would render differently, so it stays unrecognised.
    if (chatml && !has(t, len, "bos_token") && !has(t, len, "think>") && !has_builtin_system_text(t, len))
        return EMX_CHAT_CHATML;
    return EMX_CHAT_NONE;
}

static const char *const FAMILY_NAMES[] = {
    [EMX_CHAT_NONE] = "none",     [EMX_CHAT_QWEN3] = "qwen3",   [EMX_CHAT_LLAMA3] = "llama3",
    [EMX_CHAT_SMOLLM2] = "smollm2", [EMX_CHAT_CHATML] = "chatml", [EMX_CHAT_QWEN25] = "qwen2.5",
    [EMX_CHAT_GEMMA3] = "gemma3",
};

const char *emx_chat_template_name(uint32_t family) {
    return family < sizeof FAMILY_NAMES / sizeof FAMILY_NAMES[0] ? FAMILY_NAMES[family] : NULL;
}

int emx_chat_template_from_name(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < sizeof FAMILY_NAMES / sizeof FAMILY_NAMES[0]; i++)
        if (strcmp(name, FAMILY_NAMES[i]) == 0) return (int)i;
    return -1;
}

int emx_chat_template_adds_bos(uint32_t family) { return family == EMX_CHAT_LLAMA3 || family == EMX_CHAT_GEMMA3; }
