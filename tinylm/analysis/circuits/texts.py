"""Which text the neurons are read on: the run's validation text, as ``evaluate.py split=val`` scores it.

The run's recorded config (``.hydra/config.yaml`` beside the checkpoint's folder) names its data file and how
training split it (``tinylm.commands.evaluate.build_data``, the data module's ``read_split``: the last
``data.val_fraction`` of the characters). At most ``VALIDATION_CHARS`` characters of it are read (its start),
in windows of block_size. Without a run config, a data file, or a validation text the tokenizer can read, the
caller falls back to its probe text, and says why.
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

    from tinylm.commands.evaluate import DATA_KEYS, build_data, run_config

    if loaded.path is None:
        return None, "the model was not loaded from a run folder"
    try:
        saved = run_config(Path(loaded.path))
        if saved is None:
            return None, f"no recorded run config beside {loaded.path}"
        datamodule = build_data(OmegaConf.create({"data": dict.fromkeys(DATA_KEYS)}), loaded, Path(loaded.path))
        if not hasattr(datamodule, "read_split"):
            return None, "the run's data is not one text"
        if not _exists(datamodule.path):
            return None, f"the run's data file {datamodule.path} is missing"
        whole = datamodule.read_split()[1]
    except TinyLMError as e:
        return None, str(e)
    if not whole:
        return None, "the run has no validation text (data.val_fraction=0)"
    text = whole[:VALIDATION_CHARS]
    if loaded.tokenizer.unknown(text):
        return None, f"the run's data file {datamodule.path} holds characters the tokenizer does not know"
    shown = f"its first {len(text):,} of {len(whole):,} characters" if len(text) < len(whole) else \
        f"{len(text):,} characters"
    return text, f"the run's validation text of {datamodule.path} ({shown})"


def neurons_text(loaded, given: str | None, probe: str | None, probe_name: str = "the probe text"):
    """(text, source, line): ``given`` (source "text"), else the run's validation text ("validation"), else
    ``probe`` ("probe", with a line saying why the validation text was not read; None where there is none)."""
    if given is not None:
        return given, "text", None
    text, what = validation_text(loaded)
    if text is not None:
        return text, "validation", None
    return probe, "probe", f"neurons: read on {probe_name}, not the run's validation text: {what}"
