"""The task seam (tinylm.tasks): the data group chooses the task, the task its views, data arguments,
validation scores and checkpoints' task; the commands ask the task."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys

import pytest
import torch
from builders import ARCHITECTURES
from conftest import ROOT, TINY_TEXT, compose, run_train
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.tasks import get_task, model_class_of, refuse_derived, task_of_checkpoint, task_of_config, views_left_out
from tinylm.tasks.text.attention import AttentionMaps
from tinylm.tasks.text.probes import NextTokenProbes
from tinylm.tasks.text.samples import SampleText
from tinylm.tasks.translation.callbacks import TranslationMaps, TranslationSamples
from tinylm.training.config_checks import config_problems
from tinylm.training.fit import Run, build_datamodule, train

PAIRS = [("一", "1"), ("二", "2"), ("三", "3"), ("十", "10"), ("十一", "11"), ("十二", "12"), ("二十", "20"),
         ("三十", "30"), ("二十一", "21"), ("三十二", "32")]
TINY = ["model.n_embd=16", "model.num_heads=2", "data.batch_size=4", "data.val_batches=1", "threads=1",
        "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.enable_progress_bar=false"]
SEQ2SEQ = ["model=seq2seq", "data=pairs", "model.encoder_layers=1", "model.decoder_layers=1", "model.block_size=8"]
GPT_ON_PAIRS = ["model=gpt", "data=pairs", "model.num_layers=1", "model.block_size=8"]
TEXT_VIEWS = (SampleText, AttentionMaps, NextTokenProbes)
TRANSLATION_VIEWS = (TranslationSamples, TranslationMaps)
SKIPPED = "skipped for this run"


@pytest.fixture
def pairs_path(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def never_built(monkeypatch, classes) -> None:
    """Building one of ``classes`` fails the test: the task must leave them out before they are built."""
    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} was built")
    for cls in classes:
        monkeypatch.setattr(cls, "__init__", refuse)


def tags(run_dir) -> dict[str, set[str]]:
    events = EventAccumulator(str(run_dir), size_guidance={"images": 0, "tensors": 0, "scalars": 0})
    events.Reload()
    return {kind: set(events.Tags()[kind]) for kind in ("images", "tensors", "scalars")}


def text_tags(found: dict[str, set[str]]) -> set[str]:
    return ({t for t in found["images"] if t.startswith("maps/attention_layer") or t == "maps/causal_mask"}
            | {t for t in found["tensors"] if t.startswith("samples")}
            | {t for t in found["scalars"] if t.startswith("probe/")})


def translation_tags(found: dict[str, set[str]]) -> set[str]:
    return ({t for t in found["images"] if t.startswith(("maps/cross_attention", "maps/encoder", "maps/pair"))}
            | {t for t in found["tensors"] if t.startswith("translations")}
            | {t for t in found["scalars"] if t in ("loss/val_exact_match", "loss/val_cer")})


# --------------------------------------------------------------------------------------------
# Whole runs, in-process: the views follow from the data group alone


def test_a_seq2seq_run_on_pairs_logs_the_translation_views_and_no_text_view(tmp_path, pairs_path, monkeypatch,
                                                                            caplog):
    never_built(monkeypatch, TEXT_VIEWS)
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        metrics = train(compose(*SEQ2SEQ, *TINY, f"data.path={pairs_path}", output_dir=run))
    found = tags(run)
    assert {"maps/cross_attention_layer0", "maps/encoder_layer0"} <= found["images"]
    assert "translations/text_summary" in found["tensors"]
    assert {"loss/val_exact_match", "loss/val_cer"} <= found["scalars"] and 0 <= metrics["val_exact_match"] <= 1
    assert text_tags(found) == set()
    assert "token_embedding" in " ".join(p.name for p in run.rglob("*"))  # the shared projector
    assert SKIPPED not in caplog.text
    loaded = load_model(run / "checkpoints" / "last.ckpt")
    hparams = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert loaded.task == hparams["task"] == "translation" and "translation_pairs" not in hparams


def test_a_gpt_on_pairs_is_decoder_only_and_logs_the_translation_views(tmp_path, pairs_path, monkeypatch, caplog):
    never_built(monkeypatch, TEXT_VIEWS)
    cfg = compose(*GPT_ON_PAIRS, *TINY, f"data.path={pairs_path}", output_dir=tmp_path / "run")
    seq2seq = compose(*SEQ2SEQ, output_dir=tmp_path)
    assert build_datamodule(Run(cfg, task_of_config(cfg), model_class_of(cfg))).decoder_only  # from the model's kind
    assert not build_datamodule(Run(seq2seq, task_of_config(seq2seq), model_class_of(seq2seq))).decoder_only
    with caplog.at_level(logging.WARNING):
        train(cfg)
    found = tags(tmp_path / "run")
    assert "maps/pair_attention_layer0" in found["images"] and "translations/text_summary" in found["tensors"]
    assert {"loss/val_exact_match", "loss/val_cer"} <= found["scalars"]
    assert text_tags(found) == set() and SKIPPED not in caplog.text and "failed" not in caplog.text
    assert load_model(tmp_path / "run" / "checkpoints" / "last.ckpt").task == "translation"


def test_a_text_run_logs_the_text_views_and_no_translation_view(tmp_path, monkeypatch, caplog):
    never_built(monkeypatch, TRANSLATION_VIEWS)
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        train(compose(*TINY, "model.num_layers=1", "model.block_size=16", f"data.path={text}", "data.repeat=30",
                      output_dir=run))
    found = tags(run)
    assert {"maps/attention_layer0", "maps/causal_mask"} <= found["images"]
    assert "samples/text_summary" in found["tensors"]
    assert translation_tags(found) == set() and SKIPPED not in caplog.text
    assert load_model(run / "checkpoints" / "last.ckpt").task == "text"


# --------------------------------------------------------------------------------------------
# The registry


def test_the_data_group_names_the_task(tmp_path):
    assert task_of_config(compose(output_dir=tmp_path)).name == "text"
    assert task_of_config(compose("data=tinyshakespeare", output_dir=tmp_path)).name == "text"
    assert task_of_config(compose("model=seq2seq", "data=pairs", output_dir=tmp_path)).name == "translation"
    assert task_of_config(compose("experiment=numbers_zh", output_dir=tmp_path)).name == "translation"
    assert task_of_config(compose("data._target_=my.own.DataModule", output_dir=tmp_path)).name == "text"


def test_each_task_leaves_out_the_views_of_the_other():
    assert views_left_out(get_task("translation")) == {"sample_text", "attention_maps", "next_token_probes",
                                                       "head_scores"}
    assert views_left_out(get_task("text")) == {"translation_samples", "translation_maps"}


def test_callback_presets_keep_working(tmp_path):
    default = compose(output_dir=tmp_path).callbacks
    assert {"translation_samples", "translation_maps", "sample_text", "embedding_projector"} <= set(default)
    assert compose("callbacks=translation", output_dir=tmp_path).callbacks == default  # no longer needed
    minimal = compose("data=pairs", "model=seq2seq", "callbacks=minimal", output_dir=tmp_path).callbacks
    views = {*views_left_out(get_task("text")), *views_left_out(get_task("translation"))}
    assert not any(minimal[view] for view in views)
    assert "translation_maps" not in compose("data=pairs", "~callbacks.translation_maps", output_dir=tmp_path).callbacks


GPT, SEQ2SEQ_CLASS = ARCHITECTURES["gpt"][1], ARCHITECTURES["seq2seq"][1]


@pytest.mark.parametrize(("hparams", "model_class", "task"), [
    ({"task": "translation"}, GPT, "translation"),
    ({"task": "text"}, GPT, "text"),
    ({"translation_pairs": True}, GPT, "translation"),  # checkpoints before the task hyperparameter
    ({"translation_pairs": False}, GPT, "text"),
    ({}, GPT, "text"),  # release 0.1
    ({}, SEQ2SEQ_CLASS, "translation"),  # an encoder-decoder only ever translated
])
def test_the_task_of_a_checkpoint(hparams, model_class, task):
    assert task_of_checkpoint({"hyper_parameters": hparams}, model_class) == task


def test_a_checkpoint_of_an_unknown_task_is_one_line():
    with pytest.raises(ValueError, match="its task 'poetry' is not one of text, translation"):
        task_of_checkpoint({"hyper_parameters": {"task": "poetry"}}, GPT)


def test_importing_the_registry_imports_no_torch():
    code = "import sys, tinylm.tasks, tinylm.console; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.slow  # a process importing Lightning: about 4 s
def test_the_data_modules_import_no_decoding_code():
    """Reading and batching the data imports nothing that decodes (the sampling and translation loops)."""
    code = ("import sys, tinylm.tasks.text.data, tinylm.tasks.translation.data; "
            "print(sorted(m for m in sys.modules if m.startswith('tinylm')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    imported = proc.stdout.strip()
    assert "tinylm.tasks.translation.batches" in imported, proc.stderr
    for decoding in ("tinylm.tasks.translation.decoding", "tinylm.generation.sampling", "tinylm.console"):
        assert f"'{decoding}'" not in imported


TASK_FLAGS = {"translates", "translation_pairs", "decoder_only", "for_translation"}


def test_no_task_flag_is_read_outside_the_tasks_and_the_models():
    """Only tinylm/tasks/ and tinylm/models/ ask what a run translates; the rest asks the task or the model's
    kind (``tinylm.tasks.is_encoder_decoder``). An attribute or a key of these names anywhere else is a read."""
    files = [*ROOT.glob("*.py"), *(ROOT / "bench").rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py"),
             *(ROOT / "tinylm").rglob("*.py")]
    reads = []
    for path in files:
        if path.is_relative_to(ROOT / "tinylm" / "tasks") or path.is_relative_to(ROOT / "tinylm" / "models"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "value", None)
            if isinstance(node, ast.Attribute | ast.Constant) and name in TASK_FLAGS:
                reads.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert len(files) > 100 and not reads


# --------------------------------------------------------------------------------------------
# decoder_only follows from the model


DECODER_ONLY = ("data.decoder_only is not a setting: train.py sets it from the model's kind (a decoder-only "
                "model.arch reads each pair as one sequence source + BEGIN + target, model=seq2seq reads the two "
                "sides apart); remove it")


@pytest.mark.parametrize("override", ["data.decoder_only=true", "+data.decoder_only=false"])
def test_data_decoder_only_on_the_command_line_is_one_error(override):
    with pytest.raises(TinyLMError) as info:
        refuse_derived(["model=gpt", "data=pairs", override])
    assert str(info.value) == DECODER_ONLY
    refuse_derived(["model=gpt", "data=pairs", "data.demo_pairs=50"])  # the rest passes


def test_an_added_decoder_only_key_is_refused_by_the_config_check(tmp_path):
    cfg = compose("model=gpt", "data=pairs", "+data.decoder_only=true", output_dir=tmp_path)
    assert config_problems(cfg) == [DECODER_ONLY]


def test_train_py_refuses_data_decoder_only_in_one_line(tmp_path):
    proc = run_train(tmp_path / "run", "model=gpt", "data=pairs", "data.decoder_only=true", check=False)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [f"error: {DECODER_ONLY}"]
    assert not (tmp_path / "run").exists()
