"""The model family: one module per architecture, one interface (``LanguageModel``), one builder.

A model config names its class: ``_target_`` (conf/model/<name>.yaml), a ``LanguageModel``
subclass whose ``__init__`` takes ``config: <its ModelConfig dataclass>``; the other keys are that
config's fields. ``build_model`` checks the class, builds the config dataclass (which refuses a bad
value) and the model. A checkpoint's ``model_config`` (plain data, see ``model_config``) names
its class by ``arch`` alone for the architectures below (``gpt`` when absent, as in release 0.1),
so that older readers rebuild it too, and by ``_target_`` for any other class: one in a tinylm
module loads as it is, one elsewhere once the program has imported its module (a checkpoint never
makes tinylm import a module of its choosing, nor call anything but a ``LanguageModel`` subclass).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import asdict

from hydra._internal.utils import _locate  # hydra.utils.get_object without its error log line

from tinylm.models.base import LanguageModel, ModelConfig
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.rnn import RNNConfig, RNNLanguageModel
from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig

# arch -> (config dataclass, model class): the classes a checkpoint names by its arch
ARCHITECTURES: dict[str, tuple[type[ModelConfig], type[LanguageModel]]] = {
    "gpt": (GPTConfig, GPT),
    "lstm": (RNNConfig, RNNLanguageModel),
    "gru": (RNNConfig, RNNLanguageModel),
    "seq2seq": (Seq2SeqConfig, Seq2Seq),
}

__all__ = ["ARCHITECTURES", "LanguageModel", "ModelConfig", "NotImported", "build_model", "config_class", "model_class",
           "model_config", "model_config_problems"]


class NotImported(ValueError):
    """A checkpoint's model class is in a module the program has not imported."""


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _imported(target: str):
    """What ``target`` (module.Name) names in a module that is already imported, or in tinylm's own; None if none is.

    A checkpoint is data: a module it names outside tinylm is never imported (an import runs code).
    """
    if target.startswith("tinylm."):
        try:
            return _locate(target)
        except Exception:  # Hydra's _locate raises whatever the import raised
            return None
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            found = module
            for name in parts[cut:]:
                found = inspect.getattr_static(found, name, None)
            return found
    return None


def model_class(config: dict, imports: bool = True) -> type[LanguageModel]:
    """The class a model config names: its ``_target_``, else its ``arch``; a ValueError (one line) if none fits.

    ``imports=False`` (a checkpoint's config): a ``_target_`` outside tinylm must be in a module the
    program has already imported.
    """
    target = config.get("_target_")
    if target is None:
        arch = config.get("arch", "gpt")
        if arch not in ARCHITECTURES:
            choices = ", ".join(ARCHITECTURES)
            raise ValueError(f"model.arch={arch!r}: choose one of {choices} (model=gpt, model=lstm or model=seq2seq)")
        return ARCHITECTURES[arch][1]
    known = {class_name(cls): cls for _, cls in ARCHITECTURES.values()}
    if not isinstance(target, str):
        found = None
    elif target in known:
        found = known[target]
    elif imports:
        try:
            found = _locate(target)
        except Exception:  # Hydra's _locate raises whatever the import raised
            raise ValueError(f"model._target_={target!r} is not a class Python can import: check it") from None
    else:
        found = _imported(target)
        if found is None:
            raise NotImported(f"its model class {target} is not one of tinylm's and no imported module has it: "
                              f"import {target.rpartition('.')[0]} first, then load it (tinylm never imports a module "
                              "a checkpoint names)")
    if not (isinstance(found, type) and issubclass(found, LanguageModel)):
        raise ValueError(f"model._target_={target!r} is not a model: name a subclass of tinylm.models.LanguageModel")
    return found


def config_class(cls: type[LanguageModel]) -> type[ModelConfig]:
    """The config dataclass a model class takes: the annotation of its ``__init__``'s ``config``."""
    try:
        found = inspect.signature(cls.__init__, eval_str=True).parameters["config"].annotation
    except (KeyError, NameError):
        found = None
    if not (isinstance(found, type) and issubclass(found, ModelConfig)):
        raise ValueError(f"{class_name(cls)}.__init__ must take `config: <its ModelConfig subclass>` (annotated)")
    return found


def _fields(config: dict) -> dict:
    """The config dataclass's values: a model config without its ``_target_``."""
    return {k: v for k, v in config.items() if k != "_target_"}


def model_config_problems(cfg: dict, imports: bool = True) -> list[str]:
    """Everything wrong with a model config of any class, each one line."""
    try:
        cls = model_class(cfg, imports)
        config = config_class(cls)
    except ValueError as e:
        return [str(e)]
    arch = cfg.get("arch")
    if "_target_" in cfg and arch in ARCHITECTURES and ARCHITECTURES[arch][1] is not cls:
        return [f"model.arch={arch} does not fit model._target_={cfg['_target_']}: choose the model with "
                "model=<name> (conf/model/), which sets both"]
    return config.problems(_fields(cfg))


def build_model(config: dict, imports: bool = True) -> LanguageModel:
    """The model a config describes: ``model.*`` plus ``vocab_size``, or a checkpoint's ``model_config``
    (``imports=False``). A ValueError (one line) names a problem, a TypeError a key the config class lacks."""
    cls = model_class(config, imports)
    return cls(config_class(cls)(**_fields(config)))


def model_config(model: LanguageModel) -> dict:
    """What a checkpoint stores of a model: its config's fields, and ``_target_`` for a class its arch does not name."""
    config = asdict(model.config)
    if ARCHITECTURES.get(config.get("arch"), (None, None))[1] is not type(model):
        config["_target_"] = class_name(type(model))
    return config
