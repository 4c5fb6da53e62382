"""The ``tinylm`` TensorBoard plugin: a tab that looks inside the runs of the logdir, and the same views
in a notebook cell or an HTML file.

TensorBoard finds it through the ``tensorboard_plugins`` entry point (pyproject.toml). The backend
serves JSON under ``/data/plugin/tinylm/`` (docs/inside.md lists the routes); the tab itself is the
plain ES module and its files in ``static/``, served as they are. One frontend, three hosts: in
TensorBoard it asks the routes; in a notebook cell (``lm.show``) or a saved file the same modules
answer from the routes' answers computed beforehand and written into the page.

- ``plugin``: the ``TBPlugin``, its routes and the static files;
- ``http``: request parameters checked, answers and errors as JSON;
- ``runs``: which folders of the logdir are tinylm runs, and what each holds;
- ``runfiles``: what of a run folder is read (regular files, bounded), and the rule for links: none is followed;
- ``models``: each run's model loaded once and kept (bounded, reloaded when its checkpoint changes);
- ``views``: the numbers of one text through a model (attention, predictions, logit lens, translation);
- ``circuits``: the Circuits and Neurons views' numbers (direct logit attribution, OV/QK, composition, neurons),
  those of ``tinylm.analysis.circuits``;
- ``events``: what training logged (the probe's attention weights, the head scores), read back;
- ``run_text``: the text the tab opens each run on, made of its vocabulary;
- ``standalone``: ``lm.show``'s, ``lm.show_heads``'s, ``lm.show_circuits``'s and ``lm.show_neurons``'s views: one
  self-contained HTML page each, no network;
- ``bundle``: the static ES modules and styles inlined into one page; ``head_scores``: the heads view's answer.
"""
