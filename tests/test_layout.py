"""The layout check of tinylm/runs/layout.py, in-process: the environment SLURM (srun, a sbatch script's batch
step) or torchrun gives a process, set with monkeypatch, against the trainer's devices x num_nodes. A layout
Lightning cannot use is one error line that names the layout to use, said before Hydra makes a run folder
(tests/test_slurm.py and tests/test_multinode.py run the real engines)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tinylm.errors import TinyLMError
from tinylm.runs.layout import check_layout

DDP = {"strategy": "ddp", "devices": 2, "num_nodes": 1}
ONE = {"strategy": "auto", "devices": 1, "num_nodes": 1}
LAUNCH_VARS = ("TORCHELASTIC", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for name in list(os.environ):
        if name.startswith(LAUNCH_VARS):
            monkeypatch.delenv(name)


def srun(monkeypatch, ntasks: int, per_node: str, nnodes: int = 1, procid: int = 0, step: str | None = "0"):
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "python3", "SLURM_PROCID": str(procid),
           "SLURM_NTASKS": str(ntasks), "SLURM_TASKS_PER_NODE": per_node, "SLURM_NNODES": str(nnodes)}
    if step is not None:
        env["SLURM_STEP_ID"] = step
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def torchrun(monkeypatch, world: int, local: int, rank: int = 0, local_rank: int = 0):
    for name, value in {"TORCHELASTIC_RUN_ID": "none", "RANK": rank, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": local,
                        "LOCAL_RANK": local_rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, str(value))


def refusal(trainer: dict) -> str:
    with pytest.raises(TinyLMError) as e:
        check_layout(trainer)
    return str(e.value)


def test_one_slurm_task_of_a_two_device_trainer_is_refused_with_the_layout_to_use(monkeypatch):
    srun(monkeypatch, 1, "1")  # srun -N1 -n1 (or --ntasks-per-node=1) ... trainer=ddp trainer.devices=2
    text = refusal(DDP)
    assert "SLURM started 1 tasks" in text and "per node: start srun --nodes=1 --ntasks-per-node=2, or" in text, text
    check_layout(ONE)  # one task of a one-process trainer: fine
    check_layout({**DDP, "devices": 1})  # ddp of one rank
    check_layout({**ONE, "devices": "auto"})  # Lightning counts the devices


def test_slurm_layouts_that_match_pass_and_others_speak_once(monkeypatch):
    srun(monkeypatch, 2, "2")  # srun --ntasks-per-node=2 / srun -n2
    check_layout(DDP)
    assert os.environ["SLURM_NTASKS_PER_NODE"] == "2"
    assert "the trainer trains one process" in refusal(ONE)
    srun(monkeypatch, 2, "2", procid=1)  # task 1 exits quietly: task 0 says it
    with pytest.raises(SystemExit) as e:
        check_layout(ONE)
    assert e.value.code == 1


def test_a_sbatch_script_without_srun_is_told_to_use_srun(monkeypatch):
    srun(monkeypatch, 2, "2", step=None)  # the batch step: SLURM_NTASKS=2, no SLURM_STEP_ID
    text = refusal(DDP)
    assert "runs in its batch step" in text and "start train.py with srun" in text, text
    srun(monkeypatch, 1, "1", step=None)  # sbatch's one task, trainer.devices=2: trains one rank otherwise
    assert "--ntasks-per-node=2 and start train.py with srun" in refusal(DDP)
    check_layout(ONE)  # sbatch --wrap "python train.py": one process, fine
    srun(monkeypatch, 2, "2", step="4294967294")  # the batch step's id on some SLURM versions
    assert "start train.py with srun" in refusal(DDP)


def test_slurm_interactive_jobs_are_left_to_lightning(monkeypatch):
    srun(monkeypatch, 1, "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # Lightning ignores SLURM there, so does the check
    check_layout(DDP)


@pytest.mark.parametrize("trainer", [{**DDP, "num_nodes": 2, "devices": 1}, {**DDP, "num_nodes": 2}])
def test_num_nodes_without_torchrun_or_slurm_is_refused(trainer):
    text = refusal(trainer)
    assert text.startswith("trainer.num_nodes=2, but no torchrun or SLURM") and "torchrun" in text, text
    assert "srun --nodes=N" in text


def test_lightning_starts_the_processes_of_one_node_itself(monkeypatch):
    check_layout(DDP)  # the parent: Lightning starts rank 1 (tests/test_sweeps.py runs it)
    for name, value in {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "12910"}.items():  # what Lightning gives the rank it starts
        monkeypatch.setenv(name, value)
    check_layout(DDP)


def test_a_stray_local_rank_is_refused(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")  # Lightning would take the ranks as started outside and wait
    assert "LOCAL_RANK=0 is set in the environment" in refusal(DDP)
    check_layout(ONE)


def test_torchrun_layouts_against_the_trainer(monkeypatch):
    torchrun(monkeypatch, world=2, local=1)  # 2 nodes x 1 process, trainer.num_nodes=2 forgotten
    text = refusal({**DDP, "devices": 1})
    assert text.startswith("torchrun started 2 process(es) on 2 node(s) (1 per node), but trainer.devices=1 "
                           "trainer.num_nodes=1"), text
    assert "use trainer.devices=1 trainer.num_nodes=2" in text
    check_layout({**DDP, "devices": 1, "num_nodes": 2})
    torchrun(monkeypatch, world=2, local=2)  # one node, 2 processes
    check_layout(DDP)
    assert "use trainer=ddp trainer.devices=2 trainer.num_nodes=1" in refusal(ONE)  # 2 processes, 1-process trainer
    torchrun(monkeypatch, world=1, local=1)
    assert "torchrun --nnodes=1 --nproc_per_node=2" in refusal(DDP)
    check_layout(ONE)
    torchrun(monkeypatch, world=4, local=2, rank=3, local_rank=1)  # local rank 0 says it: one line per node
    with pytest.raises(SystemExit):
        check_layout(DDP)


@pytest.mark.parametrize("launcher", ["slurm", "torchrun"])
def test_the_refusal_is_one_error_line_before_a_run_folder_is_made(monkeypatch, tmp_path, launcher):
    from tinylm.commands.train import run_command_line

    if launcher == "slurm":
        srun(monkeypatch, 1, "1")
        trainer = ["trainer=ddp", "trainer.devices=2"]
    else:
        torchrun(monkeypatch, world=2, local=1)
        trainer = ["trainer=ddp", "trainer.devices=1"]
    monkeypatch.setattr(sys, "argv", ["train.py", *trainer, f"paths.log_dir={tmp_path}"])
    with pytest.raises(SystemExit) as e:
        run_command_line()
    assert str(e.value.code).startswith("error: ") and "\n" not in str(e.value.code), e.value.code
    assert list(tmp_path.iterdir()) == []


def test_the_lost_ranks_line_quotes_the_backends_first_sentence():
    from types import SimpleNamespace

    from tinylm.training.fit import lost_ranks, peer_reason

    gloo = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                        "[127.0.0.1]:11992: Connection reset by peer. This is typically caused by a remote worker "
                        "crashing. Check the logs of the remote worker before reporting an error.")
    assert peer_reason(gloo) == "Read error [127.0.0.1]:11992: Connection reset by peer."
    endless = RuntimeError("Connection closed by peer " + "word " * 100)
    assert peer_reason(endless).endswith("word ...") and len(peer_reason(endless)) <= 244
    trainer = SimpleNamespace(world_size=2, global_rank=0, global_step=7)
    with pytest.raises(TinyLMError) as e, lost_ranks(trainer, Path("/nonexistent")):
        raise gloo
    assert "(a node or a process of the job died: Read error [127.0.0.1]:11992: Connection reset by peer.); " \
           "the job is over, no checkpoint was saved yet" in str(e.value), e.value
