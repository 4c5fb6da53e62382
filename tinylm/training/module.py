"""The LightningModule: loss, optimizer, schedule and logging around the plain model.

The model is the network the config builds (``model._target_``, ``tinylm.models.build_model``: the
GPT, the LSTM/GRU baseline, the encoder-decoder, or any ``LanguageModel``): the module uses only
the models' shared interface, a batch in, the loss out (``loss(batch)``). The optimizer is a partial
(``optim._target_`` with ``_partial_: true``, e.g. ``adamw`` below), called with the parameter
groups (and, if it takes ``hidden``, the hidden weight matrices too: ``tinylm.training.muon``). Its
task (``tinylm.tasks``) may score it further at each validation: on translation pairs (``data=pairs``),
the exact match and the character error rate of its greedy translations (``loss/val_exact_match``,
``loss/val_cer``: ``score_tag``).

Checkpoints hold only plain data (tensors, numbers, strings, lists, dicts): the model config, the
tokenizer (``tokenizer`` key), the data's identity (``data``: token count, hash of the ids) and the
weights, so ``torch.load(path, weights_only=True)`` reads them and a checkpoint alone is enough to generate.
Its ``hyper_parameters`` hold the model config and the optimizer's settings as plain data too.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import lightning as L
import torch

from tinylm.errors import TinyLMError
from tinylm.models import LanguageModel, model_config
from tinylm.tasks import DEFAULT_TASK, get_task
from tinylm.tasks.base import Task, bits_per_char
from tinylm.training.adamw import AdamW


def score_tag(name: str) -> str:
    """The tag of the task's validation score ``name``: ``loss/val_<name>``. TensorBoard groups the
    scalars by the part of the tag before the first ``/``, so it is shown beside ``loss/val``."""
    return f"loss/val_{name}"


DECAYS = ("cosine", "linear")  # optim.decay: the shape of the decay from lr to its floor


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float, decay: str = "cosine") -> float:
    """Learning-rate multiplier: linear warmup to 1, then cosine (or ``decay="linear"``: straight-line)
    decay to ``min_lr_ratio`` at ``decay_steps``."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    remaining = 1 - progress if decay == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return min_lr_ratio + remaining * (1 - min_lr_ratio)


def scheduled(optimizer: torch.optim.Optimizer, warmup_steps: int, decay_steps: int, min_lr_ratio: float,
              decay: str):
    """The optimizer alone (``decay_steps`` <= 0: a constant learning rate), or Lightning's dict with the
    warmup + decay schedule (``warmup_cosine``), stepped every training step."""
    if decay_steps <= 0:
        return optimizer
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, warmup_steps, decay_steps, min_lr_ratio, decay))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def adamw(param_groups: list[dict], lr: float = 1e-3, weight_decay: float = 0.1,
          betas: tuple[float, float] = (0.9, 0.99), warmup_steps: int = 0, decay_steps: int = 0,
          min_lr_ratio: float = 0.1, decay: str = "cosine"):
    """conf/optim/adamw.yaml: fused AdamW over ``param_groups`` (``weight_decay`` where a group sets none),
    in what ``configure_optimizers`` returns: torch's kernel with less Python around it
    (``tinylm.training.adamw.AdamW``, the same weights bit for bit).

    ``decay_steps`` > 0 adds warmup + cosine (or linear) decay, stepped every training step (reaching the
    floor ``min_lr_ratio`` at that step); 0 keeps the learning rate constant, as the reference run does.
    """
    optimizer = AdamW(param_groups, lr=lr, weight_decay=weight_decay, betas=tuple(betas))
    return scheduled(optimizer, warmup_steps, decay_steps, min_lr_ratio, decay)


def optimizer_settings(optimizer: Callable) -> dict:
    """The optimizer partial as plain data (its function and arguments), for the checkpoint's hyper_parameters."""
    function, settings = optimizer, {}
    if isinstance(optimizer, functools.partial):
        function, settings = optimizer.func, dict(optimizer.keywords)
    return {"_target_": f"{function.__module__}.{function.__qualname__}", **settings}


