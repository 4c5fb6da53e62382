"""How a sweep's jobs are launched: each job's config composed once, and in parallel the largest first.

- ``ComposedOnce``: Hydra composes a job's config when the sweeper checks the batch, when the sweep
  is planned (``tinylm.runs.sweep_resume``) and when the launcher starts the job, about 0.2 s of CPU
  each; this loader composes each job's overrides once and hands out copies (also to joblib's
  worker processes, which receive it with the composed configs).
- ``launch_largest_first``: the joblib launcher starts jobs in the order it is given them, so a
  sweep whose largest job comes last ends with that job alone on the machine. Jobs are started
  largest first instead (the longest-processing-time rule), each keeping its own number and folder.
- ``job_work``: the estimate of a job's size that order uses.

Where the jobs run (workers started warm, or this process when one at a time): ``tinylm.runs.sweep_workers``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

# the vocabulary size assumed when a job's model is sized before its data is read (a byte's 256 values)
SIZING_VOCAB = 256


class ComposedOnce:
    """A sweep's config loader that composes each job's config once: every caller (the sweeper's check,
    the planning, the launcher) gets its own copy. Everything else goes to the loader it wraps."""

    def __init__(self, loader):
        self.loader = loader
        self.composed: dict[tuple[str, ...], DictConfig] = {}

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: Sequence[str]) -> DictConfig:
        key = tuple(sweep_overrides)  # one sweep, one master config
        if key not in self.composed:
            self.composed[key] = self.loader.load_sweep_config(master_config, list(sweep_overrides))
        return copy.deepcopy(self.composed[key])

    def __getattr__(self, name: str):
        if name in ("loader", "composed"):  # not set yet: unpickling in a joblib worker
            raise AttributeError(name)
        return getattr(self.loader, name)


def job_work(job: DictConfig) -> float:
    """A job's size, to start the largest first: its model's parameters (built on PyTorch's meta
    device, with a ``SIZING_VOCAB``-symbol vocabulary) times the tokens it trains on (steps x batch x
    context). 0 for a model that cannot be built: that job fails at once."""
    import torch

    from tinylm.models import build_model

    try:
        model = OmegaConf.to_container(job.model, resolve=True)
        with torch.device("meta"):
            params = sum(p.numel() for p in build_model({**model, "vocab_size": SIZING_VOCAB}).parameters())
        return float(params * max(1, job.trainer.max_steps) * job.data.batch_size * job.model.block_size)
    except Exception:  # an invalid config, a class that cannot be imported: the job fails as it starts
        return 0.0


JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


def runs_in_parallel(launcher) -> bool:
    """Whether ``launcher`` is Hydra's joblib launcher (jobs in parallel processes, started in order), or
    it launched by ``tinylm.runs.sweep_workers``. By name: Hydra's plugin scan may load the plugin's
    module afresh, a class object of its own."""
    from tinylm.runs.sweep_workers import JoblibJobs

    launcher = launcher.launcher if isinstance(launcher, JoblibJobs) else launcher
    return f"{type(launcher).__module__}.{type(launcher).__qualname__}" == JOBLIB_LAUNCHER


def launch_largest_first(launcher, jobs: Sequence[tuple[int, Sequence[str], float]]) -> list[JobReturn]:
    """Launch ``jobs`` (number, overrides, size) on the joblib ``launcher`` as its own ``launch`` does
    (``tinylm.runs.sweep_workers.launch_jobs``), but the largest first, each job with its own number;
    return their results in the order given."""
    from tinylm.runs.sweep_workers import launch_jobs

    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][2])  # stable: equal sizes keep their order
    done = launch_jobs(launcher, [jobs[i][:2] for i in order], ", the largest first")
    returns: list[JobReturn] = [None] * len(jobs)  # type: ignore[list-item]
    for i, ret in zip(order, done, strict=True):
        returns[i] = ret
    return returns
