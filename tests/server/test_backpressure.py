#!/usr/bin/env python3
"""build/tools/server's back-pressure, queue limit and disconnects, without timing assumptions.

    python test_backpressure.py SERVER MODELS_DIR

A streaming client that stops reading pauses its generation once the server's bounded stream
buffer (64 KiB) and the sockets' buffers are full; the slot stays held. With --parallel 1
--queue 1 a second request then waits and a third gets 503; when the stalled client closes its
socket its generation is cancelled, the slot freed and the waiting request answered; with
--parallel 2 the other slot keeps answering while one client stalls. Every wait
polls a state (GET /metrics) under a generous cap that can only fail the check, never pass it.
Prints 'N passed, N failed'; exit 1 when any check failed. Run by tests/test_server.c.
"""
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from harness import CAP_S, Checks, ServerProcess

SERVER, MODELS = sys.argv[1], sys.argv[2]
PENDING = 64 * 1024  # tools/server/http.c SRV_STREAM_PENDING
RCVBUF = 4096        # the stalled client's receive buffer (the kernel doubles it)
CTX = 16384
check = Checks()


def start(*flags):
    """A server over qwen3-tiny with a CTX-token context."""
    return ServerProcess(SERVER, f"{MODELS}/qwen3-tiny.f32.bin", "-c", str(CTX), *flags, poll_s=0.05)


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=CAP_S) as r:
        text = r.read().decode()
    return {k: float(v) for k, v in (l.split(" ") for l in text.splitlines() if l and not l.startswith("#"))}


def wait_for(port, name, value):
    """Polls /metrics until `name` equals value; fails after CAP_S."""
    deadline = time.monotonic() + CAP_S
    while True:
        m = metrics(port)
        if m[name] == value:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} is {m[name]}, not {value}, after {CAP_S} s: {m}")
        time.sleep(0.05)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=CAP_S * 2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# The stalled stream: every token carries its 20 top logprobs and its metrics object.
STALL = {"messages": [{"role": "user", "content": "Tell me everything."}], "max_tokens": CTX - 16, "seed": 1,
         "stream": True, "logprobs": True, "top_logprobs": 20, "entropix": {"metrics": True}}


def stall_must_block():
    """The stalled generation cannot finish inside the buffers, so it must wait for its reader.
    Each token's chat logprobs entry holds 20 top entries of at least
    {"token":"","logprob":-0.0,"bytes":[]} (38 bytes): 760 bytes a token before its metrics.
    The buffers: the server's 64 KiB, the server socket's send buffer (the server fixes it at
    64 KiB, which the kernel doubles; counted here as tcp_wmem's max, what autotuning could reach
    if that setsockopt failed) and the client's receive buffer (2 x RCVBUF)."""
    wmem_max = int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
    out_min = STALL["max_tokens"] * 20 * 38
    room = PENDING + wmem_max + 2 * RCVBUF
    assert out_min > 2 * room, f"{out_min} bytes of output may fit in {room} bytes of buffers: raise CTX"


def open_stalled(port, extra=None):
    """A streaming request that reads its first event, then nothing more."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: the window is set then
    s.settimeout(CAP_S)
    s.connect(("127.0.0.1", port))
    body = json.dumps(dict(STALL, **(extra or {}))).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"data: {" not in got:
        chunk = s.recv(1024)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return s


def queue_full_then_disconnect():
    srv = start("--parallel", "1", "--queue", "1")
    port = srv.port
    try:
        stalled = open_stalled(port)
        wait_for(port, "entropix_slots_busy", 1)
        wait_for(port, "entropix_slots_stalled", 1)  # back-pressure: the slot waits for its reader
        second = {}
        t = threading.Thread(target=lambda: second.update(r=post(port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 2})))
        t.start()
        wait_for(port, "entropix_queue_length", 1)
        status, body = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                           "max_tokens": 2})
        assert status == 503, (status, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["code"] == "queue_full" and "\n" not in body["error"]["message"], body
        m = metrics(port)
        assert m["entropix_slots_busy"] == 1 and m["entropix_queue_length"] == 1, m
        stalled.close()  # unread bytes: the kernel resets the connection; the server cancels
        t.join(CAP_S * 2)
        assert not t.is_alive(), "the queued request was not answered after the stalled client left"
        status, body = second["r"]
        assert status == 200 and body["usage"]["completion_tokens"] >= 1, (status, body)
        m = wait_for(port, "entropix_slots_busy", 0)
        assert m["entropix_slots_stalled"] == 0 and m["entropix_queue_length"] == 0, m
    finally:
        rc = srv.stop()
    assert rc == 0, f"exit {rc}"


def stalled_client_does_not_hold_other_slots(extra=None):
    """With --parallel 2 the slots decode in one batched step (forward groups, on the CPU): a slot
    whose client stopped reading must step out of it, or every other slot waits for that client.
    extra: the stalled request's own fields (the agent pool, which decodes on replicas of its own
    and must never be in the slots' step)."""
    srv = start("--parallel", "2")
    port = srv.port
    try:
        stalled = open_stalled(port, extra)
        wait_for(port, "entropix_slots_stalled", 1)
        status, body = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 8, "seed": 3})
        assert status == 200 and body["usage"]["completion_tokens"] >= 1, (status, body)
        stalled.close()
        wait_for(port, "entropix_slots_busy", 0)
    finally:
        rc = srv.stop()
    assert rc == 0, f"exit {rc}"


def sigterm_with_stalled_client():
    """A client that stops reading must not keep the server from stopping."""
    srv = start()
    port = srv.port
    stalled = open_stalled(port)
    try:
        wait_for(port, "entropix_slots_stalled", 1)
    finally:
        rc = srv.stop()  # the client still connected, not reading
        stalled.close()
    assert rc == 0, f"exit {rc}"


check("stalled stream cannot finish inside the buffers", stall_must_block)
check("queue full -> 503, disconnect frees the slot", queue_full_then_disconnect)
check("a stalled client does not hold up the other slots", stalled_client_does_not_hold_other_slots)
check("a stalled agent-pool client does not hold up the other slots", lambda: stalled_client_does_not_hold_other_slots(
    {"entropix": {"sampler": "agents", "n": 2, "metrics": True}}))
check("SIGTERM with a stalled client exits 0", sigterm_with_stalled_client)
check.finish()
