"""What training logged about a run, read back through TensorBoard's data provider (the data TensorBoard
itself loaded from the run's event files; with ``--load_fast`` its Rust data server):

- the probe's raw attention weights the ``AttentionMaps`` callback logs next to its images
  (``tinylm.callbacks.attention.WEIGHTS_TAG``, plugin "tinylm", float16 (layers, heads, T, T), the probe's
  tokens as JSON in the summary's metadata): ``training``;
- the ``HeadScores`` callback's scalars, ``probe_heads_layer<L>/<score>_head<H>``: ``heads``;
- the probe those weights were drawn on (``logged_probe``), a translation run's first validation source
  (``logged_source``): the text the tab opens a run of an earlier release on (``tinylm.explorer.run_text``).

TensorBoard keeps a sample of each time series: 1,000 steps of scalars, and of the weights every step
(``tinylm.explorer.plugin.TinyLMLoader`` sets ``--samples_per_plugin tinylm=0``; TensorBoard's own default
is 10).
"""

from __future__ import annotations

import json
import math
import re

from tensorboard.data import provider

from tinylm.analysis.callback import SCALAR_TAG
from tinylm.analysis.heads import SCORES
from tinylm.callbacks.attention import WEIGHTS_TAG
from tinylm.explorer.runs import RunFolder

PLUGIN = "tinylm"
TRANSLATIONS_TAG = "translations/text_summary"  # TranslationSamples' lines, as SummaryWriter.add_text names them
FIRST_SOURCE = re.compile(r"^- \S+ `([^`\n]+)` → ", re.MULTILINE)
ALL_STEPS = 100_000  # what the reads ask for: every step TensorBoard kept


def event_runs(data, ctx, experiment: str, run: RunFolder) -> list[str]:
    """TensorBoard's runs that hold ``run``'s events: its folder, and the folders below it (a sweep job's
    ``<swept settings>/``, a run of an earlier release's ``tensorboard/``); every run for the logdir itself."""
    names = [r.run_name for r in data.list_runs(ctx, experiment_id=experiment)]
    return sorted(name for name in names if run.name in (".", name) or name.startswith(run.name + "/"))


def logged_probe(data, ctx, experiment: str, run: RunFolder) -> str | None:
    """The probe text the run's attention weights were logged with (its tokens joined); None before any."""
    runs = event_runs(data, ctx, experiment, run)
    if not runs:
        return None
    listed = data.list_tensors(ctx, experiment_id=experiment, plugin_name=PLUGIN,
                               run_tag_filter=provider.RunTagFilter(runs=runs, tags=[WEIGHTS_TAG]))
    for name in reversed(runs):  # a later event folder wins (a resumed run's)
        series = listed.get(name, {}).get(WEIGHTS_TAG)
        if series is not None:
            tokens = json.loads(series.plugin_content.decode("utf-8") or "{}").get("tokens") or []
            if all(isinstance(token, str) for token in tokens) and "".join(tokens):
                return "".join(tokens)
    return None


def logged_source(data, ctx, experiment: str, run: RunFolder) -> str | None:
    """The source of the first validation pair the run's ``TranslationSamples`` translated (its lines read
    ``- ✓ `source` → `prediction` (`reference`)``); None before any."""
    runs = event_runs(data, ctx, experiment, run)
    if not runs:
        return None
    read = data.read_tensors(ctx, experiment_id=experiment, plugin_name="text", downsample=1,
                             run_tag_filter=provider.RunTagFilter(runs=runs, tags=[TRANSLATIONS_TAG]))
    for name in reversed(runs):
        for datum in read.get(name, {}).get(TRANSLATIONS_TAG, [])[-1:]:
            text = datum.numpy.flat[0] if datum.numpy.size else b""
            text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
            if found := FIRST_SOURCE.search(text):
                return found.group(1)
    return None


def training(data, ctx, experiment: str, run: RunFolder) -> dict:
    """``{"tokens", "steps", "attention": [step][layer][head][query][key]}`` of the logged probe weights."""
    runs = event_runs(data, ctx, experiment, run)
    if not runs:
        return {"tokens": [], "steps": [], "attention": []}
    wanted = provider.RunTagFilter(runs=runs, tags=[WEIGHTS_TAG])
    listed = data.list_tensors(ctx, experiment_id=experiment, plugin_name=PLUGIN, run_tag_filter=wanted)
    read = data.read_tensors(ctx, experiment_id=experiment, plugin_name=PLUGIN, downsample=ALL_STEPS,
                             run_tag_filter=wanted)
    tokens: list[str] = []
    by_step = {}
    for name in runs:  # a later event folder wins a step logged twice (a resumed run's)
        series = listed.get(name, {}).get(WEIGHTS_TAG)
        if series is None:
            continue
        tokens = json.loads(series.plugin_content.decode("utf-8") or "{}").get("tokens", tokens)
        for datum in read.get(name, {}).get(WEIGHTS_TAG, []):
            by_step[datum.step] = datum.numpy
    steps = sorted(by_step)
    attention = [by_step[step].astype("float64").round(4).tolist() for step in steps]
    return {"tokens": tokens, "steps": steps, "attention": attention}


def heads(data, ctx, experiment: str, run: RunFolder) -> dict:
    """The head scores over steps: ``values[score][step][layer][head]`` (null where a step lacks one)."""
    runs = event_runs(data, ctx, experiment, run)
    found: dict[tuple[str, int, int], dict[int, float]] = {}  # (score, layer, head) -> step -> value
    if runs:
        listed = data.list_scalars(ctx, experiment_id=experiment, plugin_name="scalars",
                                   run_tag_filter=provider.RunTagFilter(runs=runs))
        tags = sorted({tag for name in runs for tag in listed.get(name, {}) if SCALAR_TAG.fullmatch(tag)})
        if tags:
            read = data.read_scalars(ctx, experiment_id=experiment, plugin_name="scalars", downsample=ALL_STEPS,
                                     run_tag_filter=provider.RunTagFilter(runs=runs, tags=tags))
            for name in runs:
                for tag, points in read.get(name, {}).items():
                    layer, score, head = SCALAR_TAG.fullmatch(tag).groups()
                    found.setdefault((score, int(layer), int(head)), {}).update(
                        (point.step, round(point.value, 6) if math.isfinite(point.value) else None)
                        for point in points)
    steps = sorted({step for values in found.values() for step in values})
    layers = 1 + max((layer for _, layer, _ in found), default=-1)
    count = 1 + max((head for _, _, head in found), default=-1)
    values = {score: [[[found.get((score, layer, head), {}).get(step) for head in range(count)]
                       for layer in range(layers)] for step in steps] for score in SCORES}
    return {"scores": list(SCORES), "layers": layers, "heads": count, "steps": steps, "values": values}
