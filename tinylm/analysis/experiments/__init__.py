"""The analyses ``analyze.py`` runs, one module each: ``heads`` (a decoder's head scores and ablation),
``cross_heads`` (an encoder-decoder's cross-attention heads), ``logit_lens`` and ``patching``. Each
registers its function (``tinylm.analysis.registry.register``); a new module here is a new analysis."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from tinylm.analysis import registry


@cache
def _import_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def registered() -> list[registry.Analysis]:
    """Every registered analysis, this package's and any registered elsewhere, in ``order``."""
    _import_all()
    return sorted(registry.REGISTERED, key=lambda analysis: analysis.order)
