"""The circuits of a run's model as the tab's "Circuits" and "Neurons" views ask for them: plain JSON-ready dicts.

Every number comes from the analysis' own functions (``tinylm.analysis.circuits``: what ``analyze.py`` writes
to dla.json, circuits.json, composition.json and neurons.json, and what ``lm.dla``, ``lm.circuits``,
``lm.composition`` and ``lm.neurons`` return), unchanged but for the rounding of the matrices (``MATRIX_DIGITS``);
this module only reads the request's text, layer and head, and says in one line what a model lacks (a
TinyLMError: the routes answer 400 with it). Nothing here writes anything.

    dla(loaded, text, against)      direct logit attribution at each position of the text (dla.json); an
                                    encoder-decoder's text is a source, its greedy translation attributed
    heads(loaded)                   each head's copying and positional previous-token scores (circuits.json)
    ov(loaded, layer, head, kind)   a head's OV circuit, V x V, with its copying score (kind "cross": an
                                    encoder-decoder's cross-attention head)
    qk(loaded, layer, head, kind)   a head's token QK circuit (V x V) and positional QK pattern (T x T or None)
    composition(loaded)             Q-, K- and V-composition of every earlier head with every later one
    neurons(loaded, text, k)        each MLP neuron's top examples in the text and the characters it pushes up
                                    (a decoder's: an encoder-decoder is one line)
"""

from __future__ import annotations

import torch

from tinylm.errors import TinyLMError
from tinylm.explorer.views import encoded
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import LoadedModel
from tinylm.values import whole_number

MAX_NEURON_K = 20  # examples per neuron
MATRIX_DIGITS = 4  # decimals of the OV and QK matrices' logits and scores (a V x V matrix of a large vocabulary is big)
KINDS = {"self": "", "cross": "cross"}  # the ov and qk routes' kind= -> the analysis' prefix of the head's name


def transformer(loaded: LoadedModel, what: str) -> None:
    """A TinyLMError for a model without attention heads (the LSTM/GRU): what applies to it instead."""
    if not loaded.model.has_attention:
        raise TinyLMError(f"this run's model is an {loaded.model.config.arch} model: it has no attention heads, so "
                          f"{what} does not apply; its hidden state is read whole (lm.run_with_cache: hook_rnn_out)")


def dla(loaded: LoadedModel, text: str, against: str | None = None) -> dict:
    """``direct_logit_attribution`` of the text's last ``context_window`` tokens (dla.json), each position's
    parts (embed, pos_embed, LxHy, mlpx, bias) adding up to its logit; ``truncated`` when the text was cut.
    An encoder-decoder reads the text as one source line (``translated_dla``)."""
    from tinylm.analysis.circuits.dla import direct_logit_attribution

    transformer(loaded, "direct logit attribution")
    if against is not None and len(against) != 1:
        raise TinyLMError(f"against={against!r}: give one character to compare the target with (or none)")
    if is_encoder_decoder(loaded.model):
        return translated_dla(loaded, text, against)
    ids, truncated = encoded(loaded, text)
    if len(ids) < 2:
        raise TinyLMError(f"text={text!r} is one character: direct logit attribution reads each position for the "
                          "next character, so type at least two")
    with torch.inference_mode():
        answer = direct_logit_attribution(loaded.model, ids, loaded.tokenizer, against=against)
    return {**answer, "truncated": truncated}


def translated_dla(loaded: LoadedModel, text: str, against: str | None) -> dict:
    """An encoder-decoder's attribution as ``analyze.py`` and ``lm.dla`` make it: ``text`` is one source line, the
    target the model's greedy translation of it (BEGIN first: ``tokens``), each position attributed for the
    next character of the translation and the last for the end (``targets``); ``source`` and ``translation``."""
    from tinylm.analysis.circuits.dla import direct_logit_attribution
    from tinylm.models.seq2seq import BEGIN_ID, END_ID
    from tinylm.tasks.translation.decoding import encode_source, longest_source, translate

    if not text:
        raise TinyLMError("text is empty: type a source to translate")
    if "\n" in text or "\r" in text:
        raise TinyLMError("text holds more than one line: pass one source line to translate")
    model, tokenizer = loaded.model, loaded.tokenizer
    source = encode_source(tokenizer, text, 1, "error", longest_source(model),
                           fix="type characters of the run's training text")
    with torch.inference_mode():
        written = translate(model, torch.tensor([source], device=model.token_embeddings().device))[0]
        target = [BEGIN_ID, *written[: model.config.block_size - 1]]
        answer = direct_logit_attribution(model, target, tokenizer, against=against, source=source,
                                          targets=[*target[1:], END_ID])
    return {**answer, "source": [tokenizer.decode_piece([i]) for i in source],
            "translation": tokenizer.decode(target[1:]), "truncated": False}


def heads(loaded: LoadedModel) -> dict:
    """``head_circuits`` (circuits.json): each head's copying and positional previous-token scores."""
    from tinylm.analysis.circuits.ov_qk import head_circuits

    transformer(loaded, "OV and QK circuits")
    with torch.inference_mode():
        return head_circuits(loaded.model, loaded.tokenizer)


