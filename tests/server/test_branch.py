#!/usr/bin/env python3
"""build/tools/server's branching decoder ("entropix": {"sampler": "branch", ...}) against ./run.

    python test_branch.py SERVER RUN MODELS_DIR

Starts the server on loopback (an ephemeral port) over qwen3-tiny (chat template; its memory
said to be 64 MiB, so a run whose branch tails would not fit is refused) and stories260K (raw),
drives them with the official openai client and raw HTTP, compares every text with
`./run --sampler branch` for the same prompt and flags, stops the servers with SIGTERM (exit 0
expected) and prints 'N passed, N failed'. Exit 1 when any check failed. Every wait polls a
state under a cap that can only fail. Run by tests/test_server.c (make test).
"""
import functools
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from harness import CAP_S, Checks, ModelServer, parse_metrics, wait_for

SERVER, RUN, MODELS = sys.argv[1], sys.argv[2], sys.argv[3]
check = Checks()
Server = functools.partial(ModelServer, SERVER, MODELS)  # Server(model, *flags, env=None)


def raw(url, body):
    """(status, parsed JSON or the text) of a POST of body as JSON."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=CAP_S) as r:
            data, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode()


def metrics(srv):
    with urllib.request.urlopen(srv.url + "/metrics", timeout=CAP_S) as r:
        return parse_metrics(r.read().decode())


def run_text(model, *args):
    out = subprocess.run([RUN, f"{MODELS}/{model}.bin", "-t", "1", *args], capture_output=True, check=True)
    return out.stdout.decode()


def branch_flags(opts):
    """./run's flags for the extension's keys (tools/eval's names)."""
    names = {"tau": "--branch-entropy", "k": "--branch-k", "forks": "--branch-forks", "gate": "--branch-gate",
             "lookahead": "--branch-lookahead", "rule": "--branch-rule", "cue": "--answer-cue",
             "alphabet": "--answer-alphabet"}
    flags = ["--sampler", "branch"]
    for k, v in opts.items():
        flags += [names[k], ",".join(v) if k == "alphabet" else str(v)]
    return flags


chat = Server("qwen3-tiny.f32", env={"EMX_MEMAVAILABLE_MB": "64"})
raw_srv = Server("stories260K.f32")
c, r = chat.client(), raw_srv.client()
MSG = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
MSG_RUN = ["--system", "Be brief.", "-p", "Name a colour."]
# qwen3-tiny's random weights: every step is unsure, so tau 0 forks at the first one
CHAT_OPTS = [{}, {"tau": 0, "k": 3, "gate": 0.5}, {"tau": 0, "k": 4, "forks": 2, "lookahead": 2, "rule": "margin"},
             {"tau": 0, "k": 3, "gate": 0.5, "alphabet": ["red", "blue", "green"], "cue": "Answer:"}]


def extension(resp):
    return resp.model_dump()["entropix"]


def chat_same_as_run():
    """Non-streamed and streamed: ./run's text; which sampler ran, the forks, the paths."""
    for opts in CHAT_OPTS:
        want = run_text(chat.model, *MSG_RUN, "-n", "12", *branch_flags(opts))
        ext = {"entropix": dict(opts, sampler="branch")}
        got = c.chat.completions.create(model=chat.model, messages=MSG, max_tokens=12, extra_body=ext)
        assert got.choices[0].message.content + "\n" == want, (opts, got.choices[0].message.content, want)
        x = extension(got)
        assert x["sampler"] == "branch" and "seed" not in x and x["n_forks"] <= opts.get("forks", 1), x
        assert x["n_forks"] >= 1 or "tau" not in opts, x
        outputs = [p for p in x["paths"] if p["output"]]
        assert len(outputs) == 1 and outputs[0]["text"] == got.choices[0].message.content, x["paths"]
        assert all(p["end"] in ("stop", "budget", "cut") for p in x["paths"]), x["paths"]
        if "alphabet" in opts:  # the committed answer: one of the entries, and the text ends with it
            assert x["answer"] in opts["alphabet"] and got.choices[0].message.content.endswith("Answer: " + x["answer"]), x
            assert all(p["answer"] in opts["alphabet"] for p in x["paths"] if "answer" in p), x["paths"]
        chunks = list(c.chat.completions.create(model=chat.model, messages=MSG, max_tokens=12, stream=True,
                                                stream_options={"include_usage": True}, extra_body=ext))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) + "\n" == want, opts
        last = [ch for ch in chunks if ch.choices][-1]
        assert last.choices[0].finish_reason == got.choices[0].finish_reason, (last, got)
        assert last.model_dump()["entropix"]["paths"] == x["paths"]
        assert chunks[-1].usage.completion_tokens == got.usage.completion_tokens


