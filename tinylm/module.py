"""The LightningModule: loss, optimizer, schedule and logging around the plain ``GPT`` model.

Checkpoints hold only plain data (tensors, numbers, strings, lists, dicts): the model config, the
tokenizer (``tokenizer`` key) and the weights, so ``torch.load(path, weights_only=True)`` reads them
and a checkpoint alone is enough to generate.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import lightning as L
import torch

from tinylm.model import GPT, GPTConfig

LN2 = math.log(2)


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier: linear warmup to 1, then cosine decay to ``min_lr_ratio``."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr_ratio
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr_ratio + 0.5 * (1 + math.cos(math.pi * progress)) * (1 - min_lr_ratio)


class LitGPT(L.LightningModule):
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
    ):
        """``model``: GPTConfig fields; ``tokenizer``: its plain-data state.

        ``decay_steps`` > 0 turns on warmup + cosine decay (reaching the floor at that step);
        0 keeps the learning rate constant, as the reference run does.
        """
        super().__init__()
        self.save_hyperparameters()
        self.config = GPTConfig(**model)
        self.model = GPT(self.config)
        self.tokenizer_state = tokenizer
        self.chars_per_token = chars_per_token
        self.start_step = 0

    def forward(self, idx, targets=None):
        return self.model(idx, targets)

    def on_train_start(self) -> None:
        self.start_step = self.global_step  # > 0 when resuming

    def training_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self.model(x, y)
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/bpc", loss / LN2 / self.chars_per_token)

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

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["model_config"] = asdict(self.config)
        checkpoint["tokenizer"] = self.tokenizer_state
