"""Keys that nothing takes: a key added with ``+`` is checked against what will receive it.

A ``_target_`` entry's keys are its constructor's arguments (followed through ``**kwargs`` where
that is known, ``KWARGS_GO_TO``), the model's are the fields of its class's config (``model._target_``), the
Trainer's the arguments train.py passes on, and the top level's those of conf/train.yaml. Each
unknown key is one line naming the keys that are taken, with a close match suggested, so that
Hydra's own advice for a typo (``+model.n_emb=32``) is not a TypeError from a constructor. A key that
what receives its group takes though the group's config files have it not (``ADDED_WITH_PLUS``: a Trainer
argument) is known without importing the receiver, so that the command line check (``tinylm.precheck``)
says to add it with ``+``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import inspect
from collections.abc import Callable, Collection

from hydra._internal.utils import _locate  # hydra.utils.get_object without its error log line
from omegaconf import DictConfig, OmegaConf

from tinylm.models import config_class, model_class
from tinylm.tasks import DERIVED

# The top level of conf/train.yaml: its settings, then its groups (hydra is Hydra's own).
TOP_LEVEL = ["seed", "ckpt_path", "threads", "compile", "data", "model", "optim", "trainer", "callbacks", "logger",
             "paths"]
# Keys train.py gives a constructor itself, from elsewhere: a value in the group would be ignored.
SET_BY_TRAIN = {"data": {"block_size": "model.block_size", "seed": "seed", **DERIVED["data"]},
                "model": {"vocab_size": "the data's vocabulary"}}
# Where the **kwargs of a class that train.py builds go; a class not listed that takes **kwargs is not checked.
# Each: (the callable that receives them, the keys the class passes to it itself).
SUMMARY_WRITER = ("torch.utils.tensorboard.SummaryWriter" if importlib.util.find_spec("tensorboard")
                  else "tensorboardX.SummaryWriter")  # as Lightning picks it
KWARGS_GO_TO = {
    "tinylm.training.tensorboard_logger.RunTensorBoardLogger": (
        "lightning.pytorch.loggers.tensorboard.TensorBoardLogger", ()),
    "lightning.pytorch.loggers.tensorboard.TensorBoardLogger": (
        "lightning.fabric.loggers.tensorboard.TensorBoardLogger", ()),
    "lightning.fabric.loggers.tensorboard.TensorBoardLogger": (SUMMARY_WRITER, ("log_dir",)),
}
# Groups whose keys are exactly those with a rule: what train.py reads of them.
RULED = {"optim": "optim", "callbacks.early_stopping": "early stopping"}
# The optim keys only conf/optim/muon.yaml's function takes: refused under any other optimizer.
MUON = "tinylm.training.muon.muon"
MUON_ONLY = ("muon_lr", "momentum", "ns_steps", "ns_dtype")
# Lightning's Trainer.__init__ arguments, in its order: known without importing Lightning (tests/test_precheck_hints.py
# holds them to the installed Lightning's).
TRAINER_ARGUMENTS = (
    "accelerator", "strategy", "devices", "num_nodes", "precision", "logger", "callbacks", "fast_dev_run", "max_epochs",
    "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "limit_val_batches",
    "limit_test_batches", "limit_predict_batches", "overfit_batches", "val_check_interval", "check_val_every_n_epoch",
    "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing", "enable_progress_bar", "enable_model_summary",
    "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "deterministic", "benchmark",
    "inference_mode", "use_distributed_sampler", "profiler", "detect_anomaly", "barebones", "plugins",
    "sync_batchnorm", "reload_dataloaders_every_n_epochs", "default_root_dir", "enable_autolog_hparams",
    "model_registry",
)
# The Trainer arguments train.py passes on untouched (Lightning checks them): it sets the other three itself.
TRAINER_PASSED_ON = tuple(a for a in TRAINER_ARGUMENTS if a not in ("callbacks", "logger", "plugins"))
# A group -> (the keys what receives it takes, what that is): a key of these that the group's config files have not
# is added with ``+`` (``+trainer.limit_val_batches=2``).
ADDED_WITH_PLUS = {"trainer": (TRAINER_PASSED_ON, "a Lightning Trainer argument")}


def arguments(target: Callable) -> list[str] | None:
    """The keyword arguments a class or function takes, in order; None when it takes any (``**kwargs``)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # no signature Python can read
        return None
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        return names
    onward = KWARGS_GO_TO.get(f"{target.__module__}.{target.__qualname__}")
    if onward is None:
        return None
    more = arguments(_locate(onward[0]))
    return None if more is None else names + [n for n in more if n not in names and n not in onward[1]]


