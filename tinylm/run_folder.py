"""A run folder's layout, the checkpoint to use from one, and the project folder they all live under.

A run folder is a training run (``runs/<time>_<settings>/``) or one job of a sweep (``multirun/<time>/<job>/``)
under the outputs folder (``paths.log_dir``). It holds:

- ``checkpoints/``: ``best-*.ckpt`` (the best validation so far) and ``last.ckpt`` (what a run resumes from);
  a checkpoint is written to ``<name>.ckpt.tmp`` and renamed into place, so ``kill -9`` mid-write leaves a
  partial ``.tmp`` that no lister takes;
- ``.hydra/``: Hydra's record of the run (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``, ``resumes.yaml``);
- ``running.json`` while it trains (its process id, host and start time), ``metrics.json`` when training ends,
  ``error.txt`` when a sweep job fails, ``claim.json`` for a sweep job not started yet;
- ``probe.txt``: the probe text its attention inspector drew, which the tinylm tab opens it on;
- its TensorBoard event files, in the folder itself; runs of earlier releases hold them in ``tensorboard/``.

Which checkpoint (``choose_checkpoint``): a file named by the user; else a run folder's best one, else its
``last.ckpt``; else the newest run's under the outputs folder, never a debug run (``debug=fast``, ...) while
an ordinary run has checkpoints; the choice says which file and why, for the line every command prints.
Listing a run's checkpoints removes the partials of a run whose writer is gone; the tinylm tab lists them
``read_only``: it writes nothing and follows no link.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import yaml

from tinylm.errors import TinyLMError
from tinylm.textfile import MIB, read_capped_bytes, read_json

CHECKPOINTS_DIR, LAST_NAME, BEST_PREFIX, CKPT_SUFFIX = "checkpoints", "last.ckpt", "best-", ".ckpt"
LAST_CHECKPOINT = Path(CHECKPOINTS_DIR) / LAST_NAME
SAVED_CONFIG, SAVED_WEIGHTS = "config.json", "model.safetensors"  # a saved model folder (lm.save_pretrained)
TMP_SUFFIX = ".tmp"  # a checkpoint being written: <name>.ckpt.tmp
HYDRA_DIR = ".hydra"  # where Hydra records a run's config (hydra.output_subdir)
MARKER, METRICS, ERROR, CLAIM = "running.json", "metrics.json", "error.txt", "claim.json"
PROBE_FILE = "probe.txt"  # the probe as UTF-8 text, exactly
EVENT_FILE_PREFIX = "events.out.tfevents"
EARLIER_EVENTS_DIR = "tensorboard"  # where earlier releases wrote a run's events, inside its folder
RUN_PATTERNS = ("runs/*", "multirun/*/*")  # run folders, relative to the outputs folder
MARKER_BYTES = 4096  # a claim is a line of JSON: a larger or non-regular running.json is not read
TRAIN_HINT = "train one with `python train.py`"

_PACKAGE = Path(__file__).resolve().parent
CHECKOUT = None if (_PACKAGE / "conf").is_dir() else _PACKAGE.parent  # an installed package carries conf/
CONF_DIR = _PACKAGE / "conf" if CHECKOUT is None else CHECKOUT / "conf"


def use_project_root() -> Path:
    """Point ``paths.root_dir`` (the ``TINYLM_ROOT`` environment variable) at the checkout tinylm is imported
    from, else at the current folder, unless the environment names one; return it."""
    return Path(os.environ.setdefault("TINYLM_ROOT", str(CHECKOUT or Path.cwd())))


def shown_path(path: str | Path) -> str:
    """``path`` relative to the current folder when it lies inside it (and that is shorter), else absolute:
    ``outputs/runs/...`` from the project folder, never a ``../..`` walk out of it."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    inside = relative != os.pardir and not relative.startswith(os.pardir + os.sep)
    return relative if inside and len(relative) < len(absolute) else absolute


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


