"""evaluate.py: every position scored once, training's validation split, one JSON line, one-line errors."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from builders import build_tokenizer
from conftest import ROOT, TINY_TEXT, compose_config, entry_point
from torch.nn import functional as F

from tinylm.cli import quote_values
from tinylm.errors import TinyLMError
from tinylm.models import build_model
from tinylm.tasks.text.data import TextDataModule
from tinylm.tasks.text.evaluation import window_plan
from tinylm.tasks.translation.data import PairDataModule

evaluate_cli = entry_point("evaluate.py")

BLOCK = 8
TEXT = TINY_TEXT * 3  # 159 characters
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def save(path: Path, model, tokenizer, **extra) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "model_config": asdict(model.config), "tokenizer": tokenizer.state(), "global_step": 7, **extra}, path)
    return path


def tiny_model(vocab_size: int, arch: str = "gpt", block_size: int = BLOCK):
    torch.manual_seed(0)  # a fixed random model: its logits differ per position and context
    sizes = {"gpt": {"n_embd": 16, "num_heads": 2, "num_layers": 1}, "lstm": {"n_embd": 8, "hidden_size": 16},
             "seq2seq": {"n_embd": 16, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1}}[arch]
    return build_model({"arch": arch, "vocab_size": vocab_size, "block_size": block_size, "dropout": 0.0,
                        **sizes}).eval()


@pytest.fixture
def text_ckpt(tmp_path):
    """A random GPT over TEXT's characters, and TEXT in tmp_path/text.txt."""
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    tokenizer = build_tokenizer("char", TEXT)
    model = tiny_model(tokenizer.vocab_size)
    return save(tmp_path / "run" / "checkpoints" / "last.ckpt", model, tokenizer), model, tokenizer


def config(*overrides: str):
    return compose_config("evaluate", *quote_values(list(overrides), evaluate_cli.PATH_KEYS))


def evaluate(capsys, *overrides: str) -> tuple[str, dict]:
    """(the human line, the JSON object of the last line) of an in-process run."""
    evaluate_cli.run(config(*overrides))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    return lines[0], json.loads(lines[-1])


def longest_context_loss(model, ids: torch.Tensor) -> float:
    """The mean loss of every position p >= 1 read with its last min(p, block_size) ids, one forward pass
    each: what stride=1 must give for a causal model."""
    losses = []
    with torch.no_grad():
        for p in range(1, len(ids)):
            context = ids[max(0, p - BLOCK) : p].long()[None]
            losses.append(F.cross_entropy(model(context)[0][0, -1], ids[p].long()).item())
    return sum(losses) / len(losses)


@pytest.mark.parametrize("kind", ["char", "byte"])
def test_uniform_model_scores_ln_vocab_per_token(kind, tmp_path, capsys):
    """All weights zero: logits all 0, so every position costs exactly ln V nats; bpc is bits per
    character as training's loss/val_bpc: loss / ln 2 for characters, x tokens / characters for bytes."""
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    tokenizer = build_tokenizer(kind, TEXT)
    model = tiny_model(tokenizer.vocab_size)
    for p in model.parameters():
        p.data.zero_()
    ckpt = save(tmp_path / "zero.ckpt", model, tokenizer)
    _, result = evaluate(capsys, f"ckpt_path={ckpt}", f"data.path={tmp_path / 'text.txt'}", "split=all")
    tokens = len(tokenizer.encode(TEXT))  # characters, or UTF-8 bytes (3 per CJK character)
    assert result["loss"] == pytest.approx(math.log(tokenizer.vocab_size), rel=1e-6)
    assert result["bpc"] == pytest.approx(result["loss"] / math.log(2) * tokens / len(TEXT), rel=1e-12)
    assert result["tokens"] == tokens - 1


def test_stride_one_equals_direct_longest_context_loss(text_ckpt, tmp_path, capsys):
    ckpt, model, tokenizer = text_ckpt
    _, result = evaluate(capsys, f"ckpt_path={ckpt}", f"data.path={tmp_path / 'text.txt'}", "split=all", "stride=1",
                         "batch_size=5")
    ids = torch.tensor(tokenizer.encode(TEXT))
    assert result["loss"] == pytest.approx(longest_context_loss(model, ids), rel=1e-5)
    assert result["tokens"] == len(ids) - 1


