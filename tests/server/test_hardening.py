#!/usr/bin/env python3
"""build/tools/server against slow, absent, hostile and departing clients, and its shutdown.

    python test_hardening.py SERVER MODELS_DIR

Every check starts its own server on loopback (an ephemeral port) and drives it with raw
sockets and urllib, bounded: a wait polls a state (/metrics, a socket, the process) under a cap
that can only fail the check, never pass it; no check measures a time. Prints
'N passed, N failed'; exit 1 when any check failed. Run by tests/test_server.c.
"""
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import CAP_S, Checks, ServerProcess, parse_metrics, post_raw, wait_for

SERVER, MODELS = sys.argv[1], sys.argv[2]
check = Checks()


class Server(ServerProcess):
    def __init__(self, *flags, model="qwen3-tiny.f32", env=None):
        path = model if model.startswith("/") else f"{MODELS}/{model}.bin"
        super().__init__(SERVER, path, *flags, env=env)


def request(url, body=None, headers=None, method=None, source="127.0.0.1"):
    """(status, headers, parsed JSON or bytes) of one request sent from address `source`."""
    import http.client
    host, port = url.split("//")[1].split("/")[0].split(":")
    path = "/" + url.split("//")[1].split("/", 1)[1] if url.count("/") > 2 else "/"
    conn = http.client.HTTPConnection(host, int(port), timeout=CAP_S, source_address=(source, 0))
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        h.setdefault("Content-Type", "application/json")
    conn.request(method or ("POST" if body is not None else "GET"), path, data, h)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    try:
        return r.status, r.headers, json.loads(raw.decode("utf-8"))  # strict: an error body must be UTF-8
    except ValueError:
        return r.status, r.headers, raw


def metrics(srv, source="127.0.0.1"):
    status, _, text = request(srv.url + "/metrics", source=source)
    assert status == 200, (status, text)
    return parse_metrics(text.decode())


def error_object(status, body, want_status, want_code=None):
    assert status == want_status, (status, body)
    assert isinstance(body, dict) and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert "\n" not in body["error"]["message"], body
    if want_code:
        assert body["error"]["code"] == want_code, body


def closed_unanswered(s):
    """True once the server closed socket s (reset or end of stream) without an HTTP answer."""
    try:
        data = s.recv(4096)
    except (BlockingIOError, socket.timeout):
        return False
    except ConnectionError:
        return True
    assert not data.startswith(b"HTTP/"), f"a slow request was answered: {data[:80]!r}"
    return data == b""


CHAT = {"messages": [{"role": "user", "content": "Tell me everything."}], "seed": 1}


# ---------------------------------------------------------------------------------------------
# Slow and many clients

def slowloris_closed_and_health_answered():
    """Requests sent a byte at a time are closed at the header deadline, never answered; the
    per-address limit refuses the rest of them, and another address is still served."""
    with Server("--header-timeout", "2", "--max-conn-per-addr", "4") as srv:
        slow = []
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)
            s.setblocking(False)
            slow.append(s)
        line = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: "
        stop = threading.Event()

        def drip():  # one byte per socket every 0.3 s, never the end of the headers
            i = 0
            while not stop.is_set():
                for s in slow:
                    try:
                        s.send(line[i % len(line):i % len(line) + 1])
                    except OSError:
                        pass
                i += 1
                time.sleep(0.3)
        t = threading.Thread(target=drip)
        t.start()
        try:
            status, _, body = request(srv.url + "/health", source="127.0.0.2")  # another address
            assert status == 200 and body == {"status": "ok"}, (status, body)
            wait_for("every slow connection closed", lambda: all([closed_unanswered(s) for s in slow]))
            wait_for("the closes counted", lambda: metrics(srv)["entropix_connections_timed_out_total"] >= 4)
        finally:
            stop.set()
            t.join()
            for s in slow:
                s.close()
        assert srv.stop() == 0


def idle_connections_leave_health_answered():
    """With the default limits, idle connections from one address stop at the per-address limit
    (another address is served), and past --max-conn a connection is served /health and /metrics
    only: a server full of clients can still be watched."""
    with Server() as srv:
        idle = []
        try:
            for _ in range(40):  # one address: 32 admitted, the rest closed at once
                idle.append(socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S))
            status, _, body = request(srv.url + "/health", source="127.0.0.2")
            assert status == 200 and body == {"status": "ok"}, (status, body)
            for a in range(3, 6):  # 3 more addresses: 64 open in all, --max-conn's default
                for _ in range(11):
                    s = socket.socket()
                    s.bind((f"127.0.0.{a}", 0))
                    s.connect(("127.0.0.1", srv.port))
                    idle.append(s)
            wait_for("65 connections open", lambda: metrics(srv, "127.0.0.9")["entropix_connections"] >= 66)
            error_object(*request(srv.url + "/v1/models", source="127.0.0.9")[::2], 503, "too_many_connections")
            status, _, body = request(srv.url + "/health", source="127.0.0.9")
            assert status == 200 and body == {"status": "ok"}, (status, body)
        finally:
            for s in idle:
                s.close()
        assert srv.stop() == 0


