"""What the command-line entry points share: quoting free-form values for Hydra, and exiting cleanly.

Hydra parses every ``key=value`` with its override grammar. Unquoted, it rejects non-ASCII
letters (``prompt=我正在学习``, ``ckpt_path=模型/step.ckpt``), quotes, brackets and ``=``, makes
``a,b`` a sweep, trims outer spaces, and OmegaConf resolves ``${...}``. ``quote_values`` wraps the
values of chosen keys in Hydra quotes before Hydra sees ``sys.argv``, so users never have to quote
twice (once for the shell, once for Hydra). ``run_command`` and ``quiet_broken_pipe`` make an
entry point follow the house rules: bad input is one ``error: ...`` line, Ctrl-C exit 130, a
closed pipe a quiet exit 141. ``encode_text`` and ``check_out_dir``: the text and the output
folder of the commands that draw a checkpoint's figures (visualize.py, analyze.py).
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from tinylm.errors import EXIT_INTERRUPTED, TinyLMError
from tinylm.textfile import unwritable_folder

if TYPE_CHECKING:
    from tinylm.tokenizer import Tokenizer

# bash reports 128 + SIGPIPE (13) for `yes | head -1`: a closed pipe reads the same for us, so
# `set -o pipefail` scripts that already accept it from other tools accept it from ours.
EXIT_BROKEN_PIPE = 141
# train.py's folder and file names, quoted for Hydra; the files only outside a sweep, where
# data.path=a.txt,b.txt means two jobs
TRAIN_FOLDER_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "paths.log_dir", "paths.root_dir")
TRAIN_PATH_KEYS = ("data.path", "ckpt_path", *TRAIN_FOLDER_KEYS)


def _escape_interpolations(text: str) -> str:
    """Make OmegaConf read ``${`` as text: ``\\${`` is a literal ``${``, and the backslashes
    right before it must double so they stay backslashes (other backslashes are never special)."""
    return re.sub(r"(\\*)\$\{", r"\1\1\\${", text)


def _hydra_quoted(value: str) -> str:
    """``value`` in Hydra single quotes: only a quote, and backslashes right before a quote or
    before the closing quote, need escaping."""
    value = re.sub(r"(\\*)(')", r"\1\1\\\2", value)  # \' -> \\\'  and ' -> \'
    value = re.sub(r"(\\+)$", r"\1\1", value)  # a final backslash must not eat the closing quote
    return f"'{value}'"


def _already_quoted(value: str) -> bool:
    return len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""


def quote_values(argv: list[str], keys: Iterable[str], literal: bool = False) -> list[str]:
    """``argv`` with the values of ``key=value`` (also ``+key=`` / ``++key=``) for ``keys`` in Hydra quotes.

    Then Hydra reads any text there as is: spaces, CJK, quotes, backslashes, ``=`` and ``,``.
    Left alone: values already in quotes (``key='...'`` or ``key="..."``: Hydra syntax written on
    purpose, e.g. ``prompt="'null'"`` for the text "null"), an empty value (``key=``, the empty
    string) and ``null`` (in any case, as Hydra spells it: the key stays unset).
    ``literal``: free text, not config syntax: ``${...}`` is escaped so OmegaConf keeps it as
    written instead of resolving it (``prompt='${oc.env:HOME}'`` stays that text). Without it (paths)
    an interpolation such as ``ckpt_path=${paths.log_dir}/x.ckpt`` still works.
    """
    keys = set(keys)
    quoted = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key.lstrip("+") in keys and value and value.lower() != "null" and not _already_quoted(value):
            arg = f"{key}={_hydra_quoted(_escape_interpolations(value) if literal else value)}"
        quoted.append(arg)
    return quoted


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's final flush of what is still
    buffered cannot fail again on the closed pipe (and print 'Exception ignored' to stderr)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@contextmanager
def quiet_broken_pipe():
    """Exit 141 without a word when the reader of stdout goes away (``generate.py | head -c 20``).

    Wrap the whole entry point (Hydra's own ``--help`` prints outside ``run_command``). stdout is
    flushed on the way out, even on ``sys.exit``, so a pending write fails here and not at exit.
    """
    try:
        try:
            yield
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None


def resolve_path(path: str | None) -> str | None:
    """Relative paths are relative to the directory the user launched from, not the run folder."""
    return None if path in (None, "") else hydra.utils.to_absolute_path(str(path))


@contextmanager
def few_collections():
    """Import torch and Lightning without the cyclic garbage collector: they make about a million objects,
    and the collector sweeps them again and again as they come (what that costs: docs/performance.md).
    Afterwards what was imported is frozen out of later collections (``gc.freeze``), only
    if something was: a sweep's next job in the same process imports nothing, and freezing then would keep
    the last job's uncollected garbage for good."""
    modules = len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > modules:
            gc.freeze()
        gc.enable()


def run_command(run: Callable[[DictConfig], object], cfg: DictConfig) -> None:
    """Call an entry point's ``run(cfg)`` (inside Hydra's main), ending without a traceback:
    bad input is one ``error: ...`` line, Ctrl-C exit 130, a closed stdout exit 141."""
    try:
        with quiet_broken_pipe():
            run(cfg)
    except TinyLMError as e:
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None


@contextmanager
def writing_into(out_dir: Path, what: str):
    """One ``error:`` line for what a check of ``out_dir`` could not know: a full disk, a read-only mount, a race."""
    try:
        yield
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise TinyLMError(f"could not write {what} into {out_dir}: {e.strerror or e}{where}; pass out_dir=DIR, "
                          "a folder you can write to") from None


def encode_text(tokenizer: Tokenizer, text: str, block_size: int) -> list[int]:
    """The probe text's ids, or one clear error if the model cannot read it."""
    if not text:
        raise TinyLMError('text is empty: pass the text to look at, e.g. text="自注意力可以让序列"')
    from tinylm.tokenizer import unknown_characters

    if missing := tokenizer.unknown(text):
        raise unknown_characters(tokenizer, "text", missing, "use characters of the training text")
    ids = tokenizer.encode(text)
    if len(ids) > block_size:
        raise TinyLMError(
            f"text is {len(ids)} tokens long but the model sees at most block_size={block_size}: "
            "pass a shorter text"
        )
    return ids


def check_out_dir(out_dir: Path) -> None:
    """One clear error, before anything is drawn, if the PNGs cannot go into ``out_dir`` (nothing is created)."""
    problem = unwritable_folder(out_dir)
    if problem is None:
        return
    folder, why = problem
    fix = "a folder (or a new name)" if not folder.is_dir() else "a folder you can write to"
    raise TinyLMError(f"cannot write the PNGs into {out_dir}: {folder} {why}; pass out_dir=DIR, {fix}")
