"""The config builds the objects: the network from ``model._target_``, the optimizer from the ``optim`` partial,
the callbacks from their entries (an entry switched off in the config builds nothing).

A model class defined here, in a test file, trains through ``train(cfg)`` from a model config of
its own (``conf/model/<name>.yaml`` on Hydra's search path), and its checkpoint loads and
generates: nothing in the package knows it. A checkpoint never makes tinylm call anything but
a ``LanguageModel`` subclass, nor import the module it names.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial

import pytest
import torch
import torch.nn as nn
from conftest import TINY_TEXT, compose
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ProgressBar, TQDMProgressBar
from torch.nn import functional as F

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.generation.sampling import generate
from tinylm.models import ModelConfig, build_model
from tinylm.models.base import Decoder
from tinylm.models.checks import size_problems
from tinylm.tasks import model_class_of, task_of_config
from tinylm.tasks.text.data import TextDataModule
from tinylm.training.config_checks import config_problems
from tinylm.training.fit import Run, build_module, instantiate_all, train
from tinylm.training.module import adamw, warmup_cosine

# ---------------------------------------------------------------------------------------------
# A model of a test file's own: the next token from the current one alone


@dataclass
class BigramConfig(ModelConfig):
    block_size: int = 8  # the training window T
    dropout: float = 0.0

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        return size_problems(cfg, ("vocab_size", "block_size"))


class Bigram(Decoder):
    """Logits for the next token are a row of a table, picked by the current token."""

    def __init__(self, config: BigramConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.vocab_size)  # (V, V)

    def forward(self, idx, targets=None, cache=None, last_only=False):
        logits = self.token_embedding(idx[:, -1:] if last_only else idx)  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    def new_cache(self, batch_size, device=None, dtype=torch.float32):
        return None  # no cache: every step reads the window

    def dimensions(self):
        return {"V (vocabulary)": self.config.vocab_size}

    def parameter_table(self):
        return [("next-token table", self.token_embedding.weight.numel())]


class Trap:
    """Not a model: a checkpoint naming it must not get it called."""

    calls = 0

    def __init__(self, *args, **kwargs):
        Trap.calls += 1


TARGET = f"{Bigram.__module__}.Bigram"
QUICK = ["logger=none", "callbacks=minimal", "trainer.enable_progress_bar=false", "data.batch_size=8",
         "data.val_batches=1", "data.repeat=30", "trainer.max_steps=4", "trainer.val_check_interval=2"]


@pytest.fixture
def bigram_conf(tmp_path):
    """A conf dir with model/bigram.yaml, added to Hydra's search path: ``model=bigram`` picks it."""
    folder = tmp_path / "conf" / "model"
    folder.mkdir(parents=True)
    (folder / "bigram.yaml").write_text(f"_target_: {TARGET}\nblock_size: 8\ndropout: 0.0\n", encoding="utf-8")
    return f"hydra.searchpath=[file://{tmp_path / 'conf'}]"


def bigram_config(tmp_path, bigram_conf, *overrides):
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    return compose(bigram_conf, "model=bigram", f"data.path={text}", *QUICK, *overrides, output_dir=tmp_path / "run")


def test_a_model_of_a_test_file_trains_from_its_config_and_generates_from_its_checkpoint(tmp_path, bigram_conf):
    cfg = bigram_config(tmp_path, bigram_conf)
    metrics = train(cfg)
    assert metrics["steps"] == 4 and metrics["num_params"] == 37 * 37  # V = 37 symbols in TINY_TEXT
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=True)  # plain data only
    assert saved["model_config"] == {"_target_": TARGET, "vocab_size": 37, "block_size": 8, "dropout": 0.0}
    assert saved["hyper_parameters"]["optim"]["_target_"] == "tinylm.training.module.adamw"
    loaded = load_model(ckpt)
    assert type(loaded.model) is Bigram and loaded.global_step == 4
    assert torch.equal(loaded.model.token_embedding.weight, saved["state_dict"]["model.token_embedding.weight"])
    prompt = torch.tensor([loaded.tokenizer.encode("自注意")])
    out = generate(loaded.model, prompt, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 9) and torch.equal(out[:, :3], prompt) and int(out.max()) < 37


