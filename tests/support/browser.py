"""A headless Chromium driven over the DevTools protocol, standard library only.

Chromium's ``--remote-debugging-pipe`` speaks the protocol over two pipes (it reads commands on its
file descriptor 3 and writes answers on 4, each message JSON ended by a NUL byte), so no WebSocket
client is needed. ``Browser`` opens pages, evaluates JavaScript in them and takes screenshots::

    with Browser() as browser:
        tab = browser.open("file:///.../site/index.html")
        browser.evaluate(tab, "document.title")
        browser.screenshot(tab, Path("home.png"))
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

#: Debian's package installs /usr/bin/chromium (a launcher script for /usr/lib/chromium/chromium)
CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "chromium", "chromium-browser",
              "google-chrome")


def find_chromium() -> str | None:
    """The Chromium binary to drive: ``$CHROMIUM`` if set, else the first of ``CANDIDATES`` found."""
    for name in ([os.environ["CHROMIUM"]] if os.environ.get("CHROMIUM") else []) + list(CANDIDATES):
        path = shutil.which(name) if not os.path.isabs(name) else (name if os.access(name, os.X_OK) else None)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium process, offline (``--no-proxy-server`` and no network service needed:
    the pages are ``file://`` URLs), with a throwaway profile."""

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise BrowserError("no Chromium found (set CHROMIUM=/path/to/chromium)")
        self.width, self.height, self.timeout = width, height, timeout
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict] = []

    # ------------------------------------------------------------ process and pipes

    def __enter__(self) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="bnnzoo-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        args = [self.binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--no-proxy-server",
                "--allow-file-access-from-files", "--hide-scrollbars", "--mute-audio",
                f"--window-size={self.width},{self.height}", f"--user-data-dir={self._profile.name}",
                "about:blank"]

        def pipes():  # in the child: its fd 3 reads our commands, its fd 4 carries its answers
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w)]  # clear of 3, 4
            os.dup2(high[0], 3)  # dup2 leaves the copies inheritable: they survive the exec
            os.dup2(high[1], 4)

        # close_fds=False: it would close 3 and 4 after pipes() ran; every other descriptor of this
        # process is close-on-exec (PEP 446), so nothing else leaks into Chromium
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=pipes)
        os.close(to_child_r)
        os.close(from_child_w)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (BrowserError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed the pipe (exit status {self._process.poll()})")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer)

    def wait_event(self, method: str, session: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._read_message(deadline))

    # ------------------------------------------------------------ pages

    def open(self, url: str) -> str:
        """Open ``url`` in a new tab, wait for its load event; returns the tab's session."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                  session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return session

    def evaluate(self, session: str, expression: str, await_promise: bool = False):
        """The value of a JavaScript expression in the tab (JSON-serialisable values only)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": await_promise}, session=session)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails'].get('text')}: "
                               f"{result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def screenshot(self, session: str, path: Path, full_page: bool = True) -> Path:
        """A PNG of the tab (the whole page when ``full_page``, else the window)."""
        params: dict = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            size = self.evaluate(session, "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 16000), "scale": 1}
        data = self.send("Page.captureScreenshot", params, session=session)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
