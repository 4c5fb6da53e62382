"""What can be wrong with a GPT's config, each one line that names the key and a fix.

Checked before any data is read or model is built (``tinylm.models.model_config_problems``), so
the model file itself stays the architecture alone. ``attention_problems`` are the checks of the
settings every Transformer here shares (heads, positions): the encoder-decoder's too.
"""

from __future__ import annotations

from tinylm.models.checks import size_problems
from tinylm.values import FLAG, POSITIVE_NUMBER, is_int, nullable, value_problem

POS_ENCODINGS = ("learned", "sinusoidal", "rope")
ATTN_IMPLS = ("sdpa", "explicit")
NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("relu", "relu2")


def attention_problems(cfg: dict) -> list[str]:
    """What is wrong with n_embd, num_heads and pos_encoding together, each one line."""
    problems = []
    n_embd, heads = cfg.get("n_embd"), cfg.get("num_heads")
    if is_int(n_embd) and is_int(heads) and heads > 0 and n_embd % heads:
        divisors = [d for d in range(1, n_embd + 1) if n_embd % d == 0]
        nearest = min(divisors, key=lambda d: (abs(d - heads), -d))
        problems.append(
            f"model.n_embd={n_embd} is not divisible by model.num_heads={heads}: use "
            f"model.num_heads={nearest} or a multiple of {heads} for n_embd (e.g. {heads * -(-n_embd // heads)})"
        )
    if cfg.get("pos_encoding") not in POS_ENCODINGS:
        problems.append(f"model.pos_encoding={cfg.get('pos_encoding')!r}: choose one of {', '.join(POS_ENCODINGS)}")
    if cfg.get("pos_encoding") == "sinusoidal" and is_int(n_embd) and n_embd % 2:
        problems.append(f"model.n_embd={n_embd} must be even for sinusoidal positions")
    rope = cfg.get("pos_encoding") == "rope"
    if rope and is_int(n_embd) and is_int(heads) and heads > 0 and (n_embd // heads) % 2:
        problems.append(
            f"head size model.n_embd/model.num_heads={n_embd // heads} must be even for rope positions "
            "(it rotates pairs of channels): change model.n_embd or model.num_heads"
        )
    return problems


def gpt_config_problems(cfg: dict) -> list[str]:
    """Everything wrong with a GPT config (``model.*`` plus vocab_size), each one line."""
    problems = size_problems(cfg, ("vocab_size", "block_size", "n_embd", "num_heads", "num_layers"))
    if cfg.get("arch", "gpt") != "gpt":
        problems.append(f"model.arch={cfg.get('arch')!r} is not a GPT: use model=gpt")
    problems += attention_problems(cfg)
    if cfg.get("attn_impl") not in ATTN_IMPLS:
        problems.append(f"model.attn_impl={cfg.get('attn_impl')!r}: choose one of {', '.join(ATTN_IMPLS)}")
    return problems + option_problems(cfg)


def option_problems(cfg: dict) -> list[str]:
    """The speedrun options (absent from configs before them: their defaults)."""
    problems = []
    for key, choices in (("norm", NORMS), ("activation", ACTIVATIONS)):
        if cfg.get(key, choices[0]) not in choices:
            problems.append(f"model.{key}={cfg.get(key)!r}: choose one of {', '.join(choices)}")
    for key in ("qk_norm", "tied_head"):
        if problem := value_problem(f"model.{key}", cfg.get(key, False), FLAG):
            problems.append(problem)
    cap = nullable(POSITIVE_NUMBER, " (e.g. 15) or null (no cap)")
    if problem := value_problem("model.logit_softcap", cfg.get("logit_softcap"), cap):
        problems.append(problem)
    return problems