class LitLanguageModel(L.LightningModule):
    def __init__(
        self,
        net: LanguageModel,
        tokenizer: dict,
        optimizer: Callable = adamw,
        chars_per_token: float = 1.0,
        task: Task | None = None,
    ):
        """``net``: the network to train (``tinylm.models.build_model``); ``tokenizer``: its plain-data state;
        ``optimizer``: called with the parameter groups, it returns what ``configure_optimizers`` returns
        (an optimizer, or Lightning's dict with its schedule). ``task``: what the model learns
        (``tinylm.tasks``; the text task when None), which scores it at each validation; its name is what the
        checkpoints record.
        """
        super().__init__()
        self.task = task or get_task(DEFAULT_TASK)
        self.save_hyperparameters(ignore=["net", "optimizer", "task"])
        # what the task, the network and the optimizer are, as plain data: a checkpoint holds no objects
        self.save_hyperparameters({"task": self.task.name, "model": model_config(net),
                                   "optim": optimizer_settings(optimizer)})
        self.model = net
        self.optimizer = optimizer
        self.config = net.config
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
        self.score_names: tuple[str, ...] = ()  # the task's validation scores, once a validation has scored them

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
        self.log("loss/val_bpc", bits_per_char(loss, self.chars_per_token), sync_dist=True)
        counts = self.task.validation_counts(self.model, batch)  # summed over the batches, scored at the end
        if counts is not None:
            self._task_counts.append(counts)

    def on_validation_epoch_start(self) -> None:
        self._task_counts = []

    def on_validation_epoch_end(self) -> None:
        if self._task_counts:
            totals = tuple(sum(c) for c in zip(*self._task_counts, strict=True))
            scores = self.task.validation_scores(totals)
            for name, value in scores.items():
                self.log(score_tag(name), value, prog_bar=name == self.task.headline, sync_dist=True)
            self.score_names = tuple(scores)
        # loss/val is the mean over the validation batches here; checkpoints are saved after this hook
        loss = self.trainer.callback_metrics.get("loss/val")
        if not self.trainer.sanity_checking and loss is not None and float(loss) < self.best_val_loss:
            self.best_val_loss, self.best_step = float(loss), self.global_step

    def configure_optimizers(self):
        # weight decay on matrices (linear weights, embeddings) only; not on biases or LayerNorms
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        groups = [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]
        if "hidden" in inspect.signature(self.optimizer).parameters:  # an optimizer of its own for them (muon)
            configured = self.optimizer(groups, hidden=self.hidden_matrices())
        else:
            configured = self.optimizer(groups)
        optimizer = configured["optimizer"] if isinstance(configured, dict) else configured
        # the configured learning rates, before a resume loads the saved ones (see _apply_configured_lr)
        self._configured_lrs = [group.get("initial_lr", group["lr"]) for group in optimizer.param_groups]
        return configured

    def hidden_matrices(self) -> list[torch.nn.Parameter]:
        """The 2-D weights inside the residual blocks (attention and feed-forward matrices): not the
        embeddings, the head or any gain or bias."""
        return [p for block in self.model.residual_layers() for p in block.parameters() if p.requires_grad
                and p.dim() == 2]

    def _check_finite(self, loss: torch.Tensor, stage: str) -> None:
        """Divergence guard: stop at the first non-finite loss, before any checkpoint is saved."""
        if not torch.isfinite(loss):
            raise TinyLMError(
                f"{stage} loss became {loss.item()} at step {self.global_step}: training diverged; "
                f"lower optim.lr (now {self._configured_lrs[0]:g}) or set trainer.gradient_clip_val=1.0 "
                "(the last good checkpoint is kept)"
            )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["model_config"] = model_config(self.model)
        checkpoint["tokenizer"] = self.tokenizer_state
        # dropout's random state, so a resumed run draws the same masks as an uninterrupted one
        checkpoint["torch_rng_state"] = torch.get_rng_state()
        checkpoint["best_val"] = {"loss": self.best_val_loss, "step": self.best_step}
        if self.data_identity is not None:  # for tinylm.runs.resume.check_resume; checkpoints before it have none
            checkpoint["data"] = dict(self.data_identity)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            self._resume_rng_state = checkpoint["torch_rng_state"]
        if "best_val" in checkpoint:  # optional in a checkpoint: without it the best starts afresh
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
        so `ckpt_path=... optim.lr=<lower>` really lowers it (same value: nothing changes). A schedule
        (a LambdaLR, as ``adamw``'s) scales it by the configured schedule's factor at this step."""
        for optimizer in self.trainer.optimizers:
            for group, lr in zip(optimizer.param_groups, self._configured_lrs, strict=True):
                group["initial_lr"], group["lr"] = lr, lr
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            scheduler.base_lrs = list(self._configured_lrs)
            for group, lr, factor in zip(scheduler.optimizer.param_groups, self._configured_lrs,
                                         getattr(scheduler, "lr_lambdas", ()), strict=False):
                group["lr"] = lr * factor(scheduler.last_epoch)
