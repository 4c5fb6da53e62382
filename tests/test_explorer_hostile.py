"""The tinylm tab's server under hostile input: a real ``tensorboard`` on 127.0.0.1 over a logdir of runs made
to break it (a FIFO for a checkpoint, a record that is /dev/zero or 64 GiB, links out of the logdir, names
no URL can send back, a best checkpoint replaced as training replaces it), sent real requests by several
clients at once (one server for the module: it takes about 10 s to start, so these tests are slow ones).
Stuck requests are caught by timeouts: a route that blocks fails its test, it does not hang the suite; the
server's address space is capped, so one that reads /dev/zero fails without taking the machine's memory.
Two in-process tests hold a request inside a load or a computation on purpose, to show
that the other runs' requests go on meanwhile."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest
import torch

from tinylm.explorer import models, views
from tinylm.explorer.inprocess import client
from tinylm.explorer.runs import scan

pytestmark = pytest.mark.usefixtures("one_thread")
GIB = 1 << 30
TEXT = "自注意力"
MEMORY_CAP = 4 * GIB  # of the server's address space: a server that reads /dev/zero fails, not the machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


class Server:
    """``tensorboard --logdir`` on 127.0.0.1, its log in a file (a pipe nobody reads could fill and stall it)."""

    def __init__(self, logdir: Path, log: Path):
        self.port = free_port()
        self.log = log
        command = [str(Path(sys.executable).with_name("tensorboard")), "--logdir", str(logdir),
                   "--host", "127.0.0.1", "--port", str(self.port)]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=cap_memory)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.get("/data/plugins_listing", timeout=5, plugin=False)
                return
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.5)

    def get(self, route: str, timeout: float = 30, plugin: bool = True, **params) -> tuple[int, dict]:
        """GET the route (``/data/plugin/tinylm/<route>`` for the plugin's): (status, JSON)."""
        query = "&".join(f"{k}={v.decode() if isinstance(v, bytes) else quote(str(v))}" for k, v in params.items())
        url = f"http://127.0.0.1:{self.port}" + (f"/data/plugin/tinylm/{route}" if plugin else route)
        try:
            with urllib.request.urlopen(url + (f"?{query}" if query else ""), timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # TensorBoard stops on Ctrl+C (it outlives a SIGTERM while serving)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:  # a thread stuck in a read keeps it alive
            self.proc.kill()
            self.proc.wait()


def sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, gpt_run) -> Path:
    """outputs/runs/: copies of the session's GPT run, each broken one way, and a few that are not runs."""
    base = tmp_path_factory.mktemp("hostile")
    runs = base / "outputs" / "runs"

    def copy(name: str) -> Path:
        return Path(shutil.copytree(gpt_run.path, runs / name, symlinks=True))

    copy("gpt")
    os.mkfifo(copy("fifo") / "checkpoints" / "best-x.ckpt")  # the newest "best": a FIFO no one writes to
    zero = copy("zero") / ".hydra" / "config.yaml"
    zero.unlink()
    zero.symlink_to("/dev/zero")
    sparse(copy("huge") / ".hydra" / "config.yaml", 64 * GIB)
    sparse(copy("bigckpt") / "checkpoints" / "best-step999999.ckpt", 64 * GIB)
    copy("rotating")
    copy("back\\slash")
    copy("control\x01char")
    copy(os.fsdecode(b"not-utf8-\xff"))
    (runs / "linked").symlink_to(runs / "gpt")  # a run folder that is a link
    outside = Path(shutil.copytree(gpt_run.path, base / "elsewhere"))
    shutil.rmtree(copy("outside") / "checkpoints")
    (runs / "outside" / "checkpoints").symlink_to(outside / "checkpoints")  # checkpoints/ out of the logdir
    (copy("filelink") / "checkpoints" / "best-step999999.ckpt").symlink_to(
        next((outside / "checkpoints").glob("best-*.ckpt")))  # the newest "best": a link to another run's
    crafted = copy("crafted") / "checkpoints" / "last.ckpt"
    for best in crafted.parent.glob("best-*.ckpt"):
        best.unlink()
    checkpoint = torch.load(crafted, weights_only=True)
    checkpoint["model_config"]["n_embd"] = 10**6  # a model of 12 TB: the loader refuses it before building it
    torch.save(checkpoint, crafted)
    return runs


@pytest.fixture(scope="module")
def server(logdir, tmp_path_factory):
    served = Server(logdir.parent, tmp_path_factory.mktemp("tensorboard") / "log.txt")
    yield served
    served.stop()


def one_line_error(body: dict) -> bool:
    return list(body) == ["error"] and "\n" not in body["error"] and body["error"]


@pytest.mark.slow
def test_a_fifo_checkpoint_holds_up_nothing(server):
    """/runs skips the FIFO for the run's next checkpoint, while another run's predict answers meanwhile."""
    with ThreadPoolExecutor(2) as pool:
        listing = pool.submit(server.get, "runs", timeout=30)
        time.sleep(0.5)
        status, body = server.get("predict", timeout=15, run="runs/gpt", text=TEXT)
        assert status == 200 and len(body["top"]) == len(TEXT)
        status, body = listing.result()
    assert status == 200
    fifo = next(run for run in body["runs"] if run["name"] == "runs/fifo")
    assert fifo["checkpoint"].startswith("best-step") and fifo["step"] == 20
    assert server.get("predict", timeout=15, run="runs/fifo", text=TEXT)[0] == 200


@pytest.mark.slow
def test_a_record_that_is_dev_zero_or_64_gib_is_not_read(server):
    before = server.rss_mib()
    status, body = server.get("runs", timeout=30)
    assert status == 200 and {"runs/zero", "runs/huge"} <= {run["name"] for run in body["runs"]}
    assert server.rss_mib() - before < 200


@pytest.mark.slow
@pytest.mark.parametrize(("run", "why"), [("runs/bigckpt", "is 65,536.0 MiB, over the 1024 MiB limit"),
                                          ("runs/crafted", "crafted/checkpoints/last.ckpt")])
def test_a_checkpoint_too_big_or_refused_by_the_loader_is_skipped_and_its_run_a_one_line_400(server, run, why):
    status, body = server.get("runs", timeout=30)
    (skipped,) = [listed for listed in body["skipped"] if listed["name"] == run]
    assert why in skipped["error"]
    status, body = server.get("predict", run=run, text=TEXT)
    assert status == 400 and one_line_error(body) and body["error"] == skipped["error"]


@pytest.mark.slow
def test_every_run_it_lists_it_opens_and_it_follows_no_link(server):
    status, body = server.get("runs", timeout=30)
    names = {run["name"] for run in body["runs"]}
    assert names >= {"runs/gpt", "runs/fifo", "runs/zero", "runs/huge", "runs/filelink"}
    assert not names & {"runs/back\\slash", "runs/control\x01char", "runs/not-utf8-\udcff", "runs/linked",
                        "runs/outside"}
    for name in names:
        assert server.get("predict", run=name, text=TEXT)[0] == 200, name
    filelink = next(run for run in body["runs"] if run["name"] == "runs/filelink")
    assert filelink["checkpoint"] != "best-step999999.ckpt"  # its own best, not the link to another run's
    status, body = server.get("predict", run="runs/outside", text=TEXT)
    assert status == 404 and one_line_error(body)


@pytest.mark.slow
def test_a_number_or_text_that_is_not_what_it_looks_like_is_a_one_line_400(server):
    status, body = server.get("predict", run="runs/gpt", text=TEXT, k="²")
    assert status == 400 and one_line_error(body) and body["error"].startswith("k='²' must be a whole number")
    status, body = server.get("predict", run="runs/gpt", text=b"%FF%FE")
    assert status == 400 and one_line_error(body) and "text parameter is not UTF-8" in body["error"]
    assert server.get("predict", run="runs/gpt", text="%FF%FE")[0] == 400  # the characters: not in the vocabulary
    assert server.get("predict", run="runs/gpt", text=b"%E8%87%AA%E6%B3%A8")[0] == 200  # 自注, percent-encoded


def rotate(folder: Path, checkpoint: dict, stop: threading.Event) -> int:
    """Replace the run's best checkpoint as training does until ``stop``: the next one written to a temporary
    file and renamed into place (``AtomicCheckpointIO``), then the one it beats removed (as Lightning's
    ModelCheckpoint removes it); how many were written."""
    from tinylm.training.safety import AtomicCheckpointIO

    writer, (previous,), step = AtomicCheckpointIO(), list(folder.glob("best-*.ckpt")), 20
    while not stop.is_set():
        step += 1
        path = folder / f"best-step{step:06d}.ckpt"
        writer.save_checkpoint({**checkpoint, "global_step": step}, path)
        previous.unlink()
        previous = path
    return step - 20


@pytest.mark.slow
def test_a_best_checkpoint_replaced_while_clients_read_is_never_a_500(server, logdir):
    folder = logdir / "rotating" / "checkpoints"
    checkpoint = torch.load(next(folder.glob("best-*.ckpt")), weights_only=True)
    stop, answers = threading.Event(), Counter()

    def client_loop(route: str, **params) -> None:
        while not stop.is_set():
            status, body = server.get(route, **params)
            answers[status] += 1
            assert status == 200 or (400 <= status < 500 and one_line_error(body)), (status, body)

    with ThreadPoolExecutor(4) as pool:
        writer = pool.submit(rotate, folder, checkpoint, stop)
        clients = [pool.submit(client_loop, "runs"),
                   pool.submit(client_loop, "predict", run="runs/rotating", text=TEXT),
                   pool.submit(client_loop, "attention", run="runs/rotating", text=TEXT)]
        time.sleep(8)
        stop.set()
        for future in clients:
            future.result()
        assert writer.result() > 20
    assert answers[500] == 0 and answers[200] > 10 * (sum(answers.values()) - answers[200]), answers


# ------------------------------------------------------------------------------------------------
# In-process: one request held inside a load or a computation on purpose


@pytest.fixture
def two_runs(tmp_path, gpt_run):
    for name in ("a", "b"):
        shutil.copytree(gpt_run.path, tmp_path / "runs" / name)
    return client(tmp_path / "runs")


def held_while(app, hold, run: str, other: str) -> int:
    """The status of ``predict`` on run ``other`` while a request for ``run`` is inside ``hold``."""
    inside, release = hold
    with ThreadPoolExecutor(2) as pool:
        stuck = pool.submit(app.get, f"/data/plugin/tinylm/predict?run={run}&text={quote(TEXT)}")
        assert inside.wait(10)
        answered = pool.submit(app.get, f"/data/plugin/tinylm/predict?run={other}&text={quote(TEXT)}")
        try:
            return answered.result(timeout=10).status_code
        finally:
            release.set()
            assert stuck.result(timeout=10).status_code == 200


def holding(monkeypatch, module, name: str, when) -> tuple[threading.Event, threading.Event]:
    """``module.name`` waits (until the second event) on the calls ``when(args)`` is true for, the first
    event set once one is inside."""
    inside, release, original = threading.Event(), threading.Event(), getattr(module, name)

    def held(*args, **kwargs):
        if when(args):
            inside.set()
            release.wait(20)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, held)
    return inside, release


def test_a_load_that_hangs_holds_up_no_other_run(two_runs, monkeypatch):
    hold = holding(monkeypatch, models, "load_model", lambda args: "/runs/a/" in str(args[0]))
    assert held_while(two_runs[0], hold, "a", "b") == 200


def test_a_long_computation_holds_up_no_other_model(two_runs, monkeypatch):
    hold = holding(monkeypatch, views, "predict", lambda args: args[0].path.parent.parent.name == "a")
    assert held_while(two_runs[0], hold, "a", "b") == 200


def test_scan_lists_no_name_a_url_cannot_send_and_no_folder_through_a_link(tmp_path):
    for name in ("ok", "back\\slash", "tab\tname", "del\x7f", os.fsdecode(b"not-utf8-\xff"), "linked-checkpoints"):
        for part in (".hydra", "checkpoints"):
            (tmp_path / name / part).mkdir(parents=True)
    shutil.rmtree(tmp_path / "linked-checkpoints" / "checkpoints")
    (tmp_path / "linked-checkpoints" / "checkpoints").symlink_to(tmp_path / "ok" / "checkpoints")
    (tmp_path / "linked-run").symlink_to(tmp_path / "ok")
    assert [run.name for run in scan(tmp_path)] == ["ok"]
