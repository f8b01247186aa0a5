#!/usr/bin/env python3
"""build/tools/server against the official `openai` Python client, as users call it.

    python test_openai_client.py SERVER RUN MODELS_DIR

Starts the server on loopback (an ephemeral port) over qwen3-tiny (chat template) and
stories260K (raw), runs every check, stops the servers with SIGTERM (exit 0 expected) and prints
'N passed, N failed'. Exit 1 when any check failed. Run by tests/test_server.c (make test).
"""
import functools
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import openai

from harness import Checks, ModelServer

SERVER, RUN, MODELS = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks()
Server = functools.partial(ModelServer, SERVER, MODELS)  # Server(model, *flags, env=None)


def raw(url, body, headers=None, method="POST"):
    """(status, parsed JSON or text) for a hand-made request (a body is sent as JSON unless
    headers name another Content-Type)."""
    headers = dict(headers or {})
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode()


def run_text(model, *args):
    out = subprocess.run([RUN, f"{MODELS}/{model}.bin", "-t", "1", *args], capture_output=True, check=True)
    return out.stdout.decode()


def error_object(status, body, want_status, param=None):
    assert status == want_status, (status, body)
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"] and "\n" not in err["message"], err
    if param:
        assert err["param"] == param, err


chat = Server("qwen3-tiny.f32")
raw_srv = Server("stories260K.f32", "--api-key", "sekret", "--max-body", "4096")
par_srv = Server("stories260K.q8", "--parallel", "3")
c = chat.client()
r = raw_srv.client("sekret")
MSG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
COMBINED = ["--sampler", "combined"]  # what a request that names no sampler runs


def chat_same_as_run():
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12)
    want = run_text(chat.model, "--system", "Be brief.", "-p", "Name a colour.", "-s", "7", "-n", "12", *COMBINED)
    assert got.choices[0].message.content + "\n" == want, (got.choices[0].message.content, want)
    assert got.usage.completion_tokens <= 12 and got.usage.prompt_tokens > 5
    assert got.choices[0].finish_reason in ("stop", "length")


def chat_temperature_same_as_run():
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=3, max_tokens=10, temperature=0.5, top_p=0.9,
                                    extra_body={"entropix": {"sampler": "combined"}})
    want = run_text(chat.model, "--system", "Be brief.", "-p", "Name a colour.", "-s", "3", "-n", "10", "--temp", "0.5",
                    "--top-p", "0.9", "--sampler", "combined")
    assert got.choices[0].message.content + "\n" == want


def completion_same_as_run():
    got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=11, max_tokens=30)
    want = run_text(raw_srv.model, "-p", "Once upon a time", "-s", "11", "-n", "30", *COMBINED)
    assert "Once upon a time" + got.choices[0].text + "\n" == want, (got.choices[0].text, want)
    assert got.usage.completion_tokens == 30 and got.choices[0].finish_reason == "length"


