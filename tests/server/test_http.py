#!/usr/bin/env python3
"""build/tools/server's HTTP semantics as clients of llama-server, vLLM and the OpenAI API expect
them: HEAD on the GET routes, Retry-After on 503, 499 in the request log for a client that left
mid-generation or while its answer was sent, the path logged as requested, /models/{id} without
/v1, best_of on /v1/completions, duplicate JSON keys refused.

    python test_http.py SERVER MODELS_DIR

Every check starts its own server on loopback (an ephemeral port) and drives it with raw sockets
and http.client; a wait polls a state (/metrics, the log) under a cap that can only fail the
check, never pass it. Prints 'N passed, N failed'; exit 1 when any check failed. Run by
tests/test_server.c.
"""
import http.client
import json
import math
import re
import signal
import socket
import struct
import sys

from harness import CAP_S, Checks, ServerProcess, parse_metrics, post_raw, wait_for

SERVER, MODELS = sys.argv[1], sys.argv[2]
check = Checks()


class Server(ServerProcess):
    def __init__(self, *flags, model="stories260K.f32"):
        super().__init__(SERVER, f"{MODELS}/{model}.bin", *flags)
        self.model = model


def request(srv, method, path, body=None, headers=None):
    """(status, headers, body bytes) of one request on a connection of its own."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=CAP_S)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    h = dict(headers or {})
    if data is not None:
        h.setdefault("Content-Type", "application/json")
    conn.request(method, path, data, h)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, r.headers, raw


def metrics(srv):
    status, _, text = request(srv, "GET", "/metrics")
    assert status == 200, (status, text)
    return parse_metrics(text.decode())


def error_of(status, raw, want_status, want_param=None):
    body = json.loads(raw)
    assert status == want_status, (status, body)
    assert "\n" not in body["error"]["message"], body
    if want_param is not None:
        assert body["error"]["param"] == want_param, body
    return body["error"]


# ---------------------------------------------------------------------------------------------
# HEAD, Allow, routes

GET_ROUTES = ("/health", "/metrics", "/v1/models", "/v1/models/stories260K.f32", "/models",
              "/models/stories260K.f32", "/")


def head_is_get_without_a_body():
    """HEAD on each GET route: the GET's status and headers (Content-Length the GET body's
    length), no body bytes on the wire, and the kept-alive connection then answers a GET."""
    with Server() as srv:
        for path in GET_ROUTES + ("/v1/models/nope",):
            g_status, g_h, g_body = request(srv, "GET", path)
            h_status, h_h, h_body = request(srv, "HEAD", path)
            assert h_status == g_status and h_body == b"", (path, h_status, g_status, h_body[:80])
            assert h_h["Content-Type"] == g_h["Content-Type"], (path, dict(h_h))
            if path != "/metrics":  # its numbers move between the two requests
                assert int(h_h["Content-Length"]) == len(g_body), (path, dict(h_h), len(g_body))
        # the raw bytes: a HEAD's answer ends at its headers, the next answer follows on the same socket
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)
        s.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        answers = got.split(b"HTTP/1.1 ")
        assert len(answers) == 3 and answers[1].endswith(b"\r\n\r\n"), got
        assert answers[2].startswith(b"200") and answers[2].endswith(b'{"status":"ok"}'), got
        status, h, raw = request(srv, "HEAD", "/v1/completions")
        assert status == 405 and h["Allow"] == "POST, OPTIONS" and raw == b"", (status, dict(h))
        assert srv.stop() == 0


def allow_lists_head():
    """405 and OPTIONS name HEAD among a GET route's methods (RFC 9110)."""
    with Server() as srv:
        for path in GET_ROUTES:
            status, h, raw = request(srv, "DELETE", path)
            error_of(status, raw, 405)
            assert h["Allow"] == "GET, HEAD, OPTIONS", (path, dict(h))
            status, h, _ = request(srv, "OPTIONS", path)
            assert status == 204 and h["Allow"] == "GET, HEAD, OPTIONS", (path, status, dict(h))
        status, h, _ = request(srv, "OPTIONS", "/v1/completions")
        assert status == 204 and h["Allow"] == "POST, OPTIONS", dict(h)
        assert srv.stop() == 0