def test_the_toy_models_config_is_checked_before_anything_is_built(tmp_path, bigram_conf):
    assert config_problems(bigram_config(tmp_path, bigram_conf)) == []
    assert config_problems(bigram_config(tmp_path, bigram_conf, "model.block_size=0")) == [
        "model.block_size=0 must be a positive integer"]
    assert config_problems(bigram_config(tmp_path, bigram_conf, "+model.n_embd=8")) == [
        f"model.n_embd is unknown: remove it (model._target_={TARGET} takes block_size, dropout)"]


@pytest.mark.parametrize(("target", "message"), [
    ("os.system", "model._target_='os.system' is not a model: name a subclass of tinylm.models.LanguageModel"),
    (f"{Trap.__module__}.Trap", f"model._target_='{Trap.__module__}.Trap' is not a model: name a subclass"),
    ("tinylm.nothing.Model", "model._target_='tinylm.nothing.Model' is not a class Python can import: check it"),
])
def test_a_model_target_that_is_no_model_is_one_line(tmp_path, target, message):
    assert [p[:len(message)] for p in config_problems(compose(f"model._target_={target}", output_dir=tmp_path))] == [
        message]
    assert Trap.calls == 0


def checkpoint_naming(tmp_path, target: str):
    """A valid checkpoint of a Bigram whose model config names ``target`` instead."""
    model = Bigram(BigramConfig(vocab_size=3))
    tokenizer = {"kind": "char", "itos": ["a", "b", "c"]}
    path = tmp_path / "named.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "tokenizer": tokenizer,
                "model_config": {"_target_": target, "vocab_size": 3, "block_size": 8, "dropout": 0.0}}, path)
    return path


@pytest.mark.parametrize("target", ["builtins.eval", "os.system", "subprocess.Popen", f"{Trap.__module__}.Trap",
                                    "tinylm.models.base.ModelConfig", "tinylm.training.fit.train", "torch.nn.Linear"])
def test_a_checkpoint_never_makes_tinylm_call_anything_but_a_language_model(tmp_path, target):
    with pytest.raises(TinyLMError, match=f"^checkpoint .* is not a valid tinylm checkpoint: model._target_='{target}' "
                                          "is not a model: name a subclass of tinylm.models.LanguageModel"):
        load_model(checkpoint_naming(tmp_path, target))
    assert Trap.calls == 0


def test_a_checkpoint_never_makes_tinylm_import_the_module_it_names(tmp_path):
    assert "antigravity" not in sys.modules  # importing it opens a web browser
    with pytest.raises(TinyLMError) as error:
        load_model(checkpoint_naming(tmp_path, "antigravity.Model"))
    assert str(error.value).endswith(
        "named.ckpt: its model class antigravity.Model is not one of tinylm's and no imported module has it: "
        "import antigravity first, then load it (tinylm never imports a module a checkpoint names)")
    assert "antigravity" not in sys.modules
    assert type(load_model(checkpoint_naming(tmp_path, TARGET)).model) is Bigram  # this module is imported


def run_of(cfg) -> Run:
    """The run a composed training config describes, as ``tinylm.training.fit.prepare`` resolves it."""
    return Run(cfg, task_of_config(cfg), model_class_of(cfg))


def test_model_arch_picks_lstm_or_gru_and_checkpoints_of_the_architectures_name_them_by_arch(tmp_path):
    for overrides, layer in ((["model=lstm"], nn.LSTM), (["model=lstm", "model.arch=gru"], nn.GRU)):
        cfg = compose(*overrides, output_dir=tmp_path)
        assert config_problems(cfg) == []
        datamodule = TextDataModule(block_size=cfg.model.block_size)
        datamodule.prepare()
        module = build_module(run_of(cfg), datamodule)
        assert isinstance(module.model.rnn, layer)
        assert "_target_" not in module.hparams.model and module.hparams.model["arch"] == cfg.model.arch
    assert config_problems(compose("model.arch=lstm", output_dir=tmp_path)) == [
        "model.arch=lstm does not fit model._target_=tinylm.models.gpt.GPT: choose the model with model=<name> "
        "(conf/model/), which sets both"]