def chat_stream_same_text():
    whole = c.chat.completions.create(model=chat.model, messages=MSG, seed=5, max_tokens=16).choices[0].message.content
    chunks = list(c.chat.completions.create(model=chat.model, messages=MSG, seed=5, max_tokens=16, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole, (text, whole)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] in ("stop", "length")


def completion_stream_sse_format():
    for usage in (False, True):
        req = urllib.request.Request(raw_srv.url + "/v1/completions", method="POST",
                                     data=json.dumps({"model": raw_srv.model, "prompt": "Once", "max_tokens": 5, "seed": 1,
                                                      "stream": True, "stream_options": {"include_usage": usage}}).encode(),
                                     headers={"Authorization": "Bearer sekret", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.headers["Content-Type"] == "text/event-stream"
            body = resp.read().decode()
        events = body.split("\n\n")
        assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
        for e in events[:-2]:
            assert e.startswith("data: {"), e
            assert json.loads(e[6:])["object"] == "text_completion"
        chunks = [json.loads(e[6:]) for e in events[:-2]]
        if not usage:
            assert all("usage" not in ch for ch in chunks), chunks
            continue
        # as OpenAI: "usage" in every chunk, null but in the last (no choices, the counts)
        assert all("usage" in ch and ch["usage"] is None for ch in chunks[:-1]), chunks
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5, chunks[-1]


def chat_logprobs():
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=6, logprobs=True,
                                    top_logprobs=3)
    content = got.choices[0].logprobs.content
    assert len(content) == got.usage.completion_tokens
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert t.logprob <= t.top_logprobs[0].logprob
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or "\ufffd" in t.token


def completion_logprobs():
    got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=2, max_tokens=8, logprobs=2)
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 8
    assert "".join(lp.tokens) == got.choices[0].text
    assert lp.text_offset[0] == 0 and all(len(d) <= 2 for d in lp.top_logprobs)


def cut_inside_a_token(token_bytes, text_bytes):
    """A stop string that starts at the second byte of a token and runs over the next two, its
    first match there: (the token's index, the stop string), or None."""
    offs = [sum(map(len, token_bytes[:i])) for i in range(len(token_bytes))]
    for k in range(1, len(token_bytes) - 2):
        stop = token_bytes[k][1:] + token_bytes[k + 1] + token_bytes[k + 2]
        try:
            s = stop.decode()
        except UnicodeDecodeError:
            continue
        if len(token_bytes[k]) >= 2 and text_bytes.find(stop) == offs[k] + 1:
            return k, s
    return None


def stop_string_cuts_the_logprobs():
    """The logprobs cover the text returned: a stop string that starts inside a token keeps that
    token (with all its bytes) and drops the tokens after it, streamed or not, chat and
    completions; a streamed entry comes with the chunk that holds its first byte."""
    base = r.completions.create(model=raw_srv.model, prompt="Once upon a time", temperature=0, max_tokens=30,
                                logprobs=1).choices[0]
    toks = [t.encode() for t in base.logprobs.tokens]
    assert b"".join(toks) == base.text.encode(), base.logprobs.tokens
    k, stop = cut_inside_a_token(toks, base.text.encode())
    want = base.text[:base.logprobs.text_offset[k] + 1]
    got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", temperature=0, max_tokens=30,
                               logprobs=1, stop=stop).choices[0]
    assert got.text == want and got.finish_reason == "stop", (got.text, want, stop)
    assert got.logprobs.tokens == base.logprobs.tokens[:k + 1], (got.logprobs.tokens, k, stop)
    assert got.logprobs.text_offset == base.logprobs.text_offset[:k + 1] and got.logprobs.text_offset[-1] < len(want)
    chunks = [ch.choices[0] for ch in r.completions.create(model=raw_srv.model, prompt="Once upon a time", temperature=0,
                                                            max_tokens=30, logprobs=1, stop=stop, stream=True)]
    assert "".join(ch.text for ch in chunks) == want
    streamed = [t for ch in chunks if ch.logprobs for t in ch.logprobs.tokens]
    assert streamed == got.logprobs.tokens, (streamed, got.logprobs.tokens)
    for ch in chunks:  # no entry without its text: each chunk's text starts with its first token
        if ch.logprobs and ch.logprobs.tokens:
            assert ch.text and ch.logprobs.tokens[0].startswith(ch.text[:1]), ch
    # chat: the entries' bytes, joined, are the content and the rest of the token cut inside
    kw = dict(model=chat.model, messages=MSG, temperature=0, max_tokens=24, logprobs=True)
    base = c.chat.completions.create(**kw).choices[0]
    toks = [bytes(t.bytes) for t in base.logprobs.content]
    text = base.message.content.encode()
    assert b"".join(toks) == text, (toks, text)
    k, stop = cut_inside_a_token(toks, text)
    got = c.chat.completions.create(stop=stop, **kw).choices[0]
    assert got.message.content.encode() == text[:text.find(stop.encode())], (got.message.content, stop)
    got_toks = [bytes(t.bytes) for t in got.logprobs.content]
    assert got_toks == toks[:k + 1] and b"".join(got_toks) == got.message.content.encode() + toks[k][1:], got_toks
    chunks = [ch.choices[0] for ch in c.chat.completions.create(stream=True, stop=stop, **kw) if ch.choices]
    assert "".join(ch.delta.content or "" for ch in chunks) == got.message.content
    streamed = [bytes(t.bytes) for ch in chunks if ch.logprobs for t in ch.logprobs.content]
    assert streamed == got_toks, (streamed, got_toks)
    assert all(ch.delta.content for ch in chunks if ch.logprobs and ch.logprobs.content), chunks