def completion_same_as_run_and_sse():
    """Raw prompts (the text after the echoed prompt), and the SSE bytes of a stream whose fork's
    winner arrives at once: data events, a final finish_reason, [DONE]."""
    for opts in [{}, {"tau": 0, "forks": 3, "lookahead": 3, "gate": 0.05},
                 {"tau": 0, "gate": 0.05, "alphabet": ["Lily", "Tom", "Ben"]}]:
        want = run_text(raw_srv.model, "-p", "Once upon a time", "-n", "24", *branch_flags(opts))
        got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", max_tokens=24,
                                   extra_body={"entropix": dict(opts, sampler="branch")})
        assert "Once upon a time" + got.choices[0].text + "\n" == want, (opts, got.choices[0].text, want)
        status, body = raw(raw_srv.url + "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24,
                                                             "stream": True, "entropix": dict(opts, sampler="branch")})
        assert status == 200 and isinstance(body, str), (status, body)
        events = body.split("\n\n")
        assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
        chunks = [json.loads(e[6:]) for e in events[:-2] if e.startswith("data: {")]
        assert len(chunks) == len(events) - 2, events
        assert [ch["choices"][0]["finish_reason"] for ch in chunks] == [None] * (len(chunks) - 1) + ["length"], chunks
        assert "".join(ch["choices"][0]["text"] for ch in chunks) == got.choices[0].text
        assert chunks[-1]["entropix"]["sampler"] == "branch"


def stop_string():
    """A stop string ends the text before it, as for any sampler, streamed or not."""
    ext = {"entropix": {"sampler": "branch"}}
    base = r.completions.create(model=raw_srv.model, prompt="Once upon a time", max_tokens=24, extra_body=ext)
    stop = base.choices[0].text[-12:-6]  # inside the fork's winner
    got = r.completions.create(model=raw_srv.model, prompt="Once upon a time", max_tokens=24, stop=stop, extra_body=ext)
    assert got.choices[0].text == base.choices[0].text[:base.choices[0].text.index(stop)], (got.choices[0].text, stop)
    assert got.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in r.completions.create(
        model=raw_srv.model, prompt="Once upon a time", max_tokens=24, stop=stop, stream=True, extra_body=ext))
    assert streamed == got.choices[0].text, (streamed, got.choices[0].text)


def bad_values_refused():
    """400 with the key as param and in the message; a stream is refused before it starts."""
    cases = [({"k": 20}, "entropix.k", "out of range [2, 16]"), ({"k": 2.5}, "entropix.k", "integer"),
             ({"tau": -1}, "entropix.tau", "--branch-entropy"), ({"gate": 0}, "entropix.gate", "(0, 1]"),
             ({"forks": 17}, "entropix.forks", "at most 16"), ({"rule": "best"}, "entropix.rule", "not prob"),
             ({"lookahead": -1}, "entropix.lookahead", "--branch-lookahead"),
             ({"alphabet": "A,B"}, "entropix.alphabet", "array of strings"),
             ({"alphabet": ["A", "A"]}, "entropix.alphabet", "given twice"),
             ({"alphabet": ["x" * 65]}, "entropix.alphabet", "65 bytes"),
             ({"alphabet": [str(i) for i in range(129)]}, "entropix.alphabet", "1 to 128"),
             ({"alphabet": ["ab" * 20]}, "entropix.alphabet", "tokens (at most 16)"),
             ({"cue": ""}, "entropix.cue", "empty"), ({"cue": "x" * 257}, "entropix.cue", "at most 256"),
             ({"tau": 1, "entropy": 2}, "entropix.entropy", "give one"), ({"n": 3}, "entropix.n", "needs sampler agents")]
    for opts, param, words in cases:
        for stream in (False, True):
            status, body = raw(raw_srv.url + "/v1/completions",
                               {"prompt": "Once", "max_tokens": 4, "stream": stream, "entropix": dict(opts, sampler="branch")})
            assert status == 400 and body["error"]["param"] == param, (opts, status, body)
            msg = body["error"]["message"]
            assert param in msg and words in msg and "\n" not in msg, (opts, msg)
    status, body = raw(raw_srv.url + "/v1/completions", {"prompt": "Once", "entropix": {"sampler": "greedy", "k": 3}})
    assert status == 400 and body["error"]["param"] == "entropix.k" and "needs sampler branch" in body["error"]["message"]


