"""``TinyLMPlugin``: the tinylm tab of TensorBoard, its JSON routes and its static files; ``TinyLMLoader``,
what the ``tensorboard_plugins`` entry point names.

TensorBoard loads it through the entry point and mounts ``get_plugin_apps()`` under ``/data/plugin/tinylm/``.
The tab is the ES module ``static/index.js`` (``frontend_metadata``), which imports its other files by
relative URL: every other path is a file of ``static/`` (the catch-all route). The routes (docs/inside.md):

    runs                         the runs of the logdir that have a checkpoint: each its name (what the routes
                                 take), its label (as TensorBoard lists it) and the text it opens on
    attention?run=R&text=T[&ablate=...]           every layer's and head's attention on the text
    predict?run=R&text=T[&ablate=1.0,1.3][&k=5]   the next tokens at each position, heads switched off
    lens?run=R&text=T[&ablate=...]                the logit lens
    translate?run=R&text=SOURCE  a translation run's greedy translation and cross-attention
    training?run=R               the probe's attention at each logged step
    heads?run=R                  the head scores over steps
    dla?run=R&text=T[&against=c]  direct logit attribution at each position (dla.json); a translation run's
                                 text is a source, its greedy translation attributed
    circuits?run=R               each head's copying and positional previous-token scores (circuits.json)
    ov?run=R&layer=L&head=H[&kind=cross]   a head's OV circuit (V x V) and copying score (kind=cross: an
                                 encoder-decoder's cross-attention head; self by default)
    qk?run=R&layer=L&head=H[&kind=cross]   a head's token QK (V x V) and positional QK (T x T) circuits
    composition?run=R            Q-, K-, V-composition of earlier heads with later ones (composition.json)
    neurons?run=R&text=T[&k=5]   each MLP neuron's top examples in the text, the characters it pushes up

A model computes one request at a time (its own lock: switching heads off hooks into it), beside the other
models; no lock is held while a file is read (``models``), so a slow or stuck request holds up no other
run's. The routes compute on ``threads`` torch threads (1): the tab's models are small, and a second thread
only waits for the first, badly on a busy machine (bench/bench_explorer.py: 25 ms against 440 ms for
``predict`` at load 14 on 2 cores).
"""

from __future__ import annotations

import mimetypes
import threading
from contextlib import contextmanager
from pathlib import Path

import torch
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tinylm.errors import TinyLMError
from tinylm.explorer import circuits, events, views
from tinylm.explorer.http import ablate_of, answer, json_route, k_of, parameter, text_of
from tinylm.explorer.models import Models
from tinylm.explorer.run_text import run_text
from tinylm.explorer.runs import NoCheckpoint, Runs
from tinylm.textfile import read_capped_bytes
from tinylm.values import one_line

STATIC = Path(__file__).resolve().parent / "static"
MAX_STATIC_MIB = 16
TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html",
         ".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png", ".woff2": "font/woff2"}


class TorchThreads:
    """torch's intra-op threads (one number for the process) set to ``count`` while any route computes, then
    as they were."""

    def __init__(self):
        self._lock = threading.Lock()
        self._computing = 0
        self._before = 0

    @contextmanager
    def set_to(self, count: int):
        with self._lock:
            if not self._computing:
                self._before = torch.get_num_threads()
                torch.set_num_threads(count)
            self._computing += 1
        try:
            yield
        finally:
            with self._lock:
                self._computing -= 1
                if not self._computing:
                    torch.set_num_threads(self._before)


