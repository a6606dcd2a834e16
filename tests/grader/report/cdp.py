"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (fds 3 and 4,
NUL-terminated JSON), stdlib only: open a page, collect console errors, exceptions and network
requests, evaluate JavaScript, take a full-page screenshot."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--hide-scrollbars", "--force-device-scale-factor=1"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="tw-chromium-")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def child_fds() -> None:  # chromium reads commands on fd 3 and writes answers on fd 4
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # out of the way of 3 and 4 first
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            pass_fds=(3, 4, to_chrome_r, from_chrome_w), preexec_fn=child_fds)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.targets: dict[str, str] = {}  # session -> target, of the pages open

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe: "
                                   + (self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.poll() is not None else ""))
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + self.timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str, session: str | None = None) -> dict[str, Any]:
        """The first ``method`` event (of ``session``, where given) not waited for before."""
        def match(m: dict[str, Any]) -> bool:
            return m.get("method") == method and (session is None or m.get("sessionId") == session) \
                and not m.get("_seen")

        deadline = time.time() + self.timeout
        while True:
            m = next((m for m in self.events if match(m)), None)
            if m is None:
                self.events.append(self._read_message(deadline))
                continue
            m["_seen"] = True  # a later page's wait must not take this page's event
            return m

    def open(self, url: str, width: int = 1200, height: int = 900) -> str:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable", session=s)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=s)
        self.send("Page.navigate", {"url": url}, session=s)
        self.wait_for("Page.loadEventFired", s)
        self.targets[s] = target
        return s

    def close_page(self, session: str) -> None:
        """Close a page opened by ``open`` (Chromium prints only a page in front: one at a time)."""
        self.send("Target.closeTarget", {"targetId": self.targets.pop(session)})

    def evaluate(self, session: str, expression: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return r["result"].get("value")

    def screenshot(self, session: str, width: int, height: int) -> bytes:
        r = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                 "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}},
                      session=session)
        return base64.b64decode(r["data"])

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries."""
        out = []
        for m in self.events:
            p = m.get("params", {})
            if m.get("method") == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
            elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
            elif m.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [m["params"]["request"]["url"] for m in self.events if m.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
