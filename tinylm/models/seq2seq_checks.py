"""What can be wrong with an encoder-decoder's config, each one line that names the key and a fix.

The size, heads and position checks are the GPT's (``gpt_config_problems``), on the GPT config
that has the same attention: the encoder-decoder's layer counts stand in for ``num_layers``.
"""

from __future__ import annotations

from tinylm.models.base import size_problems
from tinylm.models.gpt_checks import gpt_config_problems


def seq2seq_config_problems(cfg: dict) -> list[str]:
    """Everything wrong with an encoder-decoder config (``model.*`` plus vocab_size), each one line."""
    problems = []
    if cfg.get("arch", "seq2seq") != "seq2seq":
        problems.append(f"model.arch={cfg.get('arch')!r} is not an encoder-decoder: use model=seq2seq")
    problems += size_problems({**cfg, "dropout": 0.0}, ("encoder_layers", "decoder_layers"))  # dropout: below
    as_gpt = {**cfg, "arch": "gpt", "num_layers": 1, "attn_impl": "explicit"}
    return problems + gpt_config_problems(as_gpt)
