"""Which text the neurons are read on: the run's validation text, as ``evaluate.py split=val`` scores it.

The run's recorded config (``.hydra/config.yaml`` beside the checkpoint's folder) names its data file and how
training split it; its task reads that split (``Task.validation_text``: the last ``data.val_fraction`` of the
characters, as the data module's ``read_split``), without Lightning. At most ``VALIDATION_CHARS`` characters
of it are read (its start), in windows of block_size. Without a run config, a data file, or a validation text
the tokenizer can read, the caller falls back to its probe text, and says why.
"""

from __future__ import annotations

import glob
from pathlib import Path

from tinylm.errors import TinyLMError

VALIDATION_CHARS = 65_536  # the neurons read at most the first 64k characters of the validation text


def _exists(path: Path) -> bool:
    return bool(glob.glob(str(path))) if glob.has_magic(str(path)) else path.exists()


def validation_text(loaded) -> tuple[str | None, str]:
    """(the start of the run's validation text, at most VALIDATION_CHARS characters; what it is), or (None, why
    it cannot be read). Never downloads: a data file that is missing is a reason, not a fetch."""
    from omegaconf import OmegaConf

    from tinylm.commands.evaluate import run_config
    from tinylm.tasks import get_task

    if loaded.path is None:
        return None, "the model was not loaded from a run folder"
    try:
        saved = run_config(Path(loaded.path))
        if saved is None:
            return None, f"no recorded run config beside {loaded.path}"
        data = OmegaConf.to_container(saved.data, resolve=True)
        path = data.get("path")
        if path and not _exists(Path(path)):
            return None, f"the run's data file {path} is missing"
        whole = get_task(loaded.task).validation_text(data)
        if whole is None:
            return None, "the run's data is not one text"
    except TinyLMError as e:
        return None, str(e)
    if not whole:
        return None, "the run has no validation text (data.val_fraction=0)"
    text = whole[:VALIDATION_CHARS]
    if loaded.tokenizer.unknown(text):
        return None, f"the run's data file {path} holds characters the tokenizer does not know"
    shown = f"its first {len(text):,} of {len(whole):,} characters" if len(text) < len(whole) else \
        f"{len(text):,} characters"
    return text, f"the run's validation text of {path} ({shown})"


def neurons_text(loaded, given: str | None, probe: str | None, probe_name: str = "the probe text"):
    """(text, source, line): ``given`` (source "text"), else the run's validation text ("validation"), else
    ``probe`` ("probe", with a line saying why the validation text was not read; None where there is none)."""
    if given is not None:
        return given, "text", None
    text, what = validation_text(loaded)
    if text is not None:
        return text, "validation", None
    return probe, "probe", f"neurons: read on {probe_name}, not the run's validation text: {what}"
