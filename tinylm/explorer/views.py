"""One text through a run's model: the numbers each route answers with, as plain JSON-ready dicts.

Each works on a ``tinylm.tasks.base.LoadedModel`` through the models' shared interface, with the
project's own code: the attention maps the ``AttentionMaps`` callback draws
(``tinylm.plots.figures.attention_weights``), heads switched off as ``generate.py ablate=`` and
``analyze.py`` do (``tinylm.analysis.hooks``), the logit lens of ``analyze.py``
(``tinylm.analysis.lens``), and greedy translation (``tinylm.tasks.translation.decoding``). A text the
model cannot read, or a view its model lacks, is one TinyLMError (the routes answer 400 with it).
Nothing here writes anything.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from tinylm.analysis.hooks import heads_switched_off
from tinylm.analysis.lens import logit_lens, pieces
from tinylm.analysis.probe import Probe
from tinylm.errors import TinyLMError
from tinylm.plots.figures import attention_weights
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import LoadedModel
from tinylm.tasks.translation.decoding import encode_source, longest_source, translation_with_cross_attention

DIGITS = 6  # probabilities and attention weights are rounded to this many decimals


def rounded(values: torch.Tensor) -> list:
    """A tensor as nested lists of floats, rounded (float64 first, so that 0.1 prints as 0.1)."""
    return values.double().round(decimals=DIGITS).tolist()


def encoded(loaded: LoadedModel, text: str) -> tuple[list[int], bool]:
    """The text's ids, the last ``context_window`` of them, and whether it was cut."""
    if not text:
        raise TinyLMError("text is empty: type a text to look at")
    from tinylm.tokenizer import unknown_characters

    if missing := loaded.tokenizer.unknown(text):
        raise unknown_characters(loaded.tokenizer, "text", missing, "type characters of the run's training text")
    ids = loaded.tokenizer.encode(text)
    window = loaded.model.context_window
    if window is not None and len(ids) > window:
        return ids[-window:], True
    return ids, False


def text_decoder(loaded: LoadedModel, what: str) -> None:
    """A TinyLMError unless the model continues text (an encoder-decoder translates: ``translate``)."""
    if is_encoder_decoder(loaded.model):
        raise TinyLMError(f"this run's model is an encoder-decoder, which translates: {what} reads a decoder's "
                          "text; use the translate route for it")


def attention(loaded: LoadedModel, text: str, ablate: list[str] = ()) -> dict:
    """Per layer and head, the attention weights (query, key) of the text's last block_size tokens, with
    ``ablate``'s heads switched off (which changes the layers after theirs)."""
    text_decoder(loaded, "attention")
    if not loaded.model.has_attention:
        raise TinyLMError(f"this run's model is an {loaded.model.config.arch} model, which has no attention: "
                          "pick a Transformer run")
    ids, truncated = encoded(loaded, text)
    with torch.inference_mode(), heads_switched_off(loaded.model, ablate):
        weights = attention_weights(loaded.model, torch.tensor(ids))  # per layer (h, T, T)
    return {"tokens": pieces(loaded.tokenizer, ids), "attention": [rounded(w) for w in weights],
            "ablated": list(ablate), "truncated": truncated}


def predict(loaded: LoadedModel, text: str, ablate: list[str], k: int) -> dict:
    """The ``k`` most likely next tokens at each position, with the heads ``ablate`` names switched off."""
    text_decoder(loaded, "predict")
    ids, truncated = encoded(loaded, text)
    tokenizer = loaded.tokenizer
    with torch.inference_mode(), heads_switched_off(loaded.model, ablate):
        logits = loaded.model(torch.tensor([ids]))[0][0].float()  # (T, V)
    probs, top = F.softmax(logits, dim=-1).topk(min(k, logits.size(-1)), dim=-1)  # (T, k) each
    rows = [[{"token": tokenizer.decode_piece([i]), "p": p} for i, p in zip(ids_row, p_row, strict=True)]
            for ids_row, p_row in zip(top.tolist(), rounded(probs), strict=True)]
    return {"tokens": pieces(tokenizer, ids), "top": rows, "ablated": list(ablate), "truncated": truncated}


def lens(loaded: LoadedModel, text: str, ablate: list[str]) -> dict:
    """analyze.py's logit lens of the text (``logit_lens.json``), with ``ablate``'s heads switched off."""
    text_decoder(loaded, "the logit lens")
    if not loaded.model.residual_layers():
        raise TinyLMError(f"this run's model is an {loaded.model.config.arch} model, which has no residual stream "
                          "to read: pick a Transformer run")
    ids, truncated = encoded(loaded, text)
    with torch.inference_mode(), heads_switched_off(loaded.model, ablate):
        result = logit_lens(Probe.of_text(loaded.model, torch.tensor([ids])), loaded.tokenizer)
    for layer in result["layers"]:  # a one-token text has no next token to score
        layer["loss"] = layer["loss"] if math.isfinite(layer["loss"]) else None
    return {**result, "ablated": list(ablate), "truncated": truncated}


def translation(loaded: LoadedModel, text: str) -> dict:
    """The greedy translation of one source line, and (an encoder-decoder) each decoder layer's cross-attention:
    rows the symbols it writes, the last one the end symbol ("end"), columns the source's."""
    if loaded.task != "translation":
        raise TinyLMError("this run was trained on text, not on translation pairs: use predict and attention for it")
    if not text:
        raise TinyLMError("text is empty: type a source to translate")
    if "\n" in text or "\r" in text:
        raise TinyLMError("text holds more than one line: pass one source line to translate")
    tokenizer = loaded.tokenizer
    ids = encode_source(tokenizer, text, 1, "error", longest_source(loaded.model),
                        fix="type characters of the run's training text")
    written, cross = translation_with_cross_attention(loaded.model, ids)  # cross: per layer (1, h, T, S)
    if cross is None:  # a decoder-only model continues source + BEGIN: no cross-attention
        return {"source": pieces(tokenizer, ids), "target": pieces(tokenizer, written),
                "translation": tokenizer.decode(written), "cross_attention": None}
    return {"source": pieces(tokenizer, ids), "target": [*pieces(tokenizer, written), "end"],
            "translation": tokenizer.decode(written), "cross_attention": [rounded(w[0]) for w in cross]}
