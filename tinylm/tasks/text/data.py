"""Text data: read a UTF-8 file, build the tokenizer, serve shifted windows ``x, y``.

Training batches are drawn at random offsets, one whole batch per indexing op:

    offsets (B,) -> windows = ids[offsets[:, None] + arange(T + 1)]  (B, T+1)
    x = windows[:, :-1], y = windows[:, 1:]                          (B, T) each

The offsets of training step ``s`` depend only on (seed, rank, s), so a resumed run draws exactly
the batches an uninterrupted run would have drawn, with no sampler state to save. Validation uses
a fixed, seeded set of windows so val loss is comparable across steps and runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from tinylm.errors import TinyLMError
from tinylm.tasks.data import SeededBatches, batch_loader, data_identity, stream_position
from tinylm.tasks.data_file import DEFAULT_MAX_MIB, default_corpus_path, download
from tinylm.tasks.text import token_cache
from tinylm.tasks.text.corpus import Corpus, split_text
from tinylm.tasks.text.tokens import encode_ids, tokenize
from tinylm.textfile import MIB
from tinylm.tokenizer import Tokenizer, tokenizer_from_state

log = logging.getLogger(__name__)


def encode_array(tokenizer: Tokenizer, text: str) -> torch.Tensor:
    """Encode a whole text to a 1-D tensor of ids without a Python object per character."""
    return torch.from_numpy(encode_ids(tokenizer, text).astype(np.int32))


def gather_windows(ids: torch.Tensor, offsets: torch.Tensor, block_size: int):
    """One indexing op: offsets (B,) -> x, y (B, T) as int64, y shifted one step right of x."""
    windows = ids[offsets.unsqueeze(1) + torch.arange(block_size + 1)].long()  # (B, T+1)
    return windows[:, :-1], windows[:, 1:]


class RandomWindows(SeededBatches):
    """Random windows of a token stream: x, y (B, T) per batch."""

    def __init__(self, ids, block_size, batch_size, seed, rank=0, start_step=0):
        super().__init__(seed, rank, start_step)
        self.ids, self.block_size, self.batch_size = ids, block_size, batch_size

    def draw(self, generator: torch.Generator):
        high = len(self.ids) - self.block_size  # valid offsets: 0 .. len - T - 1
        offsets = torch.randint(high, (self.batch_size,), generator=generator)
        return gather_windows(self.ids, offsets, self.block_size)


class TextDataModule(L.LightningDataModule):
    def __init__(
        self,
        path: str | None = None,
        tokenizer: str = "char",
        block_size: int = 32,
        batch_size: int = 32,
        val_fraction: float = 0.1,
        val_batches: int = 8,
        repeat: int = 1,
        encoding: str = "utf-8",
        errors: str = "strict",
        seed: int = 1337,
        url: str | None = None,
        sha256: str | None = None,
        bpe_vocab_size: int = 512,
        max_mib: float = DEFAULT_MAX_MIB,
        cache_dir: str | None = None,
    ):
        super().__init__()
        self.path = Path(path) if path else default_corpus_path()
        self.tokenizer_kind, self.bpe_vocab_size = tokenizer, bpe_vocab_size
        self.block_size, self.batch_size = block_size, batch_size
        self.val_fraction, self.val_batches = val_fraction, val_batches
        self.repeat, self.encoding, self.errors = repeat, encoding, errors
        self.seed, self.url, self.sha256 = seed, url, sha256
        self.max_mib = max_mib
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.cache_folder: Path | None = None  # where the ids are mapped from, when cached
        self.tokenizer: Tokenizer | None = None

    def read_split(self) -> tuple[str, str]:
        """The training and the validation text, as training splits them (``evaluate.py`` too).
        Raises TinyLMError on bad input."""
        corpus = self.corpus()
        corpus.check_cap(self.max_mib)
        return split_text(corpus.read(), self.val_fraction)

    def corpus(self) -> Corpus:
        """The text of data.path (downloaded first when missing and data.url says where from), in chunks."""
        if not self.path.exists() and self.url:
            download(self.url, self.path, self.sha256)
        return Corpus(self.path, self.encoding, self.errors, self.repeat)

    def prepare(self) -> None:
        """Read, tokenize and split the text (idempotent). Raises TinyLMError on bad input.

        The text is split by characters (the last data.val_fraction of them is validation), each
        part is encoded whole. BPE merges are learned like weights, from the training text only; the
        character vocabulary must also cover the validation text, so it is counted over the whole
        text. A text of token_cache.CACHE_MIN_MIB or more is tokenized once into data.cache_dir and
        mapped from there; a smaller one (or any, with data.cache_dir=null) in memory.
        """
        if self.tokenizer is not None:
            return
        corpus = self.corpus()
        if self.cache_dir is not None and corpus.size >= token_cache.CACHE_MIN_MIB * MIB:
            self._prepare_cached(corpus)
        else:
            corpus.check_cap(self.max_mib)
            self._prepare_in_memory(corpus)
        # Bits per character = validation bits / validation characters
        #                    = (loss per token / ln 2) / (characters per token), for every tokenizer.
        self.val_chars_per_token = max(self.val_chars, 1) / max(len(self.val_ids), 1)
        self._check_lengths()
        generator = torch.Generator().manual_seed(self.seed)
        count = self.val_batches * self.batch_size
        self.val_offsets = torch.randint(len(self.val_ids) - self.block_size, (count,), generator=generator)

    def _tokenize(self, corpus: Corpus, open_sink) -> tuple[Tokenizer, int, int]:
        passes = iter(range(1, 4))  # counting, (BPE: learning merges,) encoding

        def stream(first: bool):
            return corpus.texts(report=first, progress=f"tokenizing {self.path}, pass {next(passes)}")
        return tokenize(stream, self.tokenizer_kind, self.val_fraction, self.bpe_vocab_size, open_sink)

    def _prepare_in_memory(self, corpus: Corpus) -> None:
        parts = ([], [])
        self.tokenizer, self.num_chars, self.val_chars = self._tokenize(
            corpus, lambda tokenizer, num_chars: lambda part, ids: parts[part].append(ids.astype(np.int32)))
        self.train_ids, self.val_ids = (torch.from_numpy(np.concatenate([np.zeros(0, np.int32), *ids]))
                                        for ids in parts)
        self.identity = data_identity(self.train_ids, self.val_ids)

    def _prepare_cached(self, corpus: Corpus) -> None:
        settings = {"tokenizer": self.tokenizer_kind, "val_fraction": self.val_fraction, "repeat": self.repeat,
                    "encoding": self.encoding, "errors": self.errors,
                    **({"bpe_vocab_size": self.bpe_vocab_size} if self.tokenizer_kind == "bpe" else {})}
        folder = token_cache.cache_folder(self.cache_dir, corpus.files, settings)
        tokens = corpus.size * (corpus.chars_per_byte() if self.tokenizer_kind == "char" else 1)
        try:
            meta, ids = token_cache.cached(folder, corpus.files, settings,
                                           lambda open_sink: self._tokenize(corpus, open_sink),
                                           data_identity, need=int(tokens * 2))  # uint16 ids
        except token_cache.NoSpace as e:
            if self.repeat == 1:
                raise
            raise TinyLMError(f"data.repeat={self.repeat} makes {corpus.size / MIB:,.0f} MiB of text from "
                              f"{self.path}, and {e} (or use a smaller data.repeat)") from None
        self.cache_folder = folder
        self.tokenizer = tokenizer_from_state(meta["tokenizer"])
        self.num_chars, self.val_chars, self.identity = meta["num_chars"], meta["val_chars"], meta["identity"]
        self.train_ids, self.val_ids = token_cache.map_ids(ids, meta)

    def _check_lengths(self) -> None:
        need = self.block_size + 1
        total = len(self.train_ids) + len(self.val_ids)
        if total < need:
            raise TinyLMError(
                f"{self.path} has {total} tokens but block_size={self.block_size} needs at least "
                f"{need}: use a longer text, data.repeat=N or a smaller model.block_size"
            )
        if len(self.val_ids) < need:
            val_need = -(-need // self.val_fraction) if self.val_fraction > 0 else float("inf")
            raise TinyLMError(
                f"validation split has {len(self.val_ids)} tokens, fewer than block_size+1={need}: "
                f"the text needs about {int(val_need)} tokens at data.val_fraction={self.val_fraction} "
                f"(raise data.val_fraction or data.repeat, or lower model.block_size)"
            )
        windows = len(self.train_ids) - self.block_size
        if windows < 1:
            raise TinyLMError(
                f"too few training windows remain: data.val_fraction={self.val_fraction:g} holds out "
                f"{len(self.val_ids)} of the {total} tokens, leaving {len(self.train_ids)} for training, fewer "
                f"than block_size+1={need}: lower data.val_fraction (e.g. 0.1), or use a longer text (data.repeat=N)"
            )
        if windows < self.batch_size:
            raise TinyLMError(
                f"data.batch_size={self.batch_size} is larger than the {windows} training windows "
                f"of this text: lower data.batch_size or use a longer text (data.repeat=N)"
            )

    def summary(self) -> str:
        """What the data is, for the training log."""
        cached = f", mapped from {self.cache_folder}" if self.cache_folder else ""
        return (f"{self.path} ({len(self.train_ids) + len(self.val_ids):,} tokens, "
                f"vocabulary {self.tokenizer.vocab_size}{cached})")

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    def train_dataloader(self) -> DataLoader:
        rank, start = stream_position(self.trainer)
        return batch_loader(RandomWindows(self.train_ids, self.block_size, self.batch_size, self.seed, rank, start))

    def val_dataloader(self) -> DataLoader:
        return batch_loader([gather_windows(self.val_ids, offsets, self.block_size)
                             for offsets in self.val_offsets.split(self.batch_size)])
