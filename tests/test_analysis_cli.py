"""analyze.py on the session's trained runs: its files and table, its one-line errors, its argv wiring."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compose_config, entry_point

from tinylm.cli import quote_values
from tinylm.errors import TinyLMError

analyze = entry_point("analyze.py")
TEXT = "自注意力可以让序列中的每个位置"  # 15 characters of the runs' training text (block_size 16)
# the circuits' figures (tests/test_circuits_cli.py reads their files)
CIRCUIT_PNGS = {"dla_position", "dla_summed", "circuits_copying", "circuits_positional", "circuits_ov", "composition_q",
                "composition_k", "composition_v", "neurons"}


def run_analyze(*overrides: str) -> dict:
    """analyze.py's run on ``overrides``, quoted for Hydra as its command line quotes them."""
    quoted = quote_values(quote_values(list(overrides), analyze.TEXT_KEYS, literal=True), analyze.PATH_KEYS)
    return analyze.run(compose_config("analyze", *quoted))


def test_analyze_writes_heads_lens_figures_and_report(gpt_run, tmp_path, capsys):
    result = run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}")
    heads = json.loads((tmp_path / "heads.json").read_text(encoding="utf-8"))
    assert [(h["layer"], h["head"]) for h in heads] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert set(heads[0]) == {"layer", "head", "previous_token", "induction", "entropy", "ablation_loss_delta"}
    lens = json.loads((tmp_path / "logit_lens.json").read_text(encoding="utf-8"))
    assert lens["tokens"] == list(TEXT)
    assert [layer["layer"] for layer in lens["layers"]] == [0, 1]
    assert all(len(layer["top1"]) == len(layer["prob"]) == len(TEXT) for layer in lens["layers"])
    pngs = {"logit_lens", "previous_token", "induction", "entropy", "ablation_loss_delta", *CIRCUIT_PNGS}
    assert {p.stem for p in tmp_path.glob("*.png")} == pngs
    report = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    assert all(f"]({name}.png)" in report for name in pngs)
    printed = capsys.readouterr().out
    assert "previous-token head:" in printed and "induction head:" in printed
    assert "after block 1: loss" in printed
    assert not (tmp_path / "patching.json").exists() and result["patching"] is None


def test_analyze_patches_a_corrupt_text_of_the_same_length(gpt_run, tmp_path):
    run_analyze(f"run_dir={gpt_run.path}", "text=注意力可以", "corrupt_text=自注意力可", f"out_dir={tmp_path}",
                "ablation=mean")
    patch = json.loads((tmp_path / "patching.json").read_text(encoding="utf-8"))
    assert len(patch["residual"]) == 2 and all(len(row) == 5 for row in patch["residual"])
    assert patch["residual"][-1][-1] == pytest.approx(1.0)
    assert len(patch["heads"]) == 4
    assert (tmp_path / "patching_residual.png").is_file() and (tmp_path / "patching_heads.png").is_file()


@pytest.mark.parametrize(("override", "message"), [
    ("ablation=half", "ablation='half': choose zero"),
    ("induction_draws=0", "induction_draws=0 must be an integer >= 1"),
    ("induction_length=9", "induction_length=9 must be an integer from 2 to block_size / 2 = 8"),
    ("corrupt_text=注意", "corrupt_text is 2 tokens long and text 15"),
    ("text=自", "text is one token long"),
    ("text=𝄞", "outside the checkpoint's vocabulary"),
])
def test_bad_values_are_one_error(gpt_run, tmp_path, override, message):
    with pytest.raises(TinyLMError) as e:
        run_analyze(f"run_dir={gpt_run.path}", f"text={TEXT}", f"out_dir={tmp_path}", override)
    assert message in str(e.value)


def test_an_lstm_gets_one_line_saying_what_applies(lstm_run, tmp_path):
    with pytest.raises(TinyLMError) as e:
        run_analyze(f"run_dir={lstm_run.path}", f"text={TEXT}", f"out_dir={tmp_path}")
    assert "lstm model: it has no attention heads and no residual stream" in str(e.value)
    assert "evaluate.py" in str(e.value) and "\n" not in str(e.value)


def test_the_default_folder_is_the_run_folders_analysis():
    assert analyze.default_out_dir(Path("/r/run/checkpoints/last.ckpt")) == Path("/r/run/analysis")
    assert analyze.default_out_dir(Path("/r/model.ckpt")) == Path("/r/model-analysis")


def test_the_command_line_takes_cjk_text_unquoted(gpt_run, tmp_path):
    ckpt = next((gpt_run.path / "checkpoints").glob("best-*.ckpt"))
    proc = subprocess.run([sys.executable, str(ROOT / "analyze.py"), f"ckpt_path={ckpt}", "text=注意力 可以",
                           f"out_dir={tmp_path / 'out dir'}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("layer head")
    assert (tmp_path / "out dir" / "heads.json").is_file()
