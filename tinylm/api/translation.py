"""What ``LM`` does with a translation checkpoint, where the translation task's own decoding is the work
(``tinylm.tasks.translation.decoding``): one translation per source line, as ``generate.py`` prints them, and the
target an encoder-decoder's forward reads for a source."""

from __future__ import annotations

import torch

from tinylm.errors import TinyLMError
from tinylm.models.seq2seq import BEGIN_ID
from tinylm.tasks.translation.decoding import translate, translate_lines


def translations(model, tokenizer, text: str, unknown: str, beam_size: int, **sampling) -> str:
    """One translation per line of ``text``, joined by newlines, as ``TranslationTask.generate`` prints them;
    ``sampling``: temperature, top_k, top_p, generator, use_cache."""
    if not text:
        raise TinyLMError("nothing to translate: pass the source text, one source a line")
    sources = text.split("\n")
    if len(sources) > 1 and sources[-1] == "":  # a final newline ends the last line
        sources.pop()
    return "\n".join(translate_lines(model, tokenizer, sources, unknown, beam_size, **sampling))


def decoder_input(model, src: torch.Tensor, target: list[int] | None) -> torch.Tensor:
    """What the decoder reads for the source ``src`` (1, S): BEGIN + ``target``, or BEGIN + the model's greedy
    translation of the source when None, cut to its block_size; (1, T)."""
    written = translate(model, src)[0] if target is None else target
    return torch.tensor([[BEGIN_ID, *written[: model.config.block_size - 1]]], dtype=torch.long, device=src.device)
