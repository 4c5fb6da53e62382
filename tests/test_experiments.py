"""Experiment presets (conf/experiment/) and debug presets (conf/debug/): each composes to the
settings it documents and really trains; runs stay tiny by overriding the model size on top."""

import json
import math

import pytest
import torch
from conftest import ROOT, TINY_MODEL, TINY_TEXT, compose
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tinylm.runs.job import main as train_main
from tinylm.training.module import warmup_cosine

EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))

# What each preset promises (dotted key -> value), checked on the composed config.
PROMISES = {
    "reference": {"data.tokenizer": "char", "model.n_embd": 64, "model.num_heads": 4, "model.num_layers": 4,
                  "model.block_size": 32, "model.dropout": 0.1, "optim.lr": 1e-3, "trainer.max_steps": 1000},
    "tinyllm_byte": {"data.tokenizer": "byte", "model.pos_encoding": "sinusoidal", "model.num_layers": 2,
                     "model.num_heads": 4, "model.n_embd": 64, "model.dropout": 0.0},
    "shakespeare_char": {"data.path": str(ROOT / ".cache" / "tinyshakespeare.txt"), "model.block_size": 64,
                         "data.batch_size": 12, "model.num_layers": 4, "model.num_heads": 4, "model.n_embd": 128,
                         "model.dropout": 0.0, "trainer.max_steps": 2000, "optim.lr": 1e-3,
                         "optim.warmup_steps": 100, "optim.decay_steps": 2000, "optim.min_lr_ratio": 0.1,
                         "trainer.gradient_clip_val": 1.0, "trainer.val_check_interval": 250},
    "shakespeare_speedrun": {"data.path": str(ROOT / ".cache" / "tinyshakespeare.txt"), "model.block_size": 64,
                             "model.n_embd": 128, "model.dropout": 0.0, "optim.decay": "linear",
                             "optim._target_": "tinylm.training.muon.muon", "trainer.max_steps": 460,
                             "model.num_layers": 3, "trainer.gradient_clip_val": 1.0, "callbacks.sample_text": None},
    "induction_heads": {"model.num_layers": 2, "model.num_heads": 2, "model.pos_encoding": "rope", "model.dropout": 0.0,
                        "data.batch_size": 64, "trainer.max_steps": 600,
                        "callbacks.head_scores._target_": "tinylm.analysis.callback.HeadScores",
                        "callbacks.head_scores.induction_length": 8},
    "chinese_large": {"data.path": str(ROOT / "data" / "chinese_large.txt"), "data.tokenizer": "char",
                      "model.block_size": 128, "model.n_embd": 256, "model.num_heads": 8, "model.num_layers": 6},
    "numbers_zh": {"model.arch": "seq2seq", "data._target_": "tinylm.tasks.translation.data.PairDataModule",
                   "data.path": None,
                   "data.demo": "numbers_zh", "model.block_size": 8, "model.encoder_layers": 2,
                   "model.decoder_layers": 2, "trainer.max_steps": 1500,
                   "callbacks.translation_maps._target_": "tinylm.tasks.translation.callbacks.TranslationMaps"},
}
# the presets that train on a text file; numbers_zh trains on generated pairs (tests/test_seq2seq.py)
TEXT_EXPERIMENTS = [name for name in EXPERIMENTS if name != "numbers_zh"]

