#!/usr/bin/env python3
"""Tool calling through the official `openai` client on qwen3-tiny.f32 (random weights, Qwen3's
chat template): the client's tool-calling loop with tool_choice forcing get_weather (the forced
call's grammar makes even random weights write a call that parses), the assistant message and
the tool's result sent back for a second answer; the same streamed; "required" with two tools;
every call's arguments validated by the PyPI `jsonschema` package against the tool's
parameters; the request errors as 400s naming the field; a model whose template has no tool
calling refusing tools; the same loop on llama3-tiny.f32 in Llama 3's own form.

    python test_tools.py SERVER MODELS_DIR

Prints 'N passed, N failed'; exit 1 when any check failed (tests/test_server.c).
"""
import functools
import json
import sys

import jsonschema
import openai

from harness import Checks, ModelServer

SERVER, MODELS = sys.argv[1], sys.argv[2]
check = Checks()
Server = functools.partial(ModelServer, SERVER, MODELS)
srv = Server("qwen3-tiny.f32")
c = srv.client()

WEATHER_PARAMS = {"type": "object",
                  "properties": {"city": {"type": "string", "maxLength": 12},
                                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                  "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": WEATHER_PARAMS, "strict": True}}
TIME_PARAMS = {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
               "required": ["tz"], "additionalProperties": False}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMS}}
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
FORCE = {"type": "function", "function": {"name": "get_weather"}}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_call(call, name=None):
    assert call.type == "function" and call.id.startswith("call_"), call
    assert name is None or call.function.name == name, call
    jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])


def second_turn(msgs, message, stream=False):
    """The client's loop: the assistant's calls and each tool's result, then the answer."""
    msgs = msgs + [message] + [{"role": "tool", "tool_call_id": t["id"], "content": json.dumps({"temp": 21})}
                               for t in message["tool_calls"]]
    r = c.chat.completions.create(model=srv.model, messages=msgs, tools=[WEATHER], max_tokens=8, seed=2,
                                  stream=stream)
    if stream:
        chunks = list(r)
        assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls"), chunks[-1]
    else:
        assert r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r.choices[0]


def forced_call_and_answer():
    for seed in (1, 2, 3):
        r = c.chat.completions.create(model=srv.model, messages=MSGS, tools=[WEATHER], tool_choice=FORCE,
                                      max_tokens=200, seed=seed)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert ch.message.content is None and len(ch.message.tool_calls) == 1, ch.message
        check_call(ch.message.tool_calls[0], "get_weather")
        second_turn(MSGS, ch.message.model_dump(exclude_none=True))


def forced_call_streamed():
    chunks = list(c.chat.completions.create(model=srv.model, messages=MSGS, tools=[WEATHER], tool_choice=FORCE,
                                            max_tokens=200, seed=5, stream=True))
    calls = {}
    for ch in chunks:  # accumulated as the client's own stream helpers do
        for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            t = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            t["id"] = d.id or t["id"]
            t["name"] += d.function.name or ""
            t["arguments"] += d.function.arguments or ""
    assert chunks[-1].choices[0].finish_reason == "tool_calls", chunks[-1]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_"), calls
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER_PARAMS)
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]}
    second_turn(MSGS, message, stream=True)


def stream_helper_accumulates():
    """The client's own stream() helper puts the streamed call together."""
    with c.chat.completions.stream(model=srv.model, messages=MSGS, tools=[WEATHER], tool_choice=FORCE,
                                   max_tokens=200, seed=6) as s:
        final = s.get_final_completion()
    check_call(final.choices[0].message.tool_calls[0], "get_weather")


def forced_call_with_defs():
    """A parameters schema with $defs: its references resolve under the forced call's grammar."""
    params = {"type": "object", "properties": {"where": {"$ref": "#/$defs/place"}}, "required": ["where"],
              "additionalProperties": False,
              "$defs": {"place": {"type": "string", "enum": ["home", "work"]}}}
    tool = {"type": "function", "function": {"name": "go", "parameters": params}}
    r = c.chat.completions.create(model=srv.model, messages=MSGS, tools=[tool], tool_choice="required", max_tokens=100,
                                  seed=1)
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    jsonschema.validate(json.loads(r.choices[0].message.tool_calls[0].function.arguments), params)


