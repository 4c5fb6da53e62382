"""``Task``: what a task provides, so that the training job and the commands ask it instead of a flag.

A task subclasses it in its package (``tinylm/tasks/<name>/task.py``) and is listed in
``tinylm.tasks.TASKS``. The class attributes say what it is; the methods do what differs between
tasks, each called with what its caller has at hand (a composed config, a model, a ``LoadedModel``: a
checkpoint loaded by ``tinylm.checkpoint.load_model``). ``bits_per_char`` is how every task and the training
job turn a loss into bits per character.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinylm.errors import TinyLMError

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.figure import Figure
    from omegaconf import DictConfig

    from tinylm.models import LanguageModel
    from tinylm.tokenizer import Tokenizer


def bits_per_char(loss, chars_per_token: float):
    """A loss in nats per token (a float or a tensor) as bits per character: ``loss / ln 2 / chars_per_token``."""
    return loss / math.log(2) / chars_per_token


@dataclass
class LoadedModel:
    """A checkpoint's model and tokenizer, what a task's commands act on."""

    model: LanguageModel  # in eval mode, on the CPU
    tokenizer: Tokenizer
    path: Path
    global_step: int | None
    task: str = "text"  # what it was trained for (tinylm.tasks): what the commands do with it
    why: str = ""  # why this checkpoint was chosen, for the line that names it

    def require_attention(self) -> None:
        """One TinyLMError if the model has no attention to draw (the LSTM/GRU baseline)."""
        if not self.model.has_attention:
            raise TinyLMError(f"checkpoint {self.path} holds an {self.model.config.arch} model, which has no "
                              "attention to draw: pass a Transformer's checkpoint (ckpt_path=... or run_dir=...)")


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

    def validation_text(self, data: dict) -> str | None:
        """The validation text of a run whose data config is ``data`` (its recorded ``data`` group), split as
        training splits it, read without building the data module (no Lightning) and never downloaded; None
        for a task whose data is not one text. A missing or unreadable file is a TinyLMError."""
        return None

    def data_arguments(self, model_class: type) -> dict:
        """What the data module takes from the model (the training job adds block_size and seed)."""
        return {}

    def validation_counts(self, model, batch) -> tuple[int, ...] | None:
        """Counts of one validation batch, summed over the batches for ``validation_scores``; None: none."""
        return None

    def validation_scores(self, counts: tuple[int, ...]) -> dict[str, float]:
        """The validation scores (name -> value) of the summed counts: logged as ``loss/val_<name>`` (beside
        loss/val in TensorBoard), the run's metrics key ``val_<name>`` and in its final log line."""
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
