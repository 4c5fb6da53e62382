"""The token cache: a text's ids, tokenized once, memory-mapped by every run that trains on it.

One folder per text and settings under ``data.cache_dir`` (its name: a hash of the files' paths and
of every setting that changes the ids), holding

    ids.bin    the training ids, then the validation ids: uint16 (vocabulary <= 65,536) or uint32
    meta.json  the fingerprint it was built from, the split, the tokenizer (its vocabulary) and the
               data identity; written last, so a folder without it (a build cut short) is never read
    lock       one process builds, the others wait on it (flock): sweep jobs, DDP ranks

The fingerprint names each file by its size, mtime and a SHA-256 of ``SAMPLES`` blocks spread over
it (a full hash of 1 GB takes seconds; the samples, milliseconds). A folder whose fingerprint no
longer matches (the text was edited) or whose files do not add up is rebuilt, with one warning.
Both files are written under temporary names and renamed, so a reader sees a whole cache or none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import mmap
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tinylm.errors import TinyLMError
from tinylm.textfile import MIB

log = logging.getLogger(__name__)

FORMAT = 1  # of ids.bin and meta.json: a change makes every older cache stale
CACHE_MIN_MIB = 8  # a smaller text is tokenized in memory in a fraction of a second: no cache
SAMPLES, SAMPLE_BYTES = 64, 64 * 1024
SPARE_BYTES = 64 * MIB  # left free on the disk beyond what the ids need


def file_identity(path: Path) -> dict:
    """Size, mtime and a SHA-256 of ``SAMPLES`` blocks spread evenly over the file (all of a small one)."""
    info = path.stat()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        last = max(info.st_size - SAMPLE_BYTES, 0)
        for offset in sorted({last * i // (SAMPLES - 1) for i in range(SAMPLES)}):
            f.seek(offset)
            digest.update(f.read(SAMPLE_BYTES))
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sampled_sha256": digest.hexdigest()}


def cache_folder(cache_dir: Path, files: list[Path], settings: dict) -> Path:
    """The folder of one text with one set of settings: a hash of the files' paths and the settings."""
    key = json.dumps({"files": [str(f.resolve()) for f in files], **settings}, sort_keys=True)
    return cache_dir / hashlib.sha256(key.encode()).hexdigest()[:20]


def fingerprint(files: list[Path], settings: dict) -> dict:
    return {"format": FORMAT, "files": [file_identity(f) for f in files], **settings}


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class NoSpace(TinyLMError):
    """Too little free disk space for a token cache."""


def disk_error(folder: Path, need: int, e: OSError | None = None) -> NoSpace:
    free = shutil.disk_usage(folder).free if folder.exists() else 0
    why = "no space left on the disk" if e is not None else "not enough free disk space"
    return NoSpace(
        f"{why} for the token cache in {folder}: it needs about {need / MIB:,.0f} MiB, {free / MIB:,.0f} MiB are "
        "free: free some space, or set data.cache_dir to a folder on a larger disk (null: tokenize in memory)"
    )


def check_space(folder: Path, need: int) -> None:
    if shutil.disk_usage(folder).free < need + SPARE_BYTES:
        raise disk_error(folder, need)


