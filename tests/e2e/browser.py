"""A real headless browser for e2e tests: Debian's ``chromium``, driven over the Chrome
DevTools Protocol (https://chromedevtools.github.io/devtools-protocol/) with aiohttp's
WebSocket client, so no driver binary and no new Python package are needed.

    with Chromium() as browser:
        browser.open("http://127.0.0.1:8890/")
        browser.wait_for("document.querySelectorAll('.node').length > 0", 30)
        png = browser.screenshot(1400, 900)
"""

from __future__ import annotations

import asyncio
import base64
import itertools
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

import aiohttp

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find() -> str | None:
    """The browser's path: ``$RAILYARD_CHROMIUM``, else the first of ``BROWSERS`` on PATH."""
    return os.environ.get("RAILYARD_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)


class Chromium:
    def __init__(self, path: str | None = None, timeout: float = 30.0) -> None:
        found = path or find()
        if found is None:
            raise FileNotFoundError(f"no browser: none of {', '.join(BROWSERS)} on PATH (apt-get install chromium)")
        self.path = found
        self.timeout = timeout
        self._ids = itertools.count(1)

    def __enter__(self) -> "Chromium":
        self._profile = tempfile.mkdtemp(prefix="railyard-chromium-")  # removed by __exit__
        self._proc = subprocess.Popen(
            [self.path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        assert self._proc.stderr is not None  # stderr=PIPE
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.poll() is not None else ""
                self.__exit__()
                raise RuntimeError(f"{self.path} did not open its DevTools port: {err[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self._loop = asyncio.new_event_loop()
        self._session = self._loop.run_until_complete(self._start_session())
        self._ws = self._loop.run_until_complete(self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0))
        return self

    async def _start_session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "_loop", None) is not None:
            self._loop.run_until_complete(self._ws.close())
            self._loop.run_until_complete(self._session.close())
            self._loop.close()
        self._stop()
        # Chromium's helpers (crashpad, utility processes) can outlive the browser by a moment and
        # still write into the profile: retry the removal briefly rather than fail the test on it.
        for attempt in range(20):
            try:
                shutil.rmtree(self._profile)
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt == 19:
                    raise
                time.sleep(0.25)

    def _stop(self) -> None:
        """SIGTERM to chromium's whole process group (it was started in a session of its own, so
        its helpers are in it), SIGKILL to whatever is left after 10 s."""
        def signal_group(sig: int) -> None:
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                pass
        signal_group(signal.SIGTERM)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        signal_group(signal.SIGKILL)
        self._proc.wait()

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result (events that arrive meanwhile are skipped)."""
        return self._loop.run_until_complete(asyncio.wait_for(self._send(method, params), self.timeout))

    async def _send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        call = next(self._ids)
        await self._ws.send_json({"id": call, "method": method, "params": params})
        while True:
            msg = json.loads((await self._ws.receive()).data)
            if msg.get("id") == call:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None  # the page is still loading
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:g}s: {what or expression}")
            time.sleep(0.25)

    def screenshot(self, width: int, height: int) -> bytes:
        """The page as PNG, laid out at ``width`` x ``height`` CSS pixels."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
