"""Tokenizers: text <-> integer ids.

Every tokenizer can describe itself as plain data (``state()``: lists, dicts and strings only) and
be rebuilt from it (``tokenizer_from_state``). That plain data is stored inside every checkpoint,
so a checkpoint alone is enough to generate text, and it loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from collections.abc import Iterable


class CharTokenizer:
    """One id per distinct character of the training text (sorted, so the mapping is stable)."""

    kind = "char"

    def __init__(self, itos: list[str]):
        self.itos = list(itos)
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def unknown(self, text: str) -> list[str]:
        """The distinct characters of ``text`` that are not in the vocabulary, in order of appearance."""
        return list(dict.fromkeys(ch for ch in text if ch not in self.stoi))

    def encode(self, text: str) -> list[int]:
        missing = self.unknown(text)
        if missing:
            raise ValueError(
                f"characters not in the vocabulary ({self.vocab_size} symbols): "
                + " ".join(repr(c) for c in missing)
            )
        return [self.stoi[ch] for ch in text]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.itos[i] for i in ids)

    def decode_piece(self, ids: Iterable[int]) -> str:
        """Decode part of a stream (for printing as tokens arrive); same as ``decode`` here."""
        return self.decode(ids)

    def state(self) -> dict:
        return {"kind": self.kind, "itos": list(self.itos)}


class ByteTokenizer:
    """256 symbols: the UTF-8 bytes of the text. Any text can be encoded; nothing is unknown."""

    kind = "byte"
    vocab_size = 256

    def unknown(self, text: str) -> list[str]:
        return []

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def decode_piece(self, ids: Iterable[int]) -> str:
        # A multi-byte character may be split across pieces; drop incomplete tails silently.
        return bytes(ids).decode("utf-8", errors="ignore")

    def state(self) -> dict:
        return {"kind": self.kind}


Tokenizer = CharTokenizer | ByteTokenizer
TOKENIZERS = ("char", "byte")


def build_tokenizer(kind: str, text: str) -> Tokenizer:
    """Build the tokenizer named by ``data.tokenizer`` for a training text."""
    if kind == "char":
        return CharTokenizer.from_text(text)
    if kind == "byte":
        return ByteTokenizer()
    raise ValueError(f"unknown tokenizer {kind!r}: choose one of {', '.join(TOKENIZERS)}")


def tokenizer_from_state(state: dict) -> Tokenizer:
    """Rebuild a tokenizer from the plain data stored in a checkpoint."""
    kind = state.get("kind")
    if kind == "char":
        return CharTokenizer(state["itos"])
    if kind == "byte":
        return ByteTokenizer()
    raise ValueError(f"unknown tokenizer kind {kind!r} in checkpoint")
