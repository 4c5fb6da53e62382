"""Run folders: unique ones, even for runs started in the same second, and the record Hydra keeps in them.

``hydra.run.dir`` is ``${unique_dir:${paths.log_dir}/runs/<time stamp>}``: the ``unique_dir``
resolver claims the folder with an atomic ``mkdir``. When another run already holds that name it
tries ``<name>-2``, ``<name>-3``, ... so two ``train.py`` started at once never share a folder
(names still sort by start time). Within one process the same name always gives the same folder.

``original_overrides`` reads back the command line a run was started with (``.hydra/overrides.yaml``),
for resuming it, reusing it in a comparison and tabulating a sweep. A record that cannot be read
(not YAML, not a list of overrides, not UTF-8, not readable) is one TinyLMError naming the file
and how to restore it, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from tinylm.errors import TinyLMError
from tinylm.runs.job_files import JSON_TYPES

HYDRA_DIR = ".hydra"  # where Hydra records a run's config (hydra.output_subdir)
_claimed: dict[str, str] = {}


def claim_unique_dir(path: str) -> str:
    """Create and return ``path``, or the first free ``path-N``; the same answer for the same path."""
    if path not in _claimed:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        candidate, n = Path(path), 1
        while True:
            try:
                candidate.mkdir()
                break
            except FileExistsError:
                n += 1
                candidate = Path(f"{path}-{n}")
        _claimed[path] = str(candidate)
    return _claimed[path]


def register_resolvers() -> None:
    """Make ``${unique_dir:...}`` available to the training config (see conf/hydra/default.yaml)."""
    if not OmegaConf.has_resolver("unique_dir"):
        OmegaConf.register_new_resolver("unique_dir", claim_unique_dir)


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
    """The overrides a run folder was started with (its ``.hydra/overrides.yaml``), None if absent;
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
