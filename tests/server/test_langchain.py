#!/usr/bin/env python3
"""One LangChain call, as an application writes it: langchain-openai's ChatOpenAI pointed at the
server, a plain invoke and with_structured_output(json_schema) with a pydantic model, the answer
validated by jsonschema against the model's schema (SmolLM2-135M-Instruct).

    python test_langchain.py SERVER MODELS_DIR

Prints 'N passed, N failed'; exit 1 when any check failed (tests/test_server.c).
"""
import functools
import sys
from typing import Literal

import jsonschema
import pydantic
from langchain_openai import ChatOpenAI

from harness import Checks, ModelServer

SERVER, MODELS = sys.argv[1], sys.argv[2]
check = Checks()
srv = functools.partial(ModelServer, SERVER, MODELS)("smollm2.q8")
llm = ChatOpenAI(base_url=srv.url + "/v1", api_key="none", model=srv.model, temperature=0.7, max_tokens=60, seed=3,
                 max_retries=0, timeout=120)


class Verdict(pydantic.BaseModel):
    answer: Literal["yes", "no"]
    confidence: float


def plain_invoke():
    r = llm.invoke("Say hello.")
    assert isinstance(r.content, str) and r.content.strip(), r


def structured_output():
    for question in ("Is water wet?", "Is the sun cold?"):
        v = llm.with_structured_output(Verdict, method="json_schema").invoke(question)
        assert isinstance(v, Verdict), v
        jsonschema.validate(v.model_dump(), Verdict.model_json_schema())


check("plain_invoke", plain_invoke)
check("structured_output", structured_output)
check("SIGTERM exits 0", lambda: None if srv.stop() == 0 else (_ for _ in ()).throw(AssertionError("exit")))
check.finish()
