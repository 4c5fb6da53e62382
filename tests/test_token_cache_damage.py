"""The token cache under damage and on odd disks: ids.bin changed in place, a text edited with its size
and mtime restored, a file-size limit, a read-only cache folder, too little free space; and the tests
themselves leave the checkout's .cache/tokens alone."""

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT, TINY_MODEL, compose, train_py
from test_corpora_cache import prepared

from tinylm.errors import TinyLMError
from tinylm.tasks.text import token_cache
from tinylm.training.config_checks import config_problems

# 22 symbols (20 letters, the space and the newline); "Z" makes a 23rd
TEXT = "".join(f"{'abcdefghijklmnopqrst'[i % 20:]} {'ab' * (i % 3)}\n" for i in range(6000))


@pytest.fixture
def text_file(tmp_path, monkeypatch):
    """TEXT in a file, and a token cache for texts of any size."""
    monkeypatch.setattr(token_cache, "CACHE_MIN_MIB", 0)
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def same_ids(a, b):
    return (a.tokenizer.state() == b.tokenizer.state() and a.identity == b.identity
            and a.train_ids.tolist() == b.train_ids.tolist() and a.val_ids.tolist() == b.val_ids.tolist())


def overwrite(path, offset: int, data: bytes, keep_times: bool = True):
    """Change a file in place (its size unchanged), and set its access and modification times back."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    if keep_times:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size


def token_warnings(caplog):
    return [m for m in caplog.messages if "token cache" in m]


@pytest.mark.parametrize("outside", [True, False], ids=["outside the vocabulary", "inside it"])
def test_ids_changed_in_place_are_noticed_and_rebuilt_with_one_warning(tmp_path, text_file, caplog, outside):
    built = prepared(text_file, tmp_path / "cache")
    changed = 0xFFFF if outside else (built.train_ids[500].item() + 1) % 22
    overwrite(built.cache_folder / "ids.bin", 1000, np.array([changed], np.uint16).tobytes())
    folder = built.cache_folder
    with caplog.at_level(logging.WARNING):
        rebuilt = prepared(text_file, tmp_path / "cache")
    assert token_warnings(caplog) == [f"token cache {folder} is corrupt (ids.bin changed since it was built: its "
                                      "SHA-256 does not match): rebuilding it"]
    assert same_ids(rebuilt, prepared(text_file))


def test_damage_that_no_stat_shows_is_one_error_line_while_reading(tmp_path, text_file):
    dm = prepared(text_file, tmp_path / "cache")
    overwrite(dm.cache_folder / "ids.bin", 2 * 100, np.array([0xFFFF], np.uint16).tobytes())  # after the check
    message = (f"^the token cache {dm.cache_folder} is damaged: its ids.bin holds the id 65535, outside the "
               f"vocabulary of 22 symbols: delete the folder {dm.cache_folder}, and the next run rebuilds it$")
    with pytest.raises(TinyLMError, match=message):
        dm.train_ids[90:110]
    assert dm.train_ids[:90].tolist() == prepared(text_file).train_ids[:90].tolist()  # undamaged windows read


def test_training_on_damage_that_no_stat_shows_stops_with_one_error_line(tmp_path, text_file, monkeypatch):
    """A disk that damages ids.bin leaves its size and times as they were: the read says it."""
    cache = tmp_path / "cache"
    prepared(text_file, cache)
    (ids,) = cache.glob("*/ids.bin")
    ids.write_bytes(b"\xff" * ids.stat().st_size)
    monkeypatch.setattr(token_cache, "checked_record", lambda f, record: record,  # as if the stat were unmoved
                        raising=False)
    done = train_py(f"hydra.run.dir={tmp_path / 'run'}", *TINY_MODEL, f"data.path={text_file}",
                    f"data.cache_dir={cache}", "trainer.max_steps=2", "logger=none", "callbacks=minimal", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [(
        f"error: the token cache {ids.parent} is damaged: its ids.bin holds the id 65535, outside the vocabulary of "
        f"22 symbols: delete the folder {ids.parent}, and the next run rebuilds it")], done.stderr


def test_an_edit_that_keeps_the_size_and_the_mtime_is_noticed(tmp_path, text_file, caplog):
    big = tmp_path / "big.txt"
    big.write_text(TEXT * 100, encoding="utf-8")  # 8 MiB: more than a sample of blocks would hash
    first = prepared(big, tmp_path / "cache")
    assert first.tokenizer.vocab_size == 22
    overwrite(big, 70_000, b"Z")  # between any two of 64 sampled 64 KiB blocks, as `touch -r` or `rsync -t` leave it
    with caplog.at_level(logging.WARNING):
        edited = prepared(big, tmp_path / "cache")
    assert token_warnings(caplog) == [f"token cache {first.cache_folder} is stale (the text or the settings "
                                      "changed): rebuilding it"]
    assert edited.tokenizer.vocab_size == 23 and same_ids(edited, prepared(big))


def test_an_edited_text_is_read_for_its_hash_once_on_the_rebuild(tmp_path, text_file, monkeypatch):
    """A cache miss checks the text before and after waiting for the lock, then records it for the build: one
    read of a 1 GB text for its hash, not three."""
    prepared(text_file, tmp_path / "cache")
    overwrite(text_file, 10, b"Z")
    read = []
    monkeypatch.setattr(token_cache.hashlib, "file_digest", lambda f, name, digest=hashlib.file_digest: read.append(
        f.name) or digest(f, name))
    edited = prepared(text_file, tmp_path / "cache")
    assert edited.tokenizer.vocab_size == 23
    assert read == [str(text_file)]


def test_a_touched_or_copied_text_is_hashed_once_and_not_rebuilt(tmp_path, text_file, capsys, monkeypatch):
    folder = prepared(text_file, tmp_path / "cache").cache_folder
    capsys.readouterr()
    os.utime(text_file, ns=(10**18, 10**18))  # the same content with new times (a copy, a checkout)
    shutil.copy(folder / "ids.bin", tmp_path / "copy")
    os.replace(tmp_path / "copy", folder / "ids.bin")  # the same ids as a new file
    hashed = []
    monkeypatch.setattr(token_cache, "content_sha256", lambda f, hash=token_cache.content_sha256: hashed.append(
        f.name) or hash(f))
    again = prepared(text_file, tmp_path / "cache")
    assert capsys.readouterr().err == "" and same_ids(again, prepared(text_file))
    assert hashed == [str(text_file), str(folder / "ids.bin")]
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["files"][0]["mtime_ns"] == 10**18 and meta["ids"]["inode"] == (folder / "ids.bin").stat().st_ino
    hashed.clear()
    prepared(text_file, tmp_path / "cache")
    assert hashed == []  # the records are current again: a stat each


def test_a_cache_of_an_earlier_format_is_stale(tmp_path, text_file, caplog):
    folder = prepared(text_file, tmp_path / "cache").cache_folder
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 1}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        rebuilt = prepared(text_file, tmp_path / "cache")
    assert token_warnings(caplog) == [f"token cache {folder} is stale (made by an earlier version of tinylm): "
                                      "rebuilding it"]
    assert same_ids(rebuilt, prepared(text_file))


@pytest.mark.slow  # a process of its own, which imports torch (about 5 s)
def test_a_file_size_limit_is_one_error_line(tmp_path, text_file):
    """EFBIG, as a FAT32 disk gives past 4 GiB, for real: a file-size limit with SIGXFSZ ignored."""
    script = textwrap.dedent(f"""
        import resource, signal
        from tinylm.errors import TinyLMError
        from tinylm.tasks.text import token_cache
        from tinylm.tasks.text.data import TextDataModule
        token_cache.CACHE_MIN_MIB = 0
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            TextDataModule(path={str(text_file)!r}, cache_dir={str(tmp_path / 'cache')!r}, repeat=3).prepare()
        except TinyLMError as e:
            print(f"error: {{e}}")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (folder,) = (tmp_path / "cache").iterdir()
    assert proc.stdout == (
        f"error: the token cache in {folder} cannot grow past 0.1 MiB (of about 0.5 MiB it needs): larger files are "
        "refused here (a file-size limit, `ulimit -f`, or a file system such as FAT32, which holds at most 4 GiB a "
        "file): set data.cache_dir to a folder on another file system, or null to tokenize in memory\n")
    assert sorted(p.name for p in folder.iterdir()) == ["lock"]  # the partial file is removed


