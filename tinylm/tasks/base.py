"""``Task``: what a task provides, so that the training job and the commands ask it instead of a flag.

A task subclasses it in its package (``tinylm/tasks/<name>/task.py``) and is listed in
``tinylm.tasks.TASKS``. The class attributes say what it is; the methods do what differs between
tasks, each called with what its caller has at hand (a composed config, a model, a checkpoint
loaded by ``tinylm.checkpoint.load_model``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from omegaconf import DictConfig

    from tinylm.checkpoint import LoadedModel


class Task:
    name: str  # what checkpoints record (the LightningModule's ``task`` hyperparameter)
    data_target: str  # the data group's ``_target_`` that trains this task
    views: tuple[str, ...] = ()  # its entries of the callbacks group (conf/callbacks/default.yaml)
    headline: str | None = None  # the validation score (its name in validation_scores) on the progress bar
    score_words: dict[str, str] = {}  # how the final log line names its validation scores (else: the name)
    export_problem: str | None = None  # why export.py cannot export its checkpoints; None: it can

    def config_problems(self, cfg: DictConfig, model_class: type) -> list[str]:
        """What does not fit this task in a training config, each one line naming the fix."""
        return []

    def data_arguments(self, model_class: type) -> dict:
        """What the data module takes from the model (the training job adds block_size and seed)."""
        return {}

    def validation_counts(self, model, batch) -> tuple[int, ...] | None:
        """Counts of one validation batch, summed over the batches for ``validation_scores``; None: none."""
        return None

    def validation_scores(self, counts: tuple[int, ...]) -> dict[str, float]:
        """The validation scores (name -> value) of the summed counts: logged as ``loss/val_<name>`` (beside
        loss/val in TensorBoard), the run's metrics.json key ``val_<name>`` and in its final log line."""
        return {}

    def generate(self, cfg: DictConfig, loaded: LoadedModel, prompt: str, seed: int) -> None:
        """Print what ``generate.py`` prints for ``prompt`` (conf/generate.yaml's options in ``cfg``)."""
        raise NotImplementedError

    def figures(self, loaded: LoadedModel, ids: list[int], note: str) -> Iterator[tuple[str, Figure]]:
        """``visualize.py``'s figures of the text ``ids``: (file name without .png, figure), one by one."""
        raise NotImplementedError

    def evaluate(self, cfg: DictConfig, loaded: LoadedModel, datamodule) -> tuple[str, dict]:
        """``evaluate.py``'s scores on ``datamodule``: (the line saying what was scored, scores with loss,
        bpc and tokens)."""
        raise NotImplementedError
