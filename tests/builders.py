"""What only the tests build directly: a tokenizer from one whole text (training builds its tokenizer from a
stream, ``tinylm.tasks.text.tokens.tokenize``) and every built-in architecture's classes."""

from __future__ import annotations

from tinylm.models import BUILT_IN, config_class, model_class
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
