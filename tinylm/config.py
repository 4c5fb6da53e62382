"""Checks on a composed training config, run before any data is read or model is built.

Hydra already rejects unknown keys (the config is in struct mode); this module catches values
that compose fine but cannot train: sizes <= 0, n_embd not divisible by num_heads, and so on.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from tinylm.errors import TinyLMError
from tinylm.rnn import model_config_problems
from tinylm.tokenizer import MIN_BPE_VOCAB, TOKENIZERS


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def config_errors(cfg: DictConfig) -> list[str]:
    """Every problem with a training config, each one line naming the key and the fix."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    compile_model = model.pop("compile", False)
    problems = model_config_problems({**model, "vocab_size": 1})
    if not isinstance(compile_model, bool):
        problems.append(f"model.compile={compile_model!r} must be true or false")
    data = cfg.data
    for key in ("batch_size", "val_batches", "repeat"):
        if not _positive_int(data[key]):
            problems.append(f"data.{key}={data[key]!r} must be a positive integer")
    if not isinstance(data.val_fraction, int | float) or not 0 < data.val_fraction < 1:
        problems.append(f"data.val_fraction={data.val_fraction!r} must be in (0, 1)")
    if data.tokenizer not in TOKENIZERS:
        problems.append(f"data.tokenizer={data.tokenizer!r}: choose one of {', '.join(TOKENIZERS)}")
    if data.tokenizer == "bpe" and not (_positive_int(data.bpe_vocab_size) and data.bpe_vocab_size >= MIN_BPE_VOCAB):
        problems.append(
            f"data.bpe_vocab_size={data.bpe_vocab_size!r} must be an integer >= {MIN_BPE_VOCAB} "
            "(BPE starts from the 256 byte values), e.g. 512"
        )
    optim = cfg.optim
    if not isinstance(optim.lr, int | float) or optim.lr <= 0:
        problems.append(f"optim.lr={optim.lr!r} must be a positive number")
    if optim.weight_decay < 0:
        problems.append(f"optim.weight_decay={optim.weight_decay!r} must be >= 0")
    if optim.warmup_steps < 0 or optim.decay_steps < 0:
        problems.append("optim.warmup_steps and optim.decay_steps must be >= 0")
    trainer = cfg.trainer
    if not _positive_int(trainer.max_steps):
        problems.append(f"trainer.max_steps={trainer.max_steps!r} must be a positive integer")
    interval = trainer.val_check_interval
    if not _positive_int(interval):
        problems.append(
            f"trainer.val_check_interval={interval!r} must be a positive number of steps"
        )
    if cfg.threads is not None and not _positive_int(cfg.threads):
        problems.append(f"threads={cfg.threads!r} must be a positive integer or null")
    return problems


def validate(cfg: DictConfig) -> None:
    """Raise one TinyLMError listing every problem, or return quietly."""
    problems = config_errors(cfg)
    if problems:
        raise TinyLMError("invalid config: " + "; ".join(problems))
