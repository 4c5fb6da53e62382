"""What can be wrong with an encoder-decoder's config, each one line that names the key and a fix.

Its sizes are checked like every model's (``size_problems``), its heads and positions like the
GPT's (``attention_problems``: the same attention).
"""

from __future__ import annotations

from tinylm.models.checks import size_problems
from tinylm.models.gpt_checks import attention_problems

SIZES = ("vocab_size", "block_size", "n_embd", "num_heads", "encoder_layers", "decoder_layers")


def seq2seq_config_problems(cfg: dict) -> list[str]:
    """Everything wrong with an encoder-decoder config (``model.*`` plus vocab_size), each one line."""
    problems = []
    if cfg.get("arch", "seq2seq") != "seq2seq":
        problems.append(f"model.arch={cfg.get('arch')!r} is not an encoder-decoder: use model=seq2seq")
    return problems + size_problems(cfg, SIZES) + attention_problems(cfg)
