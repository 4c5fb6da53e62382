"""The built-in architectures by name: the model class a checkpoint names by its ``arch``, and its config checks."""

from __future__ import annotations

from collections.abc import Callable

from tinylm.models.gpt_checks import gpt_config_problems
from tinylm.models.rnn_checks import rnn_config_problems
from tinylm.models.seq2seq_checks import seq2seq_config_problems

# arch -> (the model class a checkpoint names by that arch, the checks of its config). By name: importing
# this package imports no torch (the model classes do), so that train.py checks a config's values
# (``model_config_problems``) before torch is imported. A class's config dataclass has the same checks
# (its ``problems``).
BUILT_IN: dict[str, tuple[str, Callable[[dict], list[str]]]] = {
    "gpt": ("tinylm.models.gpt.GPT", gpt_config_problems),
    "lstm": ("tinylm.models.rnn.RNNLanguageModel", rnn_config_problems),
    "gru": ("tinylm.models.rnn.RNNLanguageModel", rnn_config_problems),
    "seq2seq": ("tinylm.models.seq2seq.Seq2Seq", seq2seq_config_problems),
}
CHECKS = dict(BUILT_IN.values())  # a built-in class's name -> the checks of its config
