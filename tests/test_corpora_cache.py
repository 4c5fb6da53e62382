"""The token cache (tinylm.tasks.text.token_cache): the same numbers as tokenizing in memory, built
once (atomically, under a lock), rebuilt with one warning when stale or corrupt, and one error line
for a full disk."""

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import ROOT, TINY_MODEL, compose, train_in_process

from tinylm.errors import TinyLMError
from tinylm.tasks.text import token_cache
from tinylm.tasks.text.data import TextDataModule
from tinylm.training.config_checks import config_problems

TEXT = "".join(f"第{i}回 甄士隐梦幻识通灵，贾雨村风尘怀闺秀。Chapter {i}: 'tis\r\n" for i in range(400))


@pytest.fixture(autouse=True)
def cache_any_size(monkeypatch):
    monkeypatch.setattr(token_cache, "CACHE_MIN_MIB", 0)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "novel.txt"
    path.write_text(TEXT, encoding="utf-8", newline="")
    return path


def prepared(path, cache_dir=None, **kw):
    dm = TextDataModule(path=str(path), cache_dir=str(cache_dir) if cache_dir else None,
                        **{"block_size": 16, "batch_size": 4, "val_batches": 2, **kw})
    dm.prepare()
    return dm


def batches(dm, n=3):
    loader = iter(dm.train_dataloader())
    return [next(loader) for _ in range(n)] + list(dm.val_dataloader())


def assert_same_numbers(a, b):
    assert a.tokenizer.state() == b.tokenizer.state()
    assert a.identity == b.identity
    assert a.train_ids.tolist() == b.train_ids.tolist() and a.val_ids.tolist() == b.val_ids.tolist()
    assert a.val_chars_per_token == b.val_chars_per_token
    for (xa, ya), (xb, yb) in zip(batches(a), batches(b), strict=True):
        assert xa.dtype == xb.dtype == torch.long and torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_cached_and_in_memory_give_the_same_numbers(tmp_path, text_file, kind, capsys):
    kw = {"tokenizer": kind, "repeat": 2, **({"bpe_vocab_size": 300} if kind == "bpe" else {})}
    memory = prepared(text_file, **kw)
    built = prepared(text_file, tmp_path / "cache", **kw)
    assert "tokenizing once into the token cache" in capsys.readouterr().err
    again = prepared(text_file, tmp_path / "cache", **kw)  # mapped, not tokenized again
    assert "tokenizing" not in capsys.readouterr().err
    assert again.train_ids.dtype == torch.uint16 and memory.train_ids.dtype == torch.int32
    assert sorted(p.name for p in built.cache_folder.iterdir()) == ["ids.bin", "lock", "meta.json"]
    assert f"mapped from {built.cache_folder}" in again.summary()
    assert_same_numbers(memory, built)
    assert_same_numbers(memory, again)


def test_a_vocabulary_over_65536_symbols_is_stored_as_uint32(tmp_path):
    chars = [chr(c) for c in (*range(0x4E00, 0xA000), *range(0x20000, 0x2A6E0), *range(0x3400, 0x4DC0))]
    path = tmp_path / "big-vocab.txt"
    path.write_text("".join(chars) * 2, encoding="utf-8")
    cached = prepared(path, tmp_path / "cache")
    assert cached.tokenizer.vocab_size == len(chars) > 65536 and cached.train_ids.dtype == torch.uint32
    assert_same_numbers(prepared(path), cached)


def test_each_setting_that_changes_the_ids_has_its_own_folder(tmp_path, text_file):
    folders = {prepared(text_file, tmp_path / "c", **kw).cache_folder
               for kw in ({}, {"repeat": 2}, {"val_fraction": 0.2}, {"tokenizer": "byte"})}
    assert len(folders) == 4
    assert prepared(text_file, tmp_path / "c", batch_size=8).cache_folder in folders  # batches: not the ids


def test_an_edited_text_is_stale_and_rebuilt_with_one_warning(tmp_path, text_file, caplog):
    first = prepared(text_file, tmp_path / "cache")
    text_file.write_text(TEXT + "新的一回。\n", encoding="utf-8")
    os.utime(text_file, ns=(1, 1))  # the mtime alone would do; the size and content changed too
    with caplog.at_level(logging.WARNING):
        rebuilt = prepared(text_file, tmp_path / "cache")
    assert [m for m in caplog.messages if "token cache" in m] == [
        f"token cache {first.cache_folder} is stale (the text or the settings changed): rebuilding it"]
    assert rebuilt.cache_folder == first.cache_folder and rebuilt.identity != first.identity
    assert_same_numbers(prepared(text_file), rebuilt)


