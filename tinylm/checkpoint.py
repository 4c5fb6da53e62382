"""Finding a checkpoint and loading it safely, without Lightning.

Which checkpoint: a file named by the user; else a run folder's; else the newest run's under
``outputs/``. A run folder is a training run (``runs/<time>/``) or one job of a sweep
(``multirun/<time>/<job>/``); its checkpoints are in ``checkpoints/``, where the best one
(``best-*.ckpt``) is preferred over ``last.ckpt``. "The newest run" is never a debug run
(``debug=fast``, ...) while an ordinary run has checkpoints; ``choose_checkpoint`` says which file
it picked and why (the newer debug runs it passed over), for the line every command prints.

Loading: ``torch.load(weights_only=True)`` only rebuilds tensors and plain containers, so a file
that asks for any other Python object is refused before anything in it can run. A tinylm
checkpoint holds everything needed to rebuild the model and tokenizer as plain data
("model_config", "tokenizer", "state_dict"; see ``tinylm.training.module``), and Lightning's
``hyper_parameters`` the task it was trained for (``tinylm.tasks.task_of_checkpoint``).
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tinylm.console import shown_path
from tinylm.errors import TinyLMError
from tinylm.models import NotImported, build, described, model_spec
from tinylm.models.sizes import weights_problem
from tinylm.runs.folder import HYDRA_DIR, read_record
from tinylm.runs.partials import remove_stale_partials
from tinylm.tasks import task_of_checkpoint
from tinylm.tasks.base import LoadedModel
from tinylm.tokenizer import Tokenizer, tokenizer_from_state

if TYPE_CHECKING:  # choosing a checkpoint imports no torch: a command with no run to load answers at once
    from tinylm.models import LanguageModel, ModelConfig

RUN_PATTERNS = ("runs/*", "multirun/*/*")  # run folders, relative to the outputs folder
REQUIRED_KEYS = ("state_dict", "model_config", "tokenizer")
TRAIN_HINT = "train one with `python train.py`"


def what_it_is(path: Path) -> str:
    """What ``path`` is, for a message: "is a folder", "is a file", "is a FIFO (named pipe)", "does not exist", ..."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "is a broken symbolic link" if path.is_symlink() else "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return "is " + next((name for test, name in kinds if test(mode)), "not a file or a folder")


def run_checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint files, best-*.ckpt first (newest first), then last.ckpt: regular files only
    (never a FIFO, a folder or a half-written ``.tmp``), a file that vanishes meanwhile left out. The
    partial checkpoints a killed run left are removed first (``remove_stale_partials``)."""
    folder = Path(run_dir) / "checkpoints"
    remove_stale_partials(folder)
    best = []
    for path in folder.glob("best-*.ckpt"):
        try:
            info = path.stat()
        except OSError:  # rotated away between the listing and now
            continue
        if stat.S_ISREG(info.st_mode):
            best.append((info.st_mtime, path))
    best.sort(key=lambda found: found[0], reverse=True)
    last = [folder / "last.ckpt"] if (folder / "last.ckpt").is_file() else []
    return [path for _, path in best] + last


class Chosen(NamedTuple):
    """A checkpoint file and why it was the one (for messages; empty: the user named the file)."""

    path: Path
    why: str = ""


def kind(path: Path) -> str:
    """``best`` or ``last``: which of its run's checkpoints a file is."""
    return "best" if path.name.startswith("best-") else "last"


