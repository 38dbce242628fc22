"""Headless Chromium driven over the DevTools protocol (test-side code).

Debian's ``chromium`` (installed by ``make setup``: ``scripts/install-chromium.sh``) runs with the
flags this machine needs (headless, no sandbox as root, no GPU, no QUIC, no background networking,
component updates or sync: the machine's closed network would refuse those connections) and a
fresh profile folder; it listens for DevTools on 127.0.0.1 only, on a port it picks
(``DevToolsActivePort``). One page, one WebSocket (``websocket-client``); every wait is bounded.
The browser runs in its own process group and is stopped by that id.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


def chromium_binary() -> str | None:
    """Debian's chromium, or another Chromium/Chrome on PATH (``$CHROMIUM`` first)."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium with one page. ``folder``: where its profile and log go (a test's
    tmp dir). Use as a context manager; :meth:`close` stops it by process group."""

    def __init__(self, folder: Path, width: int = 1400, height: int = 1000, start_timeout_s: float = 60.0):
        import websocket   # websocket-client

        binary = chromium_binary()
        if binary is None:
            raise BrowserError("no chromium on PATH: run `make setup` (scripts/install-chromium.sh)")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=self.folder))   # fresh every start
        self.log_path = self.folder / "chromium.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self._id = 0
        self.events: list[dict] = []
        try:
            port = self._port(profile / "DevToolsActivePort", start_timeout_s)
            target = self._page_target(port, start_timeout_s)
            self.ws = websocket.create_connection(target, timeout=30, suppress_origin=True)
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
            self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    def _port(self, marker: Path, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self.proc.returncode}: {self.log_path.read_text(errors='replace')[-2000:]}")
            try:
                return int(marker.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                time.sleep(0.1)
        raise BrowserError(f"chromium did not open its DevTools port in {timeout_s:.0f} s")

    @staticmethod
    def _page_target(port: int, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
            except OSError:   # not listening yet
                pages = []
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise BrowserError("chromium has no page target")

    def send(self, method: str, timeout_s: float = 60.0, **params) -> dict:
        """Call a DevTools method and return its result; events that arrive meanwhile are kept
        in :attr:`events`. Raises BrowserError for a protocol error or after ``timeout_s``."""
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise BrowserError(f"{method}: no answer in {timeout_s:.0f} s")

    def evaluate(self, expression: str, timeout_s: float = 60.0) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        result = self.send("Runtime.evaluate", timeout_s, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, timeout_s: float = 60.0) -> None:
        """Navigate to ``url`` and wait for its load event."""
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", timeout_s)

    def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll ``expression`` until it is truthy; its value. BrowserError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise BrowserError(f"not true after {timeout_s:.0f} s: {expression}")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen since :meth:`open`."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path, *, full_page: bool = True, clip: dict | None = None) -> Path:
        """A PNG of the page (the whole page by default, or ``clip``: x, y, width, height)."""
        if clip is None and full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = self.send("Page.captureScreenshot", 120, **params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:   # noqa: BLE001 - the browser may be gone already
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self._log.close()

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: Per section: its charts, and for each whether it drew an SVG and how many data marks it holds
#: (elements of Vega's ``role-mark`` groups with a non-empty box).
SECTION_MARKS_JS = """
Array.from(document.querySelectorAll('section[data-section]')).map(s => ({
  key: s.dataset.section,
  declared: Number(s.dataset.charts),
  empty: !!s.querySelector('.empty'),
  charts: Array.from(s.querySelectorAll('.chart')).map(c => ({
    title: c.dataset.title,
    svg: !!c.querySelector('svg'),
    marks: Array.from(c.querySelectorAll('g.role-mark > *')).filter(el => {
      const b = el.getBBox ? el.getBBox() : {width: 0, height: 0};
      return b.width > 0 || b.height > 0;
    }).length,
  })),
}))
"""
