"""What each attention head does, as numbers: three detectors read from its attention weights, and
what the loss loses when the head is switched off.

- ``previous_token``: the mean attention from each position i to i - 1 on a text (1: the head
  always looks exactly one token back);
- ``induction``: on n random tokens written twice, the mean attention from each position i of the
  second copy to i - n + 1, the token after the earlier occurrence of the current one (1: the head
  copies what followed last time), averaged over ``draws`` seeded draws;
- ``entropy``: the mean entropy of an attention row, in nats (0: one key; ln(i + 1): uniform over
  the i + 1 keys row i sees);
- ``ablation_loss_delta``: the next-token loss on the text with the head's output zeroed (or set
  to its mean over the text), minus the loss without ablation.

The random tokens come from a ``torch.Generator`` of their own: scoring never draws from the
global random stream, so a training run that scores its heads keeps its weights bit for bit.
"""

from __future__ import annotations

import torch

from tinylm.analysis.hooks import Head, ablated, head_means
from tinylm.analysis.probe import Probe
from tinylm.errors import TinyLMError
from tinylm.models.base import LanguageModel, eval_no_grad
from tinylm.models.hook_points import hooked
from tinylm.values import check_value, integer

SCORES = ("previous_token", "induction", "entropy")  # read from the attention weights
ABLATIONS = ("zero", "mean")


def previous_token(weights: torch.Tensor) -> torch.Tensor:
    """weights (B, h, T, T) -> (h,): the mean of w[i, i - 1] over i = 1 .. T-1 and the batch."""
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (B, h, T-1) -> (h,)


def induction(weights: torch.Tensor, n: int) -> torch.Tensor:
    """weights (B, h, 2n, 2n) of a text written twice -> (h,): the mean of w[i, i - n + 1] over the
    second copy, i = n .. 2n-1."""
    second = weights[:, :, n : 2 * n]  # (B, h, n, 2n): row r is position n + r
    return second.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # w[n + r, r + 1]: (h,)


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """weights (B, h, T, S) -> (h,): the mean entropy of a row, in nats."""
    return torch.special.entr(weights).sum(dim=-1).mean(dim=(0, 2))  # (B, h, T) -> (h,)


def repeated_random_tokens(vocab_size: int, n: int, draws: int, seed: int, device=None) -> torch.Tensor:
    """``draws`` rows of n random token ids written twice: (draws, 2n), from a generator of their own."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab_size, (draws, n), generator=generator)  # (draws, n)
    return tokens.repeat(1, 2).to(device)  # (draws, 2n)


def induction_length(model: LanguageModel, n: int | None) -> int:
    """The length n of the random strings: ``n``, or half the context window when None."""
    window = model.config.block_size
    n = window // 2 if n is None else n
    wanted = f"an integer from 2 to block_size / 2 = {window // 2}"
    check_value("induction_length", n, integer(2, window // 2, wanted),
                " (the random string is written twice into the context), or null for the longest")
    return n


def attention(model: LanguageModel, ids: torch.Tensor) -> list[torch.Tensor]:
    """A decoder's attention weights for ids (B, T): per layer (B, h, T, T), in eval mode without autograd."""
    with eval_no_grad(model):
        return [w.float() for w in model.attention_maps(ids)]


def attention_scores(model: LanguageModel, ids: torch.Tensor, n: int | None = None, draws: int = 4,
                     seed: int = 0) -> list[dict]:
    """A decoder's heads scored on the text ``ids`` (T,) and on random strings written twice: one
    row per layer and head, {"layer", "head", "previous_token", "induction", "entropy"}."""
    n = induction_length(model, n)
    on_text = attention(model, ids[None])  # per layer (1, h, T, T)
    repeated = repeated_random_tokens(model.config.vocab_size, n, draws, seed, ids.device)
    on_repeats = attention(model, repeated)  # per layer (draws, h, 2n, 2n)
    rows = []
    for layer, (text_weights, repeat_weights) in enumerate(zip(on_text, on_repeats, strict=True)):
        scores = zip(previous_token(text_weights).tolist(), induction(repeat_weights, n).tolist(),
                     entropy(text_weights).tolist(), strict=True)
        rows += [{"layer": layer, "head": head, "previous_token": p, "induction": i, "entropy": e}
                 for head, (p, i, e) in enumerate(scores)]
    return rows


def ablation_losses(probe: Probe, attentions: list, heads: list[Head], mode: str = "zero",
                    positions: slice = slice(None)) -> dict[Head, float]:
    """For each head alone, the probe's loss (over ``positions``) with that head switched off
    (``mode``: "zero" or "mean", its mean output over the probe), minus the loss without."""
    if mode not in ABLATIONS:
        raise TinyLMError(f"ablation={mode!r}: choose zero (the head's output set to 0) or mean (set to its mean "
                          "over the text)")
    means = head_means(attentions, probe.logits) if mode == "mean" else None
    clean = probe.loss(positions)
    deltas = {}
    for head in heads:
        with hooked(ablated(attentions, [head], means)):
            deltas[head] = probe.loss(positions) - clean
    return deltas


def all_heads(attentions: list) -> list[Head]:
    """Every (layer, head) of one kind of attention, layer by layer."""
    return [(layer, head) for layer, a in enumerate(attentions) for head in range(a.num_heads)]


def head_table(model: LanguageModel, ids: torch.Tensor, n: int | None = None, draws: int = 4, seed: int = 0,
               ablation: str = "zero") -> list[dict]:
    """``heads.json``'s rows for a decoder on the text ``ids`` (T,): ``attention_scores`` and each
    head's ``ablation_loss_delta``."""
    rows = attention_scores(model, ids, n, draws, seed)
    attentions = model.attention_layers()["self"]
    deltas = ablation_losses(Probe.of_text(model, ids[None]), attentions, all_heads(attentions), ablation)
    for row in rows:
        row["ablation_loss_delta"] = deltas[row["layer"], row["head"]]
    return rows


def strongest(rows: list[dict], score: str) -> dict:
    """The row of the head with the highest ``score``."""
    return max(rows, key=lambda row: row[score])
