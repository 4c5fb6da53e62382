"""Run folders: unique ones, even for runs started in the same second, and the record Hydra keeps in them.

``hydra.run.dir`` is ``${unique_dir:${paths.log_dir}/runs/<time stamp>}``: the ``unique_dir``
resolver claims the folder with an atomic ``mkdir``. When another run already holds that name it
tries ``<name>-2``, ``<name>-3``, ... so two ``train.py`` started at once never share a folder
(names still sort by start time). Within one process the same name always gives the same folder.

``original_overrides`` reads back the command line a run was started with (``.hydra/overrides.yaml``),
for resuming it, reusing it in a comparison and tabulating a sweep.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

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


def original_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run folder was started with (its ``.hydra/overrides.yaml``), None if absent."""
    record = Path(run_dir) / HYDRA_DIR / "overrides.yaml"
    return [str(o) for o in OmegaConf.load(record)] if record.is_file() else None


def composed_log_dir(conf_dir: Path, overrides: list[str]) -> str:
    """``paths.log_dir`` as the training config composes it with these overrides."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return str(compose("train", overrides=overrides).paths.log_dir)
