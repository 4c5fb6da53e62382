"""The text the tinylm tab opens a run on (the ``runs`` route's ``text``): the run's own probe, made of its
vocabulary, so that every view answers on it. The first of:

- the probe the run recorded in its folder when training started (``tinylm.run_folder.PROBE_FILE``:
  the attention maps' probe, a translation run's source), read as ``runfiles`` reads a run's files;
- a run of an earlier release: the probe its attention weights were logged with (their tokens), a
  translation run's first validation source (its logged translations), from the event files through
  TensorBoard's data provider;
- the configured probe (``callbacks.attention_maps.text``, a translation run's ``translation_maps.source``,
  from Hydra's record), its known characters as the ``AttentionMaps`` callback keeps them;
- a text run's probe as ``AttentionMaps`` takes it without one (``tinylm.tasks.probe_text``): the opening of
  its training text, from the first ``HEAD_BYTES`` of the data file its record names (``data_file``, read as
  ``runfiles.head_of`` reads it, and only below the logdir or the folder TensorBoard was started from:
  ``may_read_data``), its known characters;
- else letters and digits of the run's vocabulary.

The last three read the checkpoint's tokenizer: what they give is kept per checkpoint and step.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tensorboard import plugin_util

from tinylm.errors import TinyLMError
from tinylm.explorer import events, runfiles
from tinylm.explorer.models import Models
from tinylm.explorer.runs import RunFolder
from tinylm.run_folder import PROBE_FILE
from tinylm.tasks.data_file import default_corpus_path
from tinylm.tasks.probe_text import OPENING_CHARS, known_probe, text_opening
from tinylm.textfile import as_lines, read_capped_bytes
from tinylm.tokenizer import Tokenizer

_lock = threading.Lock()
_kept: dict[tuple, str] = {}  # (run folder, checkpoint, its step, configured text, task, longest) -> text
KEPT = 1024
MAX_PROBE_MIB = 0.0625  # a probe is a phrase: a bigger probe.txt is not read
HEAD_BYTES = 4 * (4 * OPENING_CHARS + 256)  # AttentionMaps' probe lies in the characters of these bytes


def recorded_probe(run_dir: Path) -> str | None:
    """The probe the run recorded in its folder, read as the tab reads a run's files (``runfiles``: a regular
    file, no link on its way); None without one (a run of an earlier release) or an unreadable one."""
    path = run_dir / PROBE_FILE
    if not runfiles.unlinked(path):
        return None
    try:
        return read_capped_bytes(path, PROBE_FILE, MAX_PROBE_MIB, links=False).decode("utf-8") or None
    except (TinyLMError, UnicodeDecodeError):
        return None


def vocabulary_text(tokenizer: Tokenizer, longest: int) -> str:
    """Up to ``longest`` letters and digits of the vocabulary, in its order (its symbols if it has none)."""
    pieces = [tokenizer.decode_piece([i]) for i in range(tokenizer.vocab_size)]
    known = [p for p in pieces if p and not tokenizer.unknown(p)]
    return "".join([p for p in known if p.isalnum()][:longest] or known[:longest])


def data_file(run_dir: Path) -> tuple[Path, str] | None:
    """The text file a run's record names as its data, and its encoding: ``data.path`` as training resolved it
    (its interpolations, then against the folder it was launched from), the corpus shipped in the package
    without one; None when the record names no such file."""
    config = runfiles.record(run_dir)
    data = config.get("data") if config else None
    if not isinstance(data, dict) or not isinstance(data.get("path") or "", str):
        return None
    try:
        recorded = OmegaConf.create(config)
        path = OmegaConf.select(recorded, "data.path") if data.get("path") else None
        encoding = OmegaConf.select(recorded, "data.encoding", default="utf-8")
        launched = OmegaConf.select(OmegaConf.create(runfiles.record(run_dir, "hydra.yaml") or {}),
                                    "hydra.runtime.cwd", default=None)
    except (OmegaConfBaseException, ValueError):
        return None
    if not isinstance(encoding, str) or not isinstance(path, str | None):
        return None
    if path is None:
        return default_corpus_path(), encoding
    path = Path(launched, path) if isinstance(launched, str) else Path(path)
    return (path, encoding) if path.is_absolute() else None


def may_read_data(path: Path, run: RunFolder) -> bool:
    """Whether the tab reads ``path`` as ``run``'s data: a file below the logdir or below the folder TensorBoard
    was started from, or the corpus shipped in the package. A run's record is whatever its folder holds, and
    the tab shows what it reads, so a record naming a file elsewhere (a secret beside it) is not read."""
    logdir = run.path if run.name == "." else run.path.parents[len(run.name.split("/")) - 1]
    real = Path(os.path.realpath(path))
    roots = (Path(os.path.realpath(logdir)), Path(os.path.realpath(Path.cwd())))
    return real == Path(os.path.realpath(default_corpus_path())) or any(real.is_relative_to(r) for r in roots)


def data_opening(run: RunFolder) -> str | None:
    """The opening ``AttentionMaps`` takes a probe from, of the run's ``data_file`` (``may_read_data``); None
    when it cannot be read."""
    found = data_file(run.path)
    if found is None or not may_read_data(found[0], run):
        return None
    head = runfiles.head_of(found[0], HEAD_BYTES)
    if head is None:
        return None
    try:
        return text_opening(as_lines(head.decode(found[1], "ignore"))[0])
    except (LookupError, TypeError):
        return None


def derived_text(tokenizer: Tokenizer, configured: str | None, task: str, longest: int,
                 opening: str | None = None) -> str:
    """The configured probe, as the run would draw it; else a text run's ``opening`` (of its training text),
    its known characters; else ``vocabulary_text``."""
    if task == "translation":
        if configured and not tokenizer.unknown(configured) and len(configured) <= longest:
            return configured
        return vocabulary_text(tokenizer, longest)
    for text in (configured, opening):
        if text and (known := known_probe(text, tokenizer.unknown)) is not None:
            return known
    return vocabulary_text(tokenizer, longest)


def logged_text(data, environ: dict, run: RunFolder, task: str) -> str | None:
    """``events.logged_source`` (a translation run) or ``events.logged_probe`` through TensorBoard's data
    provider (None without one)."""
    if data is None:
        return None
    read = events.logged_source if task == "translation" else events.logged_probe
    return read(data, plugin_util.context(environ), plugin_util.experiment_id(environ), run)


def run_text(run: RunFolder, described: dict, models: Models, data, environ: dict) -> str:
    """The text the tab opens ``run`` on (see the module's docstring); ``described``: its ``runs`` entry,
    ``data`` and ``environ``: TensorBoard's data provider and the request's environment."""
    recorded = recorded_probe(run.path)
    if recorded:
        return recorded
    task = described["task"]
    if from_events := logged_text(data, environ, run, task):
        return from_events
    configured = run.probe_text(task)
    longest = described["block_size"] if task == "translation" else OPENING_CHARS
    key = (run.path, described["checkpoint"], described["step"], configured, task, longest)
    with _lock:
        if key in _kept:
            return _kept[key]
    opening = data_opening(run) if task == "text" else None
    text = derived_text(models.in_run(run, models.get).loaded.tokenizer, configured, task, longest, opening)
    with _lock:
        if len(_kept) >= KEPT:
            _kept.clear()
        _kept[key] = text
    return text
