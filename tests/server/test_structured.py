#!/usr/bin/env python3
"""Structured output through the official `openai` client: response_format json_schema (the
client's own parse() with a pydantic model), json_object, and llama-server's grammar field, on
SmolLM2-135M-Instruct; every answer validated by the PyPI `jsonschema` package against the schema
the client sent, under the default sampler, entropix (the MODEL:entropix alias) and several seeds.

    python test_structured.py SERVER MODELS_DIR

Prints 'N passed, N failed'; exit 1 when any check failed (tests/test_server.c).
"""
import functools
import json
import re
import sys
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic

from harness import Checks, ModelServer

SERVER, MODELS = sys.argv[1], sys.argv[2]
check = Checks()
Server = functools.partial(ModelServer, SERVER, MODELS)
srv = Server("smollm2.q8")
c = srv.client()
MSGS = [{"role": "user", "content": "Invent a person and describe them."}]


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    age: int
    city: Optional[str] = pydantic.Field(max_length=24)
    role: Literal["engineer", "teacher", "artist"]
    languages: List[Literal["en", "fr", "de"]] = pydantic.Field(max_length=3)


def parse_person_under_each_sampler():
    """The client's parse(): it sends Person's schema (strict), validates the answer itself; the
    schema it sent is then checked again by jsonschema, independently of pydantic."""
    schema = openai.lib._pydantic.to_strict_json_schema(Person)
    done = 0
    for model in (srv.model, srv.model + ":entropix"):
        for seed in (1, 2, 3):
            r = c.chat.completions.parse(model=model, messages=MSGS, response_format=Person, seed=seed, max_tokens=120,
                                         temperature=1.0)
            ch = r.choices[0]
            if ch.finish_reason != "stop":  # cut by max_tokens: a truncation, not an answer
                continue
            done += 1
            assert isinstance(ch.message.parsed, Person), ch.message
            jsonschema.validate(json.loads(ch.message.content), schema)
            assert r.model_extra["entropix"]["sampler"] == ("entropix" if ":" in model else "combined")
    assert done >= 4, f"only {done} of 6 answers finished within 120 tokens"


def json_schema_streamed():
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "confidence": {"type": "number"}},
              "required": ["answer", "confidence"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}}
    chunks = list(c.chat.completions.create(model=srv.model, messages=[{"role": "user", "content": "Is water wet?"}],
                                            response_format=fmt, seed=4, max_tokens=60, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].choices[0].finish_reason == "stop", chunks[-1]
    jsonschema.validate(json.loads(text), schema)


def json_object_is_an_object():
    for seed in (1, 2):
        r = c.chat.completions.create(model=srv.model, messages=MSGS, response_format={"type": "json_object"},
                                      seed=seed, max_tokens=150, temperature=0.7)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0].message.content


def grammar_field_on_completions():
    gbnf = 'root ::= "The answer is " ("yes" | "no") "."'
    r = c.completions.create(model=srv.model, prompt="Q: Is the sky blue?\nA:", max_tokens=20, seed=3,
                             extra_body={"grammar": gbnf})
    assert re.fullmatch(r"The answer is (yes|no)\.", r.choices[0].text), r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


def errors_name_the_field():
    cases = [(dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                 "type": "string", "pattern": "(?=a)"}}}), "response_format", "lookahead"),
             (dict(response_format={"type": "xml"}), "response_format", "not text, json_object or json_schema"),
             (dict(response_format={"type": "json_schema"}), "response_format", "json_schema.schema"),
             (dict(extra_body={"grammar": "root ::= nothing"}), "grammar", "grammar: 1:"),
             (dict(extra_body={"grammar": 'root ::= "a"', "entropix": {"sampler": "agents"}}), "grammar", "agents"),
             (dict(response_format={"type": "json_object"}, extra_body={"grammar": 'root ::= "a"'}), "grammar", "give one")]
    for kw, param, needle in cases:
        try:
            c.chat.completions.create(model=srv.model, messages=MSGS, max_tokens=2, **kw)
            raise AssertionError(f"{kw} accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == param and needle in e.body["message"], (kw, e.body)


for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == "__main__" and name not in ("check", "Server", "Person"):
        check(name, fn)
check("SIGTERM exits 0", lambda: None if srv.stop() == 0 else (_ for _ in ()).throw(AssertionError("exit")))
check.finish()
