"""Reading a data file's text, as every task's data module does, free of torch: a regular file of at most
``data.max_mib`` MiB, decoded whole (``decode_text``: a leading byte order mark dropped, CRLF read as LF, one
error line for a byte that does not decode), downloaded first when the config gives its ``data.url``
(``download``); the lines the data modules and the commands' checks say of it."""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.request
from importlib import resources
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.textfile import as_lines, encoding_problem, errors_problem, read_capped_bytes

log = logging.getLogger(__name__)

DEFAULT_CORPUS = "attention_zh.txt"
DEFAULT_MAX_MIB = 1024  # data.max_mib: far above any corpus a CPU trains on, far below a runaway read
REPLACE_FIX = "data.errors=replace to replace bad bytes"  # what else fixes undecodable bytes in a text file


def codec_problems(encoding: str, errors: str) -> list[str]:
    """What is wrong with ``data.encoding`` and ``data.errors``, one line each."""
    return [f"data.{key}={value!r} {problem}"
            for key, value, problem in (("encoding", encoding, encoding_problem(encoding)),
                                        ("errors", errors, errors_problem(errors))) if problem]


def warn_notes(path: Path, crlf: int, lone_cr: int, nul: int) -> None:
    """One warning for what a text has that usually means a wrong encoding or a Windows file."""
    found = [(crlf, "CRLF line endings (read as LF; convert the file with dos2unix to skip this)"),
             (lone_cr, "lone CR characters (kept as symbols: replace them with newlines)"),
             (nul, "NUL characters (kept as symbols: a binary or UTF-16 file? check data.encoding, or remove them)")]
    notes = [f"{count:,} {what}" for count, what in found if count]
    if notes:
        log.warning("%s has %s", path, "; ".join(notes))


def bad_byte_error(path: Path, encoding: str, raw: bytes, error: UnicodeDecodeError, before: int,
                   lines: int, bad_bytes_fix: str = REPLACE_FIX) -> TinyLMError:
    """The one line for a byte that does not decode: ``raw`` was read at byte ``before`` of the file,
    after ``lines`` newlines."""
    line = lines + raw[: error.start].decode(encoding, errors="replace").count("\n") + 1
    return TinyLMError(
        f"{path} is not valid {encoding}: byte {before + error.start} ({raw[error.start:error.start + 1]!r}, "
        f"line {line}) cannot be decoded; set data.encoding=... to the file's encoding or {bad_bytes_fix}"
    )


def missing_data_file(path) -> str:
    """What the data module and the quick config check say of a data.path that names nothing."""
    return f"data file not found: {path} (set data.path to an existing text file)"


def download(url: str, dest: Path, sha256: str | None) -> None:
    """Download ``url`` to ``dest`` once (atomically), checking its SHA-256 when given. When it cannot
    (offline, a proxy), one line says where the file is looked for: put there by hand, it is used as it is."""
    tmp = dest.with_name(dest.name + ".part")
    print(f"downloading {url} -> {dest}", flush=True)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
            f.write(response.read())
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise TinyLMError(f"could not download {url} ({e}): save that file as {dest} (where data.path looks) and "
                          "run the same command again, or pass data.path=FILE to train on another text") from None
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    if sha256 and digest != sha256:
        tmp.unlink()
        raise TinyLMError(f"checksum mismatch for {url}: got {digest}, expected {sha256}")
    os.replace(tmp, dest)


def read_data_bytes(path: Path, max_mib: float = DEFAULT_MAX_MIB) -> bytes:
    """The bytes of the data file: a regular file of at most ``max_mib`` MiB, or one clear TinyLMError."""
    if not path.exists():
        raise TinyLMError(missing_data_file(path))
    return read_capped_bytes(path, "data.path", max_mib, "data.max_mib")


def decode_text(raw: bytes, path: Path, encoding: str = "utf-8", errors: str = "strict",
                bad_bytes_fix: str = REPLACE_FIX) -> str:
    """Decode a data file's bytes; drop a leading byte order mark and read CRLF line endings as LF.

    A BOM is a marker, not text. Windows line endings would otherwise put a ``\\r`` symbol before
    every newline the model learns; lone CRs and NUL characters are kept (they may mean something)
    but reported in one warning, as they usually mean a wrong encoding or a binary file.
    A byte that does not decode is one error naming it, its line, and two fixes: ``data.encoding``
    or ``bad_bytes_fix``.
    """
    if problems := codec_problems(encoding, errors):
        raise TinyLMError("; ".join(problems))
    try:
        text = raw.decode(encoding, errors=errors)
    except UnicodeDecodeError as e:
        raise bad_byte_error(path, encoding, raw, e, 0, 0, bad_bytes_fix) from None
    text, crlf = as_lines(text)
    if not text:
        raise TinyLMError(f"data file is empty: {path} (give it some text to learn from)")
    warn_notes(path, crlf, text.count("\r"), text.count("\0"))
    return text


def read_text(path: str | os.PathLike, encoding: str = "utf-8", errors: str = "strict",
              max_mib: float = DEFAULT_MAX_MIB) -> str:
    """Read a text file, turning every way it can go wrong into one clear TinyLMError."""
    path = Path(path)
    return decode_text(read_data_bytes(path, max_mib), path, encoding, errors)


def default_corpus_path() -> Path:
    """The small Chinese text about attention that ships inside the package."""
    return Path(str(resources.files("tinylm") / "corpus" / DEFAULT_CORPUS))
