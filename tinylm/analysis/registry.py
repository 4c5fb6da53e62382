"""What ``analyze.py`` runs: registered analyses, each a function that returns its JSON, its figures and its
table lines.

    @register("heads", order=10)
    def heads(subject: Subject) -> Result:
        rows = ...                                   # computed on subject.model, subject.ids, ...
        return Result(rows, [ReportFigure("previous_token", figure, title, paragraph)], ["layer head ..."])

An analysis has a ``name`` (its ``<name>.json`` file and its key in what analyze returns), the model
kinds it runs on (``models``, ``LanguageModel.kind``) and the options of conf/analyze.yaml it needs set
(``needs``). analyze runs every one that applies on one ``Subject`` (the checkpoint, the options, the text
or the source lines, the model once on them) in ``order``, then writes each ``Result``: the value as
``<name>.json``, each figure as ``<name>.png`` with its paragraph in REPORT.md, the lines into the printed
table. The modules of ``tinylm/analysis/experiments/`` register the built-in ones when imported; an
analysis defined anywhere else (a notebook's, a test's) joins them the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinylm.errors import TinyLMError

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from omegaconf import DictConfig

    from tinylm.analysis.probe import Probe
    from tinylm.models.base import LanguageModel
    from tinylm.tasks.base import LoadedModel

KINDS = ("decoder", "encoder-decoder")


@dataclass(frozen=True)
class Subject:
    """What every analysis reads: the loaded checkpoint, analyze's options, and the inputs its model
    kind takes."""

    loaded: LoadedModel
    cfg: DictConfig
    probe: Probe  # the model once on the text (a decoder) or on the first pair (an encoder-decoder)
    what: str  # what the analyses ran on, as REPORT.md and the first printed line say it
    ids: list[int] = field(default_factory=list)  # a decoder's text
    corrupt: list[int] | None = None  # a decoder's corrupt_text, as many tokens as ids
    pairs: list[tuple[list[int], list[int]]] = field(default_factory=list)  # an encoder-decoder's (source, reference)

    @property
    def model(self) -> LanguageModel:
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def note(self) -> str:
        """Every figure's second title line: the checkpoint file and its step."""
        return f"{self.loaded.path.name}, step {self.loaded.global_step}"


@dataclass(frozen=True)
class ReportFigure:
    name: str  # written as <name>.png
    figure: Figure
    title: str  # its heading in REPORT.md
    reading: str  # the paragraph under it: how to read it


@dataclass(frozen=True)
class Result:
    value: Any = None  # written as <name>.json and returned under the analysis's name (None: no file)
    figures: list[ReportFigure] = field(default_factory=list)  # in REPORT.md's order
    lines: list[str] = field(default_factory=list)  # its lines of the printed table


@dataclass(frozen=True)
class Analysis:
    name: str
    run: Callable[[Subject], Result]
    models: tuple[str, ...] = ("decoder",)
    needs: tuple[str, ...] = ()
    order: int = 100  # its JSON file and table lines come after those of lower order
    figure_order: int | None = None  # where its figures stand in REPORT.md (None: at ``order``)

    @property
    def report_order(self) -> int:
        return self.order if self.figure_order is None else self.figure_order

    def applies(self, kind: str, cfg) -> bool:
        return kind in self.models and all(cfg.get(option) is not None for option in self.needs)

    def why_not(self, kind: str) -> str:
        """Why it did not run on a model of ``kind`` (one that it does not apply to)."""
        if kind not in self.models:
            return "for " + " and ".join(f"{k}s" for k in self.models)
        return "needs " + ", ".join(f"{option}=" for option in self.needs)


REGISTERED: list[Analysis] = []


def register(name: str, models: tuple[str, ...] = ("decoder",), needs: tuple[str, ...] = (), order: int = 100,
             figure_order: int | None = None) -> Callable:
    """A decorator: the function ``run(subject) -> Result`` becomes the analysis ``name``. One name
    per model kind: each writes its own ``<name>.json``."""
    unknown = [kind for kind in models if kind not in KINDS]
    if unknown or not models:
        raise TinyLMError(f"analysis {name!r}: models={models!r}, choose among {', '.join(KINDS)}")

    def add(run: Callable[[Subject], Result]) -> Callable[[Subject], Result]:
        taken = [a for a in REGISTERED if a.name == name and set(a.models) & set(models)]
        if taken:
            raise TinyLMError(f"analysis {name!r} is registered twice for {'/'.join(models)} models: it would "
                              f"write {name}.json twice; choose another name")
        REGISTERED.append(Analysis(name, run, tuple(models), tuple(needs), order, figure_order))
        return run

    return add