def checkpoint_in_run(run_dir: str | Path) -> Chosen:
    """The checkpoint to sample from in one run folder: its best, else its last."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        fix = "pass a checkpoint file as ckpt_path=..." if run_dir.is_file() else "check run_dir=..."
        raise TinyLMError(f"run folder {run_dir} {what_it_is(run_dir)}: {fix}")
    found = run_checkpoints(run_dir)
    if not found:
        raise TinyLMError(
            f"run folder {run_dir} has no checkpoints (no checkpoints/best-*.ckpt or "
            "checkpoints/last.ckpt): pick another run_dir=..., or pass ckpt_path=..."
        )
    best = kind(found[0]) == "best"
    return Chosen(found[0], "run_dir's best checkpoint" if best else "run_dir's last checkpoint: it has no best-*.ckpt")


def debug_preset(run_dir: Path) -> str | None:
    """The debug preset a run was made with (``fast`` for ``debug=fast``), None for an ordinary run.

    Hydra's record of the config groups the run chose (``.hydra/hydra.yaml``, hydra.runtime.choices)
    names it however it was chosen: on the command line or by an experiment's defaults. The presets
    themselves leave no mark in the config (they only change trainer, logger and callbacks values).
    A run without a readable record counts as an ordinary run.
    """
    try:
        record = read_record(Path(run_dir) / HYDRA_DIR / "hydra.yaml")
        preset = record["hydra"]["runtime"]["choices"].get("debug")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return None if preset is None else str(preset)


def newest_run(found: dict[Path, list[Path]], pick_with: Callable[[Path], str]) -> tuple[Path, str]:
    """Of the runs with these checkpoints, the newest (by its newest file) that is not a debug run,
    and a note for the message: the newer debug runs passed over (``pick_with(run)``: the option that
    picks one), or, when only debug runs have checkpoints, that the newest of them is one."""
    order = sorted(found, key=lambda run: (max(p.stat().st_mtime for p in found[run]), str(run)), reverse=True)
    skipped: list[tuple[Path, str]] = []  # (run, preset) of the newer debug runs, newest first
    for run in order:
        if (preset := debug_preset(run)) is None:
            break
        skipped.append((run, preset))
    else:
        run, preset = skipped[0]
        return run, f", a debug run with debug={preset}: no other run has checkpoints"
    if not skipped:
        return run, ""
    (newest, preset), count = skipped[0], len(skipped)
    return run, (f"; skipped {count} newer debug run{'s' if count > 1 else ''}, the newest {shown_path(newest)} "
                 f"with debug={preset}: pick one with {pick_with(newest)}")


def latest_checkpoint(log_dir: str | Path) -> Chosen:
    """The checkpoint of the newest run under ``log_dir`` that has any (newest file wins), debug
    runs only when no other run has checkpoints."""
    log_dir = Path(log_dir)
    runs = [run for pattern in RUN_PATTERNS for run in log_dir.glob(pattern) if run.is_dir()]
    found = {run: ckpts for run in runs if (ckpts := run_checkpoints(run))}
    if not found:
        raise TinyLMError(
            f"no run with checkpoints under {log_dir} (looked in "
            f"{', '.join(p + '/checkpoints' for p in RUN_PATTERNS)}): {TRAIN_HINT}, "
            "or pass ckpt_path=... or run_dir=..."
        )
    run, note = newest_run(found, lambda run: f"run_dir={shown_path(run)}")
    return Chosen(found[run][0], f"the newest run's {kind(found[run][0])} checkpoint{note}")


def choose_checkpoint(
    ckpt_path: str | Path | None = None,
    run_dir: str | Path | None = None,
    log_dir: str | Path = "outputs",
) -> Chosen:
    """Resolve the user's choice: a checkpoint file, a run folder, or the newest run; and say why."""
    if ckpt_path and run_dir:
        raise TinyLMError("both ckpt_path and run_dir are set: pass only one of them")
    if ckpt_path:
        path = Path(ckpt_path)
        if not path.is_file():
            fix = "pass a .ckpt file as ckpt_path=..., or a run folder as run_dir=..." if path.is_dir() else \
                "check ckpt_path=..."
            raise TinyLMError(f"checkpoint file {path} {what_it_is(path)}: {fix}")
        return Chosen(path)
    if run_dir:
        return checkpoint_in_run(run_dir)
    return latest_checkpoint(log_dir)


def find_checkpoint(
    ckpt_path: str | Path | None = None,
    run_dir: str | Path | None = None,
    log_dir: str | Path = "outputs",
) -> Path:
    """The file ``choose_checkpoint`` picks, for code that needs only the path."""
    return choose_checkpoint(ckpt_path, run_dir, log_dir).path


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


RECORD_BYTES = 1 << 20  # a run's .hydra/*.yaml is a few KiB: a larger or non-regular one is not read


def small_record(path: Path) -> object:
    """A YAML file of a run's record, parsed, if it is a regular file of at most RECORD_BYTES; else None."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > RECORD_BYTES:
            return None
        return read_record(path)
    except (OSError, ValueError):
        return None


def trained_on(run_dir: Path) -> str:
    """What a run trained on, from its record: "data.path=<file>", else "data=<its data group>"; "" without one."""
    config, hydra = small_record(run_dir / HYDRA_DIR / "config.yaml"), small_record(run_dir / HYDRA_DIR / "hydra.yaml")
    data = config.get("data") if isinstance(config, dict) else None
    if isinstance(data, dict) and data.get("path"):
        return f"data.path={data['path']}"
    try:
        return f"data={hydra['hydra']['runtime']['choices']['data']}"
    except (TypeError, KeyError):
        return ""


def vocabulary_origin(path: Path) -> str:
    """Whose vocabulary a loaded tokenizer is, for messages: "checkpoint <path> (trained on data.path=...)"."""
    path = Path(path)
    data = trained_on(path.parent.parent) if path.parent.name == "checkpoints" else ""
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
        reason = " ".join(str(e).split())[:200] or type(e).__name__  # one line, kept short
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
    checkpoint = read_checkpoint(path)
    with refusing_invalid(path):
        cls, config, tokenizer, weights = model_parts(checkpoint)
        model = build(cls, config)
        model.load_state_dict(weights)
        task = task_of_checkpoint(checkpoint, type(model))
    tokenizer.origin = vocabulary_origin(path)
    return LoadedModel(model.eval(), tokenizer, Path(path), checkpoint.get("global_step"), task, why)
