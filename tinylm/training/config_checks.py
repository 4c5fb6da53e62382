"""Checks on a composed training config, run before any data is read or model is built.

Hydra already rejects unknown keys (the config is in struct mode) but accepts any value: whatever
it parses from the command line (a string, int, float, bool, list or null). This module checks
every value of the top level, of the ``data``, ``optim`` and ``trainer`` groups and of early stopping
against a small typed rule (``RULES``), every key added with ``+`` against what takes it (``config_keys``:
a ``_target_`` entry's constructor, the model's config fields), the model with
``tinylm.models.model_config_problems`` and its fit to the task with the task's ``config_problems``
(``tinylm.tasks``: an encoder-decoder needs translation pairs), so a bad value is one line, not a
traceback from deep inside Lightning, numpy or torch.

Most of it needs no torch (``validate(cfg, quick=True)``): train.py runs that part first, so that a
bad value is refused sooner than ``import torch`` alone would take. The rest asks Lightning or torch
(the accelerator, strategy, precision and devices), imports the classes the config names (the keys
their constructors take, a model class of the user's own), or the task: ``validate(cfg)`` runs all.
"""

from __future__ import annotations

import glob
import typing
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from tinylm.cli import resolve_path
from tinylm.errors import TinyLMError
from tinylm.models import BUILT_IN, CHECKS, model_config_problems
from tinylm.models.sizes import size_problem
from tinylm.tasks import model_class_of, task_of_config
from tinylm.tasks.data_file import missing_data_file
from tinylm.tasks.translation.numbers_zh import DEMOS
from tinylm.textfile import encoding_problem, errors_problem, unwritable_folder
from tinylm.tokenizer import MIN_BPE_VOCAB, TOKENIZERS
from tinylm.training.config_keys import MUON, unknown_keys
from tinylm.values import (
    POSITIVE_INT,
    POSITIVE_NUMBER,
    Rule,
    integer,
    is_int,
    is_number,
    nullable,
    number,
    one_of,
    text,
    value_problem,
)

if typing.TYPE_CHECKING:
    from tinylm.tasks.base import Task


def batches(v) -> str | None:
    """Lightning's batch limits: a count of batches or a fraction of them."""
    ok = is_int(v) and v >= 0 or is_number(v) and 0 <= v <= 1
    return None if ok else "must be a number of batches (an integer >= 0) or a fraction in [0, 1]"


def betas(v) -> str | None:
    ok = isinstance(v, ListConfig | list) and len(v) == 2 and all(is_number(b) and 0 <= b < 1 for b in v)
    return None if ok else "must be two numbers in [0, 1), e.g. [0.9, 0.99]"


def sha256(v) -> str | None:
    ok = isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdefABCDEF" for c in v)
    return None if ok else "must be the file's SHA-256 (64 hex digits)"


def accelerator(v) -> str | None:
    from lightning.pytorch.accelerators import AcceleratorRegistry

    names = sorted(AcceleratorRegistry.available_accelerators())
    if v == "auto":
        return None
    if v not in (*names, "gpu"):
        return f"must be one of auto, gpu, {', '.join(names)}"
    wanted = ("cuda", "mps") if v == "gpu" else (v,)
    if not any(AcceleratorRegistry[name]["accelerator"].is_available() for name in wanted):
        return "is not available on this machine: use trainer=cpu, or trainer.accelerator=auto"
    return None


def strategy(v) -> str | None:
    from lightning.pytorch.strategies import StrategyRegistry

    names = ("auto", *StrategyRegistry.available_strategies())
    ok = v in names or isinstance(v, DictConfig) and "_target_" in v
    return None if ok else "must be auto, a Lightning strategy name such as ddp, or a _target_ entry"


def file_name(v) -> str | None:
    return None if isinstance(v, str) or is_int(v) else "must be a file path"


def at_validation(v) -> str | None:
    return None if v is False else "must be false: training is one endless epoch, so check at each validation"


def precision(v) -> str | None:
    from lightning.fabric.connector import _PRECISION_INPUT

    names = [p for literal in typing.get_args(_PRECISION_INPUT) for p in typing.get_args(literal)]
    return nullable(one_of(*names))(v)


