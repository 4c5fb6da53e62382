"""The inspection callbacks: what they log to TensorBoard, that they survive failures, configs."""

import logging
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from conftest import TINY_MODEL, TINY_TEXT, compose_config, train_in_process
from conftest import compose as compose_train
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing import event_multiplexer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tinylm.callbacks import EmbeddingProjector, training_text_opening
from tinylm.errors import TinyLMError
from tinylm.generation.sampling import generate
from tinylm.models import build_model
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.plots import figures as plotting
from tinylm.runs.job import main as train_main
from tinylm.tasks.data_file import default_corpus_path
from tinylm.tasks.text.attention import AttentionMaps
from tinylm.tasks.text.data import TextDataModule
from tinylm.tasks.text.probes import NextTokenProbes
from tinylm.tasks.text.samples import SampleText, samples_markdown
from tinylm.tokenizer import CharTokenizer
from tinylm.training.module import LitLanguageModel, adamw


def events(log_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0,
                                                                "tensors": 0})
    return accumulator.Reload()


def fit(tmp_path: Path, text_file: Path, callbacks: list, steps: int, lr: float = 1e-3):
    """Train a tiny model through the Python API with a TensorBoard logger in tmp_path."""
    L.seed_everything(0, verbose=False)
    data = TextDataModule(path=text_file, block_size=16, batch_size=8, val_batches=1, repeat=30)
    data.prepare()
    model = {"vocab_size": data.tokenizer.vocab_size, "block_size": 16, "n_embd": 16,
             "num_heads": 2, "num_layers": 2, "dropout": 0.0}
    module = LitLanguageModel(net=build_model(model), tokenizer=data.tokenizer.state(), optimizer=partial(adamw, lr=lr))
    trainer = L.Trainer(
        accelerator="cpu", max_steps=steps, val_check_interval=steps,
        check_val_every_n_epoch=None, num_sanity_val_steps=0, log_every_n_steps=1,
        logger=TensorBoardLogger(tmp_path, name="tb", version=""), callbacks=callbacks,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(module, datamodule=data)
    return trainer, module, data


def test_train_py_logs_samples_attention_probes_and_embeddings(tmp_path):
    """Acceptance: all callbacks on, a few steps of the training job (in-process), then read the event files back."""
    run = tmp_path / "run"
    every = "10"
    train_in_process(
        run, *TINY_MODEL, "model.num_layers=2", "trainer.max_steps=20",
        "trainer.val_check_interval=10", "trainer.log_every_n_steps=5",
        f"callbacks.sample_text.every_n_steps={every}", "callbacks.sample_text.max_new_tokens=20",
        f"callbacks.attention_maps.every_n_steps={every}",
        f"callbacks.next_token_probes.every_n_steps={every}",
    )  # the default corpus: it has the default prompts and probe characters
    acc = events(run)
    scalars = acc.Tags()["scalars"]
    assert {"loss/train", "loss/val"} <= set(scalars)
    assert "epoch" not in scalars  # the training stream has no epochs
    for probe in ("probe/Transforme→r", "probe/注意→力"):
        values = acc.Scalars(probe)
        assert [e.step for e in values] == [10, 20]
        assert all(0 < e.value < 1 for e in values)

    images = acc.Tags()["images"]
    assert sorted(images) == ["maps/attention_layer0", "maps/attention_layer1", "maps/causal_mask",
                              "maps/heads_entropy", "maps/heads_induction", "maps/heads_previous_token"]
    for layer in ("maps/attention_layer0", "maps/attention_layer1"):  # one image per layer per inspection
        shots = acc.Images(layer)
        assert [e.step for e in shots] == [10, 20]
        assert shots[0].height * 1.4 >= shots[0].width > 300  # heads in a near-square grid, fit for a card
    assert [e.step for e in acc.Images("maps/causal_mask")] == [0]  # once, at the start

    samples = acc.Tensors("samples/text_summary")
    assert [e.step for e in samples] == [10, 20]
    text = samples[-1].tensor_proto.string_val[0].decode()
    assert "**Prompt 1:**\n\n    自注意力" in text  # the opening of the corpus' first line
    continuation = text.split("**Continuation 1** (generated):\n\n")[1]
    assert len(continuation.replace("    ", "").replace("\n", "")) > 0

    # TensorBoard sorts tags by name (plain character order here: no group starts with a digit) and
    # opens the first two groups of its Time Series tab: the loss curves and the learning rate
    tags = [tag for kind in ("scalars", "images", "tensors") for tag in acc.Tags()[kind]]
    groups = sorted({tag.split("/")[0] for tag in tags})
    assert groups == ["loss", "lr-AdamW", "maps", "probe", "probe_heads_layer0", "probe_heads_layer1", "samples",
                      "summary", "tinylm"]  # tinylm/probe_attention: the tinylm tab's raw weights, no Time Series card
    assert sorted(t for t in tags if t.startswith("loss/")) == ["loss/train", "loss/val", "loss/val_bpc"]
    # the HParams tab's session, written after training: it must reach the disk before the process ends
    hparams = event_multiplexer.EventMultiplexer()
    hparams.AddRunsFromDirectory(str(run))
    hparams.Reload()
    assert "_hparams_/session_end_info" in hparams.PluginRunToTagToContent("hparams")["."]

    (metadata,) = run.glob("*/token_embedding/metadata.tsv")
    labels = metadata.read_text(encoding="utf-8").splitlines()
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    itos = ckpt["tokenizer"]["itos"]
    assert len(labels) == len(itos)  # one row per token; newline and space are visible labels
    assert labels[itos.index("\n")] == "↵" and labels[itos.index(" ")] == "␣"
    assert (run / "projector_config.pbtxt").exists()


def test_a_failing_plot_is_a_warning_and_training_continues(tmp_path, tiny_text_file,
                                                            monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("plotting exploded")

    monkeypatch.setattr(plotting, "attention_figure", broken)
    monkeypatch.setattr(plotting, "causal_mask_figure", broken)
    probes = NextTokenProbes(every_n_steps=2, probes=[["注意", "力"]])
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        trainer, _, _ = fit(tmp_path, tiny_text_file, [AttentionMaps(every_n_steps=2), probes],
                            steps=6)
    assert trainer.global_step == 6  # trained to the end
    failures = [r.getMessage() for r in caplog.records if "plotting exploded" in r.getMessage()]
    # the mask at the start, then steps 2, 4 and 6 (the end of training is step 6 again)
    assert len(failures) == 4
    assert failures[0].startswith("AttentionMaps (causal mask) failed at step 0")
    assert failures[1].startswith("AttentionMaps failed at step 2")
    assert all(f.endswith("(RuntimeError: plotting exploded); training continues")
               for f in failures)
    acc = events(tmp_path / "tb")
    assert [e.step for e in acc.Scalars("probe/注意→力")] == [2, 4, 6]  # other callbacks ran
    assert acc.Tags()["images"] == []


def test_probe_scalar_is_the_models_probability_and_rises_as_the_rule_is_learned(
        tmp_path, tiny_text_file):
    probes = NextTokenProbes(every_n_steps=10, probes=[["自注意", "力"], ["all you ne", "e"]])
    _, module, data = fit(tmp_path, tiny_text_file, [probes], steps=30, lr=3e-2)
    acc = events(tmp_path / "tb")
    learned = [e.value for e in acc.Scalars("probe/自注意→力")]
    assert learned[0] < 0.1 < 0.5 < learned[-1]  # from near chance (1/34) towards certainty
    assert learned == sorted(learned)
    model = module.model.eval()
    for name, context, expected in [("probe/自注意→力", "自注意", "力"),
                                    ("probe/all␣you␣ne→e", "all you ne", "e")]:
        logged = acc.Scalars(name)
        assert [e.step for e in logged] == [10, 20, 30]
        with torch.no_grad():
            logits, _ = model(torch.tensor([data.tokenizer.encode(context)]))
        direct = logits[0, -1].softmax(-1)[data.tokenizer.encode(expected)[0]].item()
        assert logged[-1].value == pytest.approx(direct, rel=1e-5)


def test_probes_skip_unknown_characters_with_a_warning_and_name_whitespace(caplog):
    tokenizer = CharTokenizer.from_text("ab c\n注意力")
    probes = NextTokenProbes(probes=[["b c", "\n"], ["注意", "力"], ["xyz", "a"]])
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        encoded = probes.encode(tokenizer, block_size=8)
    assert list(encoded) == ["probe/b␣c→↵", "probe/注意→力"]
    assert encoded["probe/注意→力"] == (tokenizer.encode("注意力"), 2)
    assert "'xyz' -> 'a' skipped" in caplog.text and "'x'" in caplog.text
    long = NextTokenProbes(probes=[["abcabcab c", "a"]]).encode(tokenizer, block_size=4)
    assert long["probe/abcabcab␣c→a"] == (tokenizer.encode("b ca"), 3)  # oldest context cropped


def test_sample_text_is_reproducible_and_uses_the_generation_function():
    tokenizer = CharTokenizer.from_text("自注意力可以让序列。\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_embd=16,
                          num_heads=2, num_layers=1))
    callback = SampleText(max_new_tokens=12, temperature=1.0, seed=7)
    prompt_ids = [tokenizer.encode("自注"), tokenizer.encode("序列")]
    first = callback.samples(model, tokenizer, prompt_ids)
    assert first == callback.samples(model, tokenizer, prompt_ids)  # fixed seed
    assert [p for p, _ in first] == ["自注", "序列"]
    assert all(len(c) == 12 for _, c in first)
    expected = generate(model, torch.tensor([prompt_ids[1]]), 12, temperature=1.0,
                        generator=torch.Generator().manual_seed(7))
    assert first[1][1] == tokenizer.decode(expected[0, 2:].tolist())
    markdown = samples_markdown(first, step=5, seed=7, sampling={"temperature": 1.0})
    assert markdown.startswith("Step 5, temperature=1.0, seed 7.")
    assert "**Prompt 2:**\n\n    序列\n\n**Continuation 2** (generated):\n\n    " in markdown


def test_default_prompt_is_the_start_of_the_first_line_and_unknowns_are_skipped(caplog):
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    trainer = SimpleNamespace(datamodule=SimpleNamespace(
        train_ids=torch.tensor(tokenizer.encode("\n\n  " + TINY_TEXT))))
    assert training_text_opening(trainer, tokenizer, 4) == "自注意力"
    maps = AttentionMaps(text="自注Z意力")
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        assert maps.probe_ids(trainer, tokenizer, 16) == tokenizer.encode("自注意力")
        assert "skipping 1 character(s) not in the vocabulary: 'Z'" in caplog.text
        # nothing usable left: fall back to the training text's opening, cut to block_size
        assert AttentionMaps(text="XYZ").probe_ids(trainer, tokenizer, 5) == tokenizer.encode(
            "自注意力可")


def callback_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "tinylm.callbacks" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("text", ["   ", "XYZ"])
def test_a_blank_or_unknown_probe_is_replaced_by_the_opening_with_one_warning(tmp_path, tiny_text_file,
                                                                             caplog, text):
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        fit(tmp_path, tiny_text_file, [AttentionMaps(every_n_steps=2, text=text)], steps=6)
    assert callback_warnings(caplog) == [
        f"AttentionMaps: the probe text {text!r} has fewer than 2 non-blank known characters: drawing "
        "the training text's opening '自注意力可以让序列中的每个位置看' instead; set "
        "callbacks.attention_maps.text to a phrase of the training text"]
    acc = events(tmp_path / "tb")
    assert [e.step for e in acc.Images("maps/attention_layer1")] == [2, 4, 6]
    assert [e.step for e in acc.Images("maps/causal_mask")] == [0]


@pytest.mark.parametrize("text", ["  \n ", "XYZ"])
def test_without_probe_or_training_text_the_maps_are_off_after_one_warning(tmp_path, caplog, text):
    """No datamodule to take an opening from (e.g. Trainer.fit with bare dataloaders): decided
    once when training starts, then every call is skipped quietly."""
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    model = {"vocab_size": tokenizer.vocab_size, "block_size": 16, "n_embd": 16, "num_heads": 2,
             "num_layers": 1}
    module = LitLanguageModel(net=build_model(model), tokenizer=tokenizer.state())
    logger = TensorBoardLogger(tmp_path, name="tb", version="")
    trainer = SimpleNamespace(is_global_zero=True, global_step=0, loggers=[logger], datamodule=None)
    maps = AttentionMaps(every_n_steps=1, text=text)
    with caplog.at_level(logging.WARNING, logger="tinylm.callbacks"):
        maps.on_train_start(trainer, module)
        for step in (1, 2, 3):
            trainer.global_step = step
            maps.on_train_batch_end(trainer, module, None, None, step - 1)
        maps.on_train_end(trainer, module)
    assert callback_warnings(caplog) == [
        f"AttentionMaps: the probe text {text!r} has fewer than 2 non-blank known characters and there "
        "is no training text to take one from: no attention maps this run; set "
        "callbacks.attention_maps.text to a phrase of the training text"]
    assert maps.calls == 4  # the start and steps 1-3 ran, and skipped quietly
    logger.experiment.flush()
    assert events(tmp_path / "tb").Tags()["images"] == []


@pytest.mark.parametrize("make", [
    lambda: AttentionMaps(every_n_steps=0),
    lambda: SampleText(every_n_steps=1.5),
    lambda: SampleText(prompts="abc"),
    lambda: SampleText(temperature=-1),
    lambda: SampleText(prompt_chars=0),
    lambda: NextTokenProbes(probes=[["a"]]),
    lambda: EmbeddingProjector(every_n_steps=True),
])
def test_bad_options_are_one_line_errors(make):
    with pytest.raises(TinyLMError) as error:
        make()
    assert "\n" not in str(error.value)


def test_bad_interval_on_the_command_line_is_one_error_line(tmp_path):
    with pytest.raises(SystemExit) as info:  # what train.py prints and exits with
        train_main(compose_train(*TINY_MODEL, "callbacks.attention_maps.every_n_steps=0", "logger=none",
                                 output_dir=tmp_path / "run"))
    assert str(info.value) == (
        "error: AttentionMaps.every_n_steps=0 must be a positive integer, "
        "or null to run only when training ends")


def test_callback_config_groups():
    default = compose_config("train").callbacks
    minimal = compose_config("train", "callbacks=minimal").callbacks
    one_off = compose_config("train", "~callbacks.attention_maps").callbacks
    targets = {k: v["_target_"] for k, v in default.items()}
    assert targets["attention_maps"] == "tinylm.tasks.text.attention.AttentionMaps"
    assert {"sample_text", "next_token_probes", "embedding_projector"} <= set(targets)
    assert [k for k, v in minimal.items() if v] == [
        "model_checkpoint", "last_checkpoint", "early_stopping", "learning_rate_monitor", "progress_bar"
    ]
    assert default.early_stopping.patience is None and minimal.early_stopping.patience is None  # off by default
    assert "attention_maps" not in one_off and "sample_text" in one_off


def test_debug_shapes_prints_every_hook_point_of_one_batch(tmp_path):
    run = tmp_path / "run"
    output = train_in_process(run, *TINY_MODEL, "model.num_layers=2", "debug=shapes")
    lines = output.splitlines()

    def row(stage: str) -> str:
        (found,) = [line for line in lines if line.startswith(stage + "  ")]
        return found

    B, T, C, h, hs = 8, 16, 16, 2, 8
    V = len(set(default_corpus_path().read_text(encoding="utf-8")))
    assert f"({B}, {T})" in row("ids") and "(B, T)" in row("ids")
    assert f"({B}, {T}, {C})" in row("hook_embed") and "token embedding" in row("hook_embed")
    assert f"({B}, {T}, {C})" in row("hook_pos_embed")
    for layer in (0, 1):  # the hook points' names: what run_with_cache's cache and run_with_hooks take
        assert f"({B}, {T}, {h}, {hs})" in row(f"blocks.{layer}.attn.hook_q") and "queries" in row(
            f"blocks.{layer}.attn.hook_q")
        assert f"({B}, {h}, {T}, {T})" in row(f"blocks.{layer}.attn.hook_attn_scores")
        assert "(B, h, T, T)" in row(f"blocks.{layer}.attn.hook_pattern")
        assert f"({B}, {T}, {4 * C})" in row(f"blocks.{layer}.mlp.hook_post")
    assert f"({B}, {T}, {C})" in row("ln_final.hook_normalized")
    assert f"({B}, {T}, {V})" in row("logits")
    assert f"({B * T}, {V})" in row("loss input: logits")
    assert f"B (sequences per batch) = {B}" in output
    assert not list(run.glob("events.out.tfevents.*")) and not (run / "checkpoints").exists()