def logprobs_and_metrics_refused():
    for body, param in [({"logprobs": True, "top_logprobs": 2}, "logprobs"), ({"logprobs": False}, None),
                        ({"entropix": {"sampler": "branch", "metrics": True}}, "entropix.metrics")]:
        req = dict({"model": chat.model, "messages": MSG, "max_tokens": 2, "entropix": {"sampler": "branch"}}, **body)
        status, got = raw(chat.url + "/v1/chat/completions", req)
        if param is None:
            assert status == 200, got
            continue
        assert status == 400 and got["error"]["param"] == param and "not available" in got["error"]["message"], got
    status, got = raw(raw_srv.url + "/v1/completions", {"prompt": "Once", "logprobs": 0, "entropix": {"k": 3}})
    assert status == 400 and got["error"]["param"] == "logprobs", got


def memory_admitted():
    """16 tails of 4,000 tokens (98 MiB) where 64 MiB are said to be available: refused, 400."""
    status, body = raw(chat.url + "/v1/chat/completions",
                       {"messages": MSG, "max_tokens": 4000, "entropix": {"sampler": "branch", "k": 16}})
    assert status == 400 and body["error"]["code"] == "insufficient_memory", body
    assert "the branching decoder does not fit: its branch tails need" in body["error"]["message"], body


def prefix_cache_after_branch():
    """One slot: a greedy run leaves other rows past the prompt; a branch run then ends in a fork
    16 tokens in, so only the prompt and those 16 tokens are its sequence's rows. A request that
    continues its text reuses exactly those (cached_tokens), and gets ./run's text."""
    r.completions.create(model=raw_srv.model, prompt="Once upon a time, a little girl", max_tokens=20, temperature=0)
    first = r.completions.create(model=raw_srv.model, prompt="Once upon a time", max_tokens=24,
                                 extra_body={"entropix": {"sampler": "branch"}})
    out = [p for p in extension(first)["paths"] if p["output"]][0]
    assert out["fork"] == 0 and 0 < out["start"] < 23, out  # a final fork: the rows past start are no one's
    prompt = "Once upon a time" + first.choices[0].text
    got = r.completions.create(model=raw_srv.model, prompt=prompt, max_tokens=16, temperature=0)
    assert got.usage.prompt_tokens == first.usage.prompt_tokens + first.usage.completion_tokens, got.usage
    assert got.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens + out["start"], got.usage
    want = run_text(raw_srv.model, "-p", prompt, "-n", "16", "--temp", "0")
    assert prompt + got.choices[0].text + "\n" == want, (got.choices[0].text, want)


def departed_client_stops_it():
    """A run that forks at once and sends nothing until its branches end (4 of 3,000 tokens): its
    client leaves, the slot is free again within the cap, and the next request on the slot gets
    ./run's text."""
    body = json.dumps({"messages": MSG, "max_tokens": 3000, "stream": True,
                       "entropix": {"sampler": "branch", "tau": 0, "k": 4, "gate": 0.5}}).encode()
    s = socket.create_connection(("127.0.0.1", chat.port), timeout=CAP_S)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for("the run busy", lambda: metrics(chat)["entropix_slots_busy"] == 1)
    s.close()
    wait_for("the slot free after the client left", lambda: metrics(chat)["entropix_slots_busy"] == 0)
    got = c.chat.completions.create(model=chat.model, messages=MSG, max_tokens=8, temperature=0)
    want = run_text(chat.model, *MSG_RUN, "-n", "8", "--temp", "0")
    assert got.choices[0].message.content + "\n" == want, (got.choices[0].message.content, want)


t0 = time.monotonic()
for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == "__main__" and name not in (
            "check", "raw", "metrics", "wait_for", "run_text", "branch_flags", "extension", "Server"):
        check(name, fn)
for srv in (chat, raw_srv):
    check(f"SIGTERM exits 0 ({srv.model})", lambda srv=srv: (lambda rc: None if rc == 0 else (_ for _ in ()).throw(
        AssertionError(f"exit {rc}")))(srv.stop()))
check.finish(f" ({time.monotonic() - t0:.1f} s)")