RULES: dict[str, Rule] = {
    "seed": integer(0, 2**32 - 1),  # what numpy's seed accepts
    "threads": nullable(POSITIVE_INT),
    "compile": one_of(True, False),
    "ckpt_path": nullable(file_name),
    "data.path": nullable(file_name),
    "data.tokenizer": one_of(*TOKENIZERS),
    "data.bpe_vocab_size": POSITIVE_INT,  # >= MIN_BPE_VOCAB when used: see config_problems
    "data.batch_size": POSITIVE_INT,
    "data.val_fraction": number(0, 1, "()"),
    "data.val_batches": POSITIVE_INT,
    "data.repeat": POSITIVE_INT,
    "data.max_mib": POSITIVE_NUMBER,
    "data.encoding": encoding_problem,
    "data.errors": errors_problem,
    "data.cache_dir": nullable(text("a folder path")),  # and writable: see cache_dir_problem
    "data.url": nullable(text("a URL")),
    "data.sha256": nullable(sha256),
    "data.demo": one_of(*DEMOS),  # data=pairs without a path: the generated pairs
    "data.demo_pairs": integer(2),
    "data.demo_max": integer(2, 99_999),
    "optim.lr": POSITIVE_NUMBER,
    "optim.weight_decay": number(0),
    "optim.betas": betas,
    "optim.warmup_steps": integer(0),
    "optim.decay_steps": integer(0),
    "optim.min_lr_ratio": number(0, 1),
    "optim.decay": one_of("cosine", "linear"),  # tinylm.training.module.DECAYS
    "optim.muon_lr": POSITIVE_NUMBER,  # optim=muon (tinylm.training.muon)
    "optim.momentum": number(0, 1, "[)"),
    "optim.ns_steps": POSITIVE_INT,
    "optim.ns_dtype": one_of("float32", "bfloat16"),
    "trainer.accelerator": accelerator,
    "trainer.num_nodes": POSITIVE_INT,
    "trainer.strategy": strategy,
    "trainer.precision": precision,
    "trainer.max_steps": POSITIVE_INT,
    "trainer.val_check_interval": POSITIVE_INT,  # steps: the training stream has no epochs
    "trainer.check_val_every_n_epoch": nullable(POSITIVE_INT),
    "trainer.num_sanity_val_steps": integer(-1),
    "trainer.log_every_n_steps": POSITIVE_INT,
    "trainer.gradient_clip_val": nullable(number(0)),
    "trainer.gradient_clip_algorithm": nullable(one_of("norm", "value")),
    "trainer.enable_progress_bar": one_of(True, False),
    "trainer.enable_model_summary": one_of(True, False),
    "trainer.enable_checkpointing": one_of(True, False),
    "trainer.use_distributed_sampler": one_of(True, False),
    "trainer.deterministic": nullable(one_of(True, False, "warn")),
    "trainer.overfit_batches": batches,
    "trainer.limit_train_batches": batches,
    "trainer.limit_val_batches": batches,
    # EarlyStopping's arguments train.py takes; early stopping is off while patience is null
    "callbacks.early_stopping.monitor": one_of("loss/val", "loss/val_bpc"),
    "callbacks.early_stopping.patience": nullable(POSITIVE_INT),
    "callbacks.early_stopping.min_delta": number(0),
    "callbacks.early_stopping.check_on_train_epoch_end": at_validation,
}
ASK_LIGHTNING = ("trainer.accelerator", "trainer.strategy", "trainer.precision")  # rules that import it (and torch)


def devices_problem(trainer: DictConfig) -> str | None:
    """trainer.devices: a count (or auto); for GPUs also -1 (all) or a list of indices, and no more than exist."""
    import torch

    devices, name = trainer.get("devices"), trainer.get("accelerator")
    gpus = name in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    if is_int(devices) and devices > 0 or devices == "auto":
        if gpus and is_int(devices) and devices > torch.cuda.device_count():
            return (f"trainer.devices={devices} but this machine has {torch.cuda.device_count()} CUDA device(s): "
                    f"use trainer.devices={torch.cuda.device_count()} or fewer")
        return None
    listed = isinstance(devices, ListConfig) and len(devices) > 0 and all(is_int(d) and d >= 0 for d in devices)
    if name != "cpu" and (devices == -1 or listed):
        return None
    return f"trainer.devices={devices!r} must be a positive integer or auto (GPUs: also -1 for all, or [0, 1, ...])"


