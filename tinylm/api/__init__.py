"""tinylm from Python (docs/python.md), what ``import tinylm`` exposes:

- ``lm``: ``tinylm.load(source)`` -> ``LM``, a checkpoint ready to generate, score, run with hooks and show;
- ``training``: ``tinylm.train(overrides)`` -> ``Run``, ``python train.py`` in this process.

Each is a thin layer over what the commands run (``tinylm.commands``): the same checkpoint choice, the same
sampling and scoring code, the same checks and run folders, so the API and the commands cannot drift apart.
"""