@pytest.mark.parametrize("n_ids", [BLOCK + 1, BLOCK + 2, 20, 33, 100])
@pytest.mark.parametrize("stride", [1, 3, BLOCK // 2, BLOCK - 1, BLOCK])
def test_every_position_is_scored_once_with_the_documented_context(n_ids, stride):
    scored = []  # (position, tokens of context)
    for start, first in window_plan(n_ids, BLOCK, stride):
        assert 0 <= start <= n_ids - 1 - BLOCK and 0 <= first < BLOCK
        scored += [(start + j + 1, j + 1) for j in range(first, BLOCK)]
    assert sorted(p for p, _ in scored) == list(range(1, n_ids))  # each of 1 .. N-1 exactly once
    for position, context in scored:
        if position > BLOCK:  # after the first window: at least block_size - stride + 1 tokens back
            assert BLOCK - stride + 1 <= context <= BLOCK


@pytest.mark.parametrize("arch", ["gpt", "lstm"])
def test_split_all_counts_every_position(arch, tmp_path, capsys):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    tokenizer = build_tokenizer("char", TEXT)
    ckpt = save(tmp_path / f"{arch}.ckpt", tiny_model(tokenizer.vocab_size, arch), tokenizer)
    for stride in (1, 3, BLOCK):
        _, result = evaluate(capsys, f"ckpt_path={ckpt}", f"data.path={tmp_path / 'text.txt'}", "split=all",
                             f"stride={stride}")
        assert result["tokens"] == len(TEXT) - 1 and result["stride"] == stride


def test_val_split_is_trainings_from_the_run_config(text_ckpt, tmp_path, capsys, monkeypatch):
    """No data keys: the run folder's .hydra/config.yaml gives the text (relative to where training was
    launched), val_fraction and repeat; the scored ids are the data module's val_ids."""
    ckpt, model, tokenizer = text_ckpt
    hydra_dir = tmp_path / "run" / ".hydra"
    hydra_dir.mkdir()
    (hydra_dir / "config.yaml").write_text("seed: 5\ndata:\n  _target_: tinylm.tasks.text.data.TextDataModule\n"
                                           "  path: text.txt\n  val_fraction: 0.3\n  repeat: 2\n", encoding="utf-8")
    (hydra_dir / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    cwd: {tmp_path}\n", encoding="utf-8")
    monkeypatch.chdir(ROOT)  # not where training was launched
    line, result = evaluate(capsys, f"run_dir={tmp_path / 'run'}", "stride=1")
    datamodule = TextDataModule(str(tmp_path / "text.txt"), block_size=BLOCK, val_fraction=0.3, repeat=2)
    datamodule.prepare()
    assert result["tokens"] == len(datamodule.val_ids) - 1
    assert result["loss"] == pytest.approx(longest_context_loss(model, datamodule.val_ids), rel=1e-5)
    assert result["split"] == "val" and result["checkpoint"] == str(ckpt)
    assert line.startswith(f"evaluated {ckpt} (run_dir's last checkpoint: it has no best-*.ckpt; step 7, ")
    assert "validation split" in line
    # a command-line key wins over the run's
    _, other = evaluate(capsys, f"run_dir={tmp_path / 'run'}", "data.val_fraction=0.5")
    assert other["tokens"] == int(len(TEXT) * 2 * 0.5) - 1


def test_last_line_is_json_with_the_keys(text_ckpt, tmp_path, capsys):
    ckpt, _, _ = text_ckpt
    _, result = evaluate(capsys, f"ckpt_path={ckpt}", f"data.path={tmp_path / 'text.txt'}", "data.val_fraction=0.5")
    assert {"loss", "bpc", "tokens", "split", "stride", "checkpoint", "step"} <= set(result)
    assert result["stride"] == BLOCK // 2 and result["tokens"] == int(len(TEXT) * 0.5) - 1


@pytest.mark.parametrize("arch", ["gpt", "seq2seq"])
def test_translation_checkpoint_scores_every_validation_pair(arch, tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{n}\t{str(n)[::-1]}\n" for n in range(100, 140)), encoding="utf-8")
    datamodule = PairDataModule(str(pairs), block_size=BLOCK, decoder_only=arch == "gpt", val_fraction=0.25)
    datamodule.prepare()
    model = tiny_model(datamodule.tokenizer.vocab_size, arch)
    ckpt = save(tmp_path / "pairs.ckpt", model, datamodule.tokenizer, hyper_parameters={"translation_pairs": True})
    _, result = evaluate(capsys, f"ckpt_path={ckpt}", f"data.path={pairs}", "data.val_fraction=0.25", "batch_size=3")
    examples = datamodule.val_examples
    assert result["pairs"] == len(examples) == 10
    assert result["tokens"] == sum(len(t) + 1 for _, t in examples)  # the target and its END
    with torch.no_grad():  # one pair at a time, weighted by its scored symbols
        direct = sum(model.loss(datamodule.collate([e])).item() * (len(e[1]) + 1) for e in examples)
    assert result["loss"] == pytest.approx(direct / result["tokens"], rel=1e-5)
    assert 0 <= result["exact_match"] <= 1 and result["cer"] >= 0


@pytest.mark.parametrize("overrides, message", [
    (["data.path=missing.txt"], "data file not found"),
    (["split=test"], "split='test': choose val"),
    (["stride=0"], "stride=0 must be an integer from 1"),
    (["stride=9"], "stride=9 is larger than the model's block_size=8"),
    (["batch_size=0"], "batch_size=0 must be an integer >= 1"),
    (["run_dir=."], "both ckpt_path and run_dir are set"),
    (["data.path=foreign.txt", "split=all"],
     "has 2 character(s) outside the checkpoint's vocabulary: 'x' 'z'; checkpoint "),
    (["data.path=short.txt", "split=all"], "has 6 tokens, fewer than one window of block_size+1=9"),
    (["data.val_fraction=0"], "the validation split (the last data.val_fraction=0) of"),
])
def test_bad_input_is_one_error_line(overrides, message, text_ckpt, tmp_path, monkeypatch):
    ckpt, _, _ = text_ckpt
    monkeypatch.chdir(tmp_path)
    (tmp_path / "foreign.txt").write_text("Attention xz" * 5, encoding="utf-8")
    (tmp_path / "short.txt").write_text(TEXT[:6], encoding="utf-8")
    with pytest.raises(TinyLMError) as error:
        evaluate_cli.run(config(f"ckpt_path={ckpt}", "data.path=text.txt", *overrides))
    assert message in str(error.value) and "\n" not in str(error.value)
