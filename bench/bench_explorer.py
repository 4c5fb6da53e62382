"""Latency of the tinylm TensorBoard plugin's routes, as JSON lines:

    .venv/bin/python bench/bench_explorer.py                     # the newest run under outputs/
    .venv/bin/python bench/bench_explorer.py --run outputs/runs/<time> --repeats 30 --threads 2
    .venv/bin/python bench/bench_explorer.py --tensorboard      # also through a real `tensorboard` over HTTP

The run's folder (without ``--run``: the newest run with checkpoints under outputs/, else a default
``python train.py`` run trained first into a temporary folder) is served from its parent folder as the
logdir, as ``tensorboard --logdir outputs/runs`` does. In-process, the plugin's WSGI app is called through
werkzeug's test client (``tinylm.explorer.inprocess``): each route once to warm up (the model loaded and
kept), then ``--repeats`` times, the thread counts of ``--threads`` (``TinyLMPlugin.threads``, the torch
threads of the model routes) taking turns so that each sees the same load. ``predict`` on a 32-character
text has a target: 0.2 s on 2 CPU cores (issue 27). One JSON line per route and thread count (median and
90th percentile in ms), the model's first load, then the target's line (at the plugin's own thread
count); each line names the CPU and the load average.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

from bench_data import machine  # the CPU's name, its cores and the load average

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 200.0  # predict, 32 characters, 2 cores


def run_folder(given: str | None) -> Path:
    """``--run``, else the newest run under outputs/, else a default run trained now into a temporary folder."""
    from tinylm.errors import TinyLMError
    from tinylm.run_folder import latest_checkpoint

    if given:
        return Path(given).resolve()
    try:
        return latest_checkpoint(ROOT / "outputs").path.parent.parent.resolve()
    except TinyLMError:
        run = Path(tempfile.mkdtemp(prefix="bench-explorer-")) / "runs" / "default"
        print(f"no run under outputs/: training a default run into {run} (a few minutes)", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}",
                        "trainer.enable_progress_bar=false"], check=True, stdout=subprocess.DEVNULL)
        return run


def text_of(tokenizer, probe: str | None, chars: int = 32) -> str:
    """``chars`` characters the run's model reads: its probe text repeated (else the vocabulary's printable symbols)."""
    seed = probe if probe and not tokenizer.unknown(probe) else "".join(
        s for s in getattr(tokenizer, "itos", []) if len(s) == 1 and s.isprintable()) or "the"
    return (seed * chars)[:chars]


def plan(logdir: Path, run: Path) -> tuple[dict[str, str], str, int]:
    """The routes to time (name -> path and query) for the run, the text they send, the model's parameters."""
    from tinylm.analysis.hooks import switchable
    from tinylm.checkpoint import load_model
    from tinylm.explorer.runs import Runs
    from tinylm.tasks import is_encoder_decoder

    name = run.relative_to(logdir).as_posix()
    folder = Runs(logdir).find(name)
    model, tokenizer = (loaded := load_model(folder.checkpoint())).model, loaded.tokenizer
    text = text_of(tokenizer, folder.probe_text())
    r, q = quote(name), quote(text)
    routes = {"runs": "runs", "predict": f"predict?run={r}&text={q}", "training": f"training?run={r}",
              "heads": f"heads?run={r}"}
    if model.has_attention and not is_encoder_decoder(model):
        routes |= {"attention": f"attention?run={r}&text={q}", "lens": f"lens?run={r}&text={q}"}
        attentions = switchable(model)[1]
        if len(attentions) > 1:
            routes["predict_ablated"] = f"predict?run={r}&text={q}&ablate=0.0,1.{attentions[1].num_heads - 1}"
    return {route: "/data/plugin/tinylm/" + path for route, path in routes.items()}, text, model.num_params()


