"""The LightningModule: loss, optimizer, schedule and logging around the plain model.

The model is whatever ``model.arch`` names in ``tinylm.models`` (the GPT, the LSTM/GRU baseline,
the encoder-decoder): the module uses only the models' shared interface, a batch in, the loss out
(``loss(batch)``). Its task (``tinylm.tasks``) may score it further at each validation: on
translation pairs (``data=pairs``), the exact match and the character error rate of its greedy
translations (``val/exact_match``, ``val/cer``).

Checkpoints hold only plain data (tensors, numbers, strings, lists, dicts): the model config, the
tokenizer (``tokenizer`` key), the data's identity (``data``: token count, hash of the ids) and the
weights, so ``torch.load(path, weights_only=True)`` reads them and a checkpoint alone is enough to generate.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import lightning as L
import torch

from tinylm.errors import TinyLMError
from tinylm.models import build_model
from tinylm.tasks import get_task

LN2 = math.log(2)


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup to 1, then cosine decay to ``min_lr_ratio``."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + 0.5 * (1 + math.cos(math.pi * progress)) * (1 - min_lr_ratio)


class LitLanguageModel(L.LightningModule):
    def __init__(
        self,
        model: dict,
        tokenizer: dict,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.99),
        warmup_steps: int = 0,
        decay_steps: int = 0,
        min_lr_ratio: float = 0.1,
        chars_per_token: float = 1.0,
        task: str = "text",
    ):
        """``model``: the model config's fields (``arch`` picks the architecture); ``tokenizer``: its plain-data state.

        ``decay_steps`` > 0 turns on warmup + cosine decay (reaching the floor at that step);
        0 keeps the learning rate constant, as the reference run does. ``task``: what the model learns
        (``tinylm.tasks``), which scores it at each validation.
        """
        super().__init__()
        self.save_hyperparameters()
        self.task = get_task(task)
        self.model = build_model(model)
        self.config = self.model.config
        self.tokenizer_state = tokenizer
        self.chars_per_token = chars_per_token
        self.start_step = 0
        # the lowest loss/val so far and the step it was reached at (the first, on a tie, as
        # ModelCheckpoint's best-stepNNNNNN.ckpt); saved in checkpoints, so a resume keeps it
        self.best_val_loss = math.inf
        self.best_step: int | None = None
        # what the data module says of its data (token count, hash of the ids): set by the training job
        self.data_identity: dict | None = None
        self._task_counts: list[tuple[int, ...]] = []  # the task's counts of each validation batch

    def forward(self, idx, targets=None):
        return self.model(idx, targets)

    def training_step(self, batch, batch_idx):
        loss = self.model.loss(batch)
        self._check_finite(loss, "training")
        # Only on the steps the logger writes: each self.log call costs Lightning about as much
        # as 5% of a reference step, and the logged values are the same.
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("loss/train", loss, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # Always validate (and so checkpoint) after the last step, even when max_steps is not a
        # multiple of val_check_interval: Lightning validates when asked to stop.
        if self.global_step >= self.trainer.max_steps > 0:
            self.trainer.should_stop = True

    def validation_step(self, batch, batch_idx):
        loss = self.model.loss(batch)
        self._check_finite(loss, "validation")  # before a checkpoint could save broken weights
        self.log("loss/val", loss, prog_bar=True, sync_dist=True)
        self.log("loss/val_bpc", loss / LN2 / self.chars_per_token, sync_dist=True)
        counts = self.task.validation_counts(self.model, batch)  # summed over the batches, scored at the end
        if counts is not None:
            self._task_counts.append(counts)

    def on_validation_epoch_start(self) -> None:
        self._task_counts = []

    def on_validation_epoch_end(self) -> None:
        if self._task_counts:
            totals = tuple(sum(c) for c in zip(*self._task_counts, strict=True))
            for tag, value in self.task.validation_scores(totals).items():
                self.log(tag, value, prog_bar=tag == self.task.headline, sync_dist=True)
        # loss/val is the mean over the validation batches here; checkpoints are saved after this hook
        loss = self.trainer.callback_metrics.get("loss/val")
        if not self.trainer.sanity_checking and loss is not None and float(loss) < self.best_val_loss:
            self.best_val_loss, self.best_step = float(loss), self.global_step

    def configure_optimizers(self):
        hp = self.hparams
        # weight decay on matrices (linear weights, embeddings) only; not on biases or LayerNorms
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": hp.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas), fused=True)
        if hp.decay_steps <= 0:
            return optimizer
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: warmup_cosine(step, hp.warmup_steps, hp.decay_steps, hp.min_lr_ratio),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def _check_finite(self, loss: torch.Tensor, stage: str) -> None:
        """Divergence guard: stop at the first non-finite loss, before any checkpoint is saved."""
        if not torch.isfinite(loss):
            raise TinyLMError(
                f"{stage} loss became {loss.item()} at step {self.global_step}: training diverged; "
                f"lower optim.lr (now {self.hparams.lr:g}) or set trainer.gradient_clip_val=1.0 "
                "(the last good checkpoint is kept)"
            )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["model_config"] = asdict(self.config)
        checkpoint["tokenizer"] = self.tokenizer_state
        # dropout's random state, so a resumed run draws the same masks as an uninterrupted one
        checkpoint["torch_rng_state"] = torch.get_rng_state()
        checkpoint["best_val"] = {"loss": self.best_val_loss, "step": self.best_step}
        if self.data_identity is not None:  # for tinylm.runs.resume.check_resume; checkpoints before it have none
            checkpoint["data"] = dict(self.data_identity)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            self._resume_rng_state = checkpoint["torch_rng_state"]
        if "best_val" in checkpoint:  # not in checkpoints of release 0.1: the best then starts afresh
            self.best_val_loss, self.best_step = checkpoint["best_val"]["loss"], checkpoint["best_val"]["step"]

    def on_train_start(self) -> None:
        self.start_step = self.global_step  # > 0 when resuming
        rng_state = getattr(self, "_resume_rng_state", None)
        if rng_state is not None:  # restored last, after Lightning's own set-up draws
            torch.set_rng_state(rng_state)
        if self.start_step:
            self._apply_configured_lr()

    def _apply_configured_lr(self) -> None:
        """On resume, use the configured optim.lr, not the one saved in the optimizer state,
        so `ckpt_path=... optim.lr=<lower>` really lowers it (same value: nothing changes)."""
        hp = self.hparams
        factor = 1.0
        if hp.decay_steps > 0:
            factor = warmup_cosine(self.global_step, hp.warmup_steps, hp.decay_steps, hp.min_lr_ratio)
        for config in self.trainer.lr_scheduler_configs:
            config.scheduler.base_lrs = [hp.lr] * len(config.scheduler.base_lrs)
        for optimizer in self.trainer.optimizers:
            for group in optimizer.param_groups:
                group["initial_lr"], group["lr"] = hp.lr, hp.lr * factor
