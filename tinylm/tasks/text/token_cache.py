"""The token cache: a text's ids, tokenized once, memory-mapped by every run that trains on it.

One folder per text and settings under ``data.cache_dir`` (its name: a hash of the files' paths and
of every setting that changes the ids), holding

    ids.bin    the training ids, then the validation ids: uint16 (vocabulary <= 65,536) or uint32
    meta.json  the settings, a record of each text file and of ids.bin, the split, the tokenizer (its
               vocabulary) and the data identity; written last, so a folder without it (a build cut
               short) is never read
    lock       one process builds, the others wait on it (flock): sweep jobs, DDP ranks

A file's record is its size, modification and change times, inode and the SHA-256 of its content.
A file whose size, times and inode all match its record is taken as it is: every write moves a
file's change time (ctime), which no tool sets back, so an edit that restores the size and the
mtime (``touch -r``, ``rsync -t``, an archive unpacked) still shows. When they differ, the content
decides: hashed again, the same bytes are used (and the record updated where the folder can be
written), other bytes make the cache stale (a text) or corrupt (ids.bin), and it is rebuilt, with
one warning. So a hit costs a few ``stat`` calls and writes nothing (a cache on a read-only folder
is used as it is); a hit on a copied, moved or touched text costs one hash of it.

Every read checks its ids against the vocabulary: damage that no stat shows (the disk) is one error
line, not an index error inside the model. Both files are written under temporary names and
renamed, so a reader sees a whole cache or none.
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
from typing import BinaryIO

import numpy as np
import torch

from tinylm.errors import TinyLMError
from tinylm.textfile import MIB, unwritable_folder

log = logging.getLogger(__name__)

FORMAT = 2  # of ids.bin and meta.json: a change makes every older cache stale
CACHE_MIN_MIB = 8  # a smaller text is tokenized in memory in a fraction of a second: no cache
SPARE_BYTES = 64 * MIB  # kept free on the disk beyond what the ids need
STALE = "stale (the text or the settings changed)"
FIX = "set data.cache_dir to a writable folder, or null to tokenize in memory"


_digests: dict[tuple, str] = {}  # (device, inode, size, mtime, ctime) -> SHA-256 of the file's content
KEPT_DIGESTS = 256


def stat_record(f: BinaryIO) -> dict:
    info = os.fstat(f.fileno())
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns, "inode": info.st_ino}


def content_sha256(f: BinaryIO) -> str:
    """The SHA-256 of the open file ``f``, read once per process while its stat is the same (a cache miss
    checks a text before and after waiting for the lock, then records it for the build)."""
    info = os.fstat(f.fileno())
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in _digests:
        if len(_digests) >= KEPT_DIGESTS:
            _digests.clear()
        f.seek(0)
        _digests[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _digests[key]


def file_record(path: Path) -> dict:
    """A text file's record, its stat taken before its content is hashed: an edit meanwhile shows next time."""
    with open(path, "rb") as f:
        return {**stat_record(f), "sha256": content_sha256(f)}


def checked_record(f: BinaryIO, record: dict) -> dict | None:
    """The record of the open file ``f`` when it holds the content ``record`` names (with the stat it has
    now), else None. Equal size, times and inode: the same file, unread; else its SHA-256 decides."""
    now = stat_record(f)
    if now["size"] != record["size"]:
        return None
    if all(record.get(key) == value for key, value in now.items()):
        return record
    return {**now, "sha256": record["sha256"]} if content_sha256(f) == record["sha256"] else None


def cache_folder(cache_dir: Path, files: list[Path], settings: dict) -> Path:
    """The folder of one text with one set of settings: a hash of the files' paths and the settings."""
    key = json.dumps({"files": [str(f.resolve()) for f in files], **settings}, sort_keys=True)
    return cache_dir / hashlib.sha256(key.encode()).hexdigest()[:20]


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class NoSpace(TinyLMError):
    """Too little free disk space for a token cache."""


def free_bytes(folder: Path) -> int:
    """Free space on the disk of ``folder``, or of the nearest folder above it that exists."""
    return shutil.disk_usage(next(p for p in (folder, *folder.parents) if p.exists())).free


def disk_error(folder: Path, need: int, e: OSError | None = None) -> NoSpace:
    why = "no space left on the disk" if e is not None else "not enough free disk space"
    return NoSpace(
        f"{why} for the token cache in {folder}: it needs about {need / MIB:,.0f} MiB plus a "
        f"{SPARE_BYTES // MIB} MiB margin, {free_bytes(folder) / MIB:,.0f} MiB are free: free some space, or set "
        "data.cache_dir to a folder on a larger disk (null: tokenize in memory)"
    )


