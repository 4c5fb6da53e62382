"""Unique run folders, even for runs started in the same second.

``hydra.run.dir`` is ``${unique_dir:${paths.log_dir}/runs/<time stamp>}``: the ``unique_dir``
resolver claims the folder with an atomic ``mkdir``. When another run already holds that name it
tries ``<name>-2``, ``<name>-3``, ... so two ``train.py`` started at once never share a folder
(names still sort by start time). Within one process the same name always gives the same folder.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

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
