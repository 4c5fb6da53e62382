"""What can be wrong with an RNN's (LSTM or GRU) config, each one line that names the key and a fix."""

from __future__ import annotations

from tinylm.models.checks import size_problems

RNN_ARCHS = ("lstm", "gru")


def rnn_config_problems(cfg: dict) -> list[str]:
    """Everything wrong with an RNN config (``model.*`` plus vocab_size), each one line."""
    problems = size_problems(cfg, ("vocab_size", "block_size", "n_embd", "hidden_size", "num_layers"))
    if cfg.get("arch") not in RNN_ARCHS:
        problems.append(f"model.arch={cfg.get('arch')!r}: choose one of {', '.join(RNN_ARCHS)}")
    return problems
