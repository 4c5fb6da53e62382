"""The commands: ``tinylm <command> KEY=VALUE ...`` where tinylm is installed, ``python <command>.py ...`` in a
checkout (its train.py, generate.py, ... launch these modules).

Each module ``tinylm.commands.<command>`` has its Hydra app ``main`` and ``run_command_line()``, what the
command line runs; the commands that read a checkpoint also have ``run(cfg)``, the command on a composed
config. Their configs are ``conf/<command>.yaml``: the checkout's ``conf/``, or the copy an installed
package carries as ``tinylm/conf/`` (pyproject.toml). Run folders and caches go under the project folder
(``paths.root_dir``, the ``TINYLM_ROOT`` environment variable): the checkout that tinylm is imported from,
wherever the command is launched; an installed package's: the current folder.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tinylm.errors import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from tinylm.run_folder import Chosen

# `tinylm <command>`, in the order `tinylm --help` lists them
COMMANDS = {
    "train": "train a model (python train.py)",
    "generate": "sample text from a checkpoint (python generate.py)",
    "evaluate": "score a checkpoint on a text (python evaluate.py)",
    "analyze": "heads, logit lens and patching of a checkpoint (python analyze.py)",
    "visualize": "a checkpoint's attention maps as PNG files (python visualize.py)",
    "export": "a checkpoint as one ONNX file (python export.py)",
}


def run_command(name: str) -> None:
    """Run command ``name`` on ``sys.argv[1:]`` (its ``KEY=VALUE`` overrides and Hydra's flags). This module
    imports nothing at its top but the standard library and tinylm.errors: a Ctrl-C while Python is still
    starting is caught here, as early as a launcher can."""
    try:  # Ctrl-C while Python is still importing: stop quietly, like any interrupted program
        from tinylm.run_folder import use_project_root

        use_project_root()
        command = importlib.import_module(f"tinylm.commands.{name}")
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    command.run_command_line()


def launch(main: Callable[[], None], config_name: str, text_keys: Iterable[str], path_keys: Iterable[str]) -> None:
    """Run a command's ``@hydra.main`` app of ``conf/<config_name>.yaml`` with its free text and paths quoted for
    Hydra, quiet on a closed pipe; an override Hydra cannot apply is one ``error:`` line (``tinylm.precheck``)."""
    from tinylm.cli import quiet_broken_pipe, quote_values
    from tinylm.errors import TinyLMError
    from tinylm.precheck import composed
    from tinylm.run_folder import CONF_DIR

    sys.argv = quote_values(quote_values(sys.argv, text_keys, literal=True), path_keys)
    try:
        composed(config_name, sys.argv, CONF_DIR)
    except TinyLMError as e:
        raise SystemExit(f"error: {e}") from None
    with quiet_broken_pipe():
        main()


def checkpoint_from_config(cfg: DictConfig) -> Chosen:
    """The checkpoint that a command's ``ckpt_path``, ``run_dir`` or else the newest run under ``paths.log_dir``
    names, and why (``tinylm.run_folder.choose_checkpoint``)."""
    from tinylm.cli import resolve_path
    from tinylm.run_folder import choose_checkpoint

    return choose_checkpoint(resolve_path(cfg.ckpt_path), resolve_path(cfg.run_dir), cfg.paths.log_dir)