# ---------------------------------------------------------------------------------------------
# Clients that leave, pools that would run away

RUNAWAY = {"n": 2, "check_every": 1, "window": 1, "margin": -1000, "max_rollbacks": 16}


def runaway_pool_refused():
    """max_rollbacks past the server's bound is refused; the pool's memory is admitted as ./run
    admits it."""
    with Server("-c", "16384", env={"EMX_MEMAVAILABLE_MB": "16"}) as srv:
        status, _, body = request(srv.url + "/v1/chat/completions",
                                  dict(CHAT, max_tokens=8, entropix=dict(RUNAWAY, max_rollbacks=1000000)))
        error_object(status, body, 400)
        assert body["error"]["param"] == "entropix.max_rollbacks" and "at most 16" in body["error"]["message"], body
        # 8 workers' replicas at the context of 16384: past the 16 MiB said to be available
        status, _, body = request(srv.url + "/v1/chat/completions",
                                  dict(CHAT, max_tokens=8, entropix={"n": 8, "workers": 8}))
        error_object(status, body, 400, "insufficient_memory")
        assert "does not fit" in body["error"]["message"], body
        assert srv.stop() == 0


def departed_clients_stop_their_pools():
    """A pool that commits little (every verdict BAD, rolled back) writes little or nothing to its
    client; when the client leaves, the server notices anyway and the pool stops: a plain request
    running, and a stream waiting in the queue behind it."""
    with Server("-c", "16384") as srv:
        running = post_raw(srv, dict(CHAT, max_tokens=16000, entropix=RUNAWAY))
        wait_for("the pool running", lambda: metrics(srv)["entropix_slots_busy"] == 1)
        queued = post_raw(srv, dict(CHAT, max_tokens=16000, stream=True, entropix=RUNAWAY))
        wait_for("the stream queued", lambda: metrics(srv)["entropix_queue_length"] == 1)
        queued.close()
        running.close()
        wait_for("the slot and the queue freed after the clients left",
                 lambda: (lambda m: m["entropix_slots_busy"] == 0 and m["entropix_queue_length"] == 0)(metrics(srv)))
        assert srv.stop() == 0


# ---------------------------------------------------------------------------------------------
# Shutdown

def read_events(s, into):
    """Reads the SSE response on s to its end into `into` (bytes)."""
    while True:
        try:
            d = s.recv(65536)
        except OSError:
            return
        if not d:
            return
        into.append(d)


def sigterm_lets_a_reading_stream_end():
    """SIGTERM during a stream whose client reads: within the drain the generation finishes and
    the client gets all of it, [DONE] last; the server exits 0. The drain (and the caps on the
    exit and the reader) are far beyond what 800 tokens take even in a sanitized build, so whether
    the generation ends in time never depends on the machine's speed."""
    with Server("-c", "16384", "--drain-timeout", "900") as srv:
        s = post_raw(srv, dict(CHAT, max_tokens=800, stream=True))
        got = []
        reader = threading.Thread(target=read_events, args=(s, got))
        reader.start()
        wait_for("generating", lambda: metrics(srv)["entropix_slots_busy"] == 1)
        rc = srv.stop(cap_s=900)
        reader.join(900)
        assert rc == 0, f"exit {rc}: {srv.stderr()}"
        text = b"".join(got).decode()
        assert text.endswith("data: [DONE]\n\n\r\n0\r\n\r\n"), repr(text[-300:])
        last = [json.loads(l[6:]) for l in text.split("\n") if l.startswith("data: {")][-1]
        assert last["choices"][0]["finish_reason"] in ("stop", "length") and "shutdown" not in last["entropix"], last


