"""Whether the ranks that start ``train.py`` are the ranks the trainer makes (``trainer.devices`` per node on
``trainer.num_nodes`` nodes), checked before Hydra makes a run folder and before torch is imported: a layout
Lightning cannot use is one ``error:`` line that says which layout to use, instead of a hang (the ranks wait
for ranks that never start) or Lightning's traceback.

- SLURM (``srun``, a ``sbatch`` script): one task per rank, as many on every node as ``trainer.devices``, on
  ``trainer.num_nodes`` nodes, one task too (``srun -n1`` with ``trainer.devices=2`` would train one rank);
  ``srun -n2`` (no ``--ntasks-per-node``), which Lightning refuses, is taken as 2 tasks per node when SLURM
  placed the same number on every node. The batch step of a several-task job (``python train.py`` in a
  ``sbatch`` script, without ``srun``) is one process: refused, it would wait for ranks that never start.
- torchrun: ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` against the trainer; one line per node (local rank 0).
- neither: Lightning starts the processes of one node itself (``trainer.devices``); ``trainer.num_nodes`` > 1
  would wait for nodes nobody starts, and so would a stray ``LOCAL_RANK`` (Lightning then takes the ranks as
  started from outside).
"""

from __future__ import annotations

import os
import re

from tinylm.errors import TinyLMError
from tinylm.runs.ranks import Launch, launch, slurm_interactive

BATCH_STEP_ID = "4294967294"  # SLURM_BATCH_SCRIPT: the step id some SLURM versions give the batch step
ONE_PROCESS = (None, "auto", "single_device")  # strategies of a one-process trainer (with devices=1, num_nodes=1)


def _count(value) -> int | None:
    """trainer.devices / trainer.num_nodes as a number of processes or nodes; None when Lightning decides
    ("auto", -1)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        return int(value) if value.isdigit() and int(value) > 0 else None
    try:
        return len(list(value)) or None  # a list of device indices
    except TypeError:
        return None


def _per_node(tasks_per_node: str) -> int | None:
    """SLURM_TASKS_PER_NODE ("2", "2(x3)", "2(x2),1") as one number when every node runs as many tasks."""
    counts = {int(m.group(1)) for m in re.finditer(r"(\d+)(?:\(x\d+\))?", tasks_per_node)}
    return counts.pop() if len(counts) == 1 else None


def check_layout(trainer: dict) -> None:
    """The processes started for this run (by SLURM, torchrun or nobody) against ``trainer.devices`` x
    ``trainer.num_nodes``: one error line (TinyLMError) saying which layout to use. Of several processes that
    see the same mistake one says it, the others exit 1 quietly."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
        speaker = env.get("LOCAL_RANK", "0") == "0"  # one line per node
        check = _check_torchrun
    elif "SLURM_PROCID" in env and "SLURM_JOB_ID" in env and "SLURM_NTASKS" in env and not slurm_interactive():
        speaker = env["SLURM_PROCID"] == "0"  # task 0 says it: one line for the job
        check = _check_slurm
    else:
        _check_own_launch(trainer)
        return
    try:
        check(trainer)
    except TinyLMError:
        if speaker:
            raise
        raise SystemExit(1) from None


def _trainer_ranks(trainer: dict) -> tuple[int | None, int | None]:
    return _count(trainer.get("devices")), _count(trainer.get("num_nodes", 1))


def _check_own_launch(trainer: dict) -> None:
    devices, nodes = _trainer_ranks(trainer)
    env = os.environ
    starts = ("start its ranks on every node with torchrun (torchrun --nnodes=N --nproc_per_node=D --node_rank=R "
              "--master_addr=... --master_port=... train.py ...) or with srun (srun --nodes=N --ntasks-per-node=D "
              "python train.py ...): see docs/scale-out.md")
    if nodes is not None and nodes > 1:
        raise TinyLMError(f"trainer.num_nodes={nodes}, but no torchrun or SLURM started this process: Lightning "
                          f"starts the processes of this node only, and they would wait for the other nodes without "
                          f"end; {starts}")
    if devices is not None and devices > 1 and "LOCAL_RANK" in env and "WORLD_SIZE" not in env:
        # Lightning's own ranks 1.. get WORLD_SIZE with LOCAL_RANK; a LOCAL_RANK alone is left in the environment
        raise TinyLMError(f"LOCAL_RANK={env['LOCAL_RANK']} is set in the environment, so Lightning takes the "
                          f"{devices} ranks as started from outside and would wait for them without end: unset "
                          f"LOCAL_RANK (Lightning then starts them itself), or {starts}")


