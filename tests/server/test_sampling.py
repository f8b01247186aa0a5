#!/usr/bin/env python3
"""The request's sampling means what an OpenAI client means, through the official `openai` client.

    python test_sampling.py SERVER RUN MODELS_DIR

A request that names no sampler runs `combined` with its temperature, top_p, top_k, min_p and
penalties (the text equals ./run's with those flags); the model's alias MODEL:entropix runs the
entropix sampler; every response says which sampler ran; the logit rules' errors; the model
endpoints. Prints 'N passed, N failed'; exit 1 when any check failed (tests/test_server.c).
"""
import functools
import json
import subprocess
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

from harness import CAP_S, Checks, ModelServer

SERVER, RUN, MODELS = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks()
Server = functools.partial(ModelServer, SERVER, MODELS)
PROMPT = "Once upon a time"


def run_steps(model, *args):
    """./run's --metrics lines (one dict per token)."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        subprocess.run([RUN, f"{MODELS}/{model}.bin", "-t", "1", "-p", PROMPT, "--metrics", f.name, *args],
                       capture_output=True, check=True)
        return [json.loads(line) for line in open(f.name)]


def run_text(model, *args):
    out = subprocess.run([RUN, f"{MODELS}/{model}.bin", "-t", "1", "-p", PROMPT, *args], capture_output=True, check=True)
    return out.stdout.decode()


def raw_text(url, body=None, method="POST"):
    """(status, the body's text) of a request sent by hand."""
    req = urllib.request.Request(url, data=body and json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def raw(url, body=None, method="POST"):
    status, text = raw_text(url, body, method)
    return status, json.loads(text)


srv = Server("stories260K.f32")
c = srv.client()


def complete(**kw):
    return c.completions.create(model=kw.pop("model", srv.model), prompt=PROMPT, max_tokens=kw.pop("max_tokens", 24), **kw)


def default_is_combined_with_the_request_temperature():
    got = complete(seed=5, temperature=0.3, extra_body={"entropix": {"metrics": True}})
    x = got.model_extra["entropix"]
    assert x["sampler"] == "combined" and x["seed"] == 5, x
    temps = {t["temperature"] for t in got.choices[0].model_extra["entropix"]["tokens"]}
    assert temps == {0.3} or all(abs(t - 0.3) < 1e-6 for t in temps), temps  # every token drawn at 0.3
    want = run_text(srv.model, "-s", "5", "-n", "24", "--sampler", "combined", "--temp", "0.3")
    assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)


def top_level_top_k_and_min_p_are_honoured():
    got = complete(seed=9, temperature=1.5, extra_body={"top_k": 3, "min_p": 0.2})
    want = run_text(srv.model, "-s", "9", "-n", "24", "--sampler", "combined", "--temp", "1.5", "--top-k", "3",
                    "--min-p", "0.2")
    assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)


def the_response_says_which_sampler_ran():
    assert complete(max_tokens=2, temperature=0).model_extra["entropix"]["sampler"] == "greedy"
    assert complete(max_tokens=2).model_extra["entropix"]["sampler"] == "combined"
    chunks = list(complete(max_tokens=2, stream=True))
    assert chunks[-1].model_extra["entropix"]["sampler"] == "combined", chunks[-1]


def the_alias_runs_entropix():
    got = complete(model=srv.model + ":entropix", seed=7)
    assert got.model_extra["entropix"]["sampler"] == "entropix", got.model_extra
    assert "cases" in got.model_extra["entropix"]
    want = run_text(srv.model, "-s", "7", "-n", "24")  # ./run's default: entropix
    assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
    try:
        complete(model=srv.model + ":entropix", max_tokens=2, extra_body={"entropix": {"sampler": "greedy"}})
        raise AssertionError("the alias and another sampler accepted together")
    except openai.BadRequestError as e:
        assert e.body["param"] == "model" and "entropix sampler" in e.body["message"], e.body


