"""The tinylm tab's views of one model in a notebook cell or a file: one frontend, three hosts.

``text_view`` (``lm.show``), ``heads_view`` (``lm.show_heads``), ``translation_view``, ``circuits_view``
(``lm.show_circuits``) and ``neurons_view`` (``lm.show_neurons``) return a ``View``:
one HTML page (``View.html``) that holds the tab's own frontend (``static/``, inlined by ``bundle``) and the
answers to every question its view asks, computed here by the very functions the routes answer with
(``tinylm.explorer.views``, ``events.heads``), as JSON of the same form (a route's error as ``{"error"}``).
Nothing in the page is fetched: it works offline, from a file (``View.save``) or inline in Jupyter
(``_repr_html_``: an iframe of its own, so that several views in one notebook do not meet).

A page has no model to ask, so what it holds is decided here: the text view holds its text with every head
on, with each head switched off alone, and with every combination of up to r heads off for the largest r that
keeps the states within ``budget`` (every combination for a model of 6 heads or fewer) and their attention
weights within ``MAX_WEIGHTS`` (a large model holds fewer: every head on only, at worst), plus ``ablate``'s
heads off together (it opens with them off). Another combination shows a one-line note naming the
``lm.show(text, ablate=[...])`` that holds it. The text itself cannot be changed in the page (its box is
read-only). The heads view shows the head scores training logged (``HeadScores``), read from the run's event
files as the tab reads them; a run without them gets the scores of its checkpoint, computed now with the
analysis' own ``attention_scores`` on the text given (or the run's probe).
"""

from __future__ import annotations

import html
import itertools
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tinylm.errors import TinyLMError
from tinylm.explorer import bundle, circuits, head_scores, views
from tinylm.explorer.models import describe
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import LoadedModel
from tinylm.values import one_line

TOP_K = 5  # text_view.js asks for the top 5 next characters
BUDGET = 64  # head states (each: attention, predictions, logit lens) a text view holds at most, ablate's aside
MAX_WEIGHTS = 2_000_000  # and their attention weights at most (about 9 bytes each in the page)
MAX_CIRCUIT_VALUES = 400_000  # OV, QK and positional numbers a circuits view holds (about 7.5 bytes each)
FRAME_HEIGHT = {"text": 900, "heads": 720, "translation": 640, "circuits": 1300,  # px, until the page sets its own
                "neurons": 760}  # (fitFrame)


