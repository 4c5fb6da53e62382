import pytest
import torch

from tinylm.data import (
    RandomWindows,
    TextDataModule,
    default_corpus_path,
    encode_array,
    read_text,
)
from tinylm.errors import TinyLMError
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