def penalties_and_logit_bias_as_run():
    extra = {"repetition_penalty": 1.3, "repeat_last_n": 16}
    got = complete(temperature=0, max_tokens=40, frequency_penalty=0.7, presence_penalty=0.3, extra_body=extra)
    want = run_text(srv.model, "--temp", "0", "-n", "40", "--frequency-penalty", "0.7", "--presence-penalty", "0.3",
                    "--repeat-penalty", "1.3", "--repeat-last-n", "16")
    assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
    plain = complete(temperature=0, max_tokens=40).choices[0].text
    assert got.choices[0].text != plain, "the penalties changed nothing"
    steps = run_steps(srv.model, "--temp", "0", "-n", "12")
    first = steps[0]["id"]
    banned = complete(temperature=0, max_tokens=12, logit_bias={str(first): -100})
    want = run_text(srv.model, "--temp", "0", "-n", "12", "--logit-bias", f"{first}-100")
    assert PROMPT + banned.choices[0].text + "\n" == want, (banned.choices[0].text, want)
    assert banned.choices[0].text != complete(temperature=0, max_tokens=12).choices[0].text


def logit_rule_errors():
    for kw, param in [(dict(logit_bias={"99999": 1}), "logit_bias"), (dict(frequency_penalty=2.5), "frequency_penalty"),
                      (dict(logit_bias={"1": 1}, extra_body={"entropix": {"sampler": "agents"}}), "logit_bias"),
                      (dict(presence_penalty=1, extra_body={"entropix": {"sampler": "branch"}}), "presence_penalty")]:
        try:
            complete(max_tokens=2, **kw)
            raise AssertionError(f"{kw} accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == param and "\n" not in e.body["message"], (kw, e.body)


def models_retrieve():
    assert c.models.retrieve(srv.model).id == srv.model
    m = c.models.retrieve(srv.model + ":entropix")
    assert m.id == srv.model + ":entropix" and m.model_extra["sampler"] == "entropix", m
    assert c.models.retrieve(srv.model).model_extra["sampler"] == "combined"
    try:
        c.models.retrieve("nope")
        raise AssertionError("an unknown model retrieved")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body


def embeddings_say_not_offered():
    status, body = raw(srv.url + "/v1/embeddings", {"model": srv.model, "input": "x"})
    assert status == 404 and "does not compute embeddings" in body["error"]["message"], (status, body)


def n_choices_from_one_prompt():
    """n choices: choice i is the text of seed + i; the prompt is prefilled once (the later choices
    find its rows in the slot's cache); usage counts the prompt once and every completion."""
    got = complete(seed=5, n=3, temperature=0.9)
    assert [ch.index for ch in got.choices] == [0, 1, 2]
    for i, ch in enumerate(got.choices):
        want = run_text(srv.model, "-s", str(5 + i), "-n", "24", "--sampler", "combined", "--temp", "0.9")
        assert PROMPT + ch.text + "\n" == want, (i, ch.text, want)
    assert len({ch.text for ch in got.choices}) > 1, "the choices are all the same"
    assert got.usage.completion_tokens == 72 and got.model_extra["entropix"]["seed"] == 5, got.usage
    chat_srv_stream = list(complete(seed=5, n=3, temperature=0.9, stream=True, stream_options={"include_usage": True}))
    texts, finished = ["", "", ""], set()
    for ch in chat_srv_stream:
        for c in ch.choices:
            texts[c.index] += c.text
            if c.finish_reason:
                finished.add(c.index)
    assert texts == [ch.text for ch in got.choices] and finished == {0, 1, 2}, (texts, finished)
    assert chat_srv_stream[-1].usage.completion_tokens == 72
    try:
        complete(n=2, max_tokens=2, extra_body={"entropix": {"sampler": "agents"}})
        raise AssertionError("n=2 with the agent pool accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "n", e.body


def one_log_line_per_request():
    """The server's stderr: a line per request (time, method, path, status, tokens, ms), never the text."""
    complete(max_tokens=3, seed=1)
    raw(srv.url + "/v1/models/nope", method="GET")
    want = [r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ POST /v1/completions 200 prompt=\d+ completion=3 ms=\d+$",
            r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ GET /v1/models/nope 404 prompt=- completion=- ms=\d+$"]
    deadline = time.monotonic() + CAP_S  # a line is written as its request ends: polled, under a cap
    while not all(re.search(w, srv.stderr(), re.M) for w in want):
        assert time.monotonic() < deadline, srv.stderr()[-2000:]
        time.sleep(0.05)
    assert PROMPT not in srv.stderr(), "the prompt's text is in the log"


def server_flags_set_the_defaults():
    with Server("stories260K.f32", "--frequency-penalty", "0.7", "--temp", "0") as s2:
        got = s2.client().completions.create(model=s2.model, prompt=PROMPT, max_tokens=30)
        want = run_text(s2.model, "--temp", "0", "-n", "30", "--frequency-penalty", "0.7")
        assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
        # a request's own value replaces the server's
        got = s2.client().completions.create(model=s2.model, prompt=PROMPT, max_tokens=30, frequency_penalty=0)
        assert PROMPT + got.choices[0].text + "\n" == run_text(s2.model, "--temp", "0", "-n", "30")
        # --temp 0 makes greedy the default: a request's temperature above 0 samples with it
        got = s2.client().completions.create(model=s2.model, prompt=PROMPT, max_tokens=30, temperature=1.5, seed=42)
        assert got.model_extra["entropix"]["sampler"] == "combined", got.model_extra
        want = run_text(s2.model, "-s", "42", "-n", "30", "--sampler", "combined", "--temp", "1.5",
                        "--frequency-penalty", "0.7")
        assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
        assert s2.stop() == 0


def greedy_default_yields_to_a_request_temperature():
    """--sampler greedy is the default of a request that names no sampler and no temperature above
    0; one with a temperature samples with it (greedy is temperature 0); one that names greedy
    keeps it."""
    with Server("stories260K.f32", "--sampler", "greedy") as s2:
        cl = s2.client()
        assert cl.models.retrieve(s2.model).model_extra["sampler"] == "greedy"
        greedy = run_text(s2.model, "--sampler", "greedy", "-n", "24")
        for kw in ({}, {"temperature": 0}, {"temperature": 1.5, "seed": 42,
                                            "extra_body": {"entropix": {"sampler": "greedy"}}}):
            got = cl.completions.create(model=s2.model, prompt=PROMPT, max_tokens=24, **kw)
            assert got.model_extra["entropix"]["sampler"] == "greedy", (kw, got.model_extra)
            assert PROMPT + got.choices[0].text + "\n" == greedy, (kw, got.choices[0].text, greedy)
        got = cl.completions.create(model=s2.model, prompt=PROMPT, max_tokens=24, temperature=1.5, seed=42)
        assert got.model_extra["entropix"]["sampler"] == "combined", got.model_extra
        want = run_text(s2.model, "-s", "42", "-n", "24", "--sampler", "combined", "--temp", "1.5")
        assert PROMPT + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
        assert s2.stop() == 0


def seeds_reported_as_the_integers_that_ran():
    """entropix.seed is the seed as an integer, whatever its size (JSON's doubles are exact to
    2^53, cJSON's default print is not): sent back, it gives the same text. -1 draws one."""
    def seed_of(text):
        m = re.findall(r'"seed":([^,}]*)', text)
        assert len(m) == 1 and re.fullmatch(r"\d+", m[0]), text[-400:]
        return int(m[0])

    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 1.5}
    for seed in (8000000000000001, 9007199254740992):
        for stream in (False, True):
            status, text = raw_text(srv.url + "/v1/completions", dict(body, seed=seed, stream=stream))
            assert status == 200 and seed_of(text) == seed, (seed, stream, text[-400:])
    got = complete(seed=8000000000000001, max_tokens=12, temperature=1.5).choices[0].text
    want = run_text(srv.model, "-s", "8000000000000001", "-n", "12", "--sampler", "combined", "--temp", "1.5")
    assert PROMPT + got + "\n" == want, (got, want)
    for extra in ({}, {"seed": -1}):  # drawn by the server
        status, text = raw_text(srv.url + "/v1/completions", dict(body, **extra))
        assert status == 200, text
        drawn = seed_of(text)
        again = complete(seed=drawn, max_tokens=12, temperature=1.5)
        assert again.choices[0].text == json.loads(text)["choices"][0]["text"], (drawn, again, text)
    status, err = raw(srv.url + "/v1/completions", dict(body, seed=-2))
    assert status == 400 and err["error"]["param"] == "seed", err
    # -1 draws one even where the server's -s gives the default
    with Server("stories260K.f32", "-s", "5") as s2:
        assert s2.client().completions.create(model=s2.model, prompt=PROMPT, max_tokens=1).model_extra["entropix"]["seed"] == 5
        status, text = raw_text(s2.url + "/v1/completions", dict(body, seed=-1, max_tokens=1))
        assert status == 200 and seed_of(text) != 5, text
        assert s2.stop() == 0


for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == "__main__" and name not in ("check", "raw", "raw_text", "run_text", "run_steps",
                                                                            "Server", "complete"):
        check(name, fn)
check("SIGTERM exits 0", lambda: None if srv.stop() == 0 else (_ for _ in ()).throw(AssertionError("exit")))
check.finish()
