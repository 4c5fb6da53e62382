"""What only the tests build directly: a tokenizer from one whole text (training builds its tokenizer from a
stream, ``tinylm.tasks.text.tokens.tokenize``) and every built-in architecture's classes."""

from __future__ import annotations

import torch

from tinylm.models import BUILT_IN, config_class, model_class
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tokenizer import TOKENIZERS, BPETokenizer, ByteTokenizer, CharTokenizer, Tokenizer

# arch -> (config dataclass, model class) of each architecture in ``tinylm.models.BUILT_IN``
ARCHITECTURES = {arch: (config_class(model_class({"arch": arch})), model_class({"arch": arch})) for arch in BUILT_IN}


def build_tokenizer(kind: str, text: str, bpe_vocab_size: int = 512) -> Tokenizer:
    """The tokenizer ``data.tokenizer=kind`` gives a training text ``text``."""
    if kind == "char":
        return CharTokenizer.from_text(text)
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        return BPETokenizer.train(text, bpe_vocab_size)
    raise ValueError(f"unknown tokenizer {kind!r}: choose one of {', '.join(TOKENIZERS)}")


def trained_gpt(tokenizer: Tokenizer, text: str, block_size: int, steps: int = 60, **options) -> GPT:
    """A tiny GPT (2 layers, C=16, 2 heads, no dropout, ``options`` on top) trained in-process for ``steps`` steps
    on ``text`` four times over, seeded: it continues the text, and its logits are as peaked as a real model's."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=block_size, n_embd=16, num_heads=2,
                          num_layers=2, dropout=0.0, **options))
    data = torch.tensor(tokenizer.encode(text * 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        starts = torch.randint(len(data) - block_size - 1, (16,))
        x = torch.stack([data[s : s + block_size] for s in starts])  # (16, block_size)
        y = torch.stack([data[s + 1 : s + block_size + 1] for s in starts])
        loss = model(x, y)[1]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()
