import logging
import os
import signal

import pytest
import torch
from conftest import TINY_TEXT, compose

from tinylm.errors import TinyLMError
from tinylm.runs.job import main as train_main
from tinylm.tasks.data_file import default_corpus_path, read_text
from tinylm.tasks.text.data import (
    RandomWindows,
    TextDataModule,
    encode_array,
)
from tinylm.tokenizer import ByteTokenizer, CharTokenizer


def make_dm(path, **kw):
    defaults = dict(block_size=8, batch_size=4, val_batches=2)
    dm = TextDataModule(path=str(path), **{**defaults, **kw})
    dm.prepare()
    return dm


def test_embedded_corpus_is_packaged_and_utf8():
    text = read_text(default_corpus_path())
    assert len(text) > 1000
    assert "注意力" in text and "Transformer" in text


@pytest.mark.parametrize("kind", [CharTokenizer.from_text("自注意力 ok🙂\n"), ByteTokenizer()])
def test_encode_array_matches_encode(kind):
    text = "自注意力 ok🙂\n" * 3
    assert encode_array(kind, text).tolist() == kind.encode(text)


def test_batches_are_shifted_windows(tiny_text_file):
    dm = make_dm(tiny_text_file, repeat=20)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 8)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x moved one step to the right
    # every row is a real window of the training ids
    ids = dm.train_ids.tolist()
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        starts = [i for i in range(len(ids) - 8) if ids[i : i + 8] == row_x]
        assert any(ids[s + 1 : s + 9] == row_y for s in starts)


def test_split_and_vocab(tiny_text_file):
    dm = make_dm(tiny_text_file, repeat=20, val_fraction=0.25)
    n = len(dm.train_ids) + len(dm.val_ids)
    assert n == len(tiny_text_file.read_text(encoding="utf-8")) * 20
    assert len(dm.val_ids) == int(n * 0.25)
    assert dm.tokenizer.vocab_size == len(set(tiny_text_file.read_text(encoding="utf-8")))


def test_validation_windows_are_fixed(tiny_text_file):
    a = [b[0] for b in make_dm(tiny_text_file, repeat=20).val_dataloader()]
    b = [b[0] for b in make_dm(tiny_text_file, repeat=20).val_dataloader()]
    assert len(a) == 2 and all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_training_stream_depends_only_on_seed_and_step():
    ids = torch.arange(100, dtype=torch.int32)
    full = RandomWindows(ids, 8, 4, seed=1)
    stream = iter(full)
    batches = [next(stream)[0] for _ in range(5)]
    resumed = iter(RandomWindows(ids, 8, 4, seed=1, start_step=3))
    assert torch.equal(next(resumed)[0], batches[3])
    assert torch.equal(next(resumed)[0], batches[4])
    other_rank = next(iter(RandomWindows(ids, 8, 4, seed=1, rank=1)))[0]
    assert not torch.equal(other_rank, batches[0])


def test_byte_level_data(tiny_text_file):
    dm = make_dm(tiny_text_file, repeat=20, tokenizer="byte")
    assert dm.tokenizer.vocab_size == 256
    text = tiny_text_file.read_text(encoding="utf-8")
    # chars per token < 1 for Chinese text: bits per character accounts for it
    assert dm.val_chars_per_token == pytest.approx(len(text) / len(text.encode()), rel=0.05)


@pytest.mark.parametrize(
    ("content", "kwargs", "message"),
    [
        (None, {}, "data file not found"),
        ("DIR", {}, "is a directory"),
        (b"", {}, "data file is empty"),
        ("short", {}, "has 5 tokens but block_size=8 needs at least 9"),
        (b"abc\xff\xfe" * 50, {}, "byte 3"),
        ("abcdefghij" * 10, {"batch_size": 90}, "data.batch_size=90 is larger than the 82 training windows"),
        ("abcdefghij" * 2, {}, "validation split"),
    ],
)
def test_bad_input_errors(tmp_path, content, kwargs, message):
    path = tmp_path / "t.txt"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(TinyLMError, match=message) as info:
        make_dm(path, **kwargs)
    assert "\n" not in str(info.value)


def test_invalid_utf8_can_be_replaced(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"abc\xffdef" * 40)
    dm = make_dm(path, errors="replace")
    assert "\ufffd" in dm.tokenizer.itos