class TinyLMPlugin(base_plugin.TBPlugin):
    plugin_name = "tinylm"
    threads = 1  # torch threads of the model routes

    def __init__(self, context: base_plugin.TBContext):
        self.runs = Runs(context.logdir)
        self.data = context.data_provider
        self.models = Models()
        self._threads = TorchThreads()

    def is_active(self) -> bool:
        return bool(self.runs.list(fresh=True))

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="tinylm", disable_reload=True)

    def get_plugin_apps(self) -> dict:
        return {
            "/runs": self.serve_runs,
            "/attention": self.serve_attention,
            "/predict": self.serve_predict,
            "/lens": self.serve_lens,
            "/translate": self.serve_translate,
            "/training": self.serve_training,
            "/heads": self.serve_heads,
            "/dla": self.serve_dla,
            "/circuits": self.serve_circuits,
            "/ov": self.serve_ov,
            "/qk": self.serve_qk,
            "/composition": self.serve_composition,
            "/neurons": self.serve_neurons,
            "/*": self.serve_static,
        }

    # ----------------------------------------------------------------------------------------
    # The model routes

    def computed(self, request, view, *args) -> dict:
        """``view`` of the model of the run ``run`` names (its checkpoint as ``generate.py run_dir=`` picks it)."""
        kept = self.models.in_run(self.runs.find(parameter(request, "run")), self.models.get)
        with kept.lock, self._threads.set_to(self.threads):
            return view(kept.loaded, *args)

    @json_route
    def serve_runs(self, request) -> dict:
        """The runs with a checkpoint; those whose checkpoint cannot be read in ``skipped``, with why."""
        listed, skipped = [], []
        for run in self.runs.list():
            try:
                described = self.models.in_run(run, self.models.description)
                text = run_text(run, described, self.models, self.data, request.environ)
            except NoCheckpoint:  # none (yet): not listed
                continue
            except TinyLMError as e:  # e.g. not a tinylm checkpoint, or too big
                skipped.append({"name": run.name, "error": one_line(e)})
                continue
            listed.append({"name": run.name, "label": run.label(), **described, "text": text})
        return {"runs": listed, "skipped": skipped}

    @json_route
    def serve_attention(self, request) -> dict:
        return self.computed(request, views.attention, text_of(request), ablate_of(request))

    @json_route
    def serve_predict(self, request) -> dict:
        return self.computed(request, views.predict, text_of(request), ablate_of(request), k_of(request))

    @json_route
    def serve_lens(self, request) -> dict:
        return self.computed(request, views.lens, text_of(request), ablate_of(request))

    @json_route
    def serve_translate(self, request) -> dict:
        return self.computed(request, views.translation, text_of(request))

    # ----------------------------------------------------------------------------------------
    # The circuits (tinylm.explorer.circuits: the analysis' own functions)

    @json_route
    def serve_dla(self, request) -> dict:
        return self.computed(request, circuits.dla, text_of(request), request.args.get("against") or None)

    @json_route
    def serve_circuits(self, request) -> dict:
        return self.computed(request, circuits.heads)

    @json_route
    def serve_ov(self, request) -> dict:
        return self.computed(request, circuits.ov, parameter(request, "layer"), parameter(request, "head"),
                             request.args.get("kind") or "self")

    @json_route
    def serve_qk(self, request) -> dict:
        return self.computed(request, circuits.qk, parameter(request, "layer"), parameter(request, "head"),
                             request.args.get("kind") or "self")

    @json_route
    def serve_composition(self, request) -> dict:
        return self.computed(request, circuits.composition)

    @json_route
    def serve_neurons(self, request) -> dict:
        return self.computed(request, circuits.neurons, text_of(request), parameter(request, "k", "5"))

    # ----------------------------------------------------------------------------------------
    # What training logged

    def logged(self, request, read) -> dict:
        run = self.runs.find(parameter(request, "run"))
        if self.data is None:
            raise TinyLMError("TensorBoard gave the plugin no data provider: start it with "
                                    "`tensorboard --logdir DIR`")
        environ = request.environ
        return read(self.data, plugin_util.context(environ), plugin_util.experiment_id(environ), run)

    @json_route
    def serve_training(self, request) -> dict:
        return self.logged(request, events.training)

    @json_route
    def serve_heads(self, request) -> dict:
        return self.logged(request, events.heads)

    # ----------------------------------------------------------------------------------------
    # The tab's files

    @wrappers.Request.application
    def serve_static(self, request):
        relative = request.path.split("/data/plugin/tinylm/", 1)[-1]
        path = (STATIC / relative).resolve()
        if not path.is_relative_to(STATIC) or not path.is_file():  # nothing else, never a link out of it
            return answer(request, {"error": f"no file {relative!r} in the tinylm tab: the routes are "
                                             f"{', '.join(sorted(r for r in self.get_plugin_apps() if r != '/*'))}"},
                          404)
        kind = TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return http_util.Respond(request, read_capped_bytes(path, "static file", MAX_STATIC_MIB), kind)



class TinyLMLoader(base_plugin.TBLoader):
    """The plugin, with TensorBoard told to keep every logged step of its tensors (the probe's raw attention
    weights): by default it keeps a sample of 10 steps of a plugin's tensors. ``--samples_per_plugin=tinylm=N``
    still sets another number."""

    def fix_flags(self, flags) -> None:
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(TinyLMPlugin.plugin_name, 0)  # 0: all

    def load(self, context: base_plugin.TBContext) -> TinyLMPlugin:
        return TinyLMPlugin(context)
