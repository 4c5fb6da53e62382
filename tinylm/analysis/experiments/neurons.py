"""The MLP neurons (``tinylm.analysis.circuits.neurons``) on the run's validation text (its first 64k
characters, ``tinylm.analysis.circuits.texts``; ``neurons_text`` instead when given, of any length; the text
when the run's data file is missing, with a line saying so): ``neurons.json`` (with "source": "validation",
"text" or "probe", and "length", the characters read), a figure of the neurons that fire most and the
characters they fire on, a table line for each layer's strongest."""

from __future__ import annotations

from tinylm.analysis.circuit_figures import neurons_grid
from tinylm.analysis.circuits.neurons import neuron_examples
from tinylm.analysis.circuits.texts import neurons_text
from tinylm.analysis.registry import ReportFigure, Result, Subject, register
from tinylm.plots.figures import visible
from tinylm.tokenizer import unknown_characters

READING = (
    "MLP neurons", "Each row is one MLP neuron (layer L, neuron N) among those that fire most: its strongest "
    "positions in the run's validation text (or neurons_text; neurons.json's \"source\" says which text was "
    "read), each cell the character there, coloured by the activation (after the ReLU). After the arrow: the "
    "characters its output pushes up most, through W_out, the final LayerNorm's gain and the output head. "
    "neurons.json holds every neuron, with each example's context.")


@register("neurons", order=70)
def neurons_analysis(subject: Subject) -> Result:
    cfg, tokenizer = subject.cfg, subject.tokenizer
    given = None if cfg.get("neurons_text") is None else str(cfg.neurons_text)
    if given is not None and (missing := tokenizer.unknown(given)):
        raise unknown_characters(tokenizer, "neurons_text", missing, "use characters of the training text")
    text, source, why = neurons_text(subject.loaded, given, None, "text= (the probe)")
    ids = subject.ids if text is None else tokenizer.encode(text)
    neurons = neuron_examples(subject.model, tokenizer, ids, cfg.get("neurons_k", 5), cfg.get("neurons_context", 8))
    neurons.update(source=source, length=len(tokenizer.decode(ids)))
    lines = [why] if why else []
    for layer in neurons["layers"]:
        top = max(layer["neurons"], key=lambda n: max((e["activation"] for e in n["examples"]), default=0.0))
        example = top["examples"][0]
        pushes = "".join(visible(p["char"]) or "?" for p in top["pushes"][:3])
        lines.append(f"neurons layer {layer['layer']}: neuron {top['neuron']} fires most ({example['activation']:.2f}) "
                     f"on {visible(example['context'])!r}, pushes {pushes!r}")
    return Result(neurons, [ReportFigure("neurons", neurons_grid(neurons), *READING)], lines)
