#!/usr/bin/env python3
"""page_driver.py — opens the server's chat page in headless chromium, waits until the page says
it is done, hovers over its first token, saves a screenshot and prints the page's DOM.

    python3 tests/server/page_driver.py CHROMIUM URL SHOT.png [WIDTH [static]]

(WIDTH: the viewport's CSS pixels, default 1200; <html data-scroll-width> in the printed DOM is
the page's width as laid out, wider than WIDTH when something overflows sideways. "static": any
page, e.g. a --report file, taken once it has loaded and its scripts have run.)

tests/test_page.c runs it and checks the DOM. chromium's --dump-dom cannot be used here: it dumps
when the page has loaded (or its virtual time ran out), and a streamed answer is still arriving
then; whether it is complete would depend on timing. So this drives chromium over the DevTools
protocol instead (--remote-debugging-pipe: commands as NUL-terminated JSON on fd 3, replies and
events on fd 4; the Python standard library only) and waits for the page's own signal,
<body data-ready="1">, which the page sets once its start-up request and the answer it sent have
finished (or failed). Exit 0 with the DOM on stdout; otherwise 1 with one line on stderr.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

WAIT_S = 240  # a safety net for a page that never finishes, not a threshold the test measures


class Chromium:
    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # fds 3 and 4 in the child, as --remote-debugging-pipe expects (moved out of the way
        # first: either pipe end may itself be fd 3 or 4)
        def child_fds():
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
             "--user-data-dir=" + profile, "--remote-debugging-pipe", "--window-size=1200,900", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read_message(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chrome, 65536)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe (exit %s)" % self.proc.poll())
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read_message()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"].get("message")))
                return m["result"]
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method):
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method:
                    return self.events.pop(i)
            self.events.append(self._read_message())

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def evaluate(c, s, expression):
    r = c.call("Runtime.evaluate", s, expression=expression, awaitPromise=True, returnByValue=True)
    if "exceptionDetails" in r:
        raise RuntimeError("page script: %s" % r["exceptionDetails"].get("exception", {}).get("description", r["exceptionDetails"].get("text")))
    return r["result"].get("value")


def main():
    if len(sys.argv) not in (4, 5, 6) or (len(sys.argv) == 6 and sys.argv[5] != "static"):
        print("usage: page_driver.py CHROMIUM URL SHOT.png [WIDTH [static]]", file=sys.stderr)
        return 2
    binary, url, shot = sys.argv[1:4]
    width = int(sys.argv[4]) if len(sys.argv) >= 5 else 1200
    static = len(sys.argv) == 6
    profile = tempfile.mkdtemp(prefix="emx_page_chromium_")
    c = Chromium(binary, profile)
    try:
        target = c.call("Target.createTarget", url="about:blank")["targetId"]
        s = c.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        c.call("Page.enable", s)
        c.call("Emulation.setDeviceMetricsOverride", s, width=width, height=900, deviceScaleFactor=1, mobile=width < 600)
        c.call("Page.navigate", s, url=url)
        c.wait_event("Page.loadEventFired")
        ready = evaluate(c, s, """new Promise(function (done) {
            var t0 = Date.now();
            (function poll() {
              if (%s) return done(document.readyState === "complete");  // a page of its own: loaded
              if (!document.getElementById("log")) return done(false);  // not the chat page (an error body)
              if (document.body.getAttribute("data-ready") === "1") return done(true);
              if (Date.now() - t0 > %d) return done(false);
              setTimeout(poll, 50);
            })();
          })""" % ("true" if static else "false", WAIT_S * 1000))
        if not ready:
            print("page_driver: %s is not the chat page, or did not set data-ready=1 within %d s: %.300s"
                  % (url, WAIT_S, evaluate(c, s, "document.documentElement.outerHTML")), file=sys.stderr)
            return 1
        # Hover over the first token so the screenshot shows its metrics card.
        box = evaluate(c, s, """(function () { var t = document.querySelector(".msg.assistant .tok:not(:empty)");
            if (!t) return null; t.scrollIntoView({block: "center"}); var r = t.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2]; })()""")
        if box:
            c.call("Input.dispatchMouseEvent", s, type="mouseMoved", x=box[0], y=box[1])
        png = c.call("Page.captureScreenshot", s, format="png")["data"]
        with open(shot, "wb") as f:
            f.write(base64.b64decode(png))
        evaluate(c, s, "document.documentElement.setAttribute('data-scroll-width', document.documentElement.scrollWidth)")
        sys.stdout.write(evaluate(c, s, "document.documentElement.outerHTML"))
        return 0
    except (RuntimeError, OSError, ValueError) as e:
        print("page_driver: %s" % e, file=sys.stderr)
        return 1
    finally:
        c.close()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
