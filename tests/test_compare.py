"""python -m tinylm.compare: variants trained (or reused), tables and validation curves in one report."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
from conftest import TINY_TEXT, train_py
from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from tinylm import compare
from tinylm.checkpoint import read_checkpoint
from tinylm.compare import runner
from tinylm.errors import TinyLMError
from tinylm.tokenizer import tokenizer_from_state


def fake_run(run_dir: Path, overrides: list[str], metrics: dict, curve: dict[str, list[float]]) -> None:
    """A finished run folder as train.py leaves it, reduced to what the report reads."""
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")
    config = {"seed": 1337, "data": {"path": None, "batch_size": 32}, "model": {"block_size": 32},
              "optim": {"lr": 1e-3}, "trainer": {"max_steps": 20}}
    OmegaConf.save(OmegaConf.create(config), run_dir / ".hydra" / "config.yaml")
    (run_dir / "metrics.json").write_text(json.dumps({"steps": 20, "interrupted": False, **metrics}))
    writer = SummaryWriter(str(run_dir))
    for tag, values in curve.items():
        for i, value in enumerate(values):
            writer.add_scalar(tag, value, (i + 1) * 10)
    writer.close()


def test_report_tables_and_curves_from_run_folders(tmp_path):
    positions = {"learned": (2.10, 210_761), "sinusoidal": (2.20, 208_713), "rope": (2.00, 208_713)}
    for name, (loss, params) in positions.items():
        fake_run(tmp_path / "positions" / name, [f"model.pos_encoding={name}", "trainer.max_steps=20"],
                 {"val_loss": loss, "val_bpc": loss / 0.6931, "num_params": params, "tokens_per_second": 9000.0,
                  "wall_seconds": 4.0}, {"loss/val": [3.0, loss]})
    # per token, byte has the lowest loss; per character it is the worst
    tokenizers = {"char": (2.0, 2.9), "byte": (1.2, 5.2), "bpe": (2.8, 2.5)}
    for name, (loss, bpc) in tokenizers.items():
        fake_run(tmp_path / "tokenizers" / name, [f"data.tokenizer={name}"],
                 {"val_loss": loss, "val_bpc": bpc, "num_params": 1000},
                 {"loss/val": [loss], "loss/val_bpc": [6.0, bpc]})

    report = compare.write_report(tmp_path, compare.comparisons(20, 512))
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# Comparisons") and "## Position encodings (`positions`)" in text
    assert "## Tokenizers (`tokenizers`)" in text and "`rnn`" not in text  # only what was run
    assert "Lowest val_loss: **rope** (2.0000)" in text
    assert "Lowest val_bpc: **bpe** (2.5000)" in text  # not byte, whose per-token loss is lowest
    assert "Budget per run: 20 steps x batch 32 x block 32 tokens" in text
    rows = [line for line in text.splitlines() if re.match(r"\| (learned|sinusoidal|rope|char|byte|bpe) ", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["learned", "sinusoidal", "rope", "char", "byte", "bpe"]
    assert "210,761" in rows[0] and "2.1000" in rows[0] and "2.500" in rows[5]
    assert "`trainer.max_steps=20`" in text  # settings shared by the variants
    for name in ("positions", "tokenizers"):
        assert f"![{name} curves]({name}/curves.png)" in text
        assert (tmp_path / name / "curves.png").stat().st_size > 10_000

    assert compare.scalar_curve(tmp_path / "tokenizers" / "bpe", "loss/val_bpc") == ([10, 20], [6.0, 2.5])
    assert compare.scalar_curve(tmp_path / "tokenizers" / "bpe", "val/missing") == ([], [])


def test_finished_runs_are_reused_and_other_settings_refused(tmp_path):
    run = tmp_path / "positions" / "rope"
    fake_run(run, ["model.pos_encoding=rope", "trainer.max_steps=20"], {"val_loss": 2.0}, {})
    assert compare.finished(run, ["model.pos_encoding=rope", "trainer.max_steps=20"])
    assert not compare.finished(tmp_path / "positions" / "learned", [])
    (tmp_path / "positions" / "sinusoidal").mkdir()
    with pytest.raises(TinyLMError, match="is not a run folder"):
        compare.finished(tmp_path / "positions" / "sinusoidal", [])
    with pytest.raises(TinyLMError, match=r"holds a run with other settings .*--rerun"):
        compare.finished(run, ["model.pos_encoding=rope", "trainer.max_steps=500"])


def test_the_reference_run_is_shared_between_comparisons(tmp_path):
    learned = tmp_path / "positions" / "learned"
    overrides = ["model.pos_encoding=learned", "trainer.max_steps=20"]
    fake_run(learned, overrides, {"val_loss": 2.0}, {"loss/val": [2.5, 2.0]})
    OmegaConf.save(OmegaConf.create(compare.training_config(overrides)), learned / ".hydra" / "config.yaml")
    # the tokenizer comparison's reference: the same config, spelled differently
    char = ["data.tokenizer=char", "trainer.max_steps=20"]
    assert compare.same_run_elsewhere(tmp_path, compare.training_config(char)) == learned
    assert compare.same_run_elsewhere(tmp_path, compare.training_config(["data.tokenizer=byte",
                                                                         "trainer.max_steps=20"])) is None
    assert compare.same_run_elsewhere(tmp_path, compare.training_config(["trainer.max_steps=30"])) is None
    compare.copy_run(learned, tmp_path / "tokenizers" / "char", char)
    assert compare.finished(tmp_path / "tokenizers" / "char", char)  # reused as its own from now on
    assert compare.scalar_curve(tmp_path / "tokenizers" / "char", "loss/val") == ([10, 20], [2.5, 2.0])


def test_max_chars_trains_on_the_first_characters(tmp_path):
    source = tmp_path / "book.txt"
    source.write_text("红楼梦" * 100, encoding="utf-8")
    override = compare.data_override(str(source), 7, tmp_path / "out")
    head = Path(override[0].removeprefix("data.path="))
    assert head.read_text(encoding="utf-8") == "红楼梦红楼梦红" and head.parent == tmp_path / "out"
    assert compare.data_override(str(source), None, tmp_path) == [f"data.path={source}"]
    with pytest.raises(TinyLMError, match="no such file"):
        compare.data_override(str(tmp_path / "missing.txt"), None, tmp_path)


@pytest.mark.parametrize(("args", "message"), [
    (["positions", "--steps", "0"], "--steps, --seeds and --max-chars must be positive integers"),
    (["tricks", "--seeds", "0"], "--steps, --seeds and --max-chars must be positive integers"),
    (["rnn", "--data", "MISSING"], "no such file"),
    (["schedules", "--max-chars", "5"], "--max-chars needs --data"),
    (["positions", "model.n_emb=16"], "the train.py overrides do not fit the config: model.n_emb is unknown: did you "
                                      "mean model.n_embd?"),
])
def test_bad_arguments_are_one_error_line(tmp_path, capsys, args, message):
    args = [a.replace("MISSING", str(tmp_path / "missing.txt")) for a in args]
    assert compare.main([*args, "--out", str(tmp_path / "out")]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [[], ["--steps", "5"]])
def test_no_comparison_lists_them_and_ends_with_a_usage_line(capsys, args):
    """It said "the following arguments are required: which, overrides"; overrides are optional."""
    with pytest.raises(SystemExit) as info:
        compare.main(args)
    assert info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "choose a comparison:"
    assert [line.split()[0] for line in lines[1:-1]] == [*compare.comparisons(1, 1), "all"]
    assert lines[1] == "  positions   Position encodings: learned | sinusoidal | rope"
    assert lines[-2] == "  all         the four text comparisons: positions | tokenizers | rnn | schedules"
    assert lines[-1].startswith("usage: python -m tinylm.compare COMPARISON [options]")
    assert "overrides" not in " ".join(lines[:-1]) and "required" not in " ".join(lines)


def run_compare(capsys, *args: str) -> tuple[int, str, str]:
    """``python -m tinylm.compare ARGS`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = compare.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def first_variant_in_its_own_process(monkeypatch) -> list[Path]:
    """The runner's ``train``: the first variant it trains in a train.py process as it starts them, every
    other one as the same command in this process (conftest.train_py: no new Python, torch and Lightning
    for each). Returns the run folders trained, in order."""
    real, trained = runner.train, []

    def train(run_dir: Path, overrides: list[str]) -> str | None:
        trained.append(run_dir)
        if len(trained) == 1:
            return real(run_dir, overrides)
        train_py(f"hydra.run.dir={run_dir}", *overrides)  # raises with train.py's output if it fails
        return None

    monkeypatch.setattr(runner, "train", train)
    return trained


@pytest.mark.slow
def test_all_comparisons_end_to_end_on_a_tiny_budget(tmp_path, capsys, monkeypatch):
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT * 30, encoding="utf-8")
    out = tmp_path / "report"
    # settings both the GPT and the LSTM have, so every comparison can share them
    tiny = ["model.n_embd=16", "model.num_layers=1", "model.block_size=16", "data.batch_size=8",
            "data.val_batches=2", "threads=1"]
    args = ["all", "--steps", "6", "--data", str(text), "--bpe-vocab-size", "300", "--out", str(out), *tiny]
    trained = first_variant_in_its_own_process(monkeypatch)
    code, stdout, stderr = run_compare(capsys, *args)
    assert code == 0, stderr
    assert trained[0] == out / "positions" / "learned" and len(trained) == 10
    variants = {"positions": ["learned", "sinusoidal", "rope"], "tokenizers": ["char", "byte", "bpe"],
                "rnn": ["gpt", "lstm", "gru"], "schedules": ["constant_lr", "warmup_cosine", "grad_clip",
                                                          "warmup_cosine_clip"]}
    metrics = {}
    for name, names in variants.items():
        assert (out / name / "curves.png").is_file()
        for variant in names:
            metrics[variant] = json.loads((out / name / variant / "metrics.json").read_text())
            assert metrics[variant]["steps"] == 6 and 0 < metrics[variant]["val_loss"] < 7
            assert (out / name / variant / "checkpoints" / "last.ckpt").is_file()  # generate.py run_dir=... works
    # what the comparisons are about, in numbers
    assert metrics["learned"]["num_params"] - metrics["rope"]["num_params"] == 16 * 16  # the position table
    assert metrics["rope"]["num_params"] == metrics["sinusoidal"]["num_params"]
    # bits per character = loss per token / ln 2 x (validation tokens / validation characters)
    full = TINY_TEXT * 30
    val_text = full[len(full) - int(len(full) * 0.1) :]
    bpe = tokenizer_from_state(read_checkpoint(out / "tokenizers" / "bpe" / "checkpoints" / "last.ckpt")["tokenizer"])
    tokens = {"char": len(val_text), "byte": len(val_text.encode()), "bpe": len(bpe.encode(val_text))}
    assert tokens["char"] > tokens["bpe"] and tokens["byte"] > 1.5 * tokens["char"]  # a Chinese character: 3 bytes
    for variant, count in tokens.items():
        expected = metrics[variant]["val_loss"] / math.log(2) * count / len(val_text)
        assert metrics[variant]["val_bpc"] == pytest.approx(expected, rel=1e-6)
    assert metrics["gpt"]["num_params"] != metrics["lstm"]["num_params"] > metrics["gru"]["num_params"]
    assert metrics["warmup_cosine"]["val_loss"] != metrics["constant_lr"]["val_loss"]

    report = (out / "REPORT.md").read_text(encoding="utf-8")
    assert report.count("\n## ") == 4 and report.count("curves.png)") == 4
    for names in variants.values():
        for variant in names:
            assert re.search(rf"^\| {variant} +\|.*\| finished +\|$", report, re.MULTILINE), variant
    assert stdout.count(": training (") == 10  # the reference run is trained once, copied 3 times
    assert stdout.count("the same training config as positions/learned, copied") == 3
    assert metrics["char"] == metrics["gpt"] == metrics["constant_lr"] == metrics["learned"]

    # run again: everything is read, nothing trained, and the report is the same
    started = time.perf_counter()
    code, again, stderr = run_compare(capsys, *args)
    assert code == 0, stderr
    assert again.count("already run, reading it") == 13 and ": training (" not in again
    assert time.perf_counter() - started < 60
    assert (out / "REPORT.md").read_text(encoding="utf-8") == report

    # other settings into the same folder are refused, not mixed in
    code, _, refused = run_compare(capsys, "positions", "--steps", "8", "--data", str(text), "--out", str(out), *tiny)
    assert code == 1
    assert "holds a run with other settings" in refused and "Traceback" not in refused
