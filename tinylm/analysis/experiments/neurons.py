"""The MLP neurons (``tinylm.analysis.circuits.neurons``) on the text (or ``neurons_text``, of any length):
``neurons.json``, a figure of the neurons that fire most and the characters they fire on, a table line for each
layer's strongest."""

from __future__ import annotations

from tinylm.analysis.circuit_figures import neurons_grid
from tinylm.analysis.circuits.neurons import neuron_examples
from tinylm.analysis.registry import ReportFigure, Result, Subject, register
from tinylm.plots.figures import visible
from tinylm.tokenizer import unknown_characters

READING = (
    "MLP neurons", "Each row is one MLP neuron (layer L, neuron N) among those that fire most on the text: its "
    "strongest positions, each cell the character there, coloured by the activation (after the ReLU). After the "
    "arrow: the characters its output pushes up most, through W_out, the final LayerNorm's gain and the output "
    "head. neurons.json holds every neuron, with each example's context.")


@register("neurons", order=70)
def neurons_analysis(subject: Subject) -> Result:
    cfg, tokenizer = subject.cfg, subject.tokenizer
    ids = subject.ids
    if cfg.get("neurons_text") is not None:
        text = str(cfg.neurons_text)
        if missing := tokenizer.unknown(text):
            raise unknown_characters(tokenizer, "neurons_text", missing, "use characters of the training text")
        ids = tokenizer.encode(text)
    neurons = neuron_examples(subject.model, tokenizer, ids, cfg.get("neurons_k", 5), cfg.get("neurons_context", 8))
    lines = []
    for layer in neurons["layers"]:
        top = max(layer["neurons"], key=lambda n: max((e["activation"] for e in n["examples"]), default=0.0))
        example = top["examples"][0]
        pushes = "".join(visible(p["char"]) or "?" for p in top["pushes"][:3])
        lines.append(f"neurons layer {layer['layer']}: neuron {top['neuron']} fires most ({example['activation']:.2f}) "
                     f"on {visible(example['context'])!r}, pushes {pushes!r}")
    return Result(neurons, [ReportFigure("neurons", neurons_grid(neurons), *READING)], lines)
