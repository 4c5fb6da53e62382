"""The run's TensorBoard logger: Lightning's, without the ``epoch`` scalar, its event files in the run
folder itself, and sweep jobs named by what they sweep.

- Lightning adds an ``epoch`` value to every logged step. The training stream has no epochs, so
  that scalar is a flat line at 0 that only pushes the real curves down the first screen.
- TensorBoard names a run by the folder of its event files, relative to ``--logdir``. They are written
  into the run folder itself, so a single run is named by its folder: its start time and the
  settings its command line changed (``tinylm.runs.folder.run_name``), nothing more. In a sweep,
  each job's events go into a folder of the job named by its swept settings
  (``<job>/model.n_embd=32,model.num_heads=2``), so the run list and every legend say which curve
  is which. ``tinylm.run_folder.events_folder`` finds them, and those of earlier releases (``tensorboard/``).
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import OmegaConf


def swept_settings() -> str | None:
    """In a sweep job, ``key=value,...`` for the keys the sweep varies; None outside a sweep.

    The swept keys are those given as a sweep (``a=1,2``, ``range(...)``, ...) on the sweep's
    command line (``<sweep dir>/multirun.yaml``) and those of ``hydra.sweeper.params`` (Optuna).
    """
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra = HydraConfig.get()
    parser = OverridesParser.create()
    swept = set(OmegaConf.to_container(hydra.sweeper).get("params") or {})
    record = Path(hydra.sweep.dir) / "multirun.yaml"
    if record.is_file():
        sweep_line = OmegaConf.load(record).hydra.overrides.task
        swept |= {o.key_or_group for o in parser.parse_overrides(list(sweep_line)) if o.is_sweep_override()}
    own = [o for o in parser.parse_overrides(list(hydra.overrides.task)) if o.key_or_group in swept]
    name = ",".join(f"{o.key_or_group}={o.value()}" for o in own).replace("/", "_")  # one folder level
    return name or f"job{hydra.job.num}"


class RunTensorBoardLogger(TensorBoardLogger):
    """``TensorBoardLogger`` that drops Lightning's ``epoch``, writes into ``save_dir`` itself (the run folder;
    ``name`` adds a folder) and names sweep jobs by their settings."""

    def __init__(self, save_dir: str, name: str = "", version: str | int | None = "", **kwargs):
        super().__init__(save_dir, name=name, version=swept_settings() or version, **kwargs)

    @rank_zero_only
    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        super().log_metrics({k: v for k, v in metrics.items() if k != "epoch"}, step)
