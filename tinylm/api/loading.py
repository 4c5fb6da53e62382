"""Which checkpoint ``tinylm.load(source)`` reads: the one the commands would (``tinylm.run_folder.choose_checkpoint``).

``source`` is a checkpoint file (``ckpt_path=``), a run folder or a sweep job's folder (``run_dir=``: its
best checkpoint, else its ``last.ckpt``), or None: the newest run's best checkpoint under the outputs folder
(``paths.log_dir`` of conf/paths/default.yaml, under the project folder), as ``generate.py`` picks it. A
relative path is relative to the current folder, as on the command line. What cannot be loaded is the one
``TinyLMError`` line the commands print after ``error:``. Torch is imported only once there is a file to load.
"""

from __future__ import annotations

import os
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.run_folder import CONF_DIR, Chosen, choose_checkpoint, use_project_root

Source = str | os.PathLike | None


def outputs_folder() -> str:
    """``paths.log_dir`` as the commands compose it: conf/paths/default.yaml under the project folder
    (``use_project_root``: the checkout tinylm is imported from, else the current folder, unless TINYLM_ROOT
    names one)."""
    from omegaconf import OmegaConf

    use_project_root()
    return str(OmegaConf.create({"paths": OmegaConf.load(CONF_DIR / "paths" / "default.yaml")}).paths.log_dir)


def choose(source: Source = None) -> Chosen:
    """The checkpoint ``source`` names and why it (``Chosen``), or one TinyLMError line."""
    from tinylm.cli import resolve_path

    if source is None:
        return choose_checkpoint(log_dir=outputs_folder())
    given = resolve_path(os.path.expanduser(os.fspath(source)))  # relative to the current folder, as generate.py
    if Path(given).is_dir():  # a run folder, a sweep job's folder
        return choose_checkpoint(run_dir=given)
    if given.lower().endswith(".onnx"):
        raise TinyLMError(f"{given} is an ONNX export, which runs without torch: sample from it with "
                          f"`python generate.py ckpt_path={given}`, or load its .ckpt with tinylm.load")
    return choose_checkpoint(ckpt_path=given)


def load_checkpoint(source: Source = None):
    """The ``LoadedModel`` (model in eval mode on the CPU, tokenizer, path, step, task, why) of ``source``."""
    chosen = choose(source)
    from tinylm.checkpoint import load_model  # torch: once there is a file to load

    return load_model(*chosen)
