"""The head scores a saved heads view shows (``standalone.heads_view``), in the ``heads`` route's form:
``{"scores", "layers", "heads", "steps", "values": {score: [step][layer][head]}}``.

What training logged (the ``HeadScores`` callback's scalars) is read from the run's event files by the
route's own ``events.heads``, through TensorBoard's data provider over the run folder, as the tab reads it.
A run that logged none (``logger=none``, the callback off) gets its checkpoint's scores, computed now by the
analysis' ``attention_scores`` (what the callback logs) on a text: one step, the checkpoint's.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tinylm.errors import TinyLMError
from tinylm.explorer import views
from tinylm.run_folder import EVENT_FILE_PREFIX
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import LoadedModel


def run_folder(loaded: LoadedModel) -> Path:
    """The run folder of the checkpoint (``<run>/checkpoints/<file>``), else the checkpoint's folder."""
    return loaded.path.parent.parent if loaded.path.parent.name == "checkpoints" else loaded.path.parent


def logged(run_dir: Path) -> dict | None:
    """``events.heads`` of the run's event files (its folder and below), None when it has none."""
    if not any(path.name.startswith(EVENT_FILE_PREFIX) for path in run_dir.rglob(f"{EVENT_FILE_PREFIX}*")):
        return None
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    from tinylm.explorer import events
    from tinylm.explorer.runs import RunFolder

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(run_dir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(run_dir))
    return events.heads(provider, context.RequestContext(), "", RunFolder(".", run_dir))


def computed(loaded: LoadedModel, text: str) -> dict:
    """The checkpoint's scores on ``text`` (its last context window), as one step of the route's answer."""
    from tinylm.analysis.heads import SCORES, attention_scores

    model = loaded.model
    if not model.has_attention or is_encoder_decoder(model):
        what = "an encoder-decoder" if model.has_attention else f"an {model.config.arch} model"
        raise TinyLMError(f"this run's model is {what}: the head scores are a decoder's self-attention heads' "
                          "(pick a GPT run)")
    ids, _ = views.encoded(loaded, text)
    if len(ids) < 2:
        raise TinyLMError(f"text {text!r} is {len(ids)} token long: the head scores need 2 or more")
    rows = attention_scores(model, torch.tensor(ids))
    layers = 1 + max(row["layer"] for row in rows)
    heads = 1 + max(row["head"] for row in rows)
    table = {(row["layer"], row["head"]): row for row in rows}

    def value(score: str, layer: int, head: int) -> float | None:
        number = table[layer, head][score]
        return round(number, 6) if math.isfinite(number) else None

    values = {score: [[[value(score, layer, head) for head in range(heads)] for layer in range(layers)]]
              for score in SCORES}
    return {"scores": list(SCORES), "layers": layers, "heads": heads, "steps": [loaded.global_step or 0],
            "values": values}