# One torch thread: a tiny model gains nothing from more, and on a busy machine extra threads spin.
TINY = [*TINY_MODEL, "threads=1"]
# a few steps of a tiny model, no loggers: only the preset's other settings are exercised
TINY_RUN = [*TINY, "data.repeat=30", "trainer.max_steps=3", "trainer.val_check_interval=3", "logger=none",
            "callbacks=minimal"]


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """threads=1 sets torch's process-wide thread count: give the tests after these the usual one."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_every_preset_is_checked():
    assert EXPERIMENTS == sorted(PROMISES)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_preset_composes_to_what_it_promises(tmp_path, name):
    cfg = compose(f"experiment={name}", f"paths.root_dir={ROOT}", output_dir=tmp_path)
    for key, value in PROMISES[name].items():
        assert OmegaConf.select(cfg, key) == value, key


def test_reference_is_exactly_the_defaults(tmp_path):
    assert compose("experiment=reference", output_dir=tmp_path) == compose(output_dir=tmp_path)


def test_presets_only_change_what_they_name(tmp_path):
    """Deltas only: every key a preset file sets differs from the default, except those a recipe pins on
    purpose (its architecture and schedule, documented in the file) and the reference itself."""
    pinned = {
        "tinyllm_byte": {"model.n_embd", "model.num_heads"},
        "shakespeare_char": {"model.num_heads", "model.num_layers", "optim.lr", "optim.min_lr_ratio"},
        "induction_heads": {"callbacks.head_scores._target_"},  # a whole entry: on under callbacks=minimal too
    }
    defaults = compose(output_dir=tmp_path)
    for name in EXPERIMENTS:
        if name == "reference":
            continue
        preset = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "experiment" / f"{name}.yaml"))
        preset.pop("defaults", None)
        for key, value in leaves(preset):
            if key not in pinned.get(name, set()):
                assert OmegaConf.select(defaults, key) != value, f"{name}: {key}"


def leaves(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    """{"model": {"n_embd": 64}} -> [("model.n_embd", 64)], values as written (not resolved)."""
    found = []
    for key, value in tree.items():
        found += leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [(f"{prefix}{key}", value)]
    return found


def read_run(run):
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    return ckpt, json.loads((run / "metrics.json").read_text())


@pytest.mark.parametrize("name", TEXT_EXPERIMENTS)
def test_preset_trains_a_few_steps(tmp_path, tiny_text_file, name):
    """Every preset runs end to end on a local file (shakespeare_char downloads nothing)."""
    run = tmp_path / "run"
    cfg = compose(f"experiment={name}", *TINY_RUN, f"data.path={tiny_text_file}", output_dir=run)
    returned = train_main(cfg)
    ckpt, metrics = read_run(run)
    assert returned == metrics["best_val_loss"]  # what a sweeper optimises: the best val loss
    assert ckpt["global_step"] == metrics["steps"] == 3
    chance = math.log(ckpt["model_config"]["vocab_size"])
    assert math.isfinite(metrics["val_loss"]) and metrics["val_loss"] < 1.5 * chance
    if name == "tinyllm_byte":
        assert ckpt["tokenizer"]["kind"] == "byte" and ckpt["model_config"]["vocab_size"] == 256
        assert ckpt["model_config"]["pos_encoding"] == "sinusoidal"
        assert not any("position" in k for k in ckpt["state_dict"])  # sin/cos positions have no weights
    else:
        assert ckpt["model_config"]["vocab_size"] == len(set(TINY_TEXT))
    if name == "shakespeare_char":  # warmup: after 3 steps the lr is 4/101 of 1e-3
        lr = ckpt["optimizer_states"][0]["param_groups"][0]["lr"]
        assert lr == pytest.approx(1e-3 * warmup_cosine(3, 100, 2000, 0.1))


def test_chinese_large_without_a_file_fails_at_once_with_one_line(tmp_path):
    cfg = compose("experiment=chinese_large", f"paths.root_dir={tmp_path}", output_dir=tmp_path / "run")
    with pytest.raises(SystemExit) as info:
        train_main(cfg)
    message = str(info.value)
    expected = f"error: invalid config: data file not found: {tmp_path / 'data' / 'chinese_large.txt'} (set data.path"
    assert message.startswith(expected) and "\n" not in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_debug_fast_runs_five_steps_without_loggers(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    cfg = compose("debug=fast", *TINY, f"data.path={tiny_text_file}", "data.repeat=30", output_dir=run)
    train_main(cfg)
    ckpt, metrics = read_run(run)
    assert metrics["steps"] == ckpt["global_step"] == 5
    assert not list(run.glob("events.out.tfevents.*"))


def test_debug_profile_writes_the_simple_profiler_report(tmp_path, tiny_text_file):
    run = tmp_path / "run"
    cfg = compose("debug=profile", *TINY, f"data.path={tiny_text_file}", "data.repeat=30", output_dir=run)
    train_main(cfg)
    report = (run / "fit-profile.txt").read_text()
    rows = {cells[0]: cells[1:] for line in report.splitlines()
            if (cells := [c.strip() for c in line.strip().strip("|").split("|")]) and len(cells) == 5}
    steps = cfg.trainer.max_steps
    assert int(rows["run_training_batch"][1]) == steps == 50  # Num calls: one per training step
    assert int(rows["[LightningModule]LitLanguageModel.optimizer_step"][1]) == steps
    assert float(rows["Total"][2]) > 0  # Total time (s)
    assert not list(run.glob("events.out.tfevents.*"))


def test_debug_overfit_drives_train_loss_to_near_zero(tmp_path, tiny_text_file):
    """Two batches replayed for the preset's steps: a working model memorises them."""
    run = tmp_path / "run"
    cfg = compose("debug=overfit", *TINY, "model.n_embd=32", f"data.path={tiny_text_file}", "data.repeat=30",
                  output_dir=run)
    assert cfg.trainer.overfit_batches == 2 and cfg.model.dropout == 0.0
    train_main(cfg)
    events = EventAccumulator(str(run))
    events.Reload()
    losses = [e.value for e in events.Scalars("loss/train")]
    assert losses[0] > 0.8 * math.log(len(set(TINY_TEXT)))  # starts near chance
    assert losses[-1] < 0.1  # ends near 0
    assert read_run(run)[0]["global_step"] == cfg.trainer.max_steps
