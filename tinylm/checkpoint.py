"""Loading a checkpoint safely, without Lightning (which file: ``tinylm.run_folder.choose_checkpoint``).

``torch.load(weights_only=True)`` only rebuilds tensors and plain containers, so a file that asks for any
other Python object is refused before anything in it can run. A tinylm checkpoint holds everything needed
to rebuild the model and tokenizer as plain data ("model_config", "tokenizer", "state_dict"; see
``tinylm.training.module``), and Lightning's ``hyper_parameters`` the task it was trained for
(``tinylm.tasks.task_of_checkpoint``).

A saved model folder (``lm.save_pretrained``: ``model.safetensors`` and ``config.json``) is read the same way
(``load_saved``): safetensors holds tensors only, and the config is JSON checked against the weights.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tinylm.errors import TinyLMError
from tinylm.models import NotImported, build, described, model_spec
from tinylm.models.sizes import weights_problem
from tinylm.run_folder import (
    CHECKPOINTS_DIR,
    HYDRA_DIR,
    SAVED_CONFIG,
    SAVED_WEIGHTS,
    TRAIN_HINT,
    shown_path,
    small_record,
)
from tinylm.tasks import task_of_checkpoint
from tinylm.tasks.base import LoadedModel
from tinylm.textfile import read_capped_bytes, read_json
from tinylm.tokenizer import Tokenizer, tokenizer_from_state
from tinylm.values import SHORT, one_line

if TYPE_CHECKING:
    from tinylm.models import LanguageModel, ModelConfig

REQUIRED_KEYS = ("state_dict", "model_config", "tokenizer")
# a saved model folder (tinylm.interop.saved writes it): config.json's "tinylm_format", what a newer layout changes
SAVED_FORMAT, TOKENIZER_FILE = 1, "tokenizer.json"
MAX_SAVED_CONFIG_MIB = 64  # a config.json or tokenizer.json larger than this is not one tinylm wrote
SAVED_FIX = "save it again with lm.save_pretrained(folder), or load the checkpoint it came from"


def read_checkpoint(path: str | Path) -> dict:
    """``torch.load`` with weights_only=True, turning every failure into one clear line."""
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for bad bytes: zip, pickle, EOF, key errors
        # the restricted unpickler names the refused class or function: "... GLOBAL module.name"
        unsafe = re.search(r"GLOBAL (\S+)", str(e))
        if unsafe:
            raise TinyLMError(
                f"checkpoint {path} contains a pickled Python object ({unsafe.group(1)}) and was "
                "refused without running it: only load checkpoints saved by tinylm's train.py"
            ) from None
        raise TinyLMError(
            f"checkpoint {path} could not be read ({type(e).__name__}), it is corrupted or "
            f"truncated: pick another checkpoint or {TRAIN_HINT}"
        ) from None
    if not isinstance(checkpoint, dict):
        checkpoint = {}
    missing = [key for key in REQUIRED_KEYS if key not in checkpoint]
    if missing:
        raise TinyLMError(
            f"checkpoint {path} is not a tinylm checkpoint (missing {', '.join(missing)}): "
            "use a checkpoint saved by tinylm's train.py"
        )
    return checkpoint


UNKNOWN_DATA = f"unknown data: its run's {HYDRA_DIR}/config.yaml cannot be read"  # not a guess from hydra.yaml
def trained_on(run_dir: Path) -> str:
    """What a run trained on, from its record: "data.path=<file>", else "data=<its data group>"; "" without one;
    "unknown data" when its config.yaml is there but cannot be read (a FIFO, too large: not a guess)."""
    config_path = run_dir / HYDRA_DIR / "config.yaml"
    config, hydra = small_record(config_path), small_record(run_dir / HYDRA_DIR / "hydra.yaml")
    if config is None and os.path.lexists(config_path):
        return UNKNOWN_DATA
    data = config.get("data") if isinstance(config, dict) else None
    if isinstance(data, dict) and data.get("path"):
        return f"data.path={data['path']}"
    try:
        return f"data={hydra['hydra']['runtime']['choices']['data']}"
    except (TypeError, KeyError):
        return ""


def vocabulary_origin(path: Path, data: str | None = None) -> str:
    """Whose vocabulary a loaded tokenizer is, for messages: "checkpoint <path> (trained on data.path=...)";
    ``data``: what the run trained on, when the caller knows it (else ``trained_on`` its run)."""
    path = Path(path)
    if data is None:
        data = trained_on(path.parent.parent) if path.parent.name == CHECKPOINTS_DIR else ""
    return f"checkpoint {shown_path(path)}" + (f" (trained on {data})" if data else "")


@contextmanager
def refusing_invalid(path: str | Path) -> Iterator[None]:
    """Anything inconsistent in checkpoint ``path`` (a damaged or hand-made file) as one TinyLMError line
    saying that it is not a valid tinylm checkpoint and why."""
    try:
        yield
    except (NotImported, TinyLMError) as e:  # a class not imported, a model too big for this machine
        raise TinyLMError(f"checkpoint {path}: {e}") from None
    except (TypeError, ValueError, KeyError, RuntimeError) as e:
        reason = one_line(e, SHORT)
        raise TinyLMError(
            f"checkpoint {path} is not a valid tinylm checkpoint: {reason}: "
            "use a checkpoint saved by tinylm's train.py"
        ) from None


def model_parts(checkpoint: dict) -> tuple[type[LanguageModel], ModelConfig, Tokenizer, dict]:
    """A checkpoint's model class, its config, its tokenizer and its weights (without Lightning's ``model.``
    prefix), each checked against the others before anything is built: a config that asks for more than
    its weights hold is refused without allocating it. A ValueError, TypeError or KeyError names a problem."""
    for key in ("model_config", "state_dict"):  # the tokenizer's state is checked by its reader
        if not isinstance(checkpoint[key], dict):
            raise TypeError(f"the {key} must be a dict, not {type(checkpoint[key]).__name__}")
    tokenizer = tokenizer_from_state(checkpoint["tokenizer"])
    # by its arch, or the LanguageModel subclass its _target_ names in a module already imported: no other callable
    cls, config = model_spec(checkpoint["model_config"], imports=False)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} symbols but the model's "
                         f"vocab_size is {config.vocab_size}")
    # Lightning prefixes the model's weights with the LitLanguageModel attribute name, "model."
    weights = {str(k).removeprefix("model."): v for k, v in checkpoint["state_dict"].items()}
    if problem := weights_problem(described(cls, config), weights):
        raise ValueError(problem)
    return cls, config, tokenizer, weights


def load_model(path: str | Path, why: str = "") -> LoadedModel:
    """Rebuild the model (GPT, LSTM, GRU, encoder-decoder, or a model class of the program's own) and its
    tokenizer from a checkpoint file alone, once ``model_parts`` found them consistent and
    ``tinylm.models.build`` found that the model fits in memory (else one TinyLMError line, ``refusing_invalid``).
    """
    if Path(path).name == SAVED_WEIGHTS:  # a saved model folder's weights (tinylm.run_folder.saved_model)
        return load_saved(path, why)
    checkpoint = read_checkpoint(path)
    with refusing_invalid(path):
        cls, config, tokenizer, weights = model_parts(checkpoint)
        model = build(cls, config)
        model.load_state_dict(weights)
        task = task_of_checkpoint(checkpoint, type(model))
    tokenizer.origin = vocabulary_origin(path)
    return LoadedModel(model.eval(), tokenizer, Path(path), checkpoint.get("global_step"), task, why)


# --------------------------------------------------------------------------------------------
# A saved model folder (``lm.save_pretrained``): config.json and model.safetensors


def read_saved_config(folder: Path) -> dict:
    """config.json of a saved model folder, checked to be one tinylm wrote (one TinyLMError line if not)."""
    path = folder / SAVED_CONFIG
    try:
        config = read_json(path, SAVED_CONFIG, MAX_SAVED_CONFIG_MIB, links=False)
    except TinyLMError as e:  # not a regular file, too big, not JSON, nested too deep
        raise TinyLMError(f"{shown_path(path)} cannot be read as JSON ({one_line(e, SHORT)}): {SAVED_FIX}") from None
    if isinstance(config, dict) and config.get("tinylm_export") == "transformer_lens":
        raise TinyLMError(f"{shown_path(folder)} is a TransformerLens export (export.py format=transformer_lens): "
                          "load it with tinylm.load_transformer_lens(folder); the commands read the checkpoint it "
                          "came from, or a folder of export.py format=huggingface")
    if not isinstance(config, dict) or "tinylm_format" not in config:
        raise TinyLMError(f"{shown_path(path)} is not a tinylm model's config (no tinylm_format): {SAVED_FIX}")
    if config["tinylm_format"] != SAVED_FORMAT:
        raise TinyLMError(f"{shown_path(path)} has tinylm_format {config['tinylm_format']!r}, and this tinylm reads "
                          f"format {SAVED_FORMAT}: upgrade tinylm, or save the model again with this one")
    return config


def saved_tokenizer_state(folder: Path, config: dict):
    """The tinylm tokenizer state config.json names (a BPE tokenizer's JSON read from its file)."""
    state = config.get("tokenizer")
    if isinstance(state, dict) and state.get("kind") == "bpe" and "json" not in state:
        name = state.get("file")
        if name != TOKENIZER_FILE:  # only the one file beside it: a config names no path to read
            raise ValueError(f"the BPE tokenizer's file must be {TOKENIZER_FILE}, not {name!r}")
        data = read_capped_bytes(folder / TOKENIZER_FILE, TOKENIZER_FILE, MAX_SAVED_CONFIG_MIB, links=False)
        state = {"kind": "bpe", "json": data.decode("utf-8")}
    return state


def load_saved(weights_path: str | Path, why: str = "") -> LoadedModel:
    """The model, tokenizer and task of the saved model folder whose weights file is ``weights_path``: its
    config checked against its weights before the model is built (``tinylm.checkpoint.model_parts``)."""
    weights_path = Path(weights_path)
    folder = weights_path.parent
    config = read_saved_config(folder)
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise TinyLMError(f"reading {shown_path(folder)} needs safetensors: pip install -e .") from None
    try:
        weights = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise TinyLMError(f"{shown_path(weights_path)} cannot be read ({e}): the file is damaged or truncated: "
                          f"{SAVED_FIX}") from None
    try:
        step = config.get("global_step")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
            raise ValueError(f"global_step must be a whole number or null, not {step!r}")
        if not isinstance(config.get("model"), dict):
            raise ValueError(f"its \"model\" must be the model's config (a JSON object), not {config.get('model')!r}")
        task = {"task": config["task"]} if "task" in config else {}  # without one: text, or an encoder-decoder's
        checkpoint = {"model_config": config["model"], "state_dict": weights,
                      "tokenizer": saved_tokenizer_state(folder, config), "hyper_parameters": task}
        cls, model_cfg, tokenizer, weights = model_parts(checkpoint)
        model = build(cls, model_cfg)
        model.load_state_dict(weights)
        task = task_of_checkpoint(checkpoint, cls)
    except (NotImported, TinyLMError) as e:
        raise TinyLMError(f"saved model {shown_path(folder)}: {e}") from None
    except (TypeError, ValueError, KeyError, RuntimeError, OSError) as e:
        raise TinyLMError(f"saved model {shown_path(folder)} is not valid: {one_line(e, SHORT)}: {SAVED_FIX}") from None
    tokenizer.origin = f"saved model {shown_path(folder)}"
    return LoadedModel(model.eval(), tokenizer, weights_path, step, task, why)
