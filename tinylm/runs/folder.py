"""Run folders: named by what the command line changed, unique even for runs started in the same
second, and the record Hydra keeps in them.

``hydra.run.dir`` is ``${unique_dir:${paths.log_dir}/runs/<time stamp>,${run_name:<the overrides>}}``
(conf/hydra/default.yaml): ``run_name`` words the command line's settings as sweep jobs are named
(``model.n_embd=32,optim.lr=3e-4``), so the folder, and so the run's name in TensorBoard, says
which run is which: ``runs/2026-12-02_07-32-18_model.n_embd=32,optim.lr=3e-4``; a plain
``python train.py`` is named by its time alone. The time comes first, so names sort by start time.
The ``unique_dir`` resolver claims the folder with an atomic ``mkdir``. When another run already
holds that name it tries ``<time>-2_<settings>``, ``<time>-3_<settings>``, ... so two ``train.py``
started at once never share a folder. Within one process the same name always gives the same folder.
A resume is told its own folder (``hydra.run.dir``, ``tinylm.runs.resume``) and is never renamed.

A run refused before training leaves no folder: ``discard_new_folder`` removes the run folder this
process made for it (claimed, or a ``hydra.run.dir=`` that did not exist: ``note_given_run_dir``), a
new run's or a resume's from a checkpoint elsewhere, so no empty run shows up in TensorBoard or as the
newest run. A folder that was there before (a resume's in place, an earlier run's) is never removed,
nor one that holds checkpoints.

``original_overrides`` reads back the command line a run was started with (its record's ``overrides.yaml``),
for resuming it, reusing it in a comparison and tabulating a sweep. A record that cannot be read
(not YAML, not a list of overrides, not UTF-8, not readable) is one TinyLMError naming the file
and how to restore it, never a traceback.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import unicodedata
from collections.abc import Iterable
from pathlib import Path, PurePath

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from tinylm.errors import TinyLMError
from tinylm.run_folder import CHECKPOINTS_DIR, HYDRA_DIR, read_record
from tinylm.runs.job_files import JSON_TYPES

# Settings left out of a run's name: where it writes, how it runs or shows its progress, not what it
# trains (as the HParams columns, tinylm.training.fit.NOT_SETTINGS, and the progress bar's switch).
# The seed stays: it is what tells repeats of one experiment apart.
NOT_IN_NAME = ("paths", "ckpt_path", "callbacks", "logger", "threads", "compile", "trainer.enable_progress_bar")
FILE_KEYS = ("data.path",)  # named by the file's name: the folders above it would crowd out the settings
NAME_BYTES = 200  # the longest settings part of a folder name (UTF-8); past it, a hash stands for the rest
_UNSAFE = re.compile(r"_*[^\w.+@-]+_*|_{2,}")  # \w: letters (CJK too), digits and _; the rest is one _
_claimed: dict[tuple[str, str], str] = {}
_made_here: set[Path] = set()  # the run folders this process made (resolved): those a refusal removes


def claim_unique_dir(path: str, name: str = "") -> str:
    """Create and return ``path_name`` (``path`` without a name), or the first free ``path-N_name``;
    the same answer for the same path and name."""
    if (path, name) not in _claimed:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tail = f"_{name}" if name else ""
        candidate, n = Path(path + tail), 1
        while True:
            try:
                candidate.mkdir()
                break
            except FileExistsError:
                n += 1
                candidate = Path(f"{path}-{n}{tail}")
        _claimed[path, name] = str(candidate)
        _made_here.add(candidate.resolve())
    return _claimed[path, name]


def note_given_run_dir(argv: list[str]) -> None:
    """Remember the folder a ``hydra.run.dir=`` override names (the last one, a plain path) if it does not
    exist yet: Hydra makes it for this run, and a refusal before training removes it."""
    given = [o for o in OverridesParser.create().parse_overrides([a for a in argv[1:] if not a.startswith("-")])
             if o.key_or_group == "hydra.run.dir"]
    if given and isinstance(value := given[-1].value(), str) and "${" not in value and not Path(value).exists():
        _made_here.add(Path(value).resolve())


def keep_folder(output_dir: str | Path) -> None:
    """``output_dir`` holds a run from now on (its training started): nothing removes it, in this process either."""
    _made_here.discard(Path(output_dir).resolve())


def discard_new_folder(output_dir: str | Path) -> bool:
    """Remove ``output_dir`` if this process made it for a run refused before training (a new run's, a resume's
    into a new folder); whether it did. A folder holding checkpoints holds a run: it stays.

    The log files Hydra opened in it are closed first, so nothing writes there again."""
    folder = Path(output_dir).resolve()
    if folder not in _made_here or not folder.is_dir() or any((folder / CHECKPOINTS_DIR).glob("*.ckpt")):
        return False
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        if Path(handler.baseFilename).resolve().is_relative_to(folder):
            root.removeHandler(handler)
            handler.close()
    shutil.rmtree(folder, ignore_errors=True)
    _made_here.discard(folder)
    return True


def _safe(text: str) -> str:
    """``text`` safe in a file name, a shell word and a TensorBoard run name: each run of other
    characters than letters, digits and ``.+@-`` (``/``, spaces, quotes, brackets, commas, ...) is one
    ``_``, none at either end."""
    return _UNSAFE.sub("_", unicodedata.normalize("NFC", text)).strip("_")


def _capped(items: list[str]) -> str:
    """``items`` joined by commas; past NAME_BYTES the whole settings that fit, then ``...<hash of all>``."""
    whole = ",".join(items)
    if len(whole.encode()) <= NAME_BYTES:
        return whole
    digest = hashlib.sha1(whole.encode()).hexdigest()[:8]
    room = NAME_BYTES - len(",...") - len(digest)
    kept = []
    for item in items:
        if len(",".join([*kept, item]).encode()) > room:
            break
        kept.append(item)
    if not kept:  # the first setting alone is too long: as much of it as fits
        return f"{items[0].encode()[:room].decode(errors='ignore')}...{digest}"
    return f"{','.join(kept)},...{digest}"


def run_name(overrides: Iterable[str]) -> str:
    """The settings part of a run folder's name: ``key=value,...`` of the command line's overrides as
    given (each key once, its last value), without those of NOT_IN_NAME; empty for none."""
    chosen = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if any(key == k or key.startswith((k + ".", k + "/")) for k in NOT_IN_NAME):
            continue
        value = override.value()
        if not isinstance(value, str):  # numbers, lists, null: as typed (3e-4, not 0.0003)
            value = override.input_line.partition("=")[2]
        elif key in FILE_KEYS:
            value = PurePath(value).name
        chosen.pop(key, None)
        chosen[key] = f"~{_safe(key)}" if override.is_delete() else f"{_safe(key)}={_safe(value)}"
    return _capped(list(chosen.values())) if chosen else ""


def register_resolvers() -> None:
    """Make ``${unique_dir:...}`` and ``${run_name:...}`` available to the training config (see
    conf/hydra/default.yaml)."""
    if not OmegaConf.has_resolver("unique_dir"):
        OmegaConf.register_new_resolver("unique_dir", claim_unique_dir)
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)


def check_overrides(value: object) -> list[str]:
    """``value`` if it is a list of override strings; ValueError saying what it is instead."""
    if not isinstance(value, list):
        raise ValueError("empty" if value is None else f"{JSON_TYPES.get(type(value), 'something else')} "
                         "instead of a list of overrides")
    for number, item in enumerate(value, start=1):
        if not isinstance(item, str):
            raise ValueError(f"item {number} is {JSON_TYPES.get(type(item), 'something else')}, not an override")
    return value


def original_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run folder was started with (its record's ``overrides.yaml``), None if absent;
    a TinyLMError naming the file and the fix when it cannot be read."""
    record = Path(run_dir) / HYDRA_DIR / "overrides.yaml"
    if not record.exists():
        return None
    try:
        return check_overrides(read_record(record))
    except ValueError as e:
        raise TinyLMError(
            f"cannot read {record}: {e}; it lists the run's command-line overrides: restore it (the same list "
            f"is hydra.overrides.task in {record.with_name('hydra.yaml')})"
        ) from None


def newest_sweep_dir(log_dir: str | Path) -> Path:
    """The newest sweep folder (one holding a ``multirun.yaml``) under ``<log_dir>/multirun``; a
    TinyLMError if there is none."""
    multirun = Path(log_dir) / "multirun"
    sweeps = [p.parent for p in multirun.glob("*/multirun.yaml")]
    if not sweeps:
        raise TinyLMError(f"there is no sweep under {multirun}: run one with `python train.py -m ...`")
    return max(sweeps, key=lambda p: (p.stat().st_mtime, p.name))


def composed_log_dir(conf_dir: Path, overrides: list[str]) -> str:
    """``paths.log_dir`` as the training config composes it with these overrides."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return str(compose("train", overrides=overrides).paths.log_dir)