def test_the_optimizer_partial_gets_the_parameter_groups_and_the_hparams_stay_plain(tmp_path):
    cfg = compose("optim.lr=0.002", output_dir=tmp_path)
    datamodule = TextDataModule(block_size=cfg.model.block_size)
    datamodule.prepare()
    module = build_module(run_of(cfg), datamodule)
    optimizer = module.configure_optimizers()
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"]
    decay, no_decay = optimizer.param_groups
    assert (decay["lr"], decay["weight_decay"], no_decay["weight_decay"], decay["betas"]) == (0.002, 0.1, 0.0,
                                                                                             (0.9, 0.99))
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(module.model.parameters()))
    assert module.hparams.optim == {"_target_": "tinylm.training.module.adamw", "lr": 0.002, "weight_decay": 0.1,
                                    "betas": [0.9, 0.99], "warmup_steps": 0, "decay_steps": 0, "min_lr_ratio": 0.1,
                                    "decay": "cosine"}
    path = tmp_path / "hparams.pt"
    torch.save(dict(module.hparams), path)
    assert torch.load(path, weights_only=True)["model"] == module.hparams.model  # no partial, no class object
    scheduled = build_module(run_of(compose("optim.decay_steps=10", "optim.warmup_steps=2", output_dir=tmp_path)),
                             datamodule).configure_optimizers()
    assert scheduled["lr_scheduler"]["interval"] == "step"
    assert scheduled["optimizer"].param_groups[0]["lr"] == pytest.approx(1e-3 * warmup_cosine(0, 2, 10, 0.1))


@pytest.mark.parametrize("schedule", [[], ["optim.decay_steps=20", "optim.warmup_steps=2"]])
def test_a_resume_with_a_lower_lr_trains_at_the_lower_lr(tmp_path, bigram_conf, schedule):
    train(bigram_config(tmp_path, bigram_conf, "optim.lr=0.01", *schedule))
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    train(bigram_config(tmp_path, bigram_conf, "optim.lr=0.001", "trainer.max_steps=6", *schedule), ckpt_path=last)
    group = torch.load(last, weights_only=True)["optimizer_states"][0]["param_groups"][0]
    factor = warmup_cosine(6, 2, 20, 0.1) if schedule else 1.0
    assert group["lr"] == pytest.approx(0.001 * factor) and group["initial_lr"] == 0.001


def built_callbacks(tmp_path, *overrides) -> list:
    return instantiate_all(compose(*overrides, output_dir=tmp_path).callbacks)


def test_callbacks_are_switched_off_in_the_config_not_filtered_after_they_are_built(tmp_path):
    default = built_callbacks(tmp_path)
    kinds = [type(c) for c in default]
    assert LearningRateMonitor in kinds and EarlyStopping not in kinds
    (bar,) = [c for c in default if isinstance(c, ProgressBar)]
    assert type(bar) is TQDMProgressBar and bar.refresh_rate == 10
    # logger=none nulls the learning-rate monitor: nothing to log it to
    assert compose("logger=none", output_dir=tmp_path).callbacks.learning_rate_monitor is None
    assert LearningRateMonitor not in [type(c) for c in built_callbacks(tmp_path, "logger=none")]
    assert config_problems(compose("~logger.tensorboard", output_dir=tmp_path)) == [
        "callbacks.learning_rate_monitor has no logger to write to: use logger=none (which switches it off too), "
        "or callbacks.learning_rate_monitor=null"]
    # the bar follows trainer.enable_progress_bar, on the command line as in debug=fast
    for overrides in (["trainer.enable_progress_bar=false"], ["debug=fast"]):
        assert not [c for c in built_callbacks(tmp_path, *overrides) if isinstance(c, ProgressBar)]
    # early stopping: off while its patience is null, on with a patience
    (stopping,) = [c for c in built_callbacks(tmp_path, "callbacks.early_stopping.patience=3")
                   if isinstance(c, EarlyStopping)]
    assert (stopping.patience, stopping.monitor, stopping.min_delta) == (3, "loss/val", 0.0)


def test_the_module_receives_its_network_and_an_optimizer(tmp_path):
    net = build_model({"_target_": TARGET, "vocab_size": 5})
    from tinylm.training.module import LitLanguageModel

    module = LitLanguageModel(net=net, tokenizer={"kind": "char", "itos": list("abcde")},
                              optimizer=partial(adamw, lr=0.5))
    assert module.model is net and module.hparams.model == {"_target_": TARGET, "vocab_size": 5, "block_size": 8,
                                                            "dropout": 0.0}
    assert module.configure_optimizers().param_groups[0]["lr"] == 0.5