def sigterm_ends_streams_properly():
    """SIGTERM during a long stream whose client reads: after --drain-timeout the stream ends
    with a finish_reason, entropix.shutdown and [DONE]; a plain request gets a 503 error object;
    the server exits 0."""
    with Server("-c", "16384", "--parallel", "2", "--drain-timeout", "1") as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)
        body = json.dumps(dict(CHAT, max_tokens=16000, stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        got = []
        reader = threading.Thread(target=read_events, args=(s, got))
        reader.start()
        plain = {}
        t = threading.Thread(target=lambda: plain.update(r=request(srv.url + "/v1/chat/completions",
                                                                   dict(CHAT, max_tokens=16000))))
        t.start()
        wait_for("both generating", lambda: metrics(srv)["entropix_slots_busy"] == 2)
        rc = srv.stop()
        reader.join(CAP_S)
        t.join(CAP_S)
        assert rc == 0, f"exit {rc}: {srv.stderr()}"
        text = b"".join(got).decode()
        assert text.startswith("HTTP/1.1 200"), text[:200]
        # the last event is [DONE], then the chunked body's end
        assert text.endswith("data: [DONE]\n\n\r\n0\r\n\r\n"), repr(text[-300:])
        events = [json.loads(l[6:]) for l in text.split("\n") if l.startswith("data: {")]
        last = [e for e in events if e.get("choices")][-1]
        assert last["choices"][0]["finish_reason"] == "length" and last["entropix"]["shutdown"] is True, last
        status, _, body = plain["r"]
        error_object(status, body, 503, "shutting_down")


def second_signal_exits_at_once():
    """A second SIGTERM during the drain ends the server at once (by that signal)."""
    with Server("-c", "16384") as srv:
        def generate():
            try:
                request(srv.url + "/v1/chat/completions", dict(CHAT, max_tokens=16000))
            except OSError:
                pass  # the server is gone: what this check wants
        threading.Thread(target=generate, daemon=True).start()
        wait_for("generating", lambda: metrics(srv)["entropix_slots_busy"] == 1)
        srv.p.send_signal(signal.SIGTERM)
        wait_for("draining", lambda: b"draining" in srv.stderr().encode())
        srv.p.send_signal(signal.SIGTERM)
        rc = srv.p.wait(timeout=CAP_S)
        assert rc == -signal.SIGTERM, f"exit {rc}: {srv.stderr()}"


# ---------------------------------------------------------------------------------------------
# Web pages, keys, errors

def foreign_pages_refused():
    """A text/plain POST (what a foreign page can send without a preflight) is refused 415; a
    request with a foreign Origin 403; the server's own origin is served."""
    with Server(model="stories260K.f32") as srv:
        url = srv.url + "/v1/completions"
        req = json.dumps({"prompt": "Once", "max_tokens": 2}).encode()
        error_object(*request(url, req, {"Content-Type": "text/plain", "Origin": "http://evil.example"})[::2], 403,
                     "origin_not_allowed")
        error_object(*request(url, req, {"Content-Type": "text/plain"})[::2], 415, "unsupported_media_type")
        error_object(*request(url, req)[::2], 415, "unsupported_media_type")
        error_object(*request(url, {"prompt": "Once", "max_tokens": 2}, {"Origin": "http://evil.example"})[::2], 403,
                     "origin_not_allowed")
        error_object(*request(srv.url + "/v1/models", headers={"Origin": "http://evil.example"})[::2], 403)
        status, _, _ = request(url, {"prompt": "Once", "max_tokens": 2}, {"Origin": srv.url})
        assert status == 200
        assert srv.stop() == 0


def cors_allows_a_named_origin():
    """--cors ORIGIN: its preflight is answered, its requests served with the CORS headers."""
    with Server("--cors", "http://app.example:3000", model="stories260K.f32") as srv:
        url = srv.url + "/v1/completions"
        error_object(*request(url, {"prompt": "Once", "max_tokens": 2}, {"Origin": "http://evil.example"})[::2], 403)
        status, h, _ = request(url, method="OPTIONS", headers={"Origin": "http://app.example:3000",
                                                                "Access-Control-Request-Method": "POST"})
        assert status == 204 and h["Access-Control-Allow-Origin"] == "http://app.example:3000", (status, dict(h))
        assert "Content-Type" in h["Access-Control-Allow-Headers"] and h["Access-Control-Allow-Methods"] == "POST, OPTIONS"
        status, h, body = request(url, {"prompt": "Once", "max_tokens": 2}, {"Origin": "http://app.example:3000"})
        assert status == 200 and h["Access-Control-Allow-Origin"] == "http://app.example:3000", (status, body)
        m = metrics(srv)
        assert m["entropix_request_errors_total"] <= m["entropix_requests_total"], m
        assert srv.stop() == 0


def bearer_in_any_case():
    """The Authorization scheme is case-insensitive (RFC 9110)."""
    with Server("--api-key", "s3cret", model="stories260K.f32") as srv:
        url = srv.url + "/v1/models"
        error_object(*request(url)[::2], 401, "invalid_api_key")
        for auth in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret"):
            status, _, body = request(url, headers={"Authorization": auth})
            assert status == 200, (auth, status, body)
        assert srv.stop() == 0


def api_key_from_file_and_environment():
    with tempfile.NamedTemporaryFile("w", suffix=".key") as f:
        f.write("s3cret\n")
        f.flush()
        for flags, env in ((["--api-key-file", f.name], None), ([], {"ENTROPIX_API_KEY": "s3cret"})):
            with Server(*flags, model="stories260K.f32", env=env) as srv:
                url = srv.url + "/v1/models"
                error_object(*request(url)[::2], 401, "invalid_api_key")
                error_object(*request(url, headers={"Authorization": "Bearer wrong"})[::2], 401)
                for auth in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret"):
                    status, _, body = request(url, headers={"Authorization": auth})
                    assert status == 200, (auth, status, body)
                assert srv.stop() == 0


def errors_are_json_and_utf8():
    """Every error of the server's own is OpenAI's JSON object in valid UTF-8 (request() decodes
    strictly), the client's bytes escaped; /metrics never counts more errors than requests."""
    with Server("--max-body", "4096", model="stories260K.f32") as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)  # a path that is not UTF-8
        s.sendall(b"GET /\xc3\xa9\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = []
        read_events(s, got)
        s.close()
        head, _, raw = b"".join(got).partition(b"\r\n\r\n")
        error_object(int(head.split()[1]), json.loads(raw.decode("utf-8")), 404, "not_found")
        status, _, body = request(srv.url + "/v1/completions",
                                  b'{"prompt": "x", "entropix": {"sampler": "\xff\xfe"}}', {"Content-Type": "application/json"})
        error_object(status, body, 400)
        error_object(*request(srv.url + "/v1/completions", {"prompt": "x" * 5000})[::2], 413, "request_too_large")
        # a 405 says what the path allows (RFC 9110), as OPTIONS does
        for path, method, allow in (("/v1/completions", "PUT", "POST, OPTIONS"), ("/v1/chat/completions", "GET", "POST, OPTIONS"),
                                    ("/v1/models", "POST", "GET, HEAD, OPTIONS"), ("/health", "DELETE", "GET, HEAD, OPTIONS")):
            status, h, body = request(srv.url + path, method=method, body=b"{}", headers={"Content-Type": "application/json"})
            error_object(status, body, 405)
            assert h["Allow"] == allow, (path, method, dict(h))
            status, h, _ = request(srv.url + path, method="OPTIONS")
            assert status == 204 and h["Allow"] == allow, (path, status, dict(h))
        status, _, body = request(srv.url + "/v1/chat/completions",
                                  {"messages": [{"role": "\u00e9" * 30, "content": "x"}]})
        error_object(status, body, 400)
        for _ in range(3):
            request(srv.url + "/nothing")
        m = metrics(srv)
        assert m["entropix_request_errors_total"] <= m["entropix_requests_total"], m
        assert m["entropix_http_errors_total"] >= 5, m
        assert srv.stop() == 0


def changed_weight_served_only_with_no_verify():
    """A model whose weight changed: refused at startup (exit 1, the section named), served with
    --no-verify."""
    with open(f"{MODELS}/stories260K.q8.bin", "rb") as f:
        data = bytearray(f.read())
    data[-100] ^= 0x10
    with tempfile.NamedTemporaryFile(suffix=".bin") as m:
        m.write(data)
        m.flush()
        p = subprocess.run([SERVER, m.name, "--port", "0", "-t", "1"], capture_output=True, timeout=CAP_S)
        assert p.returncode == 1 and b"checksum mismatch in the tensor data" in p.stderr, p
        with Server("--no-verify", model=m.name) as srv:
            status, _, body = request(srv.url + "/v1/completions", {"prompt": "Once", "max_tokens": 2})
            assert status == 200, (status, body)
            assert srv.stop() == 0


check("idle connections: another address served, /health past --max-conn", idle_connections_leave_health_answered)
check("slow requests closed at their deadline, another address served", slowloris_closed_and_health_answered)
check("a runaway pool's options and memory refused", runaway_pool_refused)
check("departed clients stop their pools, running or queued", departed_clients_stop_their_pools)
check("SIGTERM: a reading stream ends whole, [DONE] last", sigterm_lets_a_reading_stream_end)
check("SIGTERM past --drain-timeout: finish_reason and [DONE], others 503", sigterm_ends_streams_properly)
check("a second signal exits at once", second_signal_exits_at_once)
check("foreign web pages refused", foreign_pages_refused)
check("--cors serves a named origin", cors_allows_a_named_origin)
check("Bearer in any case", bearer_in_any_case)
check("the API key from a file and the environment", api_key_from_file_and_environment)
check("a changed weight: refused at startup, served with --no-verify", changed_weight_served_only_with_no_verify)
check("errors are JSON in valid UTF-8, counted within requests", errors_are_json_and_utf8)
check.finish()