def config_problems(cfg: DictConfig, quick: bool = False, task: Task | None = None) -> list[str]:
    """Every problem with a training config, each one line naming the key and the fix; ``quick``: those
    found without torch, in the same words and order. ``task``: the config's, when the caller has found it."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    own_class = model.get("_target_") not in (None, *CHECKS)  # its module may import torch
    problems = [] if quick and own_class else model_config_problems({**model, "vocab_size": 1})
    if not problems and (too_big := size_problem({**model, "vocab_size": 1}, vocabulary_known=False)):
        problems.append(too_big)  # before the data is read: a lower bound, the data's vocabulary adds rows
    unknown = unknown_keys(cfg, RULES, quick)
    missing = object()
    for key, rule in RULES.items():
        if quick and key in ASK_LIGHTNING:
            continue
        value = OmegaConf.select(cfg, key, default=missing)
        if value is not missing and key not in unknown and (problem := value_problem(key, value, rule)):
            problems.append(problem)
    data = cfg.data
    if data.get("tokenizer") == "bpe" and is_int(data.bpe_vocab_size) and (problem := value_problem(
            "data.bpe_vocab_size", data.bpe_vocab_size, integer(MIN_BPE_VOCAB),
            " (BPE starts from the 256 byte values), e.g. 512")):
        problems.append(problem)
    if problem := data_path_problem(data):
        problems.append(problem)
    if problem := cache_dir_problem(data):
        problems.append(problem)
    if problem := learning_rate_monitor_problem(cfg):
        problems.append(problem)
    try:
        model_class = None if quick else model_class_of(cfg)
    except ValueError:  # a model class that cannot be named is said by model_config_problems
        model_class = None
    if problem := muon_problem(cfg, model_class):
        problems.append(problem)
    if not quick:
        problems += task_problems(cfg, task or task_of_config(cfg), model_class)
        if problem := devices_problem(cfg.trainer):
            problems.append(problem)
    return problems + list(unknown.values())


def task_problems(cfg: DictConfig, task: Task, model_class: type | None) -> list[str]:
    """What the task says of the model and the data together (``Task.config_problems``); nothing without a
    model class."""
    return [] if model_class is None else task.config_problems(cfg, model_class)


def has_residual_blocks(model_class: type) -> bool:
    """Whether a model class has residual blocks (``LanguageModel.residual_layers``), whose weight matrices Muon
    trains (``tinylm.training.module.LitLanguageModel.hidden_matrices``)."""
    from tinylm.models.base import LanguageModel

    return model_class.residual_layers is not LanguageModel.residual_layers


# The built-in model classes without residual blocks, by name: known without importing torch (the quick check);
# tests/test_precheck_hints.py holds them to the classes' own ``residual_layers``.
WITHOUT_RESIDUAL_BLOCKS = ("tinylm.models.rnn.RNNLanguageModel",)


def muon_problem(cfg: DictConfig, model_class: type | None) -> str | None:
    """optim=muon with a model without residual blocks (an LSTM or GRU): nothing for Muon to train. A built-in
    class is known by its name, any other by ``model_class`` (None: not imported, not checked)."""
    if cfg.optim.get("_target_") != MUON:
        return None
    arch, target = cfg.model.get("arch"), cfg.model.get("_target_")
    named = target if target is not None else BUILT_IN.get(arch, (None,))[0]
    built_in = isinstance(named, str) and named in CHECKS
    if built_in and named not in WITHOUT_RESIDUAL_BLOCKS:
        return None
    if not built_in and (model_class is None or has_residual_blocks(model_class)):
        return None
    model = f"model.arch={arch}" if arch in BUILT_IN else f"model._target_={target}"
    fitting = [f"model={name}" for name, (cls, _) in BUILT_IN.items() if cls not in WITHOUT_RESIDUAL_BLOCKS]
    return (f"optim=muon trains the weight matrices of residual blocks, and {model} has none: use optim=adamw, "
            f"or a model with them ({' or '.join(fitting)})")


# The built-in data modules (the tasks' data_target), which read data.path as a file, a folder or a glob
READS_DATA_PATH = ("tinylm.tasks.text.data.TextDataModule", "tinylm.tasks.translation.data.PairDataModule")


def data_path_problem(data: DictConfig) -> str | None:
    """data.path names nothing (no file or folder, and no data.url to download it from): said before torch is
    imported, in the data module's words, of the path as it resolves (relative to where the command was
    launched). A glob is the data module's to match; a data module of the user's own reads its path its way."""
    path = data.get("path")
    if data.get("_target_") not in READS_DATA_PATH or not isinstance(path, str) or not path or data.get("url"):
        return None
    resolved = resolve_path(path)
    if glob.has_magic(path) or Path(resolved).exists():
        return None
    return missing_data_file(resolved)


def cache_dir_problem(data: DictConfig) -> str | None:
    """data.cache_dir (the token cache): a folder, or one that can be made. A read-only folder is the data
    module's to judge: a current cache in it is used as it is, a missing or stale one is refused there."""
    folder = data.get("cache_dir")
    if not isinstance(folder, str) or not folder or not (why := unwritable_folder(Path(folder))):
        return None
    if why == (Path(folder), "is not writable"):
        return None
    return (f"data.cache_dir={folder}: {why[0]} {why[1]}: set data.cache_dir to a writable folder, "
            "or null to tokenize in memory")


def learning_rate_monitor_problem(cfg: DictConfig) -> str | None:
    """Lightning's LearningRateMonitor refuses a run without a logger (logger=none switches it off itself)."""
    loggers = [entry for entry in (cfg.get("logger") or {}).values() if entry and "_target_" in entry]
    if (cfg.get("callbacks") or {}).get("learning_rate_monitor") and not loggers:
        return ("callbacks.learning_rate_monitor has no logger to write to: use logger=none (which switches it "
                "off too), or callbacks.learning_rate_monitor=null")
    return None


def validate(cfg: DictConfig, quick: bool = False, task: Task | None = None) -> None:
    """Raise one TinyLMError listing every problem (``quick``: every one found without torch), or return quietly;
    ``task``: the config's, when the caller has found it."""
    problems = config_problems(cfg, quick, task)
    if problems:
        raise TinyLMError("invalid config: " + "; ".join(problems))