def _check_torchrun(trainer: dict) -> None:
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1"))
    local = int(env.get("LOCAL_WORLD_SIZE", str(world)))
    nnodes = world // local if local and world % local == 0 else None
    devices, nodes = _trainer_ranks(trainer)
    if devices is None or nodes is None:
        return  # Lightning counts the devices, and says it when they do not match
    layout = f"torchrun started {world} process(es)" + (f" on {nnodes} node(s) ({local} per node)" if nnodes else
                                                         f", {local} on this node")
    if (devices, nodes) == (local, nnodes):
        return
    ddp = "trainer=ddp " if trainer.get("strategy") in ONE_PROCESS and devices * nodes == 1 else ""
    use = f"use {ddp}trainer.devices={local} trainer.num_nodes={nnodes}, or " if nnodes else ""
    raise TinyLMError(f"{layout}, but trainer.devices={devices} trainer.num_nodes={nodes} make {devices * nodes} "
                      f"rank(s) of {devices} per node: {use}start torchrun --nnodes={nodes} "
                      f"--nproc_per_node={devices} on each of {nodes} node(s)")


def _batch_step() -> bool:
    """Whether this is the batch step of a sbatch job (its script), where no ``srun`` started the process."""
    step = os.environ.get("SLURM_STEP_ID", os.environ.get("SLURM_STEPID"))
    return step is None or step == BATCH_STEP_ID


def _check_slurm(trainer: dict) -> None:
    env = os.environ
    job = launch() or Launch(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), "slurm")
    devices, nodes = _trainer_ranks(trainer)
    ranks = devices * nodes if devices is not None and nodes is not None else None
    if _batch_step() and job.world > 1 and ranks != 1:
        raise TinyLMError(f"SLURM gave job {env['SLURM_JOB_ID']} {job.world} tasks, but train.py runs in its batch "
                          f"step, as one process, and would wait for the other ranks without end: start train.py "
                          f"with srun in the sbatch script (srun python train.py ...), which starts one task per "
                          f"rank")
    if _batch_step() and ranks is not None and ranks > 1:
        raise TinyLMError(f"SLURM gave job {env['SLURM_JOB_ID']} {job.world} task, but trainer.devices={devices} "
                          f"trainer.num_nodes={nodes} make {ranks} ranks, one task each: give the job "
                          f"#SBATCH --nodes={nodes} --ntasks-per-node={devices} and start train.py with srun in "
                          f"the sbatch script (srun python train.py ...)")
    if job.world < 2 and (ranks is None or ranks == 1):
        return  # one task of a one-process trainer (or one whose devices Lightning counts)
    _check_slurm_layout(job, trainer)


def _check_slurm_layout(job: Launch, trainer: dict) -> None:
    devices, nodes = trainer.get("devices"), trainer.get("num_nodes", 1)
    env = os.environ
    per_node = _per_node(env.get("SLURM_TASKS_PER_NODE", ""))
    nnodes = int(env.get("SLURM_NNODES", "1"))
    layout = f"SLURM started {job.world} tasks on {nnodes} node(s) ({env.get('SLURM_TASKS_PER_NODE')} per node)"
    if per_node is None:
        raise TinyLMError(f"{layout}, not as many on every node, which Lightning cannot use: start them with "
                          f"--nodes={nnodes} --ntasks-per-node={job.world // nnodes or 1}")
    fix = f"srun --nodes={nnodes} --ntasks-per-node={per_node} with trainer.devices={per_node} " \
          f"trainer.num_nodes={nnodes}"
    if not isinstance(devices, int) or not isinstance(nodes, int) or devices < 1:
        raise TinyLMError(f"{layout}: Lightning takes one task per rank, so trainer.devices must be a number "
                          f"(it is {devices}): use {fix}")
    if job.world > 1 and trainer.get("strategy") in ONE_PROCESS and devices == 1 and nodes == 1:
        raise TinyLMError(f"{layout}, but the trainer trains one process: run one task (srun -n1), or use "
                          f"trainer=ddp and {fix}")
    if (devices, nodes) != (per_node, nnodes):
        start = f"start srun --nodes={nodes} --ntasks-per-node={devices}"
        fixes = f"{start}, or use {fix}" if job.world < devices * nodes else f"use {fix}, or {start}"
        raise TinyLMError(f"{layout}, but trainer.devices={devices} trainer.num_nodes={nodes} make "
                          f"{devices * nodes} rank(s) of {devices} per node: {fixes}")
    env.setdefault("SLURM_NTASKS_PER_NODE", str(per_node))  # srun -n2: Lightning wants --ntasks-per-node