def read_meta(folder: Path, want: dict) -> tuple[dict | None, str | None]:
    """(the cache's meta.json, None) when it is whole and built from ``want``; else (None, why not:
    None when there is no cache yet)."""
    path = folder / "meta.json"
    if not path.exists():
        return None, None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        stale = meta["fingerprint"] != want
        whole = (folder / "ids.bin").stat().st_size == meta["bytes"] == np.dtype(meta["dtype"]).itemsize * (
            meta["n_train"] + meta["n_val"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, "corrupt (unreadable or incomplete)"
    if stale:
        return None, "stale (the text or the settings changed)"
    return (meta, None) if whole else (None, "corrupt (ids.bin does not match meta.json)")


class MappedIds:
    """``count`` ids of a file from id ``start`` on, indexed like a 1-D tensor (a slice, or a tensor of
    positions such as a batch of windows) and read from a memory map made for each read, as nanoGPT
    does per batch: a map kept open would count every page training ever touched in the process's
    RSS (with large page-cache folios, up to 2 MiB per random window). The file stays open, so a
    cache rebuilt by another process meanwhile does not change what this one reads."""

    def __init__(self, path: Path, dtype: np.dtype, start: int, count: int):
        self.file, self.np_dtype, self.start, self.count = open(path, "rb"), np.dtype(dtype), start, count

    def __len__(self) -> int:
        return self.count

    @property
    def dtype(self) -> torch.dtype:
        return torch.from_numpy(np.zeros(0, self.np_dtype)).dtype

    def __getitem__(self, index) -> torch.Tensor:
        if not self.count:  # (an empty file cannot be mapped)
            return torch.from_numpy(np.zeros(0, self.np_dtype)[index])
        with mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            ids = np.frombuffer(mapped, self.np_dtype, count=self.count, offset=self.start * self.np_dtype.itemsize)
            picked = np.array(ids[index if isinstance(index, slice) else np.asarray(index)])  # a copy
            del ids  # before the map closes
        return torch.from_numpy(picked)

    def tolist(self) -> list[int]:
        return self[:].tolist()


def map_ids(path: Path, meta: dict) -> tuple[MappedIds, MappedIds]:
    """The training and the validation ids of a cache's ``ids.bin`` (or of its file being written)."""
    n_train = meta["n_train"]
    return MappedIds(path, meta["dtype"], 0, n_train), MappedIds(path, meta["dtype"], n_train, meta["n_val"])


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock on ``path``, saying so when another process holds it first."""
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process to build the token cache {path.parent}", file=sys.stderr)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class IdFile:
    """``write(part, ids)``: ids appended to a file as ``dtype``, counted per part."""

    def __init__(self, f, dtype: np.dtype, folder: Path, need: int):
        self.f, self.dtype, self.folder, self.need = f, dtype, folder, need
        self.counts = [0, 0]

    def __call__(self, part: int, ids: np.ndarray) -> None:
        if part == 0 and self.counts[1]:
            raise ValueError("training ids after validation ids")
        try:
            self.f.write(np.ascontiguousarray(ids, dtype=self.dtype).tobytes())
        except OSError as e:
            raise self.full(e) from None
        self.counts[part] += len(ids)

    def full(self, e: OSError) -> Exception:
        return disk_error(self.folder, self.need, e) if e.errno in (errno.ENOSPC, errno.EDQUOT) else e


def build(folder: Path, want: dict, tokenize: Callable, identity: Callable) -> dict:
    """Tokenize into the cache: ``tokenize(open_sink)`` -> (tokenizer, characters, validation
    characters), as ``tokens.tokenize``; ``identity(train, val)`` -> the data identity. -> meta."""
    tmp = folder / f"ids.bin.tmp-{os.getpid()}"
    for left in (folder / "meta.json", *folder.glob("*.tmp-*")):  # (what a killed build left: the lock is ours)
        left.unlink(missing_ok=True)
    sink = None

    def open_sink(tokenizer, num_chars: int) -> IdFile:
        nonlocal sink
        dtype = id_dtype(tokenizer.vocab_size)
        tokens = num_chars if tokenizer.kind == "char" else sum(f["size"] for f in want["files"]) * want["repeat"]
        need = tokens * dtype.itemsize  # at most: byte-level tokens are at most the file's bytes
        check_space(folder, need)
        try:
            sink = IdFile(open(tmp, "wb"), dtype, folder, need)
        except OSError as e:
            raise TinyLMError(f"data.cache_dir: cannot write {tmp} ({e.strerror or e}): set data.cache_dir "
                              "to a writable folder, or null to tokenize in memory") from None
        return sink

    try:
        tokenizer, num_chars, val_chars = tokenize(open_sink)
        try:
            sink.f.flush()
            os.fsync(sink.f.fileno())
            sink.f.close()
        except OSError as e:
            raise sink.full(e) from None
        meta = {"fingerprint": want, "dtype": sink.dtype.name, "n_train": sink.counts[0], "n_val": sink.counts[1],
                "bytes": sum(sink.counts) * sink.dtype.itemsize, "num_chars": num_chars, "val_chars": val_chars,
                "tokenizer": tokenizer.state()}
        meta["identity"] = identity(*map_ids(tmp, meta))
        os.replace(tmp, folder / "ids.bin")
        write_atomically(folder / "meta.json", json.dumps(meta, ensure_ascii=False), sink)
        return meta
    finally:
        if sink is not None:
            sink.f.close()
        tmp.unlink(missing_ok=True)


def write_atomically(path: Path, text: str, sink: IdFile) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise sink.full(e) from None


def cached(folder: Path, want: dict, tokenize: Callable, identity: Callable, need: int) -> tuple[dict, bool]:
    """The cache's meta for ``want``, built first when missing, stale or corrupt (by one process: the
    others wait, then read it); and whether this process built it. A build that would need more than
    the disk's free space (``need``: an estimate in bytes, checked exactly once the vocabulary is
    known) is refused before a byte is read: NoSpace."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TinyLMError(f"data.cache_dir: cannot make {folder} ({e.strerror or e}): set data.cache_dir "
                          "to a writable folder, or null to tokenize in memory") from None
    meta, _ = read_meta(folder, want)
    if meta is not None:
        return meta, False
    if not os.access(folder, os.W_OK | os.X_OK):
        raise TinyLMError(f"data.cache_dir: {folder} is not writable, and its cache is missing or out of date: "
                          "set data.cache_dir to a writable folder, or null to tokenize in memory")
    with locked(folder / "lock"):
        meta, problem = read_meta(folder, want)  # built by the process this one waited for
        if meta is not None:
            return meta, False
        if problem:
            log.warning("token cache %s is %s: rebuilding it", folder, problem)
        check_space(folder, need)
        print(f"tokenizing once into the token cache {folder}", file=sys.stderr)
        return build(folder, want, tokenize, identity), True