def read_record(path: Path) -> object:
    """A YAML file of a run's record, parsed; ValueError saying why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except OSError as e:
        raise ValueError(e.strerror or str(e)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not YAML ({getattr(e, 'problem', None) or e}{where})") from None


RECORD_MIB = 1  # a run's record (its YAML files) is a few KiB: a larger one is not read


def small_record(path: Path, links: bool = True) -> object:
    """A YAML file of a run's record, parsed; None when it is not a regular file of at most ``RECORD_MIB``
    (opened without blocking: a FIFO or a device is not read), not UTF-8 or not YAML. ``links``: whether a
    symbolic link is followed."""
    try:
        return yaml.safe_load(read_capped_bytes(path, path.name, RECORD_MIB, links=links).decode("utf-8"))
    except (TinyLMError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None


def read_marker(folder: Path, name: str = MARKER) -> dict | None:
    """``running.json`` (or ``claim.json``): pid, host and start time (Unix time); None when there is
    none, or it is damaged, not a regular file or over ``MARKER_BYTES`` (opened without blocking)."""
    try:
        marker = read_json(folder / name, name, MARKER_BYTES / MIB)
    except TinyLMError:
        return None
    types = {"pid": int, "host": str, "started": int | float}
    ok = isinstance(marker, dict) and all(isinstance(marker.get(key), kind) for key, kind in types.items())
    return marker if ok else None


def process_state(pid: int) -> tuple[str, float] | None:
    """(state letter, start time as Unix time) of process ``pid``, from /proc; None where there is none."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    fields = stat_line.rsplit(")", 1)[1].split()  # after "pid (name)": the state is field 3, the start time field 22
    return fields[0], int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def alive(marker: dict) -> bool:
    """Whether the process that wrote ``marker`` still runs. On another host this cannot be checked
    from here: it counts as running. A process that started after the marker was written is
    another one that got the same pid; a zombie (killed, not yet reaped by its parent) is gone."""
    if marker["host"] != socket.gethostname():
        return True
    try:
        os.kill(marker["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    state = process_state(marker["pid"])
    if state is None:
        return True
    letter, started = state
    return letter != "Z" and started <= marker["started"] + 2  # /proc's boot time is in whole seconds


def partial_checkpoints(checkpoint_dir: Path) -> list[Path]:
    return sorted(Path(checkpoint_dir).glob(f"*{CKPT_SUFFIX}{TMP_SUFFIX}"))


def remove_partial_checkpoints(checkpoint_dir: Path, keep: Path | None = None) -> list[Path]:
    """Remove the ``*.ckpt.tmp`` in ``checkpoint_dir`` but ``keep`` (call it as the folder's one writer:
    holding the run folder, ``tinylm.runs.lock``, or writing a checkpoint there); return what was removed."""
    removed = [tmp for tmp in partial_checkpoints(checkpoint_dir) if tmp != keep]
    for tmp in removed:
        tmp.unlink(missing_ok=True)
    return removed


def writer_gone(run_dir: Path) -> bool:
    """Whether the run's claim (``running.json``) names a process that is gone: a run killed mid-way. No claim
    (a run that ended, or one trained without the run manager), a damaged one or one on another host: False."""
    holder = read_marker(run_dir)
    return holder is not None and not alive(holder)


def remove_stale_partials(checkpoint_dir: Path) -> list[Path]:
    """Remove the ``*.ckpt.tmp`` of ``checkpoint_dir`` when its run's writer is gone (``writer_gone``): a run
    killed during its first checkpoint has no ``last.ckpt`` to resume from, so nothing else would. Listed
    before the claim is read: a process that claims the run afterwards writes its own ``.tmp`` only after
    claiming it, so it never loses one to this. Returns what was removed."""
    found = partial_checkpoints(checkpoint_dir)
    if not found or not writer_gone(Path(checkpoint_dir).parent):
        return []
    for tmp in found:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only logdir: it stays, and no lister takes it
            pass
    return found


def run_checkpoints(run_dir: Path, read_only: bool = False) -> list[Path]:
    """The run's checkpoint files, ``best-*.ckpt`` first (newest first), then ``last.ckpt``: regular files only
    (never a FIFO, a folder or a partial ``.tmp``), a file that vanishes meanwhile left out. The partial
    checkpoints a killed run left are removed first (``remove_stale_partials``). ``read_only``: nothing is
    removed, and no link is followed (a ``checkpoints/`` on a path through a link, or a link in it, is as if
    it were not there)."""
    folder = Path(run_dir) / CHECKPOINTS_DIR
    if not read_only:
        remove_stale_partials(folder)
    elif folder.resolve() != folder:
        return []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    best, last = [], []
    for entry in entries:
        is_best = entry.name.startswith(BEST_PREFIX) and entry.name.endswith(CKPT_SUFFIX)
        if not (is_best or entry.name == LAST_NAME):
            continue
        try:
            info = entry.stat(follow_symlinks=not read_only)
        except OSError:  # rotated away between the listing and now
            continue
        if stat.S_ISREG(info.st_mode):
            (best if is_best else last).append((info.st_mtime_ns, Path(entry.path)))
    return [path for _, path in sorted(best, reverse=True)] + [path for _, path in last]


def modified(path: Path) -> int:
    """``path``'s modification time (ns); 0 when it is gone (a best checkpoint rotated away since its listing)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


class Chosen(NamedTuple):
    """A checkpoint file and why it was the one (for messages; empty: the user named the file)."""

    path: Path
    why: str = ""


def best_or_last(path: Path) -> str:
    """``best`` or ``last``: which of its run's checkpoints a file is."""
    return "best" if path.name.startswith(BEST_PREFIX) else "last"


def saved_model(folder: str | Path) -> Path | None:
    """The weights file of a saved model folder (``lm.save_pretrained``: ``model.safetensors`` beside a
    ``config.json``, regular files), which the commands read as a checkpoint (tinylm.interop.saved); else None."""
    weights = Path(folder) / SAVED_WEIGHTS
    return weights if weights.is_file() and (Path(folder) / SAVED_CONFIG).is_file() else None


def checkpoint_in_run(run_dir: str | Path) -> Chosen:
    """The checkpoint to sample from in one run folder: its best, else its last; a saved model folder's weights."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        fix = "pass a checkpoint file as ckpt_path=..." if run_dir.is_file() else "check run_dir=..."
        raise TinyLMError(f"run folder {run_dir} {what_it_is(run_dir)}: {fix}")
    if saved := saved_model(run_dir):
        return Chosen(saved, "a saved model folder")
    found = run_checkpoints(run_dir)
    if not found and (run_dir / SAVED_CONFIG).is_file() and not (run_dir / CHECKPOINTS_DIR).is_dir():
        raise TinyLMError(f"{run_dir} holds a {SAVED_CONFIG} but no {SAVED_WEIGHTS} beside it (a saved model folder "
                          "needs both): save it again with lm.save_pretrained(folder), or pick another run_dir=...")
    if not found:
        raise TinyLMError(
            f"run folder {run_dir} has no checkpoints (no {CHECKPOINTS_DIR}/{BEST_PREFIX}*{CKPT_SUFFIX} or "
            f"{LAST_CHECKPOINT}): pick another run_dir=..., or pass ckpt_path=..."
        )
    if best_or_last(found[0]) == "best":
        return Chosen(found[0], "run_dir's best checkpoint")
    return Chosen(found[0], f"run_dir's last checkpoint: it has no {BEST_PREFIX}*{CKPT_SUFFIX}")


def debug_preset(run_dir: Path) -> str | None:
    """The debug preset a run was made with (``fast`` for ``debug=fast``), None for an ordinary run.

    Hydra's record of the config groups the run chose (``hydra.yaml``, hydra.runtime.choices) names it
    however it was chosen: on the command line or by an experiment's defaults. The presets themselves leave
    no mark in the config (they only change trainer, logger and callbacks values). A run without a readable
    record counts as an ordinary run.
    """
    try:
        preset = small_record(Path(run_dir) / HYDRA_DIR / "hydra.yaml")["hydra"]["runtime"]["choices"].get("debug")
    except (TypeError, KeyError, AttributeError):
        return None
    return None if preset is None else str(preset)


def newest_run(found: dict[Path, list[Path]], pick_with: Callable[[Path], str]) -> tuple[Path, str]:
    """Of the runs with these checkpoints, the newest (by its newest file) that is not a debug run,
    and a note for the message: the newer debug runs passed over (``pick_with(run)``: the option that
    picks one), or, when only debug runs have checkpoints, that the newest of them is one."""
    order = sorted(found, key=lambda run: (max(map(modified, found[run])), str(run)), reverse=True)
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


def run_folders(log_dir: Path) -> list[Path]:
    """The run folders under the outputs folder ``log_dir``: its runs and its sweeps' jobs."""
    return [run for pattern in RUN_PATTERNS for run in Path(log_dir).glob(pattern) if run.is_dir()]


def latest_checkpoint(log_dir: str | Path) -> Chosen:
    """The checkpoint of the newest run under ``log_dir`` that has any (newest file wins), debug
    runs only when no other run has checkpoints."""
    found = {run: ckpts for run in run_folders(Path(log_dir)) if (ckpts := run_checkpoints(run))}
    if not found:
        raise TinyLMError(
            f"no run with checkpoints under {log_dir} (looked in "
            f"{', '.join(f'{p}/{CHECKPOINTS_DIR}' for p in RUN_PATTERNS)}): {TRAIN_HINT}, "
            "or pass ckpt_path=... or run_dir=..."
        )
    run, note = newest_run(found, lambda run: f"run_dir={shown_path(run)}")
    return Chosen(found[run][0], f"the newest run's {best_or_last(found[run][0])} checkpoint{note}")


def latest_last_checkpoint(log_dir: str | Path) -> tuple[Path, str]:
    """The newest ``last.ckpt`` of any run or sweep job under ``log_dir``, a debug run's only when no other
    run has one (as ``latest_checkpoint``), and why it: what ``ckpt_path=last`` resumes."""
    found = {run: [run / LAST_CHECKPOINT] for run in run_folders(Path(log_dir))
             if (run / LAST_CHECKPOINT).is_file()}  # a regular file: never a FIFO, whose read would wait for good
    if not found:
        raise TinyLMError(
            f"ckpt_path=last: no run under {log_dir} has {LAST_CHECKPOINT}; "
            "train first with `python train.py`, or pass ckpt_path=FILE"
        )
    run, note = newest_run(found, lambda run: f"ckpt_path={shown_path(run / LAST_CHECKPOINT)}")
    return found[run][0], f"ckpt_path=last: the newest run's {LAST_NAME}{note}"


def choose_checkpoint(ckpt_path: str | Path | None = None, run_dir: str | Path | None = None,
                      log_dir: str | Path = "outputs") -> Chosen:
    """Resolve the user's choice: a checkpoint file, a run folder, or the newest run; and say why."""
    if ckpt_path and run_dir:
        raise TinyLMError("both ckpt_path and run_dir are set: pass only one of them")
    if ckpt_path:
        path = Path(ckpt_path)
        if path.is_dir() and (saved := saved_model(path)):
            return Chosen(saved, "a saved model folder")
        if not path.is_file():
            fix = "pass a .ckpt file as ckpt_path=..., or a run folder as run_dir=..." if path.is_dir() else \
                "check ckpt_path=..."
            raise TinyLMError(f"checkpoint file {path} {what_it_is(path)}: {fix}")
        return Chosen(path)
    if run_dir:
        return checkpoint_in_run(run_dir)
    return latest_checkpoint(log_dir)


def find_checkpoint(ckpt_path: str | Path | None = None, run_dir: str | Path | None = None,
                    log_dir: str | Path = "outputs") -> Path:
    """The file ``choose_checkpoint`` picks, for code that needs only the path."""
    return choose_checkpoint(ckpt_path, run_dir, log_dir).path


def holds_event_files(folder: Path) -> bool:
    """``folder`` itself (not below it) holds a TensorBoard event file."""
    try:
        return any(p.name.startswith(EVENT_FILE_PREFIX) for p in folder.iterdir())
    except OSError:
        return False


def events_folder(run_dir: Path) -> Path:
    """The folder of a run's event files: the run folder, or its ``tensorboard/`` in a run of an earlier
    release (the run folder when it has neither). A sweep job writes them into ``<job>/<swept settings>/``."""
    run_dir = Path(run_dir)
    earlier = run_dir / EARLIER_EVENTS_DIR
    return earlier if not holds_event_files(run_dir) and holds_event_files(earlier) else run_dir