def timed(get, path: str) -> float:
    started = time.perf_counter()
    status = get(path)
    elapsed = time.perf_counter() - started
    if status != 200:
        raise SystemExit(f"error: {path} answered {status}")
    return elapsed * 1000


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2), "repeats": len(ordered)}


def in_process(logdir: Path, run: Path, repeats: int, threads: list[int]) -> list[dict]:
    from tinylm.explorer.inprocess import client

    routes, text, params = plan(logdir, run)
    app, plugin = client(logdir)

    def get(path: str) -> int:
        return app.get(path).status_code

    first_load_ms = timed(get, routes["predict"])  # the first call loads the model
    times = {(route, n): [] for route in routes for n in threads}
    for path in routes.values():
        timed(get, path)  # warm-up
    for _ in range(repeats):
        for n in threads:
            plugin.threads = n  # the torch threads of its model routes
            for route, path in routes.items():
                times[route, n].append(timed(get, path))
    base = {"bench": "explorer", "mode": "in-process", "run": str(run), "chars": len(text), "params": params}
    lines = [{**base, "route": route, "threads": n, **summary(t), **machine()} for (route, n), t in times.items()]
    lines.append({**base, "route": "predict (first call: model load)", "ms": round(first_load_ms, 1), **machine()})
    return lines


def through_tensorboard(logdir: Path, run: Path, repeats: int) -> list[dict]:
    """The same routes through a real ``tensorboard --logdir`` process, over HTTP."""
    from tinylm.explorer.plugin import TinyLMPlugin

    routes, text, params = plan(logdir, run)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tensorboard = Path(sys.executable).with_name("tensorboard")
    proc = subprocess.Popen([str(tensorboard), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"

    def get(path: str) -> int:
        with urllib.request.urlopen(base_url + path, timeout=60) as response:
            response.read()
            return response.status

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                get("/data/plugins_listing")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("error: tensorboard did not start") from None
                time.sleep(0.5)
        first_ms = timed(get, routes["predict"])  # the model's first load inside TensorBoard
        times = {route: [] for route in routes}
        for path in routes.values():
            timed(get, path)
        for _ in range(repeats):
            for route, path in routes.items():
                times[route].append(timed(get, path))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    base = {"bench": "explorer", "mode": "tensorboard", "run": str(run), "chars": len(text), "params": params,
            "threads": TinyLMPlugin.threads}
    lines = [{**base, "route": route, **summary(t), **machine()} for route, t in times.items()]
    lines.append({**base, "route": "predict (first call: model load)", "ms": round(first_ms, 1), **machine()})
    return lines


def main() -> None:
    from tinylm.explorer.plugin import TinyLMPlugin

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a run folder (default: the newest under outputs/)")
    parser.add_argument("--logdir", help="the logdir to serve (default: the run's parent folder)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per route and thread count (median)")
    parser.add_argument("--threads", default="1", help="torch thread counts to take turns, e.g. 1,2 (switching "
                        "between them slows the calls after each switch: compare with one count alone)")
    parser.add_argument("--tensorboard", action="store_true", help="also through a real tensorboard over HTTP")
    args = parser.parse_args()
    run = run_folder(args.run)
    logdir = Path(args.logdir).resolve() if args.logdir else run.parent
    threads = [int(n) for n in args.threads.split(",")]
    lines = in_process(logdir, run, args.repeats, threads)
    if args.tensorboard:
        lines += through_tensorboard(logdir, run, args.repeats)
    for line in lines:
        print(json.dumps(line, ensure_ascii=False))
    own = [line for line in lines if line.get("route") == "predict" and line.get("threads") == TinyLMPlugin.threads]
    if own:
        ms = own[0]["median_ms"]
        print(json.dumps({"bench": "explorer", "target": f"predict, {own[0]['chars']} characters, {machine()['cores']} "
                          f"cores: median <= {TARGET_MS:.0f} ms", "mode": own[0]["mode"], "value_ms": ms,
                          "met": ms <= TARGET_MS, **machine()}))


if __name__ == "__main__":
    main()