def test_special_files_are_refused_at_once(tmp_path):
    """/dev/zero was read without limit and a FIFO with no writer hung: both are refused before reading."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("reading the FIFO blocked"))
    signal.alarm(10)
    try:
        for path, kind in (("/dev/zero", "a device or socket"), (fifo, "a FIFO")):
            with pytest.raises(TinyLMError, match=f"data.path={path} is {kind}, not a regular file"):
                make_dm(path)
    finally:
        signal.alarm(0)


def test_main_refuses_dev_zero_with_one_line(tmp_path):
    cfg = compose("data.path=/dev/zero", "logger=none", output_dir=tmp_path / "run")
    with pytest.raises(SystemExit) as info:
        train_main(cfg)
    assert str(info.value) == ("error: data.path=/dev/zero is a device or socket, not a regular file: "
                               "save the text to a file and pass that")


def test_files_over_the_size_cap_are_refused(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("abcdefghij" * 110_000, encoding="utf-8")  # 1.05 MiB
    with pytest.raises(TinyLMError, match=r"is 1\.0 MiB, over the 1 MiB limit: raise it with data.max_mib=N"):
        make_dm(path, max_mib=1)
    assert len(make_dm(path, max_mib=2).train_ids) > 0


def test_repeat_past_the_cap_is_refused_before_the_text_is_built(tiny_text_file):
    size = tiny_text_file.stat().st_size
    most = 2**20 // size  # repeats that fit in 1 MiB
    with pytest.raises(TinyLMError) as info:
        make_dm(tiny_text_file, repeat=10_000_000_000)  # ~1 TB: refused at once, nothing allocated
    mib = f"{size * 10_000_000_000 / 2**20:,.0f}"
    assert str(info.value).startswith(f"data.repeat=10000000000 makes {mib} MiB of text from {tiny_text_file}, ")
    with pytest.raises(TinyLMError, match=f"over the data.max_mib=1 limit: use data.repeat={most} or less, or raise"):
        make_dm(tiny_text_file, repeat=most + 1, max_mib=1)
    assert make_dm(tiny_text_file, repeat=most, max_mib=1).num_chars == most * len(TINY_TEXT)


def test_main_refuses_a_huge_repeat_with_one_line(tmp_path, tiny_text_file):
    cfg = compose(f"data.path={tiny_text_file}", "data.repeat=10000000000", "logger=none", output_dir=tmp_path)
    with pytest.raises(SystemExit) as info:
        train_main(cfg)
    assert str(info.value).startswith("error: data.repeat=10000000000 makes ") and "\n" not in str(info.value)


def test_leading_bom_is_dropped(tmp_path, caplog):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf" + TINY_TEXT.encode() * 20)
    assert "\ufeff" not in make_dm(path).tokenizer.itos
    dm = make_dm(path, tokenizer="byte")
    assert dm.train_ids[:3].tolist() == list(TINY_TEXT.encode()[:3])
    assert caplog.records == []  # nothing to warn about


def test_crlf_is_read_as_lf_and_reported_in_one_line(tmp_path, caplog):
    lf, crlf = tmp_path / "lf.txt", tmp_path / "crlf.txt"
    lf.write_bytes(TINY_TEXT.encode() * 20)
    crlf.write_bytes(TINY_TEXT.replace("\n", "\r\n").encode() * 20)
    with caplog.at_level(logging.WARNING, logger="tinylm.tasks.text.data"):
        a, b = make_dm(lf), make_dm(crlf)
    assert torch.equal(a.train_ids, b.train_ids) and a.tokenizer.itos == b.tokenizer.itos  # no "\r" symbol
    assert [r.getMessage() for r in caplog.records] == [
        f"{crlf} has 20 CRLF line endings (read as LF; convert the file with dos2unix to skip this)"]


def test_lone_cr_and_nul_are_kept_and_reported_in_one_line(tmp_path, caplog):
    path = tmp_path / "odd.txt"
    path.write_bytes(TINY_TEXT.replace("\n", "\r\n").encode() * 20 + b"old\rmac\rline\x00end")
    with caplog.at_level(logging.WARNING, logger="tinylm.tasks.text.data"):
        dm = make_dm(path)
    assert "\r" in dm.tokenizer.itos and "\0" in dm.tokenizer.itos
    (record,) = caplog.records
    assert record.getMessage() == (
        f"{path} has 20 CRLF line endings (read as LF; convert the file with dos2unix to skip this); "
        "2 lone CR characters (kept as symbols: replace them with newlines); "
        "1 NUL characters (kept as symbols: a binary or UTF-16 file? check data.encoding, or remove them)")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"errors": "foo"}, "data.errors='foo' must be a decoding error handler: strict, replace, ignore or "
                            "backslashreplace"),
        ({"encoding": "foo"}, "data.encoding='foo' must be a text encoding Python knows"),
    ],
)
def test_bad_codec_settings_name_their_own_key(tiny_text_file, kwargs, message):
    with pytest.raises(TinyLMError) as info:
        make_dm(tiny_text_file, repeat=20, **kwargs)
    assert str(info.value).startswith(message)
    assert ("data.encoding" in str(info.value)) == ("encoding" in kwargs)