def stop_strings():
    base = r.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=11, max_tokens=30).choices[0].text
    stop = base[10:13]
    got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=11, max_tokens=30,
                               stop=["zzzz", stop])
    assert got.choices[0].text == base[:base.index(stop)], (got.choices[0].text, base, stop)
    assert got.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in r.completions.create(
        model=raw_srv.model, prompt="Once upon a time", seed=11, max_tokens=30, stop=stop, stream=True))
    assert streamed == got.choices[0].text, (streamed, got.choices[0].text)


def extension_metrics():
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=6,
                                    extra_body={"entropix": {"sampler": "entropix", "profile": "classic",
                                                             "metrics": True}})
    d = got.model_dump()
    toks = d["choices"][0]["entropix"]["tokens"]
    assert len(toks) >= got.usage.completion_tokens
    assert all(t["sampler"] == "entropix" and t["case"] in ("LELV", "HELV", "LEHV", "HEHV", "ADAPTIVE") for t in toks)
    assert d["entropix"]["seed"] == 7 and sum(d["entropix"]["cases"].values()) == len(toks)


def multi_turn():
    msgs = MSG + [{"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another?"}]
    got = c.chat.completions.create(model=chat.model, messages=msgs, seed=1, max_tokens=4)
    assert got.usage.prompt_tokens > c.chat.completions.create(model=chat.model, messages=MSG, seed=1,
                                                               max_tokens=1).usage.prompt_tokens


def render_chatml(msgs):
    """Qwen3's template for plain turns (no <think> in the contents), as tokenizer/chat_template.c renders it."""
    assert not any("think>" in m["content"] for m in msgs), msgs
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + "<|im_start|>assistant\n"


def run_raw_answer(model, prompt, *args):
    """./run --raw's continuation of prompt: its stdout less the echoed prompt (control tokens are not echoed)."""
    out = run_text(model, "--raw", "-p", prompt, *args)
    echo = re.sub(r"<\|im_(start|end)\|>", "", prompt)
    assert out.startswith(echo) and out.endswith("\n"), (out, echo)
    return out[len(echo):-1]


