"""Reading a corpus in chunks: one file, a folder of ``.txt`` files or a glob, decoded as training reads it.

The text comes out as a stream of ``str`` chunks, never whole, so memory does not grow with the
corpus. The rules are ``tinylm.textfile``'s, kept across chunk edges: a character whose bytes are
split between two reads is decoded whole (an incremental decoder), a leading byte order mark is
dropped, and a CRLF split between two reads is still one LF. Many files are read in sorted order
and joined with ``SEPARATOR`` (a blank line) between them; ``repeat`` repeats the joined text.
"""

from __future__ import annotations

import codecs
import glob
import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.tasks.data_file import bad_byte_error, codec_problems, missing_data_file, warn_notes
from tinylm.textfile import MIB, crlf_as_lf, regular_file

log = logging.getLogger(__name__)

SEPARATOR = "\n\n"  # between two files of a folder or glob: the end of one and the start of the next
CHUNK_BYTES = 16 * MIB  # what a file is read by
PROGRESS_MIN_BYTES = 64 * MIB  # a smaller text is read in well under a second: no progress line



def corpus_files(path: Path) -> list[Path]:
    """The files ``data.path`` names: itself, the ``.txt`` files of a folder, or a glob's matches, sorted."""
    if glob.has_magic(str(path)):
        files = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_file())
        if not files:
            raise TinyLMError(f"data.path={path} matches no files (check the pattern, e.g. 'books/*.txt')")
        return files
    if path.is_dir():
        files = sorted(p for p in path.glob("*.txt") if p.is_file())
        if not files:
            raise TinyLMError(f"data.path={path} is a directory without .txt files: name a text file, or put "
                              "the texts there as *.txt")
        return files
    if not path.exists():
        raise TinyLMError(missing_data_file(path))
    return [path]


class Progress:
    """A progress line on stderr (size and rate) while a large text is read; nothing for a small one."""

    def __init__(self, what: str, total: int, stream=None):
        self.what, self.total, self.done = what, total, 0
        self.stream = stream or sys.stderr
        self.shown = total >= PROGRESS_MIN_BYTES
        self.start = self.last = time.perf_counter()

    def advance(self, n: int) -> None:
        """``n`` more bytes read; 0: a file's end (the last one's: the whole text read and handled)."""
        self.done += n
        now, last = time.perf_counter(), self.done >= self.total
        every = 0.5 if self.stream.isatty() else 10  # a log file gets a line every 10 s
        if self.shown and (now - self.last >= every and not last or n == 0 and last and self.last != -1):
            self.last = -1 if last else now
            end = "\r" if self.stream.isatty() and not last else "\n"
            rate = self.done / MIB / max(now - self.start, 1e-9)
            self.stream.write(f"{self.what}: {self.done / MIB:,.0f} of {self.total / MIB:,.0f} MiB "
                              f"({rate:,.0f} MiB/s){end}")
            self.stream.flush()


def decoded_chunks(path: Path, encoding: str = "utf-8", errors: str = "strict", chunk_bytes: int = CHUNK_BYTES,
                   report: bool = True, on_read: Callable[[int], None] | None = None) -> Iterator[str]:
    """The text of ``path`` in chunks, as ``decode_text`` reads it whole: the same characters, the
    same error line for a byte that does not decode, and (``report``) the same warning."""
    decoder = codecs.getincrementaldecoder(encoding)(errors=errors)
    read = crlf = lone_cr = nul = 0
    start, held, empty = True, "", True
    with open(path, "rb") as f:
        while True:
            raw = f.read(chunk_bytes)
            pending = decoder.getstate()[0]  # the bytes of a character split by the last read
            try:
                text = decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                before = read - len(pending)
                raise bad_byte_error(path, encoding, pending + raw, e, before,
                                     newlines_before(path, encoding, before, chunk_bytes)) from None
            read += len(raw)
            if on_read:
                on_read(len(raw))
            if start and text:
                text, start = text.removeprefix("\ufeff"), False
            text = held + text
            held = "\r" if raw and text.endswith("\r") else ""  # its LF may come with the next read
            text, n = crlf_as_lf(text[: len(text) - len(held)])
            if report:
                crlf, lone_cr, nul = crlf + n, lone_cr + text.count("\r"), nul + text.count("\0")
            if text:
                empty = False
                yield text
            if not raw:
                break
    if empty:
        raise TinyLMError(f"data file is empty: {path} (give it some text to learn from)")
    if report:
        warn_notes(path, crlf, lone_cr, nul)


