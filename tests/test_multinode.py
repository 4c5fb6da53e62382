"""Several nodes for real: two torchrun "nodes" on 127.0.0.1 (``--node_rank`` 0 and 1, one process each,
gloo on CPU) started with the same command, as on a cluster with a shared filesystem.

They train into one run folder named by rank 0 (tinylm.runs.ranks), their text tokenized once into the
shared token cache, with the weights of one node of two processes; a node killed mid-run ends the job with
one line, and ``ckpt_path=last`` on every node continues it to the weights of the uninterrupted run.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY_MODEL

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

STEPS = 30  # enough steps after the first checkpoint that a node is killed mid-run
RUN = [*TINY_MODEL, "callbacks=minimal", f"trainer.max_steps={STEPS}", "trainer.val_check_interval=3"]
REPEAT = 90_000  # the tiny text x this is over 8 MiB: tokenized once into the token cache (token_cache.CACHE_MIN_MIB)
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nodes(log_dir: Path, *overrides: str, out: Path) -> list[subprocess.Popen]:
    """The same torchrun command on node 0 and node 1 (each in a session of its own, as on its own machine)."""
    port, procs = free_port(), []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", f"--node_rank={node}",
               "--master_addr=127.0.0.1", f"--master_port={port}", str(ROOT / "train.py"), "trainer=ddp_sim",
               "trainer.num_nodes=2", "trainer.devices=1", f"paths.log_dir={log_dir}", *RUN, *overrides]
        # node 1's clock reads 8 hours ahead of node 0's (its time zone): the folder must not follow it
        env = {**ENV, "TZ": "UTC0" if node == 0 else "UTC-8"}
        with open(out.with_name(f"{out.name}.node{node}.log"), "w") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
    return procs


def output(out: Path, node: int) -> str:
    return out.with_name(f"{out.name}.node{node}.log").read_text()


def run_nodes(log_dir: Path, *overrides: str, out: Path) -> None:
    procs = start_nodes(log_dir, *overrides, out=out)
    codes = [proc.wait(timeout=600) for proc in procs]
    assert codes == [0, 0], f"{codes}\n{output(out, 0)}\n{output(out, 1)}"


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [k for k in wa if not torch.equal(wa[k], wb[k])]


def one_run(log_dir: Path) -> Path:
    runs = sorted((log_dir / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[str]:
    """The data overrides of every run here: a text large enough for the token cache, a cache of its own."""
    from conftest import TINY_TEXT

    folder = tmp_path_factory.mktemp("text")
    (folder / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    return [f"data.path={folder / 'tiny.txt'}", f"data.repeat={REPEAT}", f"data.cache_dir={folder / 'tokens'}"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory, data) -> Path:
    """A 2 nodes x 1 process run, uninterrupted: its run folder. Its text is tokenized once, by one rank,
    into the shared token cache; the other rank waits for it and maps it."""
    tmp = tmp_path_factory.mktemp("two-nodes")
    run_nodes(tmp / "logs", *data, out=tmp / "out")
    said = output(tmp / "out", 0) + output(tmp / "out", 1)
    assert said.count("tokenizing once into the token cache") == 1, said
    return one_run(tmp / "logs")


def test_two_nodes_train_one_run_folder_with_the_weights_of_one_node_of_two_processes(two_nodes, data, tmp_path):
    run = two_nodes
    assert [p.name for p in (run / "checkpoints").glob("last*")] == ["last.ckpt"]
    assert (run / "metrics.json").is_file() and not (run / "running.json").exists()
    pids = {re.search(r"\.(\d+)\.\d+$", p.name).group(1) for p in run.glob("events.out.tfevents.*")}
    assert len(pids) == 1  # one TensorBoard event stream: rank 0's
    log = (run / "train.log").read_text()
    assert "GLOBAL_RANK: 0" in log and "GLOBAL_RANK: 1" not in log  # rank 1 wrote nothing there
    assert sorted(p.name for p in (run / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert not list(run.glob("*.log.*")) and not list(run.parent.parent.glob(".ranks"))  # nothing left over
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS

    # the same seed and world size on 1 node x 2 processes (Lightning starts rank 1): the same weights
    single = tmp_path / "one-node"
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "trainer=ddp_sim", "trainer.devices=2",
                           f"hydra.run.dir={single}", *data, *RUN], capture_output=True,
                          text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert_same_weights(run / "checkpoints" / "last.ckpt", single / "checkpoints" / "last.ckpt")


def stop_node(proc: subprocess.Popen) -> None:
    """The whole node at once: its torchrun agent and its worker, stopped, then killed."""
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                              text=True).stdout.split()]
    for pid in (proc.pid, *workers):
        os.kill(pid, signal.SIGSTOP)
    for pid in (proc.pid, *workers):
        os.kill(pid, signal.SIGKILL)


def test_a_killed_node_ends_the_job_in_one_line_and_ckpt_path_last_on_every_node_finishes_it(two_nodes, data,
                                                                                              tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "killed"
    procs = start_nodes(logs, *data, out=out)
    try:
        while not list(logs.glob("runs/*/checkpoints/last.ckpt")):  # the first validation's checkpoint
            assert procs[0].poll() is None and procs[1].poll() is None, output(out, 0) + output(out, 1)
            time.sleep(0.01)
        stop_node(procs[1])
        assert procs[0].wait(timeout=300) != 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    run = one_run(logs)
    step = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert step < STEPS  # killed mid-run
    errors = [line for line in output(out, 0).splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rank 0 of 2 lost the other ranks" in errors[0], output(out, 0)
    assert "ckpt_path=last on every node" in errors[0] and "Traceback" not in output(out, 0).split("error:")[0]

    run_nodes(logs, *data, "ckpt_path=last", out=tmp_path / "resumed")
    assert one_run(logs) == run
    assert f"resuming from step {step}" in (run / "train.log").read_text()
    assert_same_weights(run / "checkpoints" / "last.ckpt", two_nodes / "checkpoints" / "last.ckpt")
