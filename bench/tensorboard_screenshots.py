"""Screenshots of a run's TensorBoard: the Time Series, Images, Text, HParams and Projector tabs, and
the views of the tinylm tab (the attention explorer, tinylm/explorer).

    python bench/tensorboard_screenshots.py LOGDIR --out docs/screenshots [--prefix default] [--port N]
        [--width 1400 --height 1000] [--tabs timeseries,images,...] [--tag-filter REGEX] [--timeout 60]
        [--source TEXT]

Regenerate the screenshots in docs/screenshots/, from the repository root (about 20 s per logdir once
the runs exist; needs Chromium and CJK fonts: ``apt-get install chromium fonts-noto-cjk``):

    rm -rf /tmp/shots  # fresh runs: TensorBoard would also show the event files of older ones
    python train.py hydra.run.dir=/tmp/shots/default
    python bench/tensorboard_screenshots.py /tmp/shots/default --out docs/screenshots --prefix default
    python train.py -m hydra.sweep.dir=/tmp/shots/sweep model.n_embd=32,64 model.num_heads=2,4 trainer.max_steps=300
    python bench/tensorboard_screenshots.py /tmp/shots/sweep --out docs/screenshots --prefix sweep \\
        --tabs timeseries,images,text,hparams,projector
    python train.py experiment=numbers_zh hydra.run.dir=/tmp/shots/numbers trainer.max_steps=150 \\
        trainer.val_check_interval=50
    python bench/tensorboard_screenshots.py /tmp/shots/numbers --out docs/screenshots --prefix numbers --tabs tinylm \\
        --source 三千零五
    python train.py paths.log_dir=/tmp/shots/english data.path=ENGLISH.txt trainer.max_steps=300  # any English text
    python bench/tensorboard_screenshots.py /tmp/shots/english --out docs/screenshots --prefix english --tabs tinylm

It starts ``tensorboard --logdir LOGDIR`` on 127.0.0.1 (a free port unless ``--port``), waits until
every run folder under LOGDIR is listed and each tab's plugin has data (a tab without any is shot as
TensorBoard shows it and counts as not rendered), then opens each tab in headless Chromium, driven
over ``--remote-debugging-pipe`` (no debugging port), with the Time Series settings pane closed. A
tab is shot once its content is on the page (cards, images, text samples, trials or projected
points, counted in the page through its shadow DOMs), stays the same for two polls and no request
is in flight. The tinylm tab is shot once per view (``<prefix>-tinylm-<view>.png``), each brought on
screen with real mouse and keyboard input (bench/tinylm_tab.py): for a text run, your text with a
character hovered, heads switched off until a prediction changes, the logit lens, training and heads;
for a translation run (when the logdir has no text run), the translation (of ``--source``, else of the
run's own example source, which the tab opens with). Its
first line also says ``first_map_ms``: from opening TensorBoard's page to the tab's first attention
map on screen, and ``tab_first_map_ms``: from the tab's frame starting to load to that map. Each
``<out>/<prefix>-<tab>.png`` is re-saved optimised by Pillow (as 256 colours if still over ``--max-kb``).
One JSON line per screenshot: tab, file, width, height, what it shows
(``content``, e.g. "5 images"), its distinct colours and the share of pixels off its most common
colour (``busy``), and ``rendered``: content found and the picture not (nearly) one colour. The
server and the browser are stopped in any case.

Exit status: 0 every tab rendered, 1 some did not, 2 no screenshots (one ``error: ...`` line: no
Chromium, no LOGDIR, no event files under it, TensorBoard or Chromium failed), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import tinylm_tab
from PIL import Image

from tinylm.cli import EXIT_INTERRUPTED, quiet_broken_pipe

TABS = ("timeseries", "images", "text", "hparams", "projector", "tinylm")
CHROMIUM_NAMES = ("chromium", "chromium-browser")
EXIT_NOT_RENDERED, EXIT_ERROR = 1, 2
# A picture with fewer colours, or with fewer pixels off its most common colour, is blank. They only
# catch a blank or broken page: TensorBoard's own "No image data was found." page has ~900 colours
# and 10% such pixels; the count of content items in the page is what tells that one apart.
MIN_COLOURS = 64
MIN_BUSY = 0.05

# Helpers for the page expressions: TensorBoard's Polymer tabs live in shadow DOMs, the projector in an iframe.
PAGE_HELPERS = """
function deepAll(selector, root = document) {
  let found = [...root.querySelectorAll(selector)];
  for (const el of root.querySelectorAll('*')) {
    const inner = el.shadowRoot || (el.tagName === 'IFRAME' && el.contentDocument);
    if (inner) found = found.concat(deepAll(selector, inner));
  }
  return found;
}
const loaded = img => img.complete && img.naturalWidth > 0;
"""
# Per tab: a page expression counting the content that is ready to see, and what it counts.
CONTENT = {
    "timeseries": (  # cards with a drawn chart or a loaded image (cards below the fold stay empty)
        "deepAll('card-view').filter(c => c.querySelector('line-chart canvas')"
        " || [...c.querySelectorAll('img')].some(loaded)).length",
        "cards",
    ),
    "images": (
        "deepAll('tf-image-loader')"
        ".filter(l => [...(l.shadowRoot?.querySelectorAll('img') ?? [])].some(loaded)).length",
        "images",
    ),
    "text": (  # one markdown view per step shown, with the sample in it
        "deepAll('tf-markdown-view').filter(m => m.getRootNode().host?.tagName === 'TF-TEXT-LOADER'"
        " && [...(m.shadowRoot?.children ?? [])].some(e => e.tagName !== 'STYLE' && e.textContent.trim())).length",
        "text samples",
    ),
    "hparams": ("deepAll('vaadin-grid').reduce((n, grid) => n + (grid.items || []).length, 0)", "trials"),
    "tinylm": (tinylm_tab.CONTENT, "maps, lines and cells"),  # counted in its iframe: tinylm_tab.tab()
    "projector": (  # points once the default PCA projection exists
        "(p => p && p.dataSet && p.dataSet.projections['pca-0'] ? p.dataSet.points.length : 0)"
        "(deepAll('vz-projector')[0])",
        "points",
    ),
}
# Seconds without a new plugin turning active, once every run is listed, after which the tabs whose
# plugin is still inactive are taken as they are (TensorBoard's "No ... data was found" page).
PLUGINS_SETTLE_S = 10
# The requests that a tab waits for. Not scripts: a worker's script finishes in the worker's own
# session, which is not watched (Time Series draws its charts in workers).
WATCHED_REQUESTS = {"Document", "XHR", "Fetch", "Image"}
# Before TensorBoard's scripts run: its global settings with the Time Series settings pane closed.
CLOSE_SETTINGS_PANE = "localStorage.setItem('_tb_global_settings', '{\"timeSeriesSettingsPaneOpened\": false}')"


class ScreenshotError(Exception):
    """Why no screenshots could be taken (no Chromium, no event files, a server or browser that
    failed): one ``error: ...`` line, exit 2."""


def find_chromium() -> str:
    for name in CHROMIUM_NAMES:
        if path := shutil.which(name):
            return path
    raise ScreenshotError(
        "Chromium not found (no chromium or chromium-browser on PATH): apt-get install chromium fonts-noto-cjk"
    )


def count_runs(logdir: Path) -> int:
    """How many TensorBoard runs LOGDIR holds: folders with an event file."""
    if not logdir.is_dir():
        raise ScreenshotError(f"no such folder: {logdir}")
    runs = {p.parent for p in logdir.rglob("events.out.tfevents.*")}
    if not runs:
        raise ScreenshotError(f"no TensorBoard event files (events.out.tfevents.*) under {logdir}")
    return len(runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """End a process started in its own session, with everything it started (TensorBoard's data server)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


class TensorBoard:
    """``tensorboard --logdir LOGDIR`` on 127.0.0.1:PORT, with its output in ``log``."""

    def __init__(self, logdir: Path, port: int, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
               "--port", str(port)]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)

    def get(self, route: str):
        with urllib.request.urlopen(self.url + route, timeout=10) as reply:
            return json.load(reply)

    def wait_for_data(self, runs: int, tabs: list[str], timeout: float) -> set[str]:
        """Wait until it answers with ``runs`` runs and every tab's plugin is active; return the tabs
        whose plugin is active. Gives up on the others once the active ones have stayed the same for
        ``PLUGINS_SETTLE_S`` (or at ``timeout``). The projector looks for its data in a background
        thread that the plugin listing starts, so it turns active a moment after the first listing."""
        deadline = time.monotonic() + timeout
        active: set[str] = set()
        since = time.monotonic()  # when `active` last changed
        while True:
            if self.proc.poll() is not None:
                raise ScreenshotError(f"tensorboard exited with status {self.proc.returncode}: {last_line(self.log)}")
            try:
                if len(self.get("/data/runs")) >= runs:
                    listing = self.get("/data/plugins_listing")
                    now_active = {tab for tab in tabs if listing.get(tab, {}).get("enabled")}
                    if now_active != active:
                        active, since = now_active, time.monotonic()
                    if active == set(tabs) or (active and time.monotonic() - since >= PLUGINS_SETTLE_S):
                        return active
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                if not active:
                    raise ScreenshotError(f"TensorBoard at {self.url} did not load {runs} run(s) in {timeout:.0f} s")
                return active
            time.sleep(0.5)


