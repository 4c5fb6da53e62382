"""tinylm: a small, fast, fully inspectable Transformer language model: text, and translation pairs.

From Python (docs/python.md)::

    import tinylm

    lm = tinylm.load()                      # the newest run's best checkpoint, as generate.py picks it
    print(lm.generate("我正在学习", max_new_tokens=50, seed=1))
    logits, cache = lm.run_with_cache("自注意力")
    run = tinylm.train(["model.num_layers=2", "trainer.max_steps=200"])   # as python train.py ...

The names below are imported on first use (``__getattr__``): ``import tinylm`` imports no torch, so the
commands still refuse a bad command line before torch is imported.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it from here)

# name -> "module:attribute", imported when first asked for
_LAZY = {
    "load": "tinylm.api.lm:load",
    "LM": "tinylm.api.lm:LM",
    "load_transformer_lens": "tinylm.interop.transformer_lens:load",  # export.py format=transformer_lens's folder
    "train": "tinylm.api.training:train",
    "Run": "tinylm.api.training:Run",
    "GPT": "tinylm.models.gpt:GPT",
    "GPTConfig": "tinylm.models.gpt:GPTConfig",
    "RNNLanguageModel": "tinylm.models.rnn:RNNLanguageModel",
    "RNNConfig": "tinylm.models.rnn:RNNConfig",
    "Seq2Seq": "tinylm.models.seq2seq:Seq2Seq",
    "Seq2SeqConfig": "tinylm.models.seq2seq:Seq2SeqConfig",
    "Tokenizer": "tinylm.tokenizer:CharTokenizer",  # one id per character, as training builds it by default
    "ActivationCache": "tinylm.models.hook_points:ActivationCache",
    "HookPoint": "tinylm.models.hook_points:HookPoint",
    "TinyLMError": "tinylm.errors:TinyLMError",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """``tinylm.<name>`` of ``_LAZY``, imported on first use and kept; anything else: AttributeError (so that a
    submodule such as ``tinylm.checkpoint`` is imported as usual)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = _LAZY[name].partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
