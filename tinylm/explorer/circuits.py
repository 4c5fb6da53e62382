"""The circuits of a run's model as the tab's "Circuits" and "Neurons" views ask for them: plain JSON-ready dicts.

Every number comes from the analysis' own functions (``tinylm.analysis.circuits``: what ``analyze.py`` writes
to dla.json, circuits.json, composition.json and neurons.json, and what ``lm.dla``, ``lm.circuits``,
``lm.composition`` and ``lm.neurons`` return), unchanged but for the rounding of the matrices (``MATRIX_DIGITS``);
this module only reads the request's text, layer and head, and says in one line what a model lacks (a
TinyLMError: the routes answer 400 with it). Nothing here writes anything.

    dla(loaded, text, against)      direct logit attribution at each position of the text (dla.json)
    heads(loaded)                   each head's copying and positional previous-token scores (circuits.json)
    ov(loaded, layer, head)         a head's OV circuit, V x V, with its copying score
    qk(loaded, layer, head)         a head's token QK circuit (V x V) and positional QK pattern (T x T or None)
    composition(loaded)             Q-, K- and V-composition of every earlier head with every later one
    neurons(loaded, text, k)        each MLP neuron's top examples in the text and the characters it pushes up
"""

from __future__ import annotations

import torch

from tinylm.errors import TinyLMError
from tinylm.explorer.views import encoded
from tinylm.tasks.base import LoadedModel
from tinylm.values import whole_number

MAX_NEURON_K = 20  # examples per neuron
MATRIX_DIGITS = 4  # decimals of the OV and QK matrices' logits and scores (a V x V matrix of a large vocabulary is big)


def transformer(loaded: LoadedModel, what: str) -> None:
    """A TinyLMError for a model without attention heads (the LSTM/GRU): what applies to it instead."""
    if not loaded.model.has_attention:
        raise TinyLMError(f"this run's model is an {loaded.model.config.arch} model: it has no attention heads, so "
                          f"{what} does not apply; its hidden state is read whole (lm.run_with_cache: hook_rnn_out)")


def dla(loaded: LoadedModel, text: str, against: str | None = None) -> dict:
    """``direct_logit_attribution`` of the text's last ``context_window`` tokens (dla.json), each position's
    parts (embed, pos_embed, LxHy, mlpx, bias) adding up to its logit; ``truncated`` when the text was cut."""
    from tinylm.analysis.circuits.dla import direct_logit_attribution

    transformer(loaded, "direct logit attribution")
    if against is not None and len(against) != 1:
        raise TinyLMError(f"against={against!r}: give one character to compare the target with (or none)")
    ids, truncated = encoded(loaded, text)
    with torch.inference_mode():
        answer = direct_logit_attribution(loaded.model, ids, loaded.tokenizer, against=against)
    return {**answer, "truncated": truncated}


def heads(loaded: LoadedModel) -> dict:
    """``head_circuits`` (circuits.json): each head's copying and positional previous-token scores."""
    from tinylm.analysis.circuits.ov_qk import head_circuits

    transformer(loaded, "OV and QK circuits")
    with torch.inference_mode():
        return head_circuits(loaded.model, loaded.tokenizer)


def head_of(loaded: LoadedModel, layer, head) -> tuple[int, int]:
    """``layer`` and ``head`` (strings or ints) as a head of the model's self-attention; one line otherwise."""
    config = loaded.model.config
    layers = getattr(config, "num_layers", None) or getattr(config, "decoder_layers", 0)
    number = (whole_number(layer), whole_number(head))
    if None in number or not (0 <= number[0] < layers and 0 <= number[1] < config.num_heads):
        raise TinyLMError(f"layer={layer!r} head={head!r} is not a head of this model: layers 0 to {layers - 1}, "
                          f"heads 0 to {config.num_heads - 1}, counted from 0")
    return number


def scores_of(answer: dict, layer: int, head: int) -> dict:
    for entry in answer["heads"]:
        if entry["layer"] == layer and entry["head"] == head and not entry.get("cross"):
            return entry
    return {}


def ov(loaded: LoadedModel, layer, head) -> dict:
    """One head's OV circuit (``ov_circuit``): row a, column b is how much attending to character a makes the
    head write character b (through the output head); its copying score as circuits.json gives it."""
    from tinylm.analysis.circuits.ov_qk import ov_circuit

    transformer(loaded, "the OV circuit")
    layer, head = head_of(loaded, layer, head)
    circuits = heads(loaded)
    with torch.inference_mode():
        matrix = ov_circuit(loaded.model, layer, head)
    return {"layer": layer, "head": head, "tokens": circuits["tokens"], "ov": rounded(matrix),
            "copying": scores_of(circuits, layer, head).get("copying"), "folded": circuits.get("folded")}


def qk(loaded: LoadedModel, layer, head) -> dict:
    """One head's QK circuits: tokens (``qk_circuit``, V x V, query row, key column) and positions
    (``positional_qk``, T x T, None above the diagonal, where a query sees no key; None when the model has no
    learned or sin/cos positions, e.g. rope); ``head_size``, by whose root the model divides the scores."""
    from tinylm.analysis.circuits.ov_qk import positional_qk, qk_circuit

    transformer(loaded, "the QK circuit")
    layer, head = head_of(loaded, layer, head)
    circuits = heads(loaded)
    with torch.inference_mode():
        tokens = qk_circuit(loaded.model, layer, head)
        positions = positional_qk(loaded.model, layer, head)
    return {"layer": layer, "head": head, "tokens": circuits["tokens"], "qk": rounded(tokens),
            "positional": None if positions is None else finite(positions), "head_size": head_size(loaded, layer),
            "positional_previous_token": scores_of(circuits, layer, head).get("positional_previous_token")}


def rounded(values: torch.Tensor) -> list:
    """A matrix as nested lists of floats rounded to ``MATRIX_DIGITS`` decimals (float64 first: 0.1 prints as 0.1)."""
    return values.double().round(decimals=MATRIX_DIGITS).tolist()


def finite(values: torch.Tensor) -> list:
    """``rounded``, with None for what is not finite (JSON has no -inf: the masked scores above the diagonal)."""
    return [[v if v not in (float("inf"), float("-inf")) and v == v else None for v in row] for row in rounded(values)]


def head_size(loaded: LoadedModel, layer: int) -> int:
    from tinylm.analysis.circuits.parts import places

    return next(place.module.head_size for place in places(loaded.model) if place.layer == layer and not place.prefix)


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
    count = whole_number(k)
    if count is None or not 1 <= count <= MAX_NEURON_K:
        raise TinyLMError(f"k={k!r} must be a whole number from 1 to {MAX_NEURON_K}")
    encoded(loaded, text)  # an empty text, or a character the model does not know: one line
    ids = loaded.tokenizer.encode(text)  # all of it: neuron_examples reads it in windows of block_size
    with torch.inference_mode():
        return neuron_examples(loaded.model, loaded.tokenizer, ids, k=count)
