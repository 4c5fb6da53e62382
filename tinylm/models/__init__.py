"""The model family: one module per architecture, one interface (``LanguageModel``), one builder.

A model config names its class: ``_target_`` (conf/model/<name>.yaml), a ``LanguageModel``
subclass whose ``__init__`` takes ``config: <its ModelConfig dataclass>``; the other keys are that
config's fields. ``build_model`` checks the class, builds the config dataclass (which refuses a bad
value) and, once ``tinylm.models.sizes`` has found that it fits in memory, the model. A checkpoint's
``model_config`` (plain data, see ``model_config``) names its class by ``arch`` alone for the
architectures below (``gpt`` when absent), so that a reader that knows no ``_target_`` rebuilds it too,
and by ``_target_`` for any other class: one in a tinylm module loads as it is, one elsewhere once
the program has imported its module (a checkpoint never makes tinylm import a module of its
choosing, nor call anything but a ``LanguageModel`` subclass).

Importing the package imports no torch: a model class is imported when it is asked for or built.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import asdict, fields
from typing import TYPE_CHECKING

from hydra._internal.utils import _locate  # hydra.utils.get_object without its error log line

from tinylm.errors import TinyLMError
from tinylm.models.built_in import BUILT_IN, CHECKS
from tinylm.models.sizes import size_problem

if TYPE_CHECKING:
    from tinylm.models.base import LanguageModel, ModelConfig

__all__ = ["BUILT_IN", "LanguageModel", "ModelConfig", "NotImported", "build", "build_model", "config_class",
           "configured", "described", "model_class", "model_config", "model_config_problems", "model_spec"]


def __getattr__(name: str):
    """The names that are torch's classes, imported on first use: ``LanguageModel`` and ``ModelConfig``."""
    if name in ("LanguageModel", "ModelConfig"):
        from tinylm.models import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        if arch not in BUILT_IN:
            choices = ", ".join(BUILT_IN)
            raise ValueError(f"model.arch={arch!r}: choose one of {choices} (model=gpt, model=lstm or model=seq2seq)")
        return _locate(BUILT_IN[arch][0])
    if not isinstance(target, str):
        found = None
    elif target in CHECKS:
        found = _locate(target)
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
    from tinylm.models.base import LanguageModel

    if not (isinstance(found, type) and issubclass(found, LanguageModel)):
        raise ValueError(f"model._target_={target!r} is not a model: name a subclass of tinylm.models.LanguageModel")
    return found


def config_class(cls: type[LanguageModel]) -> type[ModelConfig]:
    """The config dataclass a model class takes: the annotation of its ``__init__``'s ``config``."""
    from tinylm.models.base import ModelConfig

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
    """Everything wrong with a model config of any class, each one line. A config of a built-in class
    (``BUILT_IN``: by its ``_target_`` or its ``arch``) is checked without importing torch."""
    target, arch = cfg.get("_target_"), cfg.get("arch", "gpt")
    if target is None and arch in BUILT_IN:
        return BUILT_IN[arch][1](_fields(cfg))
    if isinstance(target, str) and target in CHECKS:
        if arch in BUILT_IN and BUILT_IN[arch][0] != target:
            return [f"model.arch={arch} does not fit model._target_={target}: choose the model with "
                    "model=<name> (conf/model/), which sets both"]
        return CHECKS[target](_fields(cfg))
    try:
        config = config_class(model_class(cfg, imports))
    except ValueError as e:
        return [str(e)]
    return config.problems(_fields(cfg))


def model_spec(config: dict, imports: bool = True) -> tuple[type[LanguageModel], ModelConfig]:
    """The class a model config names and its config dataclass, nothing built: ``model.*`` plus ``vocab_size``,
    or a checkpoint's ``model_config`` (``imports=False``). A ValueError (one line) names a problem, a
    TypeError a key the config class lacks."""
    cls = model_class(config, imports)
    return cls, configured(cls, config)


def configured(cls: type[LanguageModel], config: dict) -> ModelConfig:
    """The config dataclass of model class ``cls`` holding ``config`` (without its ``_target_``); a ValueError or
    TypeError as ``model_spec``'s."""
    return config_class(cls)(**_fields(config))


def described(cls: type[LanguageModel], config: ModelConfig) -> dict:
    """Every field of ``config`` and the class, as ``tinylm.models.sizes`` reads a model."""
    return {**asdict(config), "_target_": class_name(cls)}


def build(cls: type[LanguageModel], config: ModelConfig) -> LanguageModel:
    """The model, once ``tinylm.models.sizes`` has found that it fits in memory (a TinyLMError with the
    numbers if not): nothing is allocated for a model that cannot be built."""
    if problem := size_problem(described(cls, config)):
        raise TinyLMError(problem)
    return cls(config)


def build_model(config: dict, imports: bool = True) -> LanguageModel:
    """The model a config describes (``model_spec``), built (``build``)."""
    return build(*model_spec(config, imports))


def model_config(model: LanguageModel) -> dict:
    """What a checkpoint stores of a model: its config's fields (an option of ``option_keys`` only when set),
    and ``_target_`` for a class its arch does not name."""
    config = asdict(model.config)
    defaults = {f.name: f.default for f in fields(model.config)}
    for key in model.config.option_keys:
        if config[key] == defaults[key]:
            del config[key]
    if BUILT_IN.get(config.get("arch"), (None,))[0] != class_name(type(model)):
        config["_target_"] = class_name(type(model))
    return config