class Chromium:
    """Headless Chromium driven with the DevTools protocol over ``--remote-debugging-pipe``:
    JSON messages ending in NUL, read by Chromium from its fd 3, its replies written to its fd 4."""

    def __init__(self, exe: str, profile: str, log: Path):
        to_chromium, self._commands = os.pipe()
        self._replies, from_chromium = os.pipe()
        for fd in (to_chromium, from_chromium):  # so that they survive the exec, even as fd 3 itself
            os.set_inheritable(fd, True)

        def as_fds_3_and_4():  # in the child, between fork and exec
            os.dup2(to_chromium, 3)
            os.dup2(from_chromium, 4)

        cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=False,
                                         preexec_fn=as_fds_3_and_4, start_new_session=True)
        os.close(to_chromium)
        os.close(from_chromium)
        self.log = log
        self._buffer = b""
        self._last_id = 0
        self._loaded: set[str] = set()  # the pages (sessions) that fired their load event
        self.requests: set[str] = set()  # network requests in flight
        self.last_request = time.monotonic()  # when the last one started or ended

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        """Send one command and return its result, noting the events that arrive meanwhile."""
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._next_message(deadline, method)).get("id") != self._last_id:
            self._note(reply)
        if "error" in reply:
            raise ScreenshotError(f"Chromium: {method}: {reply['error'].get('message')}")
        return reply["result"]

    def _next_message(self, deadline: float, waiting_for: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise ScreenshotError(f"Chromium: no {waiting_for} in time")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise ScreenshotError(f"Chromium exited: {last_line(self.log)}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _note(self, message: dict) -> None:
        event, params = message.get("method"), message.get("params", {})
        if event == "Page.loadEventFired":
            self._loaded.add(message.get("sessionId"))
        elif event == "Network.requestWillBeSent" and params.get("type") in WATCHED_REQUESTS:
            self.requests.add(params["requestId"])
            self.last_request = time.monotonic()
        elif event in ("Network.loadingFinished", "Network.loadingFailed"):
            self.requests.discard(params["requestId"])
            self.last_request = time.monotonic()

    def open(self, url: str, width: int, height: int, timeout: float) -> str:
        """A new page of ``width`` x ``height`` CSS pixels that has loaded ``url``; returns its session id."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        page = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride", page, width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.send("Page.enable", page)
        self.send("Page.addScriptToEvaluateOnNewDocument", page, source=CLOSE_SETTINGS_PANE)
        self.send("Network.enable", page)
        self.requests.clear()
        self.send("Page.navigate", page, url=url)
        deadline = time.monotonic() + timeout
        while page not in self._loaded:
            self._note(self._next_message(deadline, f"load event from {url}"))
        return page

    def evaluate(self, page: str, expression: str):
        """The value of a page expression, which can use ``PAGE_HELPERS``."""
        wrapped = f"(() => {{ {PAGE_HELPERS} return ({expression}); }})()"
        result = self.send("Runtime.evaluate", page, expression=wrapped, returnByValue=True)
        if "exceptionDetails" in result:
            raise ScreenshotError(f"in the page: {result['exceptionDetails']['exception']['description']}")
        return result["result"].get("value")

    def screenshot(self, page: str) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", page, format="png")["data"])

    def close_page(self, page: str) -> None:
        self.send("Target.closeTarget", targetId=self.send("Target.getTargetInfo", page)["targetInfo"]["targetId"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
                self.proc.wait(5)
            except (ScreenshotError, subprocess.TimeoutExpired):
                pass  # stop() below ends it
        stop(self.proc)
        os.close(self._commands)
        os.close(self._replies)


def wait_for_content(browser: Chromium, page: str, tab: str, has_data: bool, timeout: float) -> int:
    """How many content items the loaded tab shows, once that count is the same for two polls 0.5 s
    apart, no request has been in flight for 0.5 s and, if TensorBoard has data for the tab, the
    count is above 0; the last count if ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        time.sleep(0.5)
        count = browser.evaluate(page, CONTENT[tab][0])
        quiet = not browser.requests and time.monotonic() - browser.last_request >= 0.5
        if (count == previous and quiet and (count or not has_data)) or time.monotonic() > deadline:
            return count
        previous = count


def picture_stats(png: bytes) -> tuple[int, float]:
    """Distinct colours (capped at 65536) and the share of pixels not of the most common colour."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 16)
    if colours is None:
        return 1 << 16, 1.0
    pixels = image.width * image.height
    return len(colours), round(1 - max(colours)[0] / pixels, 3)


def save_png(png: bytes, path: Path, max_kb: int) -> tuple[int, int]:
    """Write the screenshot optimised, as 256 colours if it is still over ``max_kb``; return its size."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.save(path, optimize=True)
    if path.stat().st_size > max_kb * 1024:
        image.quantize(256).save(path, optimize=True)
    return image.size


def shoot(args: argparse.Namespace, tabs: list[str]) -> list[dict]:
    chromium = find_chromium()
    runs = count_runs(args.logdir)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with ExitStack() as cleanup:
        scratch = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="tb-screenshots-")))
        server = TensorBoard(args.logdir, args.port or free_port(), scratch / "tensorboard.log")
        cleanup.callback(stop, server.proc)
        active = server.wait_for_data(runs, tabs, args.timeout)
        browser = Chromium(chromium, str(scratch / "profile"), scratch / "chromium.log")
        cleanup.callback(browser.close)
        query = "?" + urllib.parse.urlencode({"tagFilter": args.tag_filter}) if args.tag_filter else ""
        for tab in tabs:
            if tab == "tinylm":
                results += shoot_tinylm(browser, server, args, tab in active)
                continue
            started = time.monotonic()
            page = browser.open(f"{server.url}/{query}#{tab}", args.width, args.height, args.timeout)
            count = wait_for_content(browser, page, tab, tab in active, args.timeout)
            png = browser.screenshot(page)
            browser.close_page(page)
            file = args.out / f"{args.prefix}-{tab}.png"
            width, height = save_png(png, file, args.max_kb)
            colours, busy = picture_stats(png)
            result = {"tab": tab, "file": str(file), "width": width, "height": height,
                      "content": f"{count} {CONTENT[tab][1]}", "colours": colours, "busy": busy,
                      "rendered": count > 0 and colours >= MIN_COLOURS and busy >= MIN_BUSY,
                      "seconds": round(time.monotonic() - started, 1)}
            if tab not in active:
                result["problem"] = f"TensorBoard has no {tab} data for this logdir"
            elif not count:
                result["problem"] = f"no {CONTENT[tab][1]} on the page after {args.timeout:.0f} s"
            print(json.dumps(result, ensure_ascii=False), flush=True)
            results.append(result)
    return results


