"""``Probe``: one text through a model, the unit every experiment runs again and again.

A decoder (the GPT) reads the text's T tokens and predicts each next one: the logits at
positions 0 .. T-2 are scored against tokens 1 .. T-1. An encoder-decoder reads a source and the
target that starts with BEGIN (teacher forcing) and is scored against the target + END. Either
way ``logits()`` runs the model once, in eval mode without autograd, so hooks in place
(``tinylm.analysis.hooks``) change what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from tinylm.models.base import LanguageModel, eval_no_grad
from tinylm.models.seq2seq import PAD_ID


@dataclass
class Probe:
    model: LanguageModel
    inputs: tuple[torch.Tensor, ...]  # decoder: (idx (B, T),); encoder-decoder: (src (B, S), tgt (B, T))
    targets: torch.Tensor  # (B, T'): what each scored position should predict
    scored: slice  # the positions of the logits scored against ``targets``
    ignore: int = -100  # a target id that is not scored (an encoder-decoder's padding)

    @classmethod
    def of_text(cls, model: LanguageModel, ids: torch.Tensor) -> Probe:
        """A decoder on ``ids`` (B, T): each position predicts the next token."""
        return cls(model, (ids,), ids[:, 1:], slice(0, ids.size(1) - 1))

    @classmethod
    def of_pair(cls, model: LanguageModel, src: torch.Tensor, tgt: torch.Tensor, targets: torch.Tensor) -> Probe:
        """An encoder-decoder on a source (B, S) and a target (B, T) starting with BEGIN, scored
        against ``targets`` (B, T), the target + END."""
        return cls(model, (src, tgt), targets, slice(0, tgt.size(1)), ignore=PAD_ID)

    @property
    def tokens(self) -> torch.Tensor:
        """The ids (B, T) the residual stream runs over: the text, or the target read so far."""
        return self.inputs[-1]

    def logits(self) -> torch.Tensor:
        """The model's logits (B, T, V) for the probe, with whatever hooks are in place."""
        with eval_no_grad(self.model):
            return self.model(*self.inputs)[0].float()

    def losses(self, logits: torch.Tensor | None = None) -> torch.Tensor:
        """The next-token loss (B, T') at every scored position."""
        logits = self.logits() if logits is None else logits
        scored = logits[:, self.scored]  # (B, T', V)
        return F.cross_entropy(scored.transpose(1, 2), self.targets, reduction="none",
                               ignore_index=self.ignore)  # (B, T'), 0 where not scored

    def loss(self, positions: slice = slice(None), logits: torch.Tensor | None = None) -> float:
        """The mean next-token loss over the scored ``positions`` (default: all of them)."""
        kept = (self.targets[:, positions] != self.ignore).sum()
        return (self.losses(logits)[:, positions].sum() / kept).item()
