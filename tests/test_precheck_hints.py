"""The command line check's hints (``tinylm.precheck``) and what the quick config check knows by name.

A key the composed config has not, but that what receives its group takes (a Lightning Trainer argument for
``trainer.*``), is one line saying to add it with ``+``; a misspelling still gets "did you mean ...?", and a key
nothing takes is refused. The names it knows without importing Lightning, and the built-in models Muon cannot
train, are held here to what Lightning and the model classes say themselves, so that they cannot drift.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import lightning
import pytest
from conftest import ROOT, compose
from hydra._internal.utils import _locate

from tinylm.errors import TinyLMError
from tinylm.models import CHECKS
from tinylm.precheck import composed
from tinylm.training.config_checks import WITHOUT_RESIDUAL_BLOCKS, config_problems, has_residual_blocks
from tinylm.training.config_keys import TRAINER_ARGUMENTS

TRAINER_KEYS = ("default_root_dir, accelerator, devices, max_steps, val_check_interval, check_val_every_n_epoch, "
                "num_sanity_val_steps, log_every_n_steps, gradient_clip_val, enable_progress_bar, "
                "enable_model_summary, deterministic")
MUON_LSTM = ("optim=muon trains the weight matrices of residual blocks, and model.arch=lstm has none: use "
             "optim=adamw, or a model with them (model=gpt or model=seq2seq)")


def refusal(*args: str, config: str = "train") -> str:
    with pytest.raises(TinyLMError) as info:
        composed(config, [f"{config}.py", *args], ROOT / "conf")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_the_trainer_arguments_known_by_name_are_the_installed_lightnings():
    assert TRAINER_ARGUMENTS == tuple(inspect.signature(lightning.Trainer.__init__).parameters)[1:]


@pytest.mark.parametrize(("args", "said"), [
    (["trainer.limit_val_batches=2"], "trainer.limit_val_batches is not in conf/trainer: add it with "
                                      "+trainer.limit_val_batches=2 (a Lightning Trainer argument)"),
    (["trainer=cpu", "trainer.strategy=ddp"], "trainer.strategy is not in conf/trainer: add it with "
                                              "+trainer.strategy=ddp (a Lightning Trainer argument)"),
    # a sweep: the hint keeps every value, not the first job's
    (["-m", "trainer.limit_val_batches=1,2"], "trainer.limit_val_batches is not in conf/trainer: add it with "
                                              "+trainer.limit_val_batches=1,2 (a Lightning Trainer argument)"),
    # a value Hydra cannot read as it is: the hint quotes it
    (["trainer.profiler=a=b"], "trainer.profiler is not in conf/trainer: add it with +trainer.profiler='a=b' (a "
                               "Lightning Trainer argument)"),
])
def test_a_trainer_argument_the_config_has_not_is_added_with_plus(args, said):
    assert refusal(*args) == said


@pytest.mark.parametrize(("override", "said"), [
    ("trainer.max_step=3", f"trainer.max_step is unknown: did you mean trainer.max_steps? (trainer=default has "
                           f"{TRAINER_KEYS})"),
    ("trainer.limit_val_batch=2", "trainer.limit_val_batch is unknown: did you mean +trainer.limit_val_batches? "
                                  f"(trainer=default has {TRAINER_KEYS})"),
    ("trainer.foo=1", f"trainer.foo is unknown: remove it (trainer=default has {TRAINER_KEYS})"),
    ("trainer.default_hp_metric=a=b", f"trainer.default_hp_metric is unknown: remove it (trainer=default has "
                                      f"{TRAINER_KEYS})"),  # a value Hydra cannot read
    # train.py gives the Trainer its callbacks and loggers itself
    ("trainer.logger=false", f"trainer.logger is unknown: remove it (trainer=default has {TRAINER_KEYS})"),
])
def test_a_misspelled_or_untaken_trainer_key_is_not_added(override, said):
    assert refusal(override) == said


def test_the_hint_is_the_training_configs_only():
    """Another command's config has no Trainer: a key there is not a Trainer argument."""
    assert refusal("trainer.limit_val_batches=2", config="evaluate").startswith(
        "trainer is unknown: remove it (the evaluate.py config (conf/evaluate.yaml) has ")


def test_what_the_hint_adds_passes_the_whole_check(tmp_path):
    cfg = compose("+trainer.limit_val_batches=2", output_dir=tmp_path)
    assert composed("train", ["train.py", "+trainer.limit_val_batches=2"], ROOT / "conf") is not None
    assert config_problems(cfg, quick=True) == config_problems(cfg) == []


def test_the_command_line_check_imports_no_lightning():
    """Its Trainer arguments are known by name: refusing or passing a command line imports neither Lightning nor
    torch (a process: what it imports is the process's own)."""
    code = ("import sys; from pathlib import Path; from tinylm.precheck import composed\n"
            "try:\n    composed('train', ['train.py', 'trainer.limit_val_batches=2'], Path('conf').resolve())\n"
            "except Exception as e:\n    print(e)\n"
            "composed('train', ['train.py', '+trainer.limit_val_batches=2'], Path('conf').resolve())\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "trainer.limit_val_batches is not in conf/trainer: add it with +trainer.limit_val_batches=2 (a Lightning "
        "Trainer argument)", "[]"]


def test_the_built_in_models_without_residual_blocks_are_known_by_name():
    assert set(WITHOUT_RESIDUAL_BLOCKS) == {target for target in CHECKS if not has_residual_blocks(_locate(target))}


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_muon_with_a_model_without_residual_blocks_is_refused_by_the_quick_check(tmp_path, arch):
    cfg = compose("optim=muon", "model=lstm", f"model.arch={arch}", output_dir=tmp_path)
    said = MUON_LSTM.replace("model.arch=lstm", f"model.arch={arch}")
    assert config_problems(cfg, quick=True) == config_problems(cfg) == [said]
    for fits in (["optim=muon"], ["optim=muon", "model=seq2seq", "data=pairs"]):
        assert config_problems(compose(*fits, output_dir=tmp_path), quick=True) == []