def required_picks_one_of_the_tools():
    for seed in (1, 2):
        r = c.chat.completions.create(model=srv.model, messages=MSGS, tools=[WEATHER, TIME], tool_choice="required",
                                      max_tokens=200, seed=seed, parallel_tool_calls=False)
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
        check_call(r.choices[0].message.tool_calls[0])


def auto_and_none_answer_as_text():
    """Random weights under auto write no call block: the text comes back as content."""
    for choice in ("auto", "none"):
        r = c.chat.completions.create(model=srv.model, messages=MSGS, tools=[WEATHER], tool_choice=choice,
                                      max_tokens=6, seed=1)
        ch = r.choices[0]
        assert ch.finish_reason in ("stop", "length") and ch.message.tool_calls is None, ch


def errors_name_the_field():
    bad_history = [{"role": "user", "content": "x"}, {"role": "tool", "content": "42"}]
    cases = [(dict(tools=[{"type": "function"}]), "tools", "tools[0]"),
             (dict(tools=[{"type": "retrieval", "function": {"name": "f"}}]), "tools", "tools[0]"),
             (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools", "function.name"),
             (dict(tools=[WEATHER, WEATHER]), "tools", "twice"),
             (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_time"}}),
              "tool_choice", "get_time"),
             (dict(tools=[WEATHER], tool_choice="sometimes"), "tool_choice", "sometimes"),
             (dict(tool_choice="required"), "tool_choice", "no tools"),
             (dict(messages=bad_history), "messages", "tool_call_id"),
             (dict(messages=[{"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                              "function": {"name": "f", "arguments": "not json"}}]}]), "messages", "arguments"),
             (dict(extra_body={"functions": [{"name": "f"}]}), "functions", "legacy"),
             (dict(tools=[WEATHER], tool_choice=FORCE, response_format={"type": "json_object"}), "tool_choice",
              "give one"),
             (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
                 "x": {"type": "string", "pattern": "a(?!b)"}}}}}], tool_choice="required"), "tools", "lookahead"),
             (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
                 "x": {"$ref": "#"}}}}}], tool_choice="required"), "tools", "refers to itself")]
    for kw, param, needle in cases:
        kw.setdefault("messages", MSGS)
        try:
            c.chat.completions.create(model=srv.model, max_tokens=2, **kw)
            raise AssertionError(f"{kw} accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == param and needle in e.body["message"], (kw, e.body)


def llama3_forced_call_and_answer():
    """Llama 3's form: the call is the answer's JSON {"name", "parameters"}; results as ipython turns."""
    with Server("llama3-tiny.f32") as other:
        lc = other.client()
        for stream in (False, True):
            r = lc.chat.completions.create(model=other.model, messages=MSGS, tools=[WEATHER], tool_choice=FORCE,
                                           max_tokens=200, seed=3, stream=stream)
            if stream:
                chunks = list(r)
                assert chunks[-1].choices[0].finish_reason == "tool_calls", chunks[-1]
                call = [d for ch in chunks if ch.choices for d in (ch.choices[0].delta.tool_calls or [])][0]
            else:
                assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
                call = r.choices[0].message.tool_calls[0]
            check_call(call, "get_weather")
            msgs = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": "21 degrees"}]
            r2 = lc.chat.completions.create(model=other.model, messages=msgs, tools=[WEATHER], max_tokens=4, seed=1)
            assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls"), r2.choices[0]
        two = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}} for i in (1, 2)]}
        try:  # the template takes one call a message
            lc.chat.completions.create(model=other.model, messages=MSGS + [two], tools=[WEATHER], max_tokens=2)
            raise AssertionError("accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == "messages" and "one at a time" in e.body["message"], e.body


def template_without_tools_refuses():
    with Server("stories260K.f32") as other:
        try:
            other.client().chat.completions.create(model=other.model, messages=MSGS, tools=[WEATHER], max_tokens=2)
            raise AssertionError("accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == "tools" and "no tool calling" in e.body["message"], e.body


for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == "__main__" and name not in ("check", "Server", "check_call", "second_turn"):
        check(name, fn)
check("SIGTERM exits 0", lambda: None if srv.stop() == 0 else (_ for _ in ()).throw(AssertionError("exit")))
check.finish()
