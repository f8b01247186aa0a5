"""What the server test scripts share: a check runner that reports each check and goes on, and
build/tools/server as a process on loopback (an ephemeral port).

Every wait polls a state under CAP_S seconds, a cap that can only fail a check, never pass it:
the server's start (its "listening on" line) and its exit after SIGTERM.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

CAP_S = 60


def wait_for(what, fn):
    """Polls fn() until it is true; fails after CAP_S."""
    deadline = time.monotonic() + CAP_S
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {CAP_S} s")
        time.sleep(0.05)


def post_raw(srv, body):
    """A chat generation request on a socket of its own (its answer left unread): the socket."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=CAP_S)
    body = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s


def parse_metrics(text):
    """/metrics' Prometheus text as {name: value} (the comment lines left out)."""
    return {k: float(v) for k, v in (line.split(" ") for line in text.splitlines() if line and line[0] != "#")}


class Checks:
    """check(name, fn): run fn, print 'ok' or 'FAIL' with the exception; finish() prints
    'N passed, N failed' and exits 1 when any check failed."""

    def __init__(self):
        self.passed, self.failed = 0, 0

    def __call__(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"ok   {name}")
        except Exception as e:  # report and go on: every check runs
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    def finish(self, note=""):
        print(f"{self.passed} passed, {self.failed} failed{note}")
        sys.exit(1 if self.failed else 0)


class ServerProcess:
    """SERVER MODEL_PATH --port 0 -t 1 FLAGS..., stderr kept in a file; .port and .url once it
    listens. A context manager: leaving it kills a server that is still running."""

    def __init__(self, server, model_path, *flags, env=None, poll_s=0.02):
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen([server, model_path, "--port", "0", "-t", "1", *flags],
                                  stdout=subprocess.DEVNULL, stderr=self.err, env=dict(os.environ, **(env or {})))
        deadline, text = time.monotonic() + CAP_S, b""
        while b"listening on" not in text:
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.p.kill()
                raise RuntimeError(f"server did not start: {self.stderr()}")
            time.sleep(poll_s)
            self.err.seek(0)
            text = self.err.read()
        self.port = int(re.search(rb"http://127\.0\.0\.1:(\d+)", text).group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def stop(self, cap_s=CAP_S):
        """SIGTERM; the exit status, or 'no exit' (then killed) after cap_s."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return f"no exit {cap_s} s after SIGTERM"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class ModelServer(ServerProcess):
    """The server over MODELS_DIR/MODEL.bin, named .model; .client() is the official openai client
    on it (imported here, so that the scripts without the client's venv can use this module)."""

    def __init__(self, server, models_dir, model, *flags, env=None):
        super().__init__(server, f"{models_dir}/{model}.bin", *flags, env=env)
        self.model = model

    def client(self, key="none"):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)