@dataclass
class View:
    """One view as a standalone HTML page (``html``); ``data``: what its page holds (the answers)."""

    html: str
    title: str
    kind: str  # "text", "heads", "translation", "circuits" or "neurons"
    data: dict = field(repr=False)

    def _repr_html_(self) -> str:
        """The page in an iframe of its own (``srcdoc``: nothing fetched), which fits its height to the page."""
        return (f'<iframe class="tinylm-view" title="{html.escape(self.title)}" srcdoc="{html.escape(self.html)}" '
                f'style="width: 100%; height: {FRAME_HEIGHT[self.kind]}px; border: 0;"></iframe>')

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (one file that opens offline in a browser); return the path."""
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path

    def __repr__(self) -> str:
        return f"<tinylm view: {self.title}; .save('view.html') writes it as one HTML file>"


# ------------------------------------------------------------------------------------------------
# The answers, as the routes give them


def answered(compute, *args) -> dict:
    """``compute(*args)``, or ``{"error": ...}`` for its TinyLMError, as the routes answer."""
    try:
        return compute(*args)
    except TinyLMError as e:
        return {"error": one_line(e)}


@contextmanager
def one_thread():
    """torch on one thread meanwhile, as the tab's routes compute (``plugin.TorchThreads``): a small model gains
    nothing from more, and on a busy machine they only wait for each other (a text view: 0.04 s against 7 s
    at load 8 on 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_of(loaded: LoadedModel, text: str) -> dict:
    """What the ``runs`` route says of the model's run (``models.describe``), opening on ``text``."""
    run_dir = head_scores.run_folder(loaded)
    return {"name": run_dir.name or ".", "label": run_dir.name or str(loaded.path), **describe(loaded), "text": text}


def probe_of(loaded: LoadedModel) -> str:
    """The text a run opens on in the tab when none is given: its recorded probe, else letters of its vocabulary."""
    from tinylm.explorer.run_text import recorded_probe, vocabulary_text
    from tinylm.tasks.probe_text import OPENING_CHARS

    recorded = recorded_probe(head_scores.run_folder(loaded))
    if recorded and not loaded.tokenizer.unknown(recorded):
        return recorded
    return vocabulary_text(loaded.tokenizer, loaded.model.config.block_size if loaded.task == "translation"
                           else OPENING_CHARS)


def head_states(heads: list[str], budget: int) -> tuple[list[tuple[str, ...]], int]:
    """Every set of up to r of ``heads`` switched off, for the largest r whose sets number at most ``budget``
    (r = 0, every head on only, when the heads alone would be more), fewest first; and r."""
    most, count = 0, 1
    while most < len(heads) and count + math.comb(len(heads), most + 1) <= budget:
        most += 1
        count += math.comb(len(heads), most)
    states = [combination for size in range(most + 1) for combination in itertools.combinations(sorted(heads), size)]
    return states, most


def heads_named(ablate, run: dict) -> tuple[str, ...]:
    """``ablate`` ("1.0" strings or (layer, head) pairs) as sorted "layer.head" strings of the model's heads."""
    named = set()
    for head in ablate or ():
        name = f"{head[0]}.{head[1]}" if isinstance(head, tuple | list) and len(head) == 2 else str(head)
        layer, _, index = name.partition(".")
        if not (layer.isdigit() and index.isdigit() and int(layer) < run["layers"] and int(index) < run["heads"]):
            raise TinyLMError(f"ablate: {head!r} is not a head of this model: write 'layer.head' (e.g. '1.0'), "
                              f"layers 0 to {run['layers'] - 1}, heads 0 to {run['heads'] - 1}, counted from 0")
        named.add(f"{int(layer)}.{int(index)}")
    return tuple(sorted(named))  # as text_view.js sorts them (every name is ASCII: code points, as JS)


def held_note(most: int, count: int) -> str | None:
    """What a text view says of a combination it does not hold ({ablate}: its heads, filled in by page.js)."""
    if most >= count:
        return None
    held = ("every head on only" if most == 0 else "every head switched off alone" if most == 1
            else f"every combination of up to {most} heads switched off")
    return (f"Not in this saved view (it holds {held}): call lm.show(text, ablate={{ablate}}) for these heads "
            "off at once, or open the run in the tinylm tab.")


def shared_maps(answers: list[dict]) -> list:
    """Each attention answer's maps moved into one list, each layer's held once (a head switched off changes
    only the layers after its own): the answer keeps ``maps``, their indexes. Returns the list."""
    maps, index = [], {}
    for entry in answers:
        answer = entry["answer"]
        if entry["route"] != "attention" or "attention" not in answer:
            continue
        indexes = []
        for layer in answer.pop("attention"):
            key = json.dumps(layer)
            if key not in index:
                index[key] = len(maps)
                maps.append(layer)
            indexes.append(index[key])
        answer["maps"] = indexes
    return maps


def saved(kind: str, run: dict, answers: list[dict], title: str, **extra) -> View:
    data = {"view": kind, "run": run, "answers": answers, "maps": shared_maps(answers), **extra}
    return View(bundle.page(data, title), title, kind, data)


# ------------------------------------------------------------------------------------------------
# The views


def text_view(loaded: LoadedModel, text: str | None = None, *, ablate=(), budget: int = BUDGET) -> View:
    """The tab's "Your text" view of ``text`` (None: the run's probe): every layer's and head's attention,
    one head's lines (hover a character), the top next characters, the logit lens, heads switched off by
    clicking (see the module's docstring for which combinations it holds); it opens with ``ablate``'s heads
    off ("1.0" or (1, 0): layer 1, head 0)."""
    if loaded.task == "translation" or is_encoder_decoder(loaded.model):
        raise TinyLMError("this model translates: show it with translation_view(loaded, source) (lm.show(source))")
    text = probe_of(loaded) if text is None else text
    run = run_of(loaded, text)
    off = heads_named(ablate, run)
    heads = [f"{layer}.{head}" for layer in range(run["layers"]) for head in range(run["heads"])]
    tokens = len(views.predict(loaded, text, [], TOP_K)["tokens"])  # a text it cannot read: its error, raised here
    weights = max(len(heads) * tokens * tokens, 1)  # the attention of one state
    states, most = head_states(heads, min(budget, MAX_WEIGHTS // weights))
    if off not in states:
        states.append(off)
    answers = []
    with one_thread():
        for state in states:
            params = {"text": text, **({"ablate": ",".join(state)} if state else {})}
            answers += [
                {"route": "attention", "params": params,
                 "answer": answered(views.attention, loaded, text, list(state))},
                {"route": "predict", "params": {**params, "k": str(TOP_K)},
                 "answer": answered(views.predict, loaded, text, list(state), TOP_K)},
                {"route": "lens", "params": params, "answer": answered(views.lens, loaded, text, list(state))},
            ]
    return saved("text", run, answers, f"tinylm · {text[:40]}", off=list(off),
                 fixed="A saved view of this text: to look at another, call lm.show(text) with it",
                 missing=held_note(most, len(heads)))


def translation_view(loaded: LoadedModel, source: str | None = None) -> View:
    """The tab's "Translation" view of one source line: the greedy translation and (an encoder-decoder)
    each decoder layer's cross-attention, target over source, one head as a map and as lines."""
    source = probe_of(loaded) if source is None else source
    answer = views.translation(loaded, source)  # a source it cannot read: its one-line error, raised here
    run = run_of(loaded, source)
    answers = [{"route": "translate", "params": {"text": source}, "answer": answer}]
    return saved("translation", run, answers, f"tinylm · {source[:40]} → {answer['translation'][:40]}",
                 fixed="A saved view of this source: to translate another, call lm.show(source) with it")


def heads_view(loaded: LoadedModel, *, text: str | None = None) -> View:
    """The tab's "Heads" view: each head's previous-token, induction and entropy scores, over the steps
    training logged them, else of the checkpoint now (on ``text``, else the run's probe)."""
    scores = head_scores.logged(head_scores.run_folder(loaded))
    if scores and scores["steps"]:
        steps = scores["steps"]
        about = f"logged while training: {len(steps)} step{'s' if len(steps) > 1 else ''}, {steps[0]} to {steps[-1]}"
    else:
        text = probe_of(loaded) if text is None else text
        with one_thread():
            scores = head_scores.computed(loaded, text)
        shown = text if len(text) <= 40 else text[:39] + "…"
        about = (f"this run logged no head scores: the checkpoint's (step {scores['steps'][0]}), computed now on "
                 f"{shown!r} and on random characters written twice")
    run = run_of(loaded, text or "")
    answers = [{"route": "heads", "params": {}, "answer": scores}]
    return saved("heads", run, answers, f"tinylm · head scores of {run['label']}", about=about)


def circuit_heads(scores: dict, heads, vocabulary: int, block_size: int) -> list[tuple[int, int, str]]:
    """The heads (layer, head, "" or "cross") whose OV and QK a circuits view holds: ``heads`` ("1.0" or (1, 0);
    "cross1.0": an encoder-decoder's cross-attention head), else every head while their matrices stay within
    ``MAX_CIRCUIT_VALUES`` (the largest copying scores first; one head at least)."""
    def kind(entry: dict) -> str:
        return "cross" if entry.get("name", "").startswith("cross") else ""

    every = sorted({(entry["layer"], entry["head"], kind(entry)) for entry in scores["heads"]})
    if heads is not None:
        run = {"layers": max(layer for layer, _, _ in every) + 1, "heads": max(head for _, head, _ in every) + 1}
        cross = any(prefix for _, _, prefix in every)
        named = [(name[5:], "cross") if cross and isinstance(name, str) and name.startswith("cross") else (name, "")
                 for name in heads]
        return sorted({(*(int(part) for part in name.split(".")), prefix) for prefix in ("", "cross")
                       for name in heads_named([n for n, p in named if p == prefix], run)})
    per_head = 2 * vocabulary * vocabulary + block_size * block_size
    copying = {(entry["layer"], entry["head"], kind(entry)): entry["copying"] for entry in scores["heads"]}
    ranked = sorted(every, key=lambda head: -copying[head])
    return sorted(ranked[:max(1, MAX_CIRCUIT_VALUES // per_head)])


def circuits_view(loaded: LoadedModel, text: str | None = None, *, heads=None) -> View:
    """The tab's "Circuits" view: the direct logit attribution of ``text`` (None: the run's probe) at each
    position and summed, the heads' OV circuits with their copying scores, their token and positional QK,
    and the composition scores (``tinylm.explorer.circuits``, the analysis' own functions). It holds the OV
    and QK of every head while they stay within ``MAX_CIRCUIT_VALUES`` numbers (a large vocabulary: the
    heads that copy most), else of ``heads`` ("1.0" or (1, 0)); it opens on the first. An encoder-decoder's
    text is one source line, its greedy translation attributed; its cross-attention heads are "cross1.0"."""
    translates = is_encoder_decoder(loaded.model)
    if loaded.task == "translation" and not translates:
        raise TinyLMError("this decoder-only model translates source + BEGIN + target in one stream: its circuits "
                          "are in lm.dla(...) and lm.circuits(); the circuits view reads a decoder's text or an "
                          "encoder-decoder's source")
    text = probe_of(loaded) if text is None else text
    with one_thread():
        scores = circuits.heads(loaded)  # a model without heads: its one line, raised here
        if translates:
            dla = circuits.dla(loaded, text)  # a source it cannot read: its one line, raised here
        else:
            views.encoded(loaded, text)  # a text it cannot read
            dla = answered(circuits.dla, loaded, text)
        config = loaded.model.config
        heads = circuit_heads(scores, heads, config.vocab_size, config.block_size)
        answers = [{"route": "circuits", "params": {}, "answer": scores},
                   {"route": "dla", "params": {"text": text}, "answer": dla},
                   {"route": "composition", "params": {}, "answer": answered(circuits.composition, loaded)}]
        for layer, head, prefix in heads:
            params = {"head": str(head), "layer": str(layer), **({"kind": prefix} if prefix else {})}
            kind = prefix or "self"
            answers += [{"route": "ov", "params": params, "answer": answered(circuits.ov, loaded, layer, head, kind)},
                        {"route": "qk", "params": params, "answer": answered(circuits.qk, loaded, layer, head, kind)}]
    names = ", ".join(f"{prefix}{layer}.{head}" for layer, head, prefix in heads)
    return saved("circuits", run_of(loaded, text), answers, f"tinylm · circuits · {text[:40]}",
                 fixed="A saved view of this text: to attribute another, call lm.show_circuits(text) with it",
                 head=list(heads[0]) if heads[0][2] else list(heads[0][:2]),
                 missing_head=f"Not in this saved view (it holds the OV and QK circuits of {names}): call "
                 "lm.show_circuits(text, heads=['{head}']) for this head's, or open the run in the tinylm tab.")


def neurons_view(loaded: LoadedModel, text: str | None = None) -> View:
    """The tab's "Neurons" view of ``text`` (None: the run's probe): each MLP neuron's top ``k`` positions in
    it (k = 5, as neurons_view.js asks), in their context, and the characters its output pushes up."""
    if loaded.task == "translation" or is_encoder_decoder(loaded.model):
        raise TinyLMError("this model translates: the neurons view reads a decoder's text, one stream; an "
                          "encoder-decoder's cross-attention heads are in lm.show_circuits(source)")
    text = probe_of(loaded) if text is None else text
    with one_thread():
        answer = circuits.neurons(loaded, text, TOP_K)  # a text or model it cannot read: its one line, raised here
    answers = [{"route": "neurons", "params": {"k": str(TOP_K), "text": text}, "answer": answer}]
    return saved("neurons", run_of(loaded, text), answers, f"tinylm · neurons · {text[:40]}",
                 fixed="A saved view of this text: to read another, call lm.show_neurons(text) with it")