def unknown_key_lines(where: str, keys, known: list[str], owner: str, verb: str = "takes",
                      set_by: dict[str, dict[str, str]] = SET_BY_TRAIN,
                      addable: Collection[str] = ()) -> dict[str, str]:
    """``where.key`` -> its one line, for each of ``keys`` that is not ``known`` (nor a Hydra ``_key_``): the keys
    ``owner`` takes (or ``has``), a close one suggested (of ``addable``, those added with ``+``, when none of
    ``known`` is close); ``set_by``: the keys train.py sets itself."""
    problems = {}
    for key in keys:
        full = f"{where}.{key}" if where else str(key)
        if str(key).startswith("_") or key in known:
            continue
        if key in set_by.get(where, {}):
            problems[full] = f"{full} is not a setting: train.py sets it from {set_by[where][key]}; remove it"
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.8)
        plus = "" if close else "+"
        close = close or difflib.get_close_matches(str(key), addable, n=1, cutoff=0.8)
        fix = f"did you mean {plus}{where + '.' if where else ''}{close[0]}?" if close else "remove it"
        problems[full] = f"{full} is unknown: {fix} ({owner} {verb} {', '.join(known)})"
    return problems


def _built(node, where: str):
    """(dotted path, entry) of every entry under ``node`` (plain data) that Hydra builds from a ``_target_``."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield where, node
        for key, value in node.items():
            yield from _built(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _built(value, f"{where}[{i}]")


def unknown_keys(cfg: DictConfig, rules: Collection[str], quick: bool = False) -> dict[str, str]:
    """Each key (added with ``+``) that nothing takes -> its one line naming the keys that are taken.

    A ``_target_`` entry (the data module, callbacks, loggers, ...) takes its constructor's arguments,
    the model the fields of its class's config, the Trainer the arguments train.py passes on,
    optim and early stopping the keys with a rule (``rules``: tinylm.training.config_checks.RULES), the top level
    the keys of conf/train.yaml. Checked before anything is built or read.

    ``quick``: only what needs no import of the classes (nor torch): the top level, optim, early
    stopping and the callbacks and loggers without a ``_target_``.
    """
    plain = OmegaConf.to_container(cfg, resolve=False)
    problems = unknown_key_lines("", [key for key in cfg if key != "hydra"], TOP_LEVEL,
                                 "the training config (conf/train.yaml)", "has")
    for where, group in RULED.items():
        node = OmegaConf.select(cfg, where, default=None)
        if isinstance(node, DictConfig):
            known = [key[len(where) + 1:] for key in rules if key.startswith(where + ".")]
            if where == "optim" and node.get("_target_") != MUON:
                known = [key for key in known if key not in MUON_ONLY]
            problems |= unknown_key_lines(where, node, known, group)
    for where, node in () if quick else _built(plain, ""):
        if where in RULED or where in ("trainer", "model"):  # the model's keys: its config class's fields, below
            continue
        try:
            target = _locate(node["_target_"])
        except Exception:  # Hydra's _locate raises whatever the import raised
            problems[f"{where}._target_"] = (f"{where}._target_={node['_target_']!r} is not a class or function "
                                             "Python can import: check its spelling")
            continue
        known = arguments(target)
        if known is not None:
            known = [k for k in known if k not in SET_BY_TRAIN.get(where, {})]
            problems |= unknown_key_lines(where, node, known, node["_target_"])
    for group in ("callbacks", "logger"):  # an entry without a _target_ is skipped by train.py: a typo
        entries = plain.get(group) or {}
        built = [name for name, entry in entries.items() if isinstance(entry, dict) and "_target_" in entry]
        problems |= unknown_key_lines(group, [n for n, e in entries.items() if e is not None and n not in built],
                             built, f"{group} (conf/{group}/)", "has")
    if quick:
        return problems
    try:
        model = model_class(plain["model"])
        fields = [f.name for f in dataclasses.fields(config_class(model)) if f.name != "vocab_size"]
    except ValueError:  # said by model_config_problems
        fields = None
    if fields is not None:
        arch = cfg.model.get("arch")
        owner = f"model.arch={arch}" if arch else f"model._target_={cfg.model.get('_target_')}"
        problems |= unknown_key_lines("model", cfg.model, fields, owner)
    problems |= {f"trainer.{key}": f"trainer.{key} is not a Lightning Trainer argument train.py can pass on: remove it"
                 for key in cfg.trainer if key != "_target_" and key not in TRAINER_PASSED_ON}
    return problems
