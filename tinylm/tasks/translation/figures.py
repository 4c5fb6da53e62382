"""A translation's figures, drawn with the shared heatmaps of ``tinylm.plots.figures``: the encoder's
self-attention and the decoder's cross-attention of one source, or a decoder-only model's attention
over the source, BEGIN and its translation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from tinylm.models import LanguageModel
from tinylm.models.base import eval_no_grad
from tinylm.models.seq2seq import BEGIN_ID
from tinylm.plots.figures import attention_figure, attention_weights, token_labels
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.translation.decoding import continue_sources, translate

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def translation_figures(model: LanguageModel, tokenizer, ids: Sequence[int], note: str = "",
                        reuse: dict | None = None) -> Iterator[tuple[str, Figure]]:
    """A translation model's attention for one source (ids), figure by figure: ("encoder_layer<N>",
    its encoder self-attention), then ("cross_attention_layer<N>", its cross-attention), a panel per head.

    The model translates the source greedily first; the cross-attention rows are the characters
    it writes (the last row: the end symbol), the columns the source characters. ``reuse``: as
    for ``attention_figure`` (draw each figure before taking the next), for the encoder maps only:
    the rows of the others change with the translation. A decoder-only model: ``pair_figures``.
    """
    if not is_encoder_decoder(type(model)):
        yield from pair_figures(model, tokenizer, ids, note, reuse)
        return
    src = torch.tensor([list(ids)], device=next(model.parameters()).device)  # (1, S)
    written = translate(model, src)[0][: model.config.block_size - 1]  # room for BEGIN in front
    tgt = torch.tensor([[BEGIN_ID, *written]], device=src.device)  # (1, T): what the decoder reads
    with eval_no_grad(model):
        maps = model.translation_maps(src, tgt)
    source, target = token_labels(tokenizer, ids), [*token_labels(tokenizer, written), "end"]
    for layer, w in enumerate(maps["encoder"]):  # (1, h, S, S)
        yield f"encoder_layer{layer}", attention_figure(w[0].float().cpu(), source, layer, note, reuse, kind="encoder")
    for layer, w in enumerate(maps["cross"]):  # (1, h, T, S)
        yield f"cross_attention_layer{layer}", attention_figure(w[0].float().cpu(), source, layer, note,
                                                                row_labels=target, kind="cross")


def pair_figures(model: LanguageModel, tokenizer, ids: Sequence[int], note: str = "",
                 reuse: dict | None = None) -> Iterator[tuple[str, Figure]]:
    """A decoder-only model's causal attention over source + BEGIN + its greedy translation of ``ids``:
    ("pair_attention_layer<N>", figure), a panel per head."""
    written = continue_sources(model, [[*ids, BEGIN_ID]])[0]
    seq = [*ids, BEGIN_ID, *written][: model.config.block_size]  # what the model read to write its translation
    labels = [*token_labels(tokenizer, ids), "begin", *token_labels(tokenizer, written)][: len(seq)]
    device = next(model.parameters()).device
    for layer, weights in enumerate(attention_weights(model, torch.tensor(seq, device=device))):  # (h, T, T) each
        yield f"pair_attention_layer{layer}", attention_figure(weights, labels, layer, note, reuse)
