"""Tokenizers: text <-> integer ids.

Every tokenizer can describe itself as plain data (``state()``: lists, dicts and strings only) and
be rebuilt from it (``tokenizer_from_state``). That plain data is stored inside every checkpoint,
so a checkpoint alone is enough to generate text, and it loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from tinylm.errors import TinyLMError

SHOWN = 10  # unknown characters a message names, and known ones it shows


class UnknownCharacters(TinyLMError, ValueError):
    """A text with characters outside a checkpoint's vocabulary (``unknown_characters`` words it)."""


def _listed(chars: list[str]) -> str:
    return " ".join(repr(c) for c in chars[:SHOWN]) + (" ..." if len(chars) > SHOWN else "")


def unknown_characters(tokenizer: Tokenizer, what: str, missing: list[str], fix: str) -> UnknownCharacters:
    """The one error for characters of a text (``what``: "text", "the prompt", "source line 2", ...) that a
    checkpoint's vocabulary lacks: which, whose vocabulary (``tokenizer.origin``: the checkpoint and the
    data its run trained on), a few characters it does know, and ``fix`` (what fits the command)."""
    known = getattr(tokenizer, "itos", [])
    sample = [c for c in known if c.isalnum()] or [c for c in known if c.isprintable() and not c.isspace()]
    example = f', e.g. "{"".join(sample[:SHOWN])}"' if sample else ""
    whose = getattr(tokenizer, "origin", "") or "the checkpoint"
    return UnknownCharacters(f"{what} has {len(missing)} character(s) outside the checkpoint's vocabulary: "
                             f"{_listed(missing)}; {whose} has a vocabulary of {tokenizer.vocab_size} symbols"
                             f"{example}: {fix}")


def say_skipped(tokenizer: Tokenizer, what: str, missing: list[str]) -> None:
    """On stderr, what ``unknown=skip`` left out of a text: how many characters and which."""
    if missing:
        whose = getattr(tokenizer, "origin", "") or "the checkpoint"
        print(f"unknown=skip: left out {len(missing)} character(s) of {what} outside the vocabulary of {whose}: "
              f"{_listed(missing)}", file=sys.stderr)


class CharTokenizer:
    """One id per distinct character of the training text (sorted, so the mapping is stable)."""

    kind = "char"
    origin = ""  # whose vocabulary, for messages: "checkpoint <path> (trained on data.path=...)" once loaded

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
            raise unknown_characters(self, "the text", missing, "use characters of the training text")
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


def byte_symbols() -> list[str]:
    """The printable character that stands for each byte value (0..255) in byte-level BPE.

    Byte-level BPE (the ``tokenizers`` ByteLevel pre-tokenizer, as in GPT-2) spells every token as
    a string of printable characters, one per byte: a byte that is a printable Latin-1 character
    stands for itself; each of the other 68 (controls, space, DEL, NBSP, soft hyphen) takes the
    next character from U+0100 on, in byte order. Reading the vocabulary back through this table
    gives each token's exact bytes.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)}
    symbols, stand_ins = [], 0
    for byte in range(256):
        if byte in printable:
            symbols.append(chr(byte))
        else:
            symbols.append(chr(0x100 + stand_ins))
            stand_ins += 1
    return symbols


class BPETokenizer:
    """Byte-level BPE trained on the training text with Hugging Face ``tokenizers``.

    Starts from the 256 byte values (so, like ``ByteTokenizer``, any text can be encoded and
    nothing is unknown) and learns merges of frequent neighbours until ``vocab_size`` symbols:
    common English words or Chinese characters become one token. The trained tokenizer is kept
    as its JSON string, plain data for the checkpoint. Decoding goes through each token's bytes,
    so a token boundary inside a UTF-8 character is handled exactly like the byte tokenizer does.
    """

    kind = "bpe"

    def __init__(self, json: str):
        """Rebuild from the JSON string of a trained tokenizer; ValueError names what is wrong with it."""
        if not isinstance(json, str):
            raise ValueError(f"the BPE tokenizer's json must be a string, not {type(json).__name__}")
        from tokenizers import Tokenizer as HFTokenizer  # only a BPE run loads the library

        try:
            self.backend = HFTokenizer.from_str(json)
        except Exception as e:  # the tokenizers library raises a bare Exception for bad JSON
            raise ValueError(f"the BPE tokenizer's json cannot be read ({e})") from None
        self.json = json
        byte_of = {symbol: byte for byte, symbol in enumerate(byte_symbols())}
        vocab = self.backend.get_vocab()  # token string -> id, ids 0 .. V-1
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError("the BPE tokenizer's ids are not 0 .. vocab_size - 1")
        self.pieces = [b""] * len(vocab)
        for token, i in vocab.items():
            if not set(token) <= byte_of.keys():
                raise ValueError(f"the BPE tokenizer's token {token!r} is not spelled in byte-level symbols")
            self.pieces[i] = bytes(byte_of[symbol] for symbol in token)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        """Learn merges from ``text`` until ``vocab_size`` symbols (fewer if the text runs out)."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        backend = HFTokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # words, then bytes
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        backend.train_from_iterator([text], trainer=trainer)
        return cls(backend.to_str())

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def unknown(self, text: str) -> list[str]:
        return []

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text).ids

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")

    def decode_piece(self, ids: Iterable[int]) -> str:
        # as ByteTokenizer: an incomplete UTF-8 tail is dropped until its last byte arrives
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="ignore")

    def state(self) -> dict:
        return {"kind": self.kind, "json": self.json}


Tokenizer = CharTokenizer | ByteTokenizer | BPETokenizer
TOKENIZERS = ("char", "byte", "bpe")
MIN_BPE_VOCAB = 256  # the byte alphabet BPE starts from


def tokenizer_from_state(state: dict) -> Tokenizer:
    """Rebuild a tokenizer from the plain data stored in a checkpoint.

    Raises ValueError with one line naming what is wrong when ``state`` is not what ``state()``
    writes (a checkpoint made by hand or damaged).
    """
    if not isinstance(state, dict):
        raise ValueError(f"the tokenizer must be a dict, not {type(state).__name__}")
    kind = state.get("kind")
    if kind == "char":
        itos = state.get("itos")
        if not isinstance(itos, list) or not all(isinstance(ch, str) and len(ch) == 1 for ch in itos):
            raise ValueError("the char tokenizer's itos is not a list of single characters")
        return CharTokenizer(itos)
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        return BPETokenizer(state.get("json"))
    raise ValueError(f"unknown tokenizer kind {kind!r}: expected one of {', '.join(TOKENIZERS)}")