def read_only(folder, monkeypatch):
    """``folder`` and all in it read-only, as on a read-only mount: permissions, and os.access saying so
    to root too (whom permissions do not stop)."""
    for path in (folder, *folder.rglob("*")):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: access(path, mode, **kw) and not (
        mode & os.W_OK and str(path).startswith(str(folder))))
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in (folder, *folder.rglob("*"))}


def test_a_read_only_cache_folder_with_a_current_cache_is_used_as_it_is(tmp_path, text_file, monkeypatch):
    cache = tmp_path / "cache"
    built = prepared(text_file, cache)
    (built.cache_folder / "lock").unlink()  # prepared elsewhere, copied without its lock
    before = read_only(cache, monkeypatch)
    try:
        assert config_problems(compose(f"data.path={text_file}", f"data.cache_dir={cache}",
                                       output_dir=tmp_path / "run")) == []
        assert same_ids(prepared(text_file, cache), built)
        os.utime(text_file, ns=(10**18, 10**18))  # touched, the same text: hashed at each run, nothing written
        assert same_ids(prepared(text_file, cache), built)
        assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in (cache, *cache.rglob("*"))} == before
        text_file.write_text(TEXT + "Z", encoding="utf-8")
        with pytest.raises(TinyLMError, match=f"^data.cache_dir: {built.cache_folder} is not writable, and the "
                                              f"token cache {built.cache_folder} is stale \\(the text or the settings "
                                              "changed\\): set data.cache_dir to a writable folder, or null"):
            prepared(text_file, cache)
    finally:
        for path in (cache, *cache.rglob("*")):
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_too_little_space_says_the_margin_and_leaves_no_folder(tmp_path, text_file, monkeypatch):
    need = len(TEXT) * 2
    free = need + 10 * 2**20  # more than the ids need, less than the margin on top
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(free, 0, free))
    with pytest.raises(TinyLMError, match=f"^not enough free disk space for the token cache in {tmp_path}/cache/"
                                          r"\w+: it needs about 0 MiB plus a 64 MiB margin, 10 MiB are free: free"):
        prepared(text_file, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before anything was made


def test_the_tests_cache_tokens_in_their_temporary_folder_not_the_checkout(tmp_path, tiny_text_file):
    """Commands run by the tests with the default data.cache_dir write under the session's temporary folder."""
    cfg = compose(f"data.path={tiny_text_file}", output_dir=tmp_path / "run")
    assert not cfg.data.cache_dir.startswith(str(ROOT)) and not cfg.data.cache_dir.startswith(".")
    before = sorted((ROOT / ".cache" / "tokens").rglob("*"))
    done = train_py(f"hydra.run.dir={tmp_path / 'run'}", f"data.path={tiny_text_file}", "data.repeat=10000000000",
                    "logger=none", check=False)  # a text over 8 MiB (1 TB), refused for the disk space it needs
    assert done.returncode == 1 and "MiB of text from" in done.stderr
    assert sorted((ROOT / ".cache" / "tokens").rglob("*")) == before
