"""What tinylm learns to do: continue a text (``text``) or translate pairs (``translation``).

Each task is a ``tinylm.tasks.base.Task`` subclass in its own package (``<name>/task.py``): its data
module, its TensorBoard views, its config checks, its validation scores, and what generate.py,
visualize.py, evaluate.py and export.py do with its checkpoints. The data group chooses the task
(``data=pairs``: translation), and a checkpoint names it (its ``task`` hyperparameter).

``TASKS`` names each task's class, imported on first use: importing this package imports no torch
(generate.py on an ONNX file imports ``tinylm.generation.prompting`` without it).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from tinylm.errors import TinyLMError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from tinylm.tasks.base import Task

TASKS = {"text": "tinylm.tasks.text.task:TextTask", "translation": "tinylm.tasks.translation.task:TranslationTask"}
DEFAULT_TASK = "text"  # a data module of the user's own continues text, as does a checkpoint naming no task
# Settings train.py sets from another one (group -> key -> from what): refused on the command line
# (``refuse_derived``) and added to a config (``tinylm.training.config_keys.SET_BY_TRAIN``)
DERIVED = {"data": {"decoder_only": "the model's kind (a decoder-only model.arch reads each pair as one sequence "
                                    "source + BEGIN + target, model=seq2seq reads the two sides apart)"}}


@cache
def get_task(name: str) -> Task:
    """The task called ``name`` (one of ``TASKS``)."""
    module, _, class_name = TASKS[name].partition(":")
    return getattr(importlib.import_module(module), class_name)()


def task_of_config(cfg: DictConfig) -> Task:
    """The task of a composed training config: the one whose data module the data group builds."""
    target = cfg.data.get("_target_")
    return next((get_task(n) for n in TASKS if get_task(n).data_target == target), get_task(DEFAULT_TASK))


def task_of_checkpoint(checkpoint: dict, model_class: type) -> str:
    """The name of the task a checkpoint was trained for: its ``task`` hyperparameter; without one,
    translation when ``translation_pairs`` is true or the model is an encoder-decoder, else text."""
    hparams = checkpoint.get("hyper_parameters")
    hparams = hparams if isinstance(hparams, dict) else {}
    if "task" in hparams:
        if hparams["task"] not in TASKS:  # a ValueError: the checkpoint reader makes it one line naming the file
            raise ValueError(f"its task {hparams['task']!r} is not one of {', '.join(TASKS)}")
        return hparams["task"]
    return "translation" if hparams.get("translation_pairs") is True or is_encoder_decoder(model_class) else "text"


def model_class_of(cfg: DictConfig) -> type:
    """The model class a training config names (``model._target_``, or ``model.arch``); a ValueError if none."""
    from omegaconf import OmegaConf

    from tinylm.models import model_class

    return model_class(OmegaConf.to_container(cfg.model, resolve=True))


def is_encoder_decoder(model) -> bool:
    """Whether a model (or its class) reads a source apart from what it writes: its ``kind``, which the
    code that treats the two kinds apart asks through this."""
    return model.kind == "encoder-decoder"


def views_left_out(task: Task) -> set[str]:
    """The entries of the callbacks group that only other tasks show: left out before anything is built."""
    return {view for name in TASKS if name != task.name for view in get_task(name).views}


def refuse_derived(overrides: list[str]) -> None:
    """One TinyLMError for a command-line override (``key=value``, ``+key=value``) of a ``DERIVED`` setting."""
    for override in overrides:
        group, _, key = override.partition("=")[0].lstrip("+~").partition(".")
        if key in DERIVED.get(group, {}):
            raise TinyLMError(f"{group}.{key} is not a setting: train.py sets it from {DERIVED[group][key]}; remove it")