def models_id_without_v1():
    """/models/{id} is /v1/models/{id}, as /models is /v1/models."""
    with Server() as srv:
        for alias in ("", ":entropix"):
            status, _, raw = request(srv, "GET", f"/models/stories260K.f32{alias}")
            assert status == 200, (status, raw)
            assert raw == request(srv, "GET", f"/v1/models/stories260K.f32{alias}")[2], raw
        status, _, raw = request(srv, "GET", "/models/nope")
        assert error_of(status, raw, 404, "model")["code"] == "model_not_found"
        assert srv.stop() == 0


# ---------------------------------------------------------------------------------------------
# 503 and Retry-After; a client that leaves mid-generation (499)

CHAT = {"messages": [{"role": "user", "content": "Tell me everything."}], "seed": 1, "max_tokens": 16000}


def retry_after(h):
    v = h["Retry-After"]
    assert v is not None and re.fullmatch(r"[1-9][0-9]*", v), dict(h)
    return int(v)


def busy_503_has_retry_after():
    """A full queue's 503, a streaming request's included, and the connection limit's 503 say
    when to try again."""
    with Server("-c", "16384", "--parallel", "1", "--queue", "0", model="qwen3-tiny.f32") as srv:
        running = post_raw(srv, CHAT)
        wait_for("the slot busy", lambda: metrics(srv)["entropix_slots_busy"] == 1)
        status, h, raw = request(srv, "POST", "/v1/chat/completions", dict(CHAT, max_tokens=2))
        e = error_of(status, raw, 503)
        assert e["code"] == "queue_full", e
        retry_after(h)
        # a stream too: the queue is checked before its status line, so it gets the same 503
        status, h, raw = request(srv, "POST", "/v1/chat/completions", dict(CHAT, max_tokens=2, stream=True))
        e = error_of(status, raw, 503)
        assert e["code"] == "queue_full" and h["Content-Type"] == "application/json", (e, dict(h))
        retry_after(h)
        running.close()
        wait_for("the slot freed", lambda: metrics(srv)["entropix_slots_busy"] == 0)
        assert srv.stop() == 0
    with Server("--max-conn", "1") as srv:
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)  # the one of --max-conn 1
        wait_for("2 connections open", lambda: metrics(srv)["entropix_connections"] >= 2)
        status, h, raw = request(srv, "GET", "/v1/models")
        e = error_of(status, raw, 503)
        assert e["code"] == "too_many_connections", e
        retry_after(h)
        idle.close()
        assert srv.stop() == 0


def queued_stream_told_when_to_retry():
    """A stream still queued when the drain begins had its 200 status line already: its 503
    (shutting_down) comes as an error event, which says when to try again as a 503's Retry-After
    does: SSE's retry field (milliseconds) and error.retry_after (seconds)."""
    with Server("-c", "16384", "--parallel", "1", "--queue", "1", "--drain-timeout", "1", model="qwen3-tiny.f32") as srv:
        running = post_raw(srv, CHAT)
        wait_for("the slot busy", lambda: metrics(srv)["entropix_slots_busy"] == 1)
        queued = post_raw(srv, dict(CHAT, max_tokens=2, stream=True))
        wait_for("one queued", lambda: metrics(srv)["entropix_queue_length"] == 1)
        srv.p.send_signal(signal.SIGTERM)
        got = b""
        while b"data: [DONE]" not in got:
            d = queued.recv(4096)
            assert d, got
            got += d
        assert got.startswith(b"HTTP/1.1 200"), got
        m = re.search(rb"\n(retry: (\d+)\n)?data: (\{\"error\".*)\n\n", got)
        assert m, got
        e = json.loads(m.group(3))["error"]
        assert e["code"] == "shutting_down", e
        assert m.group(1) and int(m.group(2)) >= 1000, got  # a retry field, and it waits a second or more
        assert e.get("retry_after") == int(m.group(2)) // 1000, e
        queued.close(), running.close()
        rc = srv.p.wait(timeout=CAP_S)  # the drain ends on its own: a second signal would exit at once
        assert rc == 0, (rc, srv.stderr())


def logged(srv, status, path="/v1/chat/completions"):
    return re.findall(rf"^\S+ POST {re.escape(path)} {status} .*$", srv.stderr(), re.M)


