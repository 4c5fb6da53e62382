"""The text the tinylm tab opens a run on (the ``runs`` route's ``text``): the run's own probe, made of its
vocabulary, so that every view answers on it. The first of:

- the probe the run recorded in its folder when training started (``tinylm.run_folder.PROBE_FILE``:
  the attention maps' probe, a translation run's source), read as ``runfiles`` reads a run's files;
- a run of an earlier release: the probe its attention weights were logged with (their tokens), a
  translation run's first validation source (its logged translations), from the event files through
  TensorBoard's data provider;
- the configured probe (``callbacks.attention_maps.text``, a translation run's ``translation_maps.source``,
  from Hydra's record), its known characters as the ``AttentionMaps`` callback keeps them;
- else letters and digits of the run's vocabulary.

The last two read the checkpoint's tokenizer: what they give is kept per checkpoint and step.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tensorboard import plugin_util

from tinylm.errors import TinyLMError
from tinylm.explorer import events
from tinylm.explorer.models import Models
from tinylm.explorer.runfiles import unlinked
from tinylm.explorer.runs import RunFolder
from tinylm.run_folder import PROBE_FILE
from tinylm.tasks.probe_text import OPENING_CHARS, known_probe
from tinylm.textfile import read_capped_bytes
from tinylm.tokenizer import Tokenizer

_lock = threading.Lock()
_kept: dict[tuple, str] = {}  # (run folder, checkpoint, its step, configured text, task, longest) -> text
KEPT = 1024
MAX_PROBE_MIB = 0.0625  # a probe is a phrase: a bigger probe.txt is not read


def recorded_probe(run_dir: Path) -> str | None:
    """The probe the run recorded in its folder, read as the tab reads a run's files (``runfiles``: a regular
    file, no link on its way); None without one (a run of an earlier release) or an unreadable one."""
    path = run_dir / PROBE_FILE
    if not unlinked(path):
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


def derived_text(tokenizer: Tokenizer, configured: str | None, task: str, longest: int) -> str:
    """The configured probe, as the run would draw it; else ``vocabulary_text``."""
    if configured:
        if task == "translation":
            if not tokenizer.unknown(configured) and len(configured) <= longest:
                return configured
        elif (known := known_probe(configured, tokenizer.unknown)) is not None:
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
    text = derived_text(models.in_run(run, models.get).loaded.tokenizer, configured, task, longest)
    with _lock:
        if len(_kept) >= KEPT:
            _kept.clear()
        _kept[key] = text
    return text
