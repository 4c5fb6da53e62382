"""``HeadScores``: each head's previous-token, induction and entropy scores during training, so that
a learner sees the step at which a head learns its job.

Every ``every_n_steps`` steps (and when training ends) it logs one scalar per head and score,
``probe_heads_layer<L>/<score>_head<H>`` (TensorBoard groups the Scalars tab by layer, after the
loss and the learning rate), and every ``images_every_n_steps`` steps a layer × head image of each
score, ``maps/heads_<score>``. The scores at
the end of training go into the run's metrics as ``head_scores``: one object per layer and
head, with the keys of analyze.py's heads.json (the ablation left out).

It is cheap: two forward passes of a few short texts, in eval mode without autograd; the random
strings come from a generator of its own, so it never changes a run's weights.
"""

from __future__ import annotations

import math
import re

import torch
from lightning.pytorch.loggers import TensorBoardLogger

from tinylm.analysis.figures import head_grid
from tinylm.analysis.heads import SCORES, attention_scores, induction_length
from tinylm.callbacks.attention import AttentionInspector, add_rgb_image
from tinylm.callbacks.inspector import (
    log,
    tensorboard_writer,
    training_text_opening,
    validate_interval,
    without_unknown,
)
from tinylm.errors import TinyLMError
from tinylm.plots.figures import render_rgb
from tinylm.tokenizer import tokenizer_from_state
from tinylm.values import check_value, integer


def scalar_tags(rows: list[dict]) -> dict[str, float]:
    """``probe_heads_layer<L>/<score>_head<H>`` -> value, for every row and score."""
    return {f"probe_heads_layer{r['layer']}/{score}_head{r['head']}": r[score] for r in rows for score in SCORES}


# what reads the scalars back (the tinylm TensorBoard plugin): a tag of ``scalar_tags`` -> (layer, score, head)
SCALAR_TAG = re.compile(r"probe_heads_layer(\d+)/(" + "|".join(SCORES) + r")_head(\d+)")


def add_scalars(writer, values: dict[str, float], step: int) -> None:
    """``writer.add_scalar(tag, value, step)`` for each of ``values``, as one event: TensorBoard reads
    each value of an event as its tag's point, and the file gets one record (and one checksum,
    computed in pure Python without TensorFlow) for the lot instead of one per value."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

    if not isinstance(writer, SummaryWriter):  # e.g. tensorboardX's, with its own protobufs
        for tag, value in values.items():
            writer.add_scalar(tag, value, step)
        return
    summary = Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])
    writer._get_file_writer().add_summary(summary, step)  # what add_scalar does with its one-value Summary


class HeadScores(AttentionInspector):
    """Head scores as scalars and images (see the module's docstring).

    ``text``: what the previous-token score and the entropy are measured on; null: the opening
    block_size characters of the training text. ``induction_length``: n of the random strings
    written twice (null: block_size / 2), ``draws`` of them, drawn from ``seed``.
    """

    def __init__(self, every_n_steps: int | None = 50, images_every_n_steps: int | None = 250,
                 text: str | None = None, induction_length: int | None = None, draws: int = 4, seed: int = 0):
        super().__init__(every_n_steps)
        self.images_every_n_steps = validate_interval("HeadScores.images", images_every_n_steps)
        if text is not None and not isinstance(text, str):
            raise TinyLMError(f"HeadScores.text={text!r} must be a string, or null for the training text's opening")
        check_value("HeadScores.draws", draws, integer(1))
        self.text, self.induction_length, self.draws, self.seed = text, induction_length, draws, seed
        self._ids: torch.Tensor | None = None
        self._figures: dict = {}  # figures.head_grid's reused figures: the labels drawn once, the cells each time
        self.final: list[dict] = []

    def probe_ids(self, trainer, module) -> torch.Tensor:
        """The text's ids (at most block_size), decided once; an empty tensor: no usable text."""
        if self._ids is None:
            self._ids = torch.zeros(0, dtype=torch.long)
            tokenizer = tokenizer_from_state(module.tokenizer_state)
            block_size = module.model.config.block_size
            induction_length(module.model, self.induction_length)  # a bad length: said once, here
            try:
                text = (training_text_opening(trainer, tokenizer, block_size) if self.text is None
                        else without_unknown(tokenizer, self.text, "HeadScores text"))
            except TinyLMError:
                text = ""
            ids = tokenizer.encode(text)[:block_size]
            if len(ids) < 2:
                log.warning("HeadScores: no text of 2 tokens or more to score the heads on; set "
                            "callbacks.head_scores.text to a phrase of the training text")
                return self._ids
            self._ids = torch.tensor(ids)
        return self._ids

    def inspect(self, trainer, module) -> None:
        ids = self.probe_ids(trainer, module)
        if len(ids) < 2:
            return
        rows = attention_scores(module.model, ids.to(module.device), self.induction_length, self.draws, self.seed)
        step = trainer.global_step
        self.final = [{**row, "step": step} for row in rows]
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                add_scalars(logger.experiment, scalar_tags(rows), step)
            else:
                logger.log_metrics(scalar_tags(rows), step=step)
        writer = tensorboard_writer(trainer)
        ending = trainer.global_step >= trainer.max_steps or trainer.should_stop
        due = self.images_every_n_steps and step % self.images_every_n_steps == 0
        if writer is not None and (due or ending):
            for score in SCORES:
                top = math.log(len(ids)) if score == "entropy" else None  # one scale for every step
                # no "step N" in the title: TensorBoard shows each image's step, and the text is drawn once
                image = render_rgb(head_grid(rows, score, vmax=top, numbers=False, reuse=self._figures))
                add_rgb_image(writer, f"maps/heads_{score}", image, step)

    def run_metrics(self) -> dict:
        """The run's metrics' ``head_scores``: the scores of the last call (none before one)."""
        return {"head_scores": self.final} if self.final else {}