def departed_client_logged_499():
    """A client that leaves while its generation runs, plain or streamed, is logged 499; one
    that reads its answer to the end, 200. Neither is an error in /metrics (nothing was answered
    with an error), and each is one request."""
    with Server("-c", "16384", model="qwen3-tiny.f32") as srv:
        for stream in (False, True):
            s = post_raw(srv, dict(CHAT, stream=stream))
            if stream:  # its first event: the answer had begun
                got = b""
                while b"data: {" not in got:
                    d = s.recv(4096)
                    assert d, got
                    got += d
            wait_for("generating", lambda: metrics(srv)["entropix_slots_busy"] == 1)
            s.close()
            wait_for("the slot freed", lambda: metrics(srv)["entropix_slots_busy"] == 0)
        wait_for("two 499 lines", lambda: len(logged(srv, 499)) == 2)
        for stream in (False, True):
            status, _, raw = request(srv, "POST", "/v1/chat/completions", dict(CHAT, max_tokens=3, stream=stream))
            assert status == 200 and (b"[DONE]" in raw if stream else json.loads(raw)["usage"]["completion_tokens"] == 3)
        wait_for("two 200 lines", lambda: len(logged(srv, 200)) == 2)
        assert len(logged(srv, 499)) == 2 and not logged(srv, 503), srv.stderr()
        m = metrics(srv)
        assert m["entropix_requests_total"] == 4 and m["entropix_request_errors_total"] == 0, m
        assert srv.stop() == 0


def plain_answer_cut_logged_499():
    """A plain request whose client leaves while its ready answer is being sent is logged 499,
    as a stream's is, with its tokens: the client reads nothing of an answer bigger than both
    sockets' buffers, then resets the connection. The same request read whole: 200."""
    big = dict(CHAT, max_tokens=300, logprobs=True, top_logprobs=20, entropix={"metrics": True})  # ~900 KB
    with Server(model="qwen3-tiny.f32") as srv:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
        s.connect(("127.0.0.1", srv.port))
        body = json.dumps(big).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_for("the answer ready", lambda: (lambda m: m["entropix_slots_busy"] == 0
                                              and m["entropix_completion_tokens_total"] > 0)(metrics(srv)))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
        s.close()
        wait_for("its log line", lambda: re.search(r" POST /v1/chat/completions \d+ ", srv.stderr()))
        lines = logged(srv, 499)
        assert len(lines) == 1 and not logged(srv, 200), [line for line in srv.stderr().splitlines() if " POST " in line]
        assert re.search(r" prompt=\d+ completion=[1-9]\d* ", lines[0]), lines
        status, _, raw = request(srv, "POST", "/v1/chat/completions", big)
        assert status == 200 and len(raw) > 256 * 1024, (status, len(raw))
        wait_for("a 200 line", lambda: len(logged(srv, 200)) == 1)
        m = metrics(srv)
        assert m["entropix_requests_total"] == 2 and m["entropix_request_errors_total"] == 0, m
        assert srv.stop() == 0


def logged_as_requested():
    """A generation request is logged under the path the client sent: /completions and
    /chat/completions without /v1 (routes of their own, as llama-server has them) stay so in the
    log, plain or streamed, beside the /v1 paths."""
    paths = ("/chat/completions", "/completions", "/v1/chat/completions", "/v1/completions")
    with Server(model="qwen3-tiny.f32") as srv:
        for path in paths:
            for stream in (False, True):
                body = dict(max_tokens=2, stream=stream,
                            **({"messages": CHAT["messages"]} if "chat" in path else {"prompt": "Once"}))
                status, _, raw = request(srv, "POST", path, body)
                assert status == 200, (path, status, raw)
        wait_for("eight 200 lines", lambda: len(re.findall(r" POST \S+ 200 ", srv.stderr())) == 8)
        for path in paths:
            assert len(logged(srv, 200, path)) == 2, (path, srv.stderr())
        assert srv.stop() == 0


# ---------------------------------------------------------------------------------------------
# best_of

def completion(srv, **fields):
    status, _, raw = request(srv, "POST", "/v1/completions", dict(prompt="Once upon a time", **fields))
    assert status == 200, (status, raw)
    return json.loads(raw)


def mean_logprob(choice):
    lps = choice["logprobs"]["token_logprobs"]
    return sum(lps) / len(lps) if lps else -math.inf