def chat_two_turns_cached():
    """A chat that goes on reuses the slot's rows (its first prompt and answer) and still gives ./run's text."""
    first = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12)
    msgs = MSG + [{"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "Another?"}]
    got = c.chat.completions.create(model=chat.model, messages=msgs, seed=9, max_tokens=12)
    assert got.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens, got.usage
    assert got.usage.prompt_tokens_details.cached_tokens < got.usage.prompt_tokens, got.usage
    want = run_raw_answer(chat.model, render_chatml(msgs), "-s", "9", "-n", "12", *COMBINED)
    assert got.choices[0].message.content == want, (got.choices[0].message.content, want)


def completion_sharing_nothing_reports_0():
    c.chat.completions.create(model=chat.model, messages=MSG, seed=1, max_tokens=2)  # the cache: <|im_start|>...
    got = c.completions.create(model=chat.model, prompt="Hello there", seed=4, max_tokens=8)
    assert got.usage.prompt_tokens_details.cached_tokens == 0, got.usage
    assert got.choices[0].text == run_raw_answer(chat.model, "Hello there", "-s", "4", "-n", "8", *COMBINED)


def completion_after_another_same_as_run():
    """One slot: each prompt shares a start with the one before and then differs or stops short;
    the rows past the common prefix are stale and must be overwritten, never read."""
    prompts = ["Once upon a time there was a big dog named Max", "Once upon a time, a little girl",
               "Once upon a time", "Once upon a time, a little girl went to the park"]
    for i, p in enumerate(prompts):
        got = r.completions.create(model=raw_srv.model, prompt=p, seed=20 + i, max_tokens=24)
        want = run_text(raw_srv.model, "-p", p, "-s", str(20 + i), "-n", "24", *COMBINED)
        assert p + got.choices[0].text + "\n" == want, (p, got.choices[0].text, want)
        if i:
            assert got.usage.prompt_tokens_details.cached_tokens > 0, (p, got.usage)


def two_slots_keep_two_chats():
    """--parallel 2: two chats that share only the template's start each keep their own slot."""
    srv = Server("qwen3-tiny.f32", "--parallel", "2")
    try:
        cl = srv.client()
        convs = [MSG, [{"role": "system", "content": "You are a pirate who answers in rhymes, always."},
                       {"role": "user", "content": "Where is the treasure buried, old friend?"}]]
        firsts = [cl.chat.completions.create(model=srv.model, messages=m, seed=3, max_tokens=6) for m in convs]
        for m, f in zip(convs, firsts):
            msgs = m + [{"role": "assistant", "content": f.choices[0].message.content},
                        {"role": "user", "content": "More."}]
            got = cl.chat.completions.create(model=srv.model, messages=msgs, seed=5, max_tokens=6)
            assert got.usage.prompt_tokens_details.cached_tokens >= f.usage.prompt_tokens, (got.usage, f.usage)
            assert got.choices[0].message.content == run_raw_answer(srv.model, render_chatml(msgs), "-s", "5", "-n", "6",
                                                                    *COMBINED)
    finally:
        assert srv.stop() == 0


def errors_via_client():
    for kwargs, exc in [(dict(temperature=3), openai.BadRequestError), (dict(top_p=0), openai.BadRequestError),
                        (dict(max_tokens=0), openai.BadRequestError), (dict(max_tokens=100000), openai.BadRequestError),
                        (dict(model="nope"), openai.NotFoundError), (dict(n=17), openai.BadRequestError)]:
        args = dict(model=chat.model, messages=MSG, max_tokens=2)
        args.update(kwargs)
        try:
            c.chat.completions.create(**args)
        except exc as e:
            assert e.body["message"], e.body
            continue
        raise AssertionError(f"{kwargs}: no {exc.__name__}")
    try:
        raw_srv.client("wrong").completions.create(model=raw_srv.model, prompt="x", max_tokens=1)
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError:
        pass


def errors_raw():
    url, auth = raw_srv.url + "/v1/completions", {"Authorization": "Bearer sekret"}
    error_object(*raw(url, b"{not json", auth), 400)
    error_object(*raw(url, b"[1, 2]", auth), 400)
    error_object(*raw(url, b'{"model": "stories260K.f32", "prompt": 5}', auth), 400, "prompt")
    error_object(*raw(url, b'{"model": "stories260K.f32", "prompt": "x", "stop": [1]}', auth), 400, "stop")
    error_object(*raw(url, b'{"model": "stories260K.f32", "prompt": "x", "seed": -2}', auth), 400, "seed")
    error_object(*raw(url, json.dumps({"model": "stories260K.f32", "prompt": "x" * 5000}).encode(), auth), 413)
    error_object(*raw(url, json.dumps({"model": "stories260K.f32", "prompt": "a b " * 1000}).encode(), auth), 400)
    error_object(*raw(url, b'{"model": "stories260K.f32", "prompt": "x"}'), 401)
    error_object(*raw(raw_srv.url + "/v1/nothing", b"{}", auth), 404)
    error_object(*raw(url, None, auth, "GET"), 405)
    # no "model" (a curl user's request, as llama.cpp's server takes it): the served model answers
    status, body = raw(url, b'{"prompt": "Once upon a time", "max_tokens": 3, "seed": 1}', auth)
    assert status == 200 and body["model"] == raw_srv.model and body["usage"]["completion_tokens"] == 3, body
    error_object(*raw(url, b'{"model": "other", "prompt": "x"}', auth), 404, "model")
    status, body = raw(raw_srv.url + "/health", None, method="GET")
    assert status == 200 and body == {"status": "ok"}
    # chat on a model without a template: a 400 that says so
    error_object(*raw(raw_srv.url + "/v1/chat/completions",
                      b'{"model": "stories260K.f32", "messages": [{"role": "user", "content": "x"}]}', auth), 400)


def parallel_slots_same_as_run():
    # Three requests at once on three slots: their decode steps run batched (one forward over
    # the busy slots' rows); each text must still be ./run's for its seed. Different prompts,
    # lengths and samplers, so the rows sit at different positions and one leaves early.
    jobs = [("Once upon a time", 5, 40, {}), ("The little dog", 9, 6, {}),
            ("Lily and Ben went", 13, 24, {"temperature": 0.0})]
    got = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def one(i):
        prompt, seed, n, extra = jobs[i]
        start.wait()
        got[i] = par_srv.client().completions.create(model=par_srv.model, prompt=prompt, seed=seed, max_tokens=n,
                                                     **extra).choices[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for (prompt, seed, n, extra), text in zip(jobs, got):
        flags = ["--temp", "0"] if extra else COMBINED
        want = run_text(par_srv.model, "-p", prompt, "-s", str(seed), "-n", str(n), *flags)
        assert text is not None and prompt + text + "\n" == want, (prompt, text, want)


AGENTS_RUN = ["--system", "Be brief.", "-p", "Name a colour."]


def agents_same_as_run():
    """The agent pool: ./run --sampler agents's text for the same seed and options, streamed or not."""
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12,
                                    extra_body={"entropix": {"sampler": "agents", "n": 3}})
    want = run_text(chat.model, *AGENTS_RUN, "-s", "7", "-n", "12", "--sampler", "agents", "--agents", "3")
    assert got.choices[0].message.content + "\n" == want, (got.choices[0].message.content, want)
    assert got.usage.completion_tokens == 12 and got.choices[0].finish_reason == "length", got
    x = got.model_dump()["entropix"]
    assert x["sampler"] == "agents" and x["seed"] == 7 and x["pool"]["rounds"] == 12 and x["pool"]["checks"] == 0, x
    chunks = list(c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12, stream=True,
                                            extra_body={"entropix": {"sampler": "agents", "n": 3}}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == got.choices[0].message.content


def agents_critic_same_as_run():
    """With the critic (margin -1000: every verdict BAD, so rollbacks happen, as tests/test_report.c)."""
    opts = {"n": 4, "check_every": 4, "margin": -1000, "max_rollbacks": 2}
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=2, max_tokens=24,
                                    extra_body={"entropix": opts})
    want = run_text(chat.model, *AGENTS_RUN, "-s", "2", "-n", "24", "--agents", "4", "--check-every", "4",
                    "--critic-margin", "-1000", "--max-rollbacks", "2")
    assert got.choices[0].message.content + "\n" == want, (got.choices[0].message.content, want)
    pool = got.model_dump()["entropix"]["pool"]
    assert pool["checks"] > 0 and pool["bad"] > 0 and pool["rollbacks"] > 0 and pool["rolled_back_tokens"] > 0, pool
    assert got.usage.completion_tokens == 24


def agents_stop_string():
    ext = {"entropix": {"sampler": "agents", "n": 3}}
    base = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12,
                                     extra_body=ext).choices[0].message.content
    stop = base[8:11]
    got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=12, stop=stop, extra_body=ext)
    assert got.choices[0].message.content == base[:base.index(stop)], (got.choices[0].message.content, base, stop)
    assert got.choices[0].finish_reason == "stop" and got.usage.completion_tokens < 12, got
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=chat.model, messages=MSG, seed=7, max_tokens=12, stop=stop, stream=True, extra_body=ext) if ch.choices)
    assert streamed == got.choices[0].message.content, (streamed, got.choices[0].message.content)


