"""An analysis registered outside the package (here, in the test) runs with analyze.py's own: its JSON,
its figure in REPORT.md and its table lines; one that needs an option left null is listed as not run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import compose_config, entry_point

from tinylm.analysis import registry
from tinylm.analysis.experiments import registered
from tinylm.analysis.figures import grid_figure
from tinylm.cli import quote_values
from tinylm.errors import TinyLMError

analyze = entry_point("analyze.py")
TEXT = "自注意力可以让序列中的每个位置"


@pytest.fixture
def own_registry(monkeypatch):
    """The registry as the package fills it, restored after the test."""
    monkeypatch.setattr(registry, "REGISTERED", list(registered()))


def text_length(subject: registry.Subject) -> registry.Result:
    """A tiny analysis: how long the text is, one figure, one table line."""
    figure = grid_figure(np.ones((1, len(subject.ids))), ["text"], [str(i) for i in range(len(subject.ids))],
                         ["Tokens", subject.note], ("position", ""), "one", 0.0, 1.0)
    return registry.Result({"tokens": len(subject.ids)}, [registry.ReportFigure("tokens", figure, "Tokens",
                                                                                "One cell per token.")],
                           [f"tokens: {len(subject.ids)}"])


def test_a_registered_analysis_is_in_analyzes_files_report_and_table(own_registry, gpt_run, tmp_path, capsys):
    registry.register("text_length")(text_length)
    registry.register("needs_corrupt", needs=("corrupt_text",))(text_length)
    overrides = quote_values([f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}"], analyze.TEXT_KEYS,
                             literal=True)
    result = analyze.run(compose_config("analyze", *quote_values(overrides, analyze.PATH_KEYS)))
    assert json.loads((tmp_path / "text_length.json").read_text(encoding="utf-8")) == {"tokens": 15}
    assert result["text_length"] == {"tokens": 15} and result["needs_corrupt"] is None
    assert not (tmp_path / "needs_corrupt.json").exists()
    assert (tmp_path / "tokens.png").is_file() and (tmp_path / "heads.json").is_file()
    report = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    assert "## Tokens\n\n![Tokens](tokens.png)\n\nOne cell per token." in report
    assert "Analyses: heads, logit_lens, dla, circuits, composition, neurons, text_length;" in report
    assert "needs_corrupt (needs corrupt_text=)" in report and "patching (needs corrupt_text=)" in report
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith("layer head")  # the built-in analyses first (lower order)
    assert printed.index("tokens: 15") > max(i for i, line in enumerate(printed) if line.startswith("after block"))
    assert str(tmp_path / "tokens.png") in printed


@pytest.mark.parametrize(("name", "models", "message"), [
    ("heads", ("decoder",), "analysis 'heads' is registered twice for decoder models"),
    ("logit_lens", ("encoder-decoder",), "analysis 'logit_lens' is registered twice"),
    ("mine", ("encoder_decoder",), "models=('encoder_decoder',), choose among decoder, encoder-decoder"),
])
def test_register_refuses_a_name_taken_for_the_kind_and_an_unknown_kind(own_registry, name, models, message):
    with pytest.raises(TinyLMError) as e:
        registry.register(name, models=models)(text_length)
    assert message in str(e.value)


def test_a_name_may_serve_each_kind_once():
    heads = [analysis for analysis in registered() if analysis.name == "heads"]
    assert sorted(kind for analysis in heads for kind in analysis.models) == ["decoder", "encoder-decoder"]