def wait_until_quiet(browser: Chromium, page: str, timeout: float) -> int:
    """How much the tinylm tab shows, once no request has been in flight for 0.5 s (each poll reads the
    browser's events, those of the requests among them)."""
    deadline = time.monotonic() + timeout
    while True:
        count = tinylm_tab.tab(browser, page, f"doc ? {tinylm_tab.CONTENT} : 0")
        if (not browser.requests and time.monotonic() - browser.last_request >= 0.5) or time.monotonic() > deadline:
            return count
        time.sleep(0.2)


def shoot_tinylm(browser: Chromium, server: TensorBoard, args: argparse.Namespace, has_data: bool) -> list[dict]:
    """The tinylm tab's views, one screenshot each (see the module's docstring)."""
    runs = server.get("/data/plugin/tinylm/runs")["runs"] if has_data else []
    translation_only = bool(runs) and all(run["task"] == "translation" for run in runs)  # else it opens a text run
    views = tinylm_tab.TRANSLATION_VIEWS if translation_only else tinylm_tab.TEXT_VIEWS
    page = browser.open(f"{server.url}/#tinylm", args.width, args.height, args.timeout)
    results = []
    try:
        for view, show in views if runs else views[:1]:
            started = time.monotonic()
            problem = None if runs else "TensorBoard has no tinylm data for this logdir"
            if runs:
                try:
                    show(browser, page, args.source) if view == "translation" else show(browser, page)
                except tinylm_tab.TabError as e:
                    problem = str(e)
            count = wait_until_quiet(browser, page, args.timeout)
            png = browser.screenshot(page)
            file = args.out / f"{args.prefix}-tinylm-{view}.png"
            width, height = save_png(png, file, args.max_kb)
            colours, busy = picture_stats(png)
            result = {"tab": "tinylm", "view": view, "file": str(file), "width": width, "height": height,
                      "content": f"{count} {CONTENT['tinylm'][1]}", "colours": colours, "busy": busy,
                      "rendered": not problem and count > 0 and colours >= MIN_COLOURS and busy >= MIN_BUSY,
                      "seconds": round(time.monotonic() - started, 1)}
            if not results:
                result["first_map_ms"] = tinylm_tab.first_map_ms(browser, page)
                result["tab_first_map_ms"] = tinylm_tab.first_map_ms(browser, page, since="tab")
            if problem:
                result["problem"] = problem
            print(json.dumps(result, ensure_ascii=False), flush=True)
            results.append(result)
    finally:
        browser.close_page(page)
    return results


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    summary, usage, *how_to_regenerate = __doc__.split("\n\n")[:4]
    parser = argparse.ArgumentParser(description=summary, usage=usage.strip(), epilog="\n\n".join(how_to_regenerate),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir", type=Path, help="a run folder, a sweep folder, or any folder with event files")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"), help="folder for the PNGs")
    parser.add_argument("--prefix", default="default", help="file names: <out>/<prefix>-<tab>.png")
    parser.add_argument("--port", type=int, default=None, help="TensorBoard's port (default: a free one)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--tabs", default=",".join(TABS), help=f"comma-separated, of {', '.join(TABS)}")
    parser.add_argument("--tag-filter", default=None, help="Time Series tag filter (a regex), e.g. 'loss'")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for the data and for each tab")
    parser.add_argument("--source", default=None,
                        help="the source text the tinylm tab translates, for a translation run (default: its probe)")
    parser.add_argument("--max-kb", type=int, default=400, help="PNGs larger than this are saved as 256 colours")
    args = parser.parse_args(argv)
    tabs = [tab.strip() for tab in args.tabs.split(",") if tab.strip()]
    if not tabs or set(tabs) - set(TABS):
        parser.error(f"--tabs: choose among {', '.join(TABS)}")
    return args, tabs


def main(argv: list[str] | None = None) -> int:
    args, tabs = parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` cleans up like Ctrl-C
    try:
        with quiet_broken_pipe():
            results = shoot(args, tabs)
    except ScreenshotError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0 if all(r["rendered"] for r in results) else EXIT_NOT_RENDERED


if __name__ == "__main__":
    sys.exit(main())
