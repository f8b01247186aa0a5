// chat_template.h — chat conversations rendered to prompt text, byte for byte as each model
// family's official Jinja chat template renders them (no images; tools for Qwen3 and Llama 3). The expected
// strings in tests/data/chat_templates/ come from the official templates run through jinja2
// the way transformers' apply_chat_template runs them (tools/gen_chat_references.py).
//
// Families (enum emx_chat_template in model_format.h):
//   EMX_CHAT_NONE     base model: the contents concatenated in order, nothing added (roles and
//                     add_generation_prompt are ignored).
//   EMX_CHAT_QWEN3    Qwen3's (hybrid thinking) template: ChatML; assistant turns before the
//                     last real user query lose their <think>...</think> reasoning, later ones
//                     keep it normalised to "<think>\nR\n</think>\n\n"; enable_thinking=0
//                     appends an empty "<think>\n\n</think>\n\n" after the generation prompt.
//                     With tools: the "# Tools" system block listing them in <tools></tools>,
//                     each assistant call as <tool_call>\n{"name": N, "arguments": A}\n</tool_call>
//                     and consecutive tool messages in one user turn, each in <tool_response>.
//   EMX_CHAT_LLAMA3   the official Llama 3.1/3.2 Instruct template without tools: exactly what
//                     Llama-3.2-1B/3B-Instruct's template renders with date_string
//                     "26 Jul 2024" (its fallback when no date is given; transformers would
//                     otherwise insert today's date), which is also what the 3.1 template
//                     renders by default. "<|begin_of_text|>", then always a system block
//                     "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" +
//                     the system message, then one header block per message; every content is
//                     trimmed as Jinja's `trim` does (Python str.strip(): Unicode whitespace).
//                     With tools: Llama 3.2's form (tools_in_user_message, its default):
//                     "Environment: ipython\n" opens the system block, the first message after
//                     the system one becomes a user turn listing the tools (each tojson(indent=4))
//                     before its trimmed content (none there is an error, as the template raises),
//                     an assistant call is {"name": N, "parameters": A} (one per message; more is
//                     an error, as the template raises) and a tool message an ipython turn holding
//                     its content as a JSON string (tojson: a string is iterable to Jinja).
//   EMX_CHAT_SMOLLM2  SmolLM2-Instruct's template: ChatML, with the default system prompt
//                     "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
//                     when the first message is not a system message.
//   EMX_CHAT_CHATML   plain ChatML: <|im_start|>role\ncontent<|im_end|>\n per message.
//   EMX_CHAT_QWEN25   Qwen2.5-Instruct's template without tools: ChatML, with the default system
//                     prompt "You are Qwen, created by Alibaba Cloud. You are a helpful
//                     assistant." when the first message is not a system message; an empty
//                     conversation is an error (the template raises).
//   EMX_CHAT_GEMMA3   Gemma 3's template: "<bos>", then "<start_of_turn>user\n" + content +
//                     "<end_of_turn>\n" per message, "model" for assistant, contents trimmed;
//                     a first system message is not a turn: its content + "\n\n" opens the
//                     first turn's text; after it, user and other roles must alternate,
//                     starting with user (the template raises otherwise, and so do we).
// Contents go in verbatim: text that spells special tokens ("<|im_end|>") is not escaped, as in
// the official templates; whether it becomes a special token is the tokenizer's call.
//
// BOS: the rendered text contains the BOS token text exactly where the official template puts
// it — Llama 3 starts with "<|begin_of_text|>", Gemma 3 with "<bos>"; the ChatML families have none. A caller that
// renders a chat tokenizes the result with special tokens parsed and must NOT add a BOS of its
// own when emx_chat_template_adds_bos() says the text carries one (the template's BOS wins, as
// in llama.cpp, so there is never a double BOS). For the other families the tokenizer's own
// add-BOS setting applies (Qwen3's and SmolLM2's say no).
//
// Detection recognises the official templates by fragments that decide how they render
// (checked on the 70 templates of llama.cpp's collection in llama-cpp-python 0.3.36: only
// Qwen2.5's, Qwen3's and Llama 3.1/3.2/3.3's match a family; Gemma 3's is not in it); look-alikes that render differently (Qwen3.5, QwQ, SmolLM3,
// Gemma 2 and 4, functionary, ...) give EMX_CHAT_NONE. One deliberate approximation: a Llama-3.0-style
// template (header blocks, no date block; e.g. ../shared's llama3 tokenizer_config.json) is
// detected as EMX_CHAT_LLAMA3 and so gets the 3.1/3.2 system block.
#ifndef ENTROPIX_CHAT_TEMPLATE_H
#define ENTROPIX_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/model_format.h"   // enum emx_chat_template

// A function call in an assistant turn: the name and the arguments as JSON text, written
// verbatim. Qwen3's template writes an OpenAI-style string of arguments as it is; Llama 3's
// writes `arguments | tojson`, meant for the arguments as an object: the caller passes that
// object as tojson writes it.
typedef struct {
    const char *name;
    const char *arguments;
} EmxChatToolCall;

typedef struct {
    const char *role;      // "system", "user", "assistant"; "tool" (qwen3, llama3): a tool's result
    const char *content;   // UTF-8, NUL-terminated; NULL is an error
    const EmxChatToolCall *tool_calls;   // assistant turns (qwen3, llama3): n_tool_calls calls
    int n_tool_calls;
} EmxChatMessage;

typedef struct {
    int add_generation_prompt;   // end with the assistant header so the model answers
    int enable_thinking;         // Qwen3: 1 = thinking on (default), 0 = as the official
                                 // template renders enable_thinking=False
    const char *const *tools;    // qwen3, llama3: n_tools tool objects, each as the family's
    int n_tools;                 // template writes it (Python json.dumps, ensure_ascii=False):
                                 // qwen3 `tojson`, llama3 `tojson(indent=4)`
} EmxChatOptions;

// Defaults used when opt is NULL: add_generation_prompt = 1, enable_thinking = 1.
#define EMX_CHAT_OPTIONS_DEFAULT ((EmxChatOptions){.add_generation_prompt = 1, .enable_thinking = 1})

// Renders the conversation as the model family's official template does. Returns a malloc'd
// NUL-terminated string (caller frees), or NULL with a one-line reason in err (unknown family,
// a role other than system/user/assistant, NULL role or content, an empty conversation for
// qwen3/llama3 — whose templates raise on one —, out of memory). err may be NULL.
char *emx_chat_render(uint32_t family, const EmxChatMessage *msgs, int n_msgs,
                      const EmxChatOptions *opt, char *err, size_t errlen);

// Detects the family from a Jinja chat template text (tokenizer_config.json "chat_template"
// or GGUF tokenizer.chat_template); EMX_CHAT_NONE if there is none or it is unrecognised.
uint32_t emx_chat_template_detect(const char *jinja_template, size_t len);

// "none", "qwen3", "llama3", "smollm2", "chatml", "qwen2.5", "gemma3"; NULL outside the enum.
const char *emx_chat_template_name(uint32_t family);

// Inverse of emx_chat_template_name; -1 if unknown.
int emx_chat_template_from_name(const char *name);

// 1 if the rendered text of this family starts with the BOS token text (so the tokenizer must
// not add another), 0 otherwise.
int emx_chat_template_adds_bos(uint32_t family);

#endif