def agents_logprobs_and_metrics():
    """Logprobs and metrics come from the pool's --metrics lines: one per committed token."""
    chosen = []
    for top in (0, 3):
        got = c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=8, logprobs=True,
                                        top_logprobs=top, extra_body={"entropix": {"n": 3, "metrics": True}})
        content = got.choices[0].logprobs.content
        assert len(content) == got.usage.completion_tokens == 8, got
        assert "".join(t.token for t in content) == got.choices[0].message.content
        for t in content:
            assert len(t.top_logprobs) == top and t.logprob <= 0, t
            assert all(a.logprob >= b.logprob for a, b in zip(t.top_logprobs, t.top_logprobs[1:]))
            assert not top or t.logprob <= t.top_logprobs[0].logprob
        toks = got.model_dump()["choices"][0]["entropix"]["tokens"]
        assert len(toks) == 8 and all(m["sampler"] == "agents" and "agent" in m for m in toks), toks
        assert [m["id"] for m in toks] and all(len(m.get("top_logprobs", [])) == top for m in toks), toks
        chosen.append([t.logprob for t in content])
    # top_logprobs 0 still gets each token's own logprob (the pool computes it only beside top ones)
    assert chosen[0] == chosen[1] and any(x < 0 for x in chosen[0]), chosen


