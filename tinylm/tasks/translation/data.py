"""Translation data (``data=pairs``): ``source<TAB>target`` lines, one character vocabulary, padded batches
(their layout: ``tinylm.tasks.translation.batches``).

The vocabulary is a ``CharTokenizer`` whose first three symbols are the control characters NUL
(padding), STX (begin) and ETX (end), then every character of the pairs: plain data in the
checkpoint like any character vocabulary, and the ids PAD_ID, BEGIN_ID and END_ID of the model.
Training batches are drawn at random, batch ``s`` depending only on (seed, rank, s) as for text;
validation reads held-out lines in fixed, seeded batches.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

from tinylm.errors import TinyLMError
from tinylm.models.seq2seq import BEGIN_ID, END_ID, PAD_ID
from tinylm.tasks.data import SeededBatches, batch_loader, data_identity, stream_position
from tinylm.tasks.data_file import DEFAULT_MAX_MIB, decode_text, read_data_bytes
from tinylm.tasks.translation.batches import collate, collate_decoder_only
from tinylm.tasks.translation.numbers_zh import numbers_zh_pairs
from tinylm.tokenizer import CharTokenizer

log = logging.getLogger(__name__)

SPECIAL = {PAD_ID: "\x00", BEGIN_ID: "\x02", END_ID: "\x03"}  # padding, begin, end: the first three symbols
# Undecodable bytes in a pairs file: no replacing them (a pair with a wrong character would be
# learned as a wrong translation), the file's encoding or a UTF-8 copy instead
CONVERT_FIX = "convert the file to UTF-8 first (e.g. iconv -f GBK -t UTF-8 pairs.tsv > pairs-utf8.tsv)"


def parse_pairs(text: str, path: Path) -> list[tuple[str, str]]:
    """(source, target) of every line ``source<TAB>target``; blank lines are skipped.

    The first tab splits a line. A line without one, with an empty side, or with one of the
    three control characters the vocabulary reserves is one TinyLMError naming its line number.
    Lines with more tabs (a third column) are kept as they are, the rest of the line the target,
    with one warning naming the first of them.
    """
    pairs, more_tabs = [], []  # more_tabs: the numbers of lines with a tab in the target
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        source, tab, target = line.partition("\t")
        if not tab:
            raise TinyLMError(f"{path} line {number} has no tab: write each pair as source<TAB>target")
        if not source or not target:
            side = "source" if not source else "target"
            raise TinyLMError(f"{path} line {number} has an empty {side}: give both sides of the pair")
        if any(c in SPECIAL.values() for c in line):
            raise TinyLMError(f"{path} line {number} has a NUL, STX or ETX character, which the vocabulary "
                              "reserves for padding, begin and end: remove it")
        if "\t" in target:
            more_tabs.append(number)
        pairs.append((source, target))
    if more_tabs:
        log.warning("%s: %d line(s) have more than one tab (the first: line %d): everything after the first tab "
                    "is the target, tabs and further columns included; write two columns, source<TAB>target",
                    path, len(more_tabs), more_tabs[0])
    return pairs


class RandomPairs(SeededBatches):
    """Random pairs, collated: one training batch per step."""

    def __init__(self, examples, batch_size, seed, rank=0, start_step=0, collate_fn=collate):
        super().__init__(seed, rank, start_step)
        self.examples, self.batch_size, self.collate_fn = examples, batch_size, collate_fn

    def draw(self, generator: torch.Generator):
        picks = torch.randint(len(self.examples), (self.batch_size,), generator=generator)
        return self.collate_fn([self.examples[i] for i in picks.tolist()])


class PairDataModule(L.LightningDataModule):
    """The pairs of ``path`` (or the generated demo), for an encoder-decoder or, ``decoder_only``, for a
    decoder-only model: the training job passes it from the model's kind (``tinylm.tasks.translation.task``)."""

    def __init__(
        self,
        path: str | None = None,
        demo: str = "numbers_zh",
        demo_pairs: int = 6000,
        demo_max: int = 9999,
        block_size: int = 16,
        batch_size: int = 64,
        val_fraction: float = 0.1,
        val_batches: int = 4,
        decoder_only: bool = False,
        encoding: str = "utf-8",
        max_mib: float = DEFAULT_MAX_MIB,
        seed: int = 1337,
    ):
        super().__init__()
        self.path = Path(path) if path else None
        self.demo, self.demo_pairs, self.demo_max = demo, demo_pairs, demo_max
        self.block_size, self.batch_size = block_size, batch_size
        self.val_fraction, self.val_batches = val_fraction, val_batches
        self.decoder_only = decoder_only
        self.collate = collate_decoder_only if decoder_only else collate
        self.encoding, self.max_mib, self.seed = encoding, max_mib, seed
        self.tokenizer: CharTokenizer | None = None
        self.val_chars_per_token = 1.0  # one symbol per character: bits per character = bits per symbol

    def read_pairs(self) -> list[tuple[str, str]]:
        """The pairs of ``path``, or of the generated demo when there is no path."""
        if self.path is not None:
            raw = read_data_bytes(self.path, self.max_mib)
            return parse_pairs(decode_text(raw, self.path, self.encoding, bad_bytes_fix=CONVERT_FIX), self.path)
        return numbers_zh_pairs(self.demo_pairs, self.demo_max, self.seed)

    @property
    def source_name(self) -> str:
        return str(self.path) if self.path is not None else f"the generated {self.demo} demo"

    def prepare(self) -> None:
        """Read, check, split and encode the pairs (idempotent). Raises TinyLMError on bad input."""
        if self.tokenizer is not None:
            return
        pairs = self.read_pairs()
        fitting = [(s, t) for s, t in pairs if self.fits(s, t)]
        if len(fitting) < len(pairs):
            most = self.block_size - 1
            longest = (f"source + target of at most {most} characters" if self.decoder_only
                       else f"a source of at most {self.block_size} characters, a target of at most {most}")
            log.warning("%s: dropped %d of %d pairs longer than model.block_size=%d (%s); raise "
                        "model.block_size to keep them", self.source_name, len(pairs) - len(fitting), len(pairs),
                        self.block_size, longest)
        if len(fitting) < 2:
            raise TinyLMError(
                f"{self.source_name} has {len(fitting)} usable pair(s) (of {len(pairs)} read, lines "
                f"source<TAB>target no longer than model.block_size={self.block_size}): training needs at "
                "least 2, one to train on and one to validate; give more pairs or raise model.block_size"
            )
        characters = sorted(set("".join(s + t for s, t in fitting)))
        self.tokenizer = CharTokenizer([SPECIAL[i] for i in range(len(SPECIAL))] + characters)
        random.Random(self.seed).shuffle(fitting)  # held-out lines: a seeded draw, not the file's end
        n_val = max(1, int(len(fitting) * self.val_fraction))
        examples = [(self.tokenizer.encode(s), self.tokenizer.encode(t)) for s, t in fitting]
        self.train_examples, self.val_examples = examples[n_val:], examples[:n_val]
        # each pair as its source ids, -1, its target ids, -2: one sequence per split (tinylm.tasks.data.data_identity)
        self.identity = data_identity(*([i for s, t in split for i in (*s, -1, *t, -2)]
                                        for split in (self.train_examples, self.val_examples)))

    def fits(self, source: str, target: str) -> bool:
        """Whether a pair fits the model: the decoder reads BEGIN + target and predicts target + END;
        decoder-only, the model reads source + BEGIN + target."""
        if self.decoder_only:
            return len(source) + 1 + len(target) <= self.block_size
        return len(source) <= self.block_size and len(target) < self.block_size

    def summary(self) -> str:
        return (f"{self.source_name} ({len(self.train_examples):,} training and {len(self.val_examples):,} "
                f"validation pairs, vocabulary {self.tokenizer.vocab_size})")

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    def train_dataloader(self) -> DataLoader:
        rank, start = stream_position(self.trainer)
        return batch_loader(RandomPairs(self.train_examples, self.batch_size, self.seed, rank, start, self.collate))

    def val_batches_list(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The fixed validation batches: a seeded choice of held-out pairs, at most val_batches x batch_size."""
        order = torch.randperm(len(self.val_examples), generator=torch.Generator().manual_seed(self.seed))
        chosen = [self.val_examples[i] for i in order[: self.val_batches * self.batch_size].tolist()]
        return [self.collate(chosen[i : i + self.batch_size]) for i in range(0, len(chosen), self.batch_size)]

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_batches_list())
