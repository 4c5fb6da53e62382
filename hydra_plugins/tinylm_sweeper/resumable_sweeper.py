"""Hydra's basic sweeper (every combination of the swept values), made resumable for tinylm.

Hydra only loads sweepers from the ``hydra_plugins`` package, so this thin class lives here and
the logic in ``tinylm.runs.sweep_resume``. conf/hydra/default.yaml makes it the training sweeper:
``python train.py -m ...`` runs a sweep as Hydra's basic sweeper would, and running the same
command again with ``hydra.sweep.dir=<that sweep>`` finishes it (see ``tinylm.runs.sweep_resume``).
Each job's config is composed once, and on the joblib launcher the largest jobs start first
(``hydra.sweeper.largest_first=false``: in the grid's order; see ``tinylm.runs.sweep_launch``), in
workers that start warm, or in this process when only one job would run at a time
(``tinylm.runs.sweep_workers``).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional  # noqa: UP035 - Hydra reads these annotations at run time

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext


@dataclass
class ResumableSweeperConf:
    _target_: str = "hydra_plugins.tinylm_sweeper.resumable_sweeper.ResumableSweeper"
    max_batch_size: Optional[int] = None  # noqa: UP045 - as Hydra's basic sweeper: None launches all at once
    params: Optional[Dict[str, str]] = None  # noqa: UP006, UP045
    largest_first: bool = True  # with the joblib launcher: start the largest jobs first


ConfigStore.instance().store(group="hydra/sweeper", name="tinylm", node=ResumableSweeperConf,
                             provider="tinylm")


class ResumableSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int], params: Optional[Dict[str, str]] = None,  # noqa: UP006, UP045
                 largest_first: bool = True):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.largest_first = largest_first

    def setup(self, *, hydra_context, task_function, config) -> None:
        from tinylm.runs.sweep_launch import ComposedOnce, runs_in_parallel
        from tinylm.runs.sweep_workers import JoblibJobs, several_at_once, start_warm_workers

        hydra_context = HydraContext(config_loader=ComposedOnce(hydra_context.config_loader),
                                     callbacks=hydra_context.callbacks)  # each job's config composed once
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        if runs_in_parallel(self.launcher):  # before this process imports the training stack itself
            if several_at_once(self.launcher):  # else every job runs in this process: no worker to warm
                start_warm_workers()
            self.launcher = JoblibJobs(self.launcher)
        from tinylm.runs.sweep_resume import ResumingLauncher

        self.launcher = ResumingLauncher(self.launcher, hydra_context, config, self.largest_first)

    def sweep(self, arguments: Sequence[str]) -> Any:
        """Every job of the sweep (expanded as BasicSweeper expands them) is planned and claimed before
        BasicSweeper writes multirun.yaml: a refused re-run writes nothing. A sweep that ran to its end
        (its jobs finished or failed, not stopped) ends with its table (``tinylm.runs.sweep_report``)."""
        from tinylm.runs.sweep_report import print_report
        from tinylm.runs.sweep_stop import start_sweep, stop_after_interrupt

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (jobs,) = self.split_arguments(parser.parse_overrides([*self._parse_config(), *arguments]), None)
        with self.launcher.claimed(jobs):
            start_sweep(self.config)
            returns = super().sweep(arguments)
        stop_after_interrupt(self.config)
        print(flush=True)
        print_report(Path(str(self.config.hydra.sweep.dir)))
        return returns