@pytest.mark.parametrize("damage", ["truncate ids", "garbage meta", "meta without a key"])
def test_a_corrupt_cache_is_rebuilt_with_one_warning(tmp_path, text_file, caplog, damage):
    folder = prepared(text_file, tmp_path / "cache").cache_folder
    if damage == "truncate ids":
        with open(folder / "ids.bin", "r+b") as f:
            f.truncate(100)
    elif damage == "garbage meta":
        (folder / "meta.json").write_bytes(b"\x00{not json")
    else:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        del meta["ids"]
        (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        rebuilt = prepared(text_file, tmp_path / "cache")
    warnings = [m for m in caplog.messages if "token cache" in m]
    assert len(warnings) == 1 and "is corrupt" in warnings[0] and "rebuilding it" in warnings[0]
    assert_same_numbers(prepared(text_file), rebuilt)


def test_a_half_written_cache_is_never_read(tmp_path, text_file, monkeypatch):
    folder = prepared(text_file, tmp_path / "cache").cache_folder
    shutil.rmtree(folder)

    def cut_short(self, part, ids):
        raise KeyboardInterrupt  # a build stopped mid-way

    monkeypatch.setattr(token_cache.IdFile, "__call__", cut_short)
    with pytest.raises(KeyboardInterrupt):
        prepared(text_file, tmp_path / "cache")
    assert sorted(p.name for p in folder.iterdir()) == ["lock"]  # no meta.json, no temporary file
    (folder / "ids.bin.tmp-4194304").write_bytes(b"what a killed build left")
    monkeypatch.undo()
    monkeypatch.setattr(token_cache, "CACHE_MIN_MIB", 0)
    assert_same_numbers(prepared(text_file), prepared(text_file, tmp_path / "cache"))
    assert sorted(p.name for p in folder.iterdir()) == ["ids.bin", "lock", "meta.json"]


def test_a_full_disk_is_one_error_line_and_leaves_no_cache(tmp_path, text_file, monkeypatch):
    def full(self, part, ids):
        raise self.refused(OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(token_cache.IdFile, "__call__", full)
    with pytest.raises(TinyLMError, match=r"^no space left on the disk for the token cache in .*: it needs about "
                                          r"\d+ MiB plus a 64 MiB margin, [\d,]+ MiB are free: free some space, or "
                                          r"set data.cache_dir"):
        prepared(text_file, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/ids.bin*")) and not list((tmp_path / "cache").glob("*/meta.json"))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 1))
    with pytest.raises(TinyLMError, match=r"^not enough free disk space for the token cache"):
        prepared(text_file, tmp_path / "cache")
    with pytest.raises(TinyLMError, match=r"^data.repeat=3 makes 0 MiB of text from .*, and not enough free disk "
                                          r"space .* \(or use a smaller data.repeat\)$"):
        prepared(text_file, tmp_path / "cache", repeat=3)


def test_cache_dir_must_be_a_writable_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    assert config_problems(compose(f"data.cache_dir={tmp_path}/file/tokens", output_dir=tmp_path / "run")) == [
        f"data.cache_dir={tmp_path}/file/tokens: {tmp_path}/file is a file, not a folder: set data.cache_dir to a "
        "writable folder, or null to tokenize in memory"]
    assert config_problems(compose("data.cache_dir=[1]", output_dir=tmp_path / "run")) == [
        "data.cache_dir=[1] must be a folder path or null"]
    assert config_problems(compose("data.cache_dir=null", output_dir=tmp_path / "run")) == []


def test_training_on_the_cache_trains_the_same_weights_bit_for_bit(tmp_path, text_file):
    weights = []
    for name, cache in (("memory", "null"), ("cached", str(tmp_path / "cache")), ("warm", str(tmp_path / "cache"))):
        run = tmp_path / name
        train_in_process(run, *TINY_MODEL, f"data.path={text_file}", f"data.cache_dir={cache}", "trainer.max_steps=6",
                         "trainer.val_check_interval=3", "logger=none", "callbacks=minimal", "threads=1")
        checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        weights.append(checkpoint["state_dict"])
        assert checkpoint["data"] == prepared(text_file).identity  # what a resume compares
    assert weights[0].keys() == weights[1].keys() == weights[2].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]) and torch.equal(weights[0][name], weights[2][name])


@pytest.mark.slow  # two processes that import torch: seconds each
def test_two_processes_build_the_cache_once(tmp_path, text_file):
    """Sweep jobs or DDP ranks started together: one tokenizes, the other waits and maps its files."""
    script = textwrap.dedent(f"""
        import sys
        from tinylm.tasks.text import token_cache
        from tinylm.tasks.text.data import TextDataModule
        token_cache.CACHE_MIN_MIB = 0
        dm = TextDataModule(path={str(text_file)!r}, cache_dir={str(tmp_path / 'cache')!r}, repeat=50)
        dm.prepare()
        print(dm.identity["sha256"], len(dm.train_ids))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], results
    assert results[0][0] == results[1][0] != ""
    assert sum("tokenizing once into the token cache" in err for _, err in results) == 1
    (ids,) = (tmp_path / "cache").glob("*/ids.bin")
    assert os.path.getsize(ids) == np.dtype("uint16").itemsize * len(TEXT.replace("\r\n", "\n")) * 50