def newlines_before(path: Path, encoding: str, end: int, chunk_bytes: int) -> int:
    """How many newlines the first ``end`` bytes of ``path`` decode to (for an error's line number)."""
    decoder, lines = codecs.getincrementaldecoder(encoding)(errors="replace"), 0
    with open(path, "rb") as f:
        while f.tell() < end:
            lines += decoder.decode(f.read(min(chunk_bytes, end - f.tell()))).count("\n")
    return lines


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """The training and the validation text: the last ``val_fraction`` of the characters is validation. The
    text is split (not its ids) so that the validation text's exact character count is known."""
    n_val_chars = int(len(text) * val_fraction)
    return text[: len(text) - n_val_chars], text[len(text) - n_val_chars :]


class Corpus:
    """The text of ``data.path`` (a file, a folder of .txt files or a glob), ``repeat`` times, in chunks."""

    def __init__(self, path: Path, encoding: str = "utf-8", errors: str = "strict", repeat: int = 1,
                 chunk_bytes: int | None = None):
        if problems := codec_problems(encoding, errors):
            raise TinyLMError("; ".join(problems))
        self.path, self.files = path, corpus_files(path)
        self.sizes = [regular_file(f, "data.path").st_size for f in self.files]
        self.encoding, self.errors, self.repeat = encoding, errors, repeat
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES

    @property
    def size(self) -> int:
        """Bytes read in one pass over the text (repeats included)."""
        return sum(self.sizes) * self.repeat

    def chars_per_byte(self) -> float:
        """Characters per byte at the start of the first file: what the whole text has, about."""
        with open(self.files[0], "rb") as f:
            raw = f.read(MIB)
        return len(raw.decode(self.encoding, errors="replace")) / max(len(raw), 1)

    def check_cap(self, max_mib: float) -> None:
        """Refuse a text that would not fit in ``data.max_mib`` MiB of memory, with one line."""
        limit = max_mib * MIB
        for file, size in zip(self.files, self.sizes, strict=True):
            if size > limit:
                raise TinyLMError(f"data.path={file} is {size / MIB:,.1f} MiB, over the {max_mib:g} MiB limit: "
                                  "raise it with data.max_mib=N (MiB) if you really mean it")
        if self.size > limit:
            what = f"{self.path}" if len(self.files) == 1 else f"the {len(self.files)} files of {self.path}"
            most = int(limit // max(sum(self.sizes), 1))
            raise TinyLMError(
                f"data.repeat={self.repeat} makes {self.size / MIB:,.0f} MiB of text from {what}, over the "
                f"data.max_mib={max_mib:g} limit: use data.repeat={most} or less, or raise data.max_mib"
            )

    def texts(self, report: bool = False, progress: str | None = None) -> Iterator[str]:
        """The joined text in chunks; ``report``: warn of CRLFs and the like (once, not per repeat);
        ``progress``: what to call a progress line for a large text."""
        bar = Progress(progress, self.size) if progress else None
        for copy in range(self.repeat):
            for i, file in enumerate(self.files):
                if i:
                    yield SEPARATOR
                yield from decoded_chunks(file, self.encoding, self.errors, self.chunk_bytes,
                                          report and copy == 0, bar.advance if bar else None)

    def read(self) -> str:
        """The whole joined text, in memory (for ``evaluate.py``; capped by ``check_cap`` first)."""
        return "".join(self.texts(report=True))