def write_error(path: Path, need: int, e: OSError) -> TinyLMError:
    """One line for a write into the cache that the system refused."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_error(path.parent, need, e)
    if e.errno == errno.EFBIG:
        written = path.stat().st_size if path.exists() else 0
        return TinyLMError(
            f"the token cache in {path.parent} cannot grow past {written / MIB:,.1f} MiB (of about {need / MIB:,.1f} "
            "MiB it needs): larger files are refused here (a file-size limit, `ulimit -f`, or a file system such as "
            "FAT32, which holds at most 4 GiB a file): set data.cache_dir to a folder on another file system, or null "
            "to tokenize in memory")
    return TinyLMError(f"data.cache_dir: cannot write {path} ({e.strerror or e}): {FIX}")


def check_space(folder: Path, need: int) -> None:
    if free_bytes(folder) < need + SPARE_BYTES:
        raise disk_error(folder, need)


class MappedIds:
    """``count`` ids of an open file from id ``start`` on, indexed like a 1-D tensor (a slice, or a tensor
    of positions such as a batch of windows) and read from a memory map made for each read, as nanoGPT
    does per batch: a map kept open would count every page training ever touched in the process's RSS
    (with large page-cache folios, up to 2 MiB per random window). The file stays open, so a cache
    rebuilt by another process meanwhile does not change what this one reads. An id outside the
    vocabulary (``vocab_size``) is damage: one TinyLMError."""

    def __init__(self, file: BinaryIO, dtype: np.dtype, start: int, count: int, vocab_size: int):
        self.file, self.np_dtype, self.start, self.count = file, np.dtype(dtype), start, count
        self.vocab_size = vocab_size

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
        if picked.size and (largest := int(picked.max())) >= self.vocab_size:
            folder = Path(self.file.name).parent
            raise TinyLMError(
                f"the token cache {folder} is damaged: its ids.bin holds the id {largest}, outside the vocabulary "
                f"of {self.vocab_size} symbols: delete the folder {folder}, and the next run rebuilds it")
        return torch.from_numpy(picked)

    def tolist(self) -> list[int]:
        return self[:].tolist()


def map_ids(file: BinaryIO, meta: dict) -> tuple[MappedIds, MappedIds]:
    """The training and the validation ids of a cache's open ``ids.bin`` (or of its file being written)."""
    n_train, dtype, vocab_size = meta["n_train"], meta["dtype"], meta["vocab_size"]
    return MappedIds(file, dtype, 0, n_train, vocab_size), MappedIds(file, dtype, n_train, meta["n_val"], vocab_size)


