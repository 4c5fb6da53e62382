"""The tinylm plugin inside a WSGI app of this process, as ``tensorboard --logdir`` mounts it, without a
server: for the tests and ``bench/bench_explorer.py`` (werkzeug's test ``Client`` calls it).

The event files are read once, when the app is made, by TensorBoard's Python multiplexer (a real
TensorBoard reads them with its data server, again and again as they grow).
"""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test, wrappers

from tinylm.explorer.plugin import TinyLMPlugin


def wsgi_app(logdir: str | Path) -> tuple[application.TensorBoardWSGI, TinyLMPlugin]:
    """TensorBoard's WSGI app with only the tinylm plugin, over ``logdir``'s runs (every logged step kept)."""
    logdir = str(logdir)
    events = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"tinylm": 0})
    events.AddRunsFromDirectory(logdir)
    events.Reload()
    context = base_plugin.TBContext(logdir=logdir, data_provider=data_provider.MultiplexerDataProvider(events, logdir))
    plugin = TinyLMPlugin(context)
    return application.TensorBoardWSGI([plugin]), plugin


def client(logdir: str | Path) -> tuple[test.Client, TinyLMPlugin]:
    """A werkzeug test client of ``wsgi_app(logdir)``, and its plugin."""
    app, plugin = wsgi_app(logdir)
    return test.Client(app, wrappers.Response), plugin