def best_of_keeps_the_likeliest():
    """best_of candidates are the n choices of the same seed (candidate i draws with seed + i);
    the n returned are those of the highest mean log-probability per token, best first, indexed
    from 0 (best_of == n: the n as they ran); usage counts every candidate's tokens."""
    with Server() as srv:
        ask = dict(seed=5, max_tokens=12, temperature=1.5)
        every = completion(srv, n=4, logprobs=0, **ask)
        ranked = sorted(every["choices"], key=lambda c: -mean_logprob(c))  # stable: ties keep their order
        total = every["usage"]["completion_tokens"]
        assert len({c["text"] for c in every["choices"]}) > 1, every  # the candidates differ
        for n, lp in ((1, None), (2, None), (2, 0), (3, 0)):
            extra = {} if lp is None else {"logprobs": lp}
            got = completion(srv, n=n, best_of=4, **ask, **extra)
            assert [c["text"] for c in got["choices"]] == [c["text"] for c in ranked[:n]], (n, got, ranked)
            assert [c["index"] for c in got["choices"]] == list(range(n)), got
            assert got["usage"]["completion_tokens"] == total, (got["usage"], total)
            assert all((c["logprobs"] is None) == (lp is None) for c in got["choices"]), got
        same = completion(srv, n=4, best_of=4, **ask)  # nothing to choose: the n choices as they ran
        assert [c["text"] for c in same["choices"]] == [c["text"] for c in every["choices"]], same
        one = completion(srv, best_of=4, **ask)  # n absent: 1
        assert one["choices"][0]["text"] == ranked[0]["text"] and len(one["choices"]) == 1, one
        plain = completion(srv, best_of=1, **ask)
        assert plain["choices"][0]["text"] == every["choices"][0]["text"], plain
        status, _, raw = request(srv, "POST", "/v1/completions", dict(prompt="x", n=3, best_of=2))
        assert "at least n" in error_of(status, raw, 400, "best_of")["message"]
        status, _, raw = request(srv, "POST", "/v1/completions", dict(prompt="x", best_of=2, stream=True))
        assert "stream" in error_of(status, raw, 400, "best_of")["message"]
        # streamed with best_of == n: the n choices, nothing to choose
        status, _, raw = request(srv, "POST", "/v1/completions", dict(prompt="x", best_of=2, n=2, stream=True, max_tokens=2))
        assert status == 200 and raw.endswith(b"data: [DONE]\n\n"), raw
        assert srv.stop() == 0


# ---------------------------------------------------------------------------------------------
# Duplicate keys

def duplicate_keys_refused():
    """A key twice in one object is refused, named with its path (Python's json keeps the last
    value, cJSON the first: a client must not believe its second value was used)."""
    with Server(model="qwen3-tiny.f32") as srv:
        cases = (
            (b'{"prompt": "x", "max_tokens": 2, "temperature": 0, "temperature": 1}', "/v1/completions", "temperature"),
            (b'{"max_tokens": 2, "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "a", "content": "b"}]}',
             "/v1/chat/completions", "messages[1].content"),
            (b'{"prompt": "x", "max_tokens": 2, "entropix": {"sampler": "greedy", "sampler": "entropix"}}', "/v1/completions",
             "entropix.sampler"),
        )
        for body, path, where in cases:
            status, _, raw = request(srv, "POST", path, body)
            e = error_of(status, raw, 400, where)
            assert f"duplicate key '{where.split('.')[-1]}'" in e["message"] and where in e["message"], e
        status, _, raw = request(srv, "POST", "/v1/completions",
                                 b'{"prompt": "x", "max_tokens": 2, "stop": ["a"], "entropix": {"metrics": false}}')
        assert status == 200, raw  # the same key in different objects is no duplicate
        assert srv.stop() == 0


check("HEAD is GET without a body", head_is_get_without_a_body)
check("Allow lists HEAD on the GET routes", allow_lists_head)
check("/models/{id} without /v1", models_id_without_v1)
check("503 says Retry-After", busy_503_has_retry_after)
check("a queued stream's shutting_down event says when to retry", queued_stream_told_when_to_retry)
check("a client gone mid-generation is logged 499", departed_client_logged_499)
check("a generation is logged under the path requested", logged_as_requested)
check("a plain answer whose client left while it was sent is logged 499", plain_answer_cut_logged_499)
check("best_of returns the likeliest of its candidates", best_of_keeps_the_likeliest)
check("duplicate keys refused, named with their path", duplicate_keys_refused)
check.finish()
