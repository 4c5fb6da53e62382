"""Reading a user's file safely: only regular files, never more than a size cap, known codecs.

``/dev/zero`` would be read without end, a FIFO with no writer would block forever, and a
directory or a socket has no text: each is refused with one line before a byte is read (and a
symbolic link, where the caller follows none), and what is read is opened without blocking. And
before a long job writes its output: whether the folder for it can be made and written.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tinylm.errors import TinyLMError
from tinylm.values import SHORT, one_line

MIB = 1 << 20
CHUNK = 16 * MIB  # what a file that grows while being read is read on by
DECODE_HANDLERS = "strict, replace, ignore or backslashreplace"


def read_capped_bytes(path: str | os.PathLike, key: str, max_mib: float, cap_key: str | None = None,
                      links: bool = True) -> bytes:
    """The bytes of the regular file ``path``, refused with one line when it is not one or too big.

    ``key`` names the setting that gave the path (e.g. ``data.path``), ``cap_key`` the setting
    that raises the cap of ``max_mib`` MiB for those who really mean it (None: nothing does).
    Without ``links``, a symbolic link is refused too. The file is opened without blocking and
    checked again once open, so a path that becomes a FIFO or a device meanwhile is refused as well.
    """
    path = Path(path)
    capped_file(path, key, max_mib, cap_key, links)
    limit = int(max_mib * MIB)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if links else os.O_NOFOLLOW)
    try:
        with open(os.open(path, flags), "rb") as f:
            info = os.fstat(f.fileno())
            refuse_irregular(info, path, key)
            # Sized by the file, not by the cap (a read of n bytes reserves n bytes first); a file
            # that grows while being read (or a /proc file, which says 0) is read on up to the cap.
            data = f.read(min(info.st_size, limit) + 1)
            while len(data) <= limit and (more := f.read(min(CHUNK, limit + 1 - len(data)))):
                data += more
    except OSError as e:
        raise TinyLMError(f"{key}: cannot read {path} ({e.strerror or e})") from None
    if len(data) > limit:
        raise TinyLMError(f"{key}={path} grew past the {max_mib:g} MiB limit while being read: {raise_cap(cap_key)}")
    return data


def read_json(path: str | os.PathLike, key: str, max_mib: float, links: bool = True):
    """The JSON value of the regular file ``path``, read as ``read_capped_bytes`` reads it; one TinyLMError for
    whatever is wrong (not a regular file, too big, not JSON, nested too deep for the parser)."""
    data = read_capped_bytes(path, key, max_mib, links=links)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise TinyLMError(f"{key}={path} is not JSON ({one_line(e, SHORT)})") from None


def capped_file(path: Path, key: str, max_mib: float, cap_key: str | None = None,
                links: bool = True) -> os.stat_result:
    """``regular_file``'s stat of ``path``, and one TinyLMError when it holds more than ``max_mib`` MiB."""
    info = regular_file(path, key, links)
    if info.st_size > max_mib * MIB:
        raise TinyLMError(f"{key}={path} is {info.st_size / MIB:,.1f} MiB, over the {max_mib:g} MiB limit: "
                          f"{raise_cap(cap_key)}")
    return info


def raise_cap(cap_key: str | None) -> str:
    """The fix a size refusal names: the setting that raises the cap, where one does."""
    if cap_key is None:
        return "nothing bigger is read here: use a smaller file"
    return f"raise it with {cap_key}=N (MiB) if you really mean it"


def regular_file(path: Path, key: str, links: bool = True) -> os.stat_result:
    """``path``'s stat when it is a regular file (or a link to one, unless ``links`` is false); else one
    TinyLMError naming ``key``."""
    try:
        info = path.stat() if links else path.lstat()
    except FileNotFoundError:
        raise TinyLMError(f"{key}: file not found: {path} (name an existing text file)") from None
    except OSError as e:
        raise TinyLMError(f"{key}: cannot read {path} ({e.strerror or e})") from None
    if stat.S_ISDIR(info.st_mode):
        raise TinyLMError(f"{key} is a directory, not a file: {path} (name a text file in it)")
    refuse_irregular(info, path, key)
    return info


def refuse_irregular(info: os.stat_result, path: Path, key: str) -> None:
    """One TinyLMError when ``info`` is not a regular file's (nothing is read from a FIFO, a device or a link)."""
    if stat.S_ISREG(info.st_mode):
        return
    if stat.S_ISLNK(info.st_mode):
        raise TinyLMError(f"{key}={path} is a symbolic link, which is not followed here: name the file itself")
    kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode)
            else "a device or socket")
    raise TinyLMError(f"{key}={path} is {kind}, not a regular file: save the text to a file and pass that")


def as_lines(text: str) -> tuple[str, int]:
    """``text`` as training reads it: a leading byte order mark dropped (a marker, not text) and CRLF
    line endings read as LF; and how many CRLFs there were."""
    return crlf_as_lf(text.removeprefix("\ufeff"))


def crlf_as_lf(text: str) -> tuple[str, int]:
    """``text`` with CRLF line endings read as LF, and how many there were (the BOM rule is as_lines')."""
    crlf = text.count("\r\n")
    return (text.replace("\r\n", "\n") if crlf else text), crlf


def encoding_problem(encoding) -> str | None:
    """What is wrong with a text encoding name (``must be ...``), or None when bytes decode with it."""
    try:
        b"a".decode(encoding)  # looks the codec up; bytes-to-bytes codecs (hex, rot13) are refused
    except (LookupError, TypeError):
        return "must be a text encoding Python knows, e.g. utf-8, gbk or latin-1"
    except UnicodeDecodeError:  # utf-16 and the like: "a" is too short, but the codec is real
        pass
    return None


def errors_problem(errors) -> str | None:
    """What is wrong with a decoding error handler (``must be ...``), or None when it yields valid text.

    Refused: unknown names, encode-only handlers (xmlcharrefreplace, namereplace) and those that
    leave lone surrogates in the text (surrogateescape, surrogatepass), which no tokenizer can encode.
    """
    try:
        b"\xed\xa0\x80".decode("utf-8", errors).encode("utf-8")  # an encoded surrogate: invalid UTF-8
    except UnicodeDecodeError:  # strict: a real handler that refuses the bytes
        pass
    except (LookupError, TypeError, UnicodeEncodeError):
        return f"must be a decoding error handler: {DECODE_HANDLERS}"
    return None


def unwritable_folder(folder: Path) -> tuple[Path, str] | None:
    """Why files cannot be written into ``folder`` (made if missing), checked without creating anything:
    (the nearest folder on its path that exists, "is a file, not a folder" or "is not writable"); None
    when they can."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return existing, "is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return existing, "is not writable"
    return None