def open_current(folder: Path, files: list[Path], settings: dict) -> tuple[dict | None, BinaryIO | None, str | None]:
    """(meta, ids.bin opened, None) when the cache is whole and built from ``files`` as they are now with
    ``settings``; else (None, None, why not: None when there is no cache yet). Reads, never writes,
    but for a record brought up to date (``update_records``)."""
    try:
        text = (folder / "meta.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None, None
    except (OSError, ValueError):
        return None, None, "corrupt (unreadable or incomplete)"
    ids = None
    try:
        meta = json.loads(text)
        if meta.get("format") != FORMAT:
            return None, None, "stale (made by an earlier version of tinylm)"
        if meta["settings"] != settings or len(meta["files"]) != len(files):
            return None, None, STALE
        records = []
        for path, record in zip(files, meta["files"], strict=True):
            with open(path, "rb") as f:
                records.append(checked_record(f, record))
        if None in records:
            return None, None, STALE
        ids = open(folder / "ids.bin", "rb")
        if not stat_record(ids)["size"] == meta["bytes"] == np.dtype(meta["dtype"]).itemsize * (
                meta["n_train"] + meta["n_val"]):
            ids.close()
            return None, None, "corrupt (ids.bin does not match meta.json)"
        if (ids_record := checked_record(ids, meta["ids"])) is None:
            ids.close()
            return None, None, "corrupt (ids.bin changed since it was built: its SHA-256 does not match)"
    except (OSError, ValueError, KeyError, TypeError):
        if ids is not None:
            ids.close()
        return None, None, "corrupt (unreadable or incomplete)"
    current = {**meta, "files": records, "ids": ids_record}
    if current != meta:
        update_records(folder, text, current)
    return current, ids, None


def update_records(folder: Path, read: str, meta: dict) -> None:
    """Save records a hit brought up to date (their files copied, moved or touched, their content the same),
    so the next run need not hash them again; nothing where the folder cannot be written or a build holds it."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return
    with contextlib.suppress(OSError), open(folder / "lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (BlockingIOError: a build holds it)
        if (folder / "meta.json").read_text(encoding="utf-8") == read:
            write_atomically(folder / "meta.json", json.dumps(meta, ensure_ascii=False))


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
    """``write(part, ids)``: ids appended to a file as ``dtype``, counted per part and hashed."""

    def __init__(self, f: BinaryIO, dtype: np.dtype, need: int):
        self.f, self.dtype, self.need = f, dtype, need
        self.counts, self.digest = [0, 0], hashlib.sha256()

    def __call__(self, part: int, ids: np.ndarray) -> None:
        if part == 0 and self.counts[1]:
            raise ValueError("training ids after validation ids")
        data = np.ascontiguousarray(ids, dtype=self.dtype)
        try:
            self.f.write(data)
        except OSError as e:
            raise self.refused(e) from None
        self.digest.update(data)
        self.counts[part] += len(ids)

    def refused(self, e: OSError) -> TinyLMError:
        return write_error(Path(self.f.name), self.need, e)


def build(folder: Path, files: list[Path], settings: dict, tokenize: Callable, identity: Callable) -> dict:
    """Tokenize into the cache: ``tokenize(open_sink)`` -> (tokenizer, characters, validation
    characters), as ``tokens.tokenize``; ``identity(train, val)`` -> the data identity. -> meta."""
    tmp = folder / f"ids.bin.tmp-{os.getpid()}"
    for left in (folder / "meta.json", *folder.glob("*.tmp-*")):  # (what a killed build left: the lock is ours)
        left.unlink(missing_ok=True)
    records = [file_record(f) for f in files]  # before the text is read
    sink = None

    def open_sink(tokenizer, num_chars: int) -> IdFile:
        nonlocal sink
        dtype = id_dtype(tokenizer.vocab_size)
        tokens = num_chars if tokenizer.kind == "char" else sum(r["size"] for r in records) * settings["repeat"]
        need = tokens * dtype.itemsize  # at most: byte-level tokens are at most the file's bytes
        check_space(folder, need)
        try:
            sink = IdFile(open(tmp, "wb"), dtype, need)
        except OSError as e:
            raise TinyLMError(f"data.cache_dir: cannot write {tmp} ({e.strerror or e}): {FIX}") from None
        return sink

    try:
        tokenizer, num_chars, val_chars = tokenize(open_sink)
        try:
            sink.f.flush()
            os.fsync(sink.f.fileno())
            sink.f.close()
        except OSError as e:
            raise sink.refused(e) from None
        meta = {"format": FORMAT, "settings": settings, "files": records, "dtype": sink.dtype.name,
                "n_train": sink.counts[0], "n_val": sink.counts[1], "bytes": sum(sink.counts) * sink.dtype.itemsize,
                "num_chars": num_chars, "val_chars": val_chars, "vocab_size": tokenizer.vocab_size,
                "tokenizer": tokenizer.state()}
        with open(tmp, "rb") as f:
            meta["identity"] = identity(*map_ids(f, meta))
        os.replace(tmp, folder / "ids.bin")
        with open(folder / "ids.bin", "rb") as f:
            meta["ids"] = {**stat_record(f), "sha256": sink.digest.hexdigest()}
        try:
            write_atomically(folder / "meta.json", json.dumps(meta, ensure_ascii=False))
        except OSError as e:
            raise sink.refused(e) from None
        return meta
    finally:
        if sink is not None:
            sink.f.close()
        tmp.unlink(missing_ok=True)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def cached(folder: Path, files: list[Path], settings: dict, tokenize: Callable, identity: Callable,
           need: int) -> tuple[dict, BinaryIO]:
    """The cache's meta and its ids.bin opened, for ``files`` with ``settings``, built first when missing,
    stale or corrupt (by one process: the others wait, then read it). A build that would need more than
    the disk's free space (``need``: an estimate in bytes, checked exactly once the vocabulary is known)
    is refused before a byte is read, or written: NoSpace."""
    meta, ids, problem = open_current(folder, files, settings)
    if meta is not None:
        return meta, ids
    if unwritable := unwritable_folder(folder):
        raise TinyLMError(f"data.cache_dir: {unwritable[0]} {unwritable[1]}, and the token cache {folder} is "
                          f"{problem or 'missing'}: {FIX}")
    check_space(folder, need)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TinyLMError(f"data.cache_dir: cannot make {folder} ({e.strerror or e}): {FIX}") from None
    with locked(folder / "lock"):
        meta, ids, problem = open_current(folder, files, settings)  # built by the process this one waited for
        if meta is not None:
            return meta, ids
        if problem:
            log.warning("token cache %s is %s: rebuilding it", folder, problem)
        print(f"tokenizing once into the token cache {folder}", file=sys.stderr)
        meta = build(folder, files, settings, tokenize, identity)
        return meta, open(folder / "ids.bin", "rb")
