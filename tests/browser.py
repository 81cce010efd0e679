"""A small Chrome DevTools protocol client around Debian's headless Chromium, for testing the HTML
report: load a file, collect console errors, exceptions and every network request, take a
screenshot."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import numpy as np
import websocket  # websocket-client
from PIL import Image

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@dataclass
class PageLoad:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    screenshot_png: bytes = b""
    # the document's scrollWidth: wider than the viewport = the page scrolls sideways
    scroll_width: int = 0
    value: Any = None  # what `load(..., evaluate=)`'s expression returned (by value)


class _Session:
    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.events.append(json.loads(self.ws.recv()))

    def drain(self, seconds: float) -> None:
        self.ws.settimeout(0.2)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                continue
        self.ws.settimeout(60)


@contextlib.contextmanager
def chromium() -> Iterator[str]:
    """Start headless Chromium with a DevTools port; yield the page's websocket URL."""
    profile = Path(tempfile.mkdtemp(prefix="iomx-chromium-"))
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1200,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        pages = json.load(urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        yield next(p["webSocketDebuggerUrl"] for p in pages if p.get("type") == "page")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def load(path: Path, width: int = 1200, evaluate: str | None = None) -> PageLoad:
    """Open `path` in headless Chromium; return console errors, requested URLs and a full-page
    screenshot, and the value of the JavaScript expression `evaluate` on the loaded page."""
    out = PageLoad()
    with chromium() as ws_url:
        s = _Session(ws_url)
        for domain in ("Page", "Runtime", "Log", "Network"):
            s.call(f"{domain}.enable")
        s.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        s.call("Page.navigate", url=path.resolve().as_uri())
        s.wait_for("Page.loadEventFired")
        s.drain(0.5)  # late console messages
        sw = s.call(
            "Runtime.evaluate",
            expression="document.documentElement.scrollWidth",
            returnByValue=True,
        )
        out.scroll_width = int(sw["result"]["value"])
        if evaluate is not None:
            out.value = s.call("Runtime.evaluate", expression=evaluate, returnByValue=True)[
                "result"
            ].get("value")
        metrics = s.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = s.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": width, "height": min(size["height"], 6000), "scale": 1},
        )
        out.screenshot_png = base64.b64decode(shot["data"])
        s.ws.close()
    for e in s.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.console_errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
            )
        elif m == "Runtime.exceptionThrown":
            out.console_errors.append(p["exceptionDetails"].get("text", "exception"))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.console_errors.append(p["entry"]["text"])
        elif m == "Network.requestWillBeSent":
            out.requests.append(p["request"]["url"])
    return out


def check_report_renders(html: Path, tmp_path: Path) -> None:
    """An HTML report loads in Chromium without a console error or any request beyond itself, and
    its screenshot (kept as tmp_path/shot.png) is neither blank nor almost empty."""
    page = load(html)
    assert page.console_errors == []
    assert page.requests == [html.resolve().as_uri()], "the report must not request anything"
    img = np.asarray(Image.open(io.BytesIO(page.screenshot_png)).convert("L"), dtype=float)
    (tmp_path / "shot.png").write_bytes(page.screenshot_png)
    assert img.std() > 20, "the screenshot is blank"
    assert (img < 200).mean() > 0.01, "the screenshot has almost no content"
