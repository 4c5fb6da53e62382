"""Tokenizing a text stream in linear time and bounded memory, into any sink of ids.

Two passes over the chunks of a ``Corpus``. The first counts: the code points (a ``bincount``; the
character vocabulary is the sorted list of those seen, ``sorted(set(text))``) or only the
characters. That gives the split, at character ``num_chars - int(num_chars * val_fraction)``, and
for BPE the merges, learned from the training part through the tokenizers library's iterator API.
The second encodes each part, chunk by chunk, into the sink: characters through a lookup table
(code point -> id), BPE in batches of pieces cut where its pre-tokenizer cuts anyway, so the ids are
those of encoding each part whole.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from tinylm.tokenizer import BPETokenizer, ByteTokenizer, CharTokenizer, Tokenizer

BPE_PIECE_CHARS = 1 << 20  # BPE encodes pieces of about this many characters, a batch at a time
BPE_BATCH = 8
# Where byte-level BPE's pre-tokenizer (the GPT-2 pattern) always splits, whatever comes before and
# after: between a letter or digit and a punctuation mark (no pattern spans both, and neither piece
# looks ahead past it). Only characters every Unicode version agrees on, so the cut is the library's.
BPE_CUT = re.compile(r"(?<=[0-9A-Za-z\u4e00-\u9fff])(?=[。，、！？；：.,!?;:])")


def code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def count_code_points(texts: Iterable[str]) -> np.ndarray:
    """How often each code point occurs in the stream: (largest + 1,) int64."""
    counts = np.zeros(0, dtype=np.int64)
    for text in texts:
        seen = np.bincount(code_points(text))
        if len(seen) > len(counts):
            counts = np.concatenate([counts, np.zeros(len(seen) - len(counts), dtype=np.int64)])
        counts[: len(seen)] += seen
    return counts


def char_table(tokenizer: CharTokenizer) -> np.ndarray:
    """Code point -> id, -1 for a character outside the vocabulary; one entry past the largest
    code point stands for every larger one."""
    vocab = np.array([ord(c) for c in tokenizer.itos], dtype=np.int64)
    table = np.full(int(vocab.max(initial=0)) + 2, -1, dtype=np.int32)
    table[vocab] = np.arange(len(vocab), dtype=np.int32)
    return table


def encode_ids(tokenizer: Tokenizer, text: str, table: np.ndarray | None = None) -> np.ndarray:
    """Encode one text to an array of ids without a Python object per character (ValueError for a
    character outside a char vocabulary)."""
    if isinstance(tokenizer, CharTokenizer):
        table = char_table(tokenizer) if table is None else table
        ids = table[np.minimum(code_points(text), len(table) - 1)]
        if (ids < 0).any():
            raise ValueError("text has characters outside the vocabulary")
        return ids
    if isinstance(tokenizer, BPETokenizer):
        return np.array(tokenizer.encode(text), dtype=np.int32)  # merging runs in Rust
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def split_parts(texts: Iterable[str], n_train: int) -> Iterator[tuple[int, str]]:
    """The stream as (part, text): part 0 (training) for its first ``n_train`` characters, then 1."""
    seen = 0
    for text in texts:
        cut = min(max(n_train - seen, 0), len(text))
        if cut:
            yield 0, text[:cut]
        if cut < len(text):
            yield 1, text[cut:]
        seen += len(text)


def training_part(parts: Iterable[tuple[int, str]]) -> Iterator[str]:
    """The training text of a split stream (read no further than its end)."""
    return (text for _, text in itertools.takewhile(lambda item: item[0] == 0, parts))


def bpe_pieces(texts: Iterable[str], target: int = BPE_PIECE_CHARS) -> Iterator[str]:
    """The stream re-cut into pieces of about ``target`` characters at ``BPE_CUT`` places only, so
    encoding (or counting) the pieces one by one gives what the joined text gives. A text without
    such a place stays one piece."""
    buffer = ""
    for text in texts:
        buffer += text
        start = 0
        while len(buffer) - start >= 2 * target and (cut := BPE_CUT.search(buffer, start + target)):
            yield buffer[start : cut.start()]
            start = cut.start()
        buffer = buffer[start:]
    if buffer:
        yield buffer


def train_bpe(texts: Iterable[str], vocab_size: int) -> BPETokenizer:
    """BPE merges learned from a stream (its pieces, through the library's iterator API)."""
    return BPETokenizer.train(bpe_pieces(texts), vocab_size)


def encode_stream(tokenizer: Tokenizer, texts: Iterable[str]) -> Iterator[np.ndarray]:
    """The ids of a stream, chunk by chunk (BPE: in batches of pieces)."""
    if isinstance(tokenizer, BPETokenizer):
        batch = []
        for piece in (*bpe_pieces(texts), None):
            if piece is not None:
                batch.append(piece)
            if batch and (piece is None or len(batch) == BPE_BATCH):
                for encoding in tokenizer.backend.encode_batch(batch):
                    yield np.array(encoding.ids, dtype=np.int32)
                batch = []
        return
    table = char_table(tokenizer) if isinstance(tokenizer, CharTokenizer) else None
    for text in texts:
        yield encode_ids(tokenizer, text, table)


def tokenize(stream: Callable[[bool], Iterable[str]], kind: str, val_fraction: float, bpe_vocab_size: int,
             open_sink: Callable[[Tokenizer, int], Callable[[int, np.ndarray], None]]) -> tuple[Tokenizer, int, int]:
    """Build the tokenizer and write the ids of each part to a sink; -> (tokenizer, characters, of them
    in validation). ``stream(first)`` gives the text's chunks (``first``: the first pass, which warns),
    ``open_sink(tokenizer, characters)`` a ``write(part, ids)``."""
    if kind == "char":
        counts = count_code_points(stream(True))
        num_chars = int(counts.sum())
        tokenizer = CharTokenizer([chr(c) for c in np.flatnonzero(counts)])
    else:
        num_chars = sum(len(text) for text in stream(True))
    n_val = int(num_chars * val_fraction)
    if kind == "bpe":
        tokenizer = train_bpe(training_part(split_parts(stream(False), num_chars - n_val)), bpe_vocab_size)
    elif kind == "byte":
        tokenizer = ByteTokenizer()
    elif kind != "char":
        raise ValueError(f"unknown tokenizer {kind!r}")
    write = open_sink(tokenizer, num_chars)
    parts = split_parts(stream(False), num_chars - n_val)
    for part, texts in itertools.groupby(parts, key=lambda item: item[0]):  # each part encoded as a whole
        for ids in encode_stream(tokenizer, (text for _, text in texts)):
            write(part, ids)
    return tokenizer, num_chars, n_val