def head_of(loaded: LoadedModel, layer, head, kind: str = "self") -> tuple[int, int, str]:
    """``layer``, ``head`` (strings or ints) and ``kind`` ("self", or "cross": an encoder-decoder's
    cross-attention) as a head of the model, with the analysis' prefix of its name; one line otherwise."""
    from tinylm.analysis.circuits.parts import places

    if kind not in KINDS:
        raise TinyLMError(f"kind={kind!r}: pass self (the default) or cross (an encoder-decoder's cross-attention)")
    prefix = KINDS[kind]
    found = {place.layer: place.module.num_heads for place in places(loaded.model) if place.prefix == prefix}
    if not found:
        raise TinyLMError(f"kind={kind!r}: this run's model has no cross-attention (a {loaded.model.kind}); its "
                          "heads are kind=self")
    layers, heads = len(found), max(found.values())
    number = (whole_number(layer), whole_number(head))
    if None in number or not (0 <= number[0] < layers and 0 <= number[1] < found.get(number[0], 0)):
        raise TinyLMError(f"layer={layer!r} head={head!r} is not a {'cross-attention ' if prefix else ''}head of "
                          f"this model: layers 0 to {layers - 1}, heads 0 to {heads - 1}, counted from 0")
    return *number, prefix


def scores_of(answer: dict, layer: int, head: int, prefix: str = "") -> dict:
    for entry in answer["heads"]:
        if entry.get("name", f"L{entry['layer']}H{entry['head']}") == f"{prefix}L{layer}H{head}":
            return entry
    return {}


def ov(loaded: LoadedModel, layer, head, kind: str = "self") -> dict:
    """One head's OV circuit (``ov_circuit``): row a, column b is how much attending to character a makes the
    head write character b (through the output head); its copying score as circuits.json gives it. ``kind``
    "cross": a cross-attention head (row a: a source character)."""
    from tinylm.analysis.circuits.ov_qk import ov_circuit

    transformer(loaded, "the OV circuit")
    layer, head, prefix = head_of(loaded, layer, head, kind)
    circuits = heads(loaded)
    with torch.inference_mode():
        matrix = ov_circuit(loaded.model, layer, head, prefix=prefix)
    answer = {"layer": layer, "head": head, "tokens": circuits["tokens"], "ov": rounded(matrix),
              "copying": scores_of(circuits, layer, head, prefix).get("copying"), "folded": circuits.get("folded")}
    return {**answer, "kind": "cross"} if prefix else answer


def qk(loaded: LoadedModel, layer, head, kind: str = "self") -> dict:
    """One head's QK circuits: tokens (``qk_circuit``, V x V, query row, key column) and positions
    (``positional_qk``, T x T, None above the diagonal, where a query sees no key; None when the model has no
    learned or sin/cos positions, e.g. rope, and for a cross-attention head); ``head_size``, by whose root the
    model divides the scores. ``kind`` "cross": a cross-attention head (query: a target character, key: a
    source character)."""
    from tinylm.analysis.circuits.ov_qk import positional_qk, qk_circuit

    transformer(loaded, "the QK circuit")
    layer, head, prefix = head_of(loaded, layer, head, kind)
    circuits = heads(loaded)
    with torch.inference_mode():
        tokens = qk_circuit(loaded.model, layer, head, prefix=prefix)
        positions = None if prefix else positional_qk(loaded.model, layer, head)
    answer = {"layer": layer, "head": head, "tokens": circuits["tokens"], "qk": rounded(tokens),
              "positional": None if positions is None else finite(positions),
              "head_size": head_size(loaded, layer, prefix),
              "positional_previous_token": scores_of(circuits, layer, head, prefix).get("positional_previous_token")}
    return {**answer, "kind": "cross"} if prefix else answer


def rounded(values: torch.Tensor) -> list:
    """A matrix as nested lists of floats rounded to ``MATRIX_DIGITS`` decimals (float64 first: 0.1 prints as 0.1)."""
    return values.double().round(decimals=MATRIX_DIGITS).tolist()


def finite(values: torch.Tensor) -> list:
    """``rounded``, with None for what is not finite (JSON has no -inf: the masked scores above the diagonal)."""
    return [[v if v not in (float("inf"), float("-inf")) and v == v else None for v in row] for row in rounded(values)]


def head_size(loaded: LoadedModel, layer: int, prefix: str = "") -> int:
    from tinylm.analysis.circuits.parts import places

    return next(place.module.head_size for place in places(loaded.model)
                if place.layer == layer and place.prefix == prefix)


def composition(loaded: LoadedModel) -> dict:
    """``composition_scores`` (composition.json): q, k, v indexed [earlier head][later head], the baseline."""
    from tinylm.analysis.circuits.composition import composition_scores

    transformer(loaded, "composition")
    with torch.inference_mode():
        return composition_scores(loaded.model, seed=0)


def neurons(loaded: LoadedModel, text: str, k) -> dict:
    """``neuron_examples`` (neurons.json) on the whole text (read in windows of block_size): each MLP neuron's
    top ``k`` positions with their context (ending on the character it fires on) and the characters its
    output pushes up most."""
    from tinylm.analysis.circuits.neurons import neuron_examples

    transformer(loaded, "reading MLP neurons")
    if is_encoder_decoder(loaded.model):
        raise TinyLMError("this run's model is an encoder-decoder: the neurons view reads a decoder's text, one "
                          "stream; its cross-attention heads are in the Circuits view (dla, ov and qk with kind=cross)")
    count = whole_number(k)
    if count is None or not 1 <= count <= MAX_NEURON_K:
        raise TinyLMError(f"k={k!r} must be a whole number from 1 to {MAX_NEURON_K}")
    encoded(loaded, text)  # an empty text, or a character the model does not know: one line
    ids = loaded.tokenizer.encode(text)  # all of it: neuron_examples reads it in windows of block_size
    with torch.inference_mode():
        return neuron_examples(loaded.model, loaded.tokenizer, ids, k=count)