def agents_bad_options():
    url = chat.url + "/v1/chat/completions"
    for opts, param in [({"n": 0}, "entropix.n"), ({"n": 1000}, "entropix.n"), ({"lookahead": -1}, "entropix.lookahead"),
                        ({"lookahed": 2}, "entropix"), ({"devices": "cuda:0"}, "entropix.devices"),
                        ({"critic_model": "x.bin"}, "entropix.critic_model"), ({"workers": 64}, "entropix.workers")]:
        body = {"model": chat.model, "messages": MSG, "max_tokens": 2, "entropix": dict(sampler="agents", **opts)}
        for stream in (False, True):
            status, err = raw(url, json.dumps(dict(body, stream=stream)).encode())
            error_object(status, err, 400, param)
            assert param in err["error"]["message"], err


def paths_without_v1():
    """/chat/completions, /completions and /models, as llama.cpp's server answers them: the /v1 API."""
    bare = openai.OpenAI(base_url=raw_srv.url, api_key="sekret", max_retries=0, timeout=120)
    got = bare.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=11, max_tokens=8).choices[0].text
    assert got == r.completions.create(model=raw_srv.model, prompt="Once upon a time", seed=11,
                                       max_tokens=8).choices[0].text
    assert [m.id for m in bare.models.list().data] == [raw_srv.model, raw_srv.model + ":entropix"]
    bare_chat = openai.OpenAI(base_url=chat.url, api_key="none", max_retries=0, timeout=120)
    got = bare_chat.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=6).choices[0].message.content
    assert got == c.chat.completions.create(model=chat.model, messages=MSG, seed=7, max_tokens=6).choices[0].message.content
    error_object(*raw(raw_srv.url + "/models", None, {"Authorization": "Bearer sekret"}, "POST"), 405)


def models_and_metrics():
    assert [m.id for m in c.models.list().data] == [chat.model, chat.model + ":entropix"]
    # "created": the model file's time
    assert all(m.created == int(os.path.getmtime(f"{MODELS}/{chat.model}.bin")) for m in c.models.list().data)
    status, text = raw(chat.url + "/metrics", None, method="GET")
    assert status == 200
    values = dict(line.split(" ") for line in text.splitlines() if line and not line.startswith("#"))
    assert int(values["entropix_requests_total"]) > 0 and int(values["entropix_completion_tokens_total"]) > 0
    assert values["entropix_slots_total"] == "1" and values["entropix_queue_length"] == "0"
    assert int(values["entropix_prompt_tokens_cached_total"]) > 0 and values["entropix_slots_stalled"] == "0"


for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == "__main__" and name not in ("check", "raw", "run_text", "error_object", "Server",
                                                                            "render_chatml", "run_raw_answer",
                                                                            "cut_inside_a_token"):
        check(name, fn)
for s in (chat, raw_srv, par_srv):
    check(f"SIGTERM exits 0 ({s.model})", lambda s=s: (lambda rc: None if rc == 0 else (_ for _ in ()).throw(
        AssertionError(f"exit {rc}")))(s.stop()))
check.finish()
