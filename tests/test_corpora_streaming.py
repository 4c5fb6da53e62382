"""Streaming tokenization gives what reading the whole text gave: the same characters, vocabulary,
ids, split and data identity, whatever the chunk size (item 1 of the big-corpora work).

``today`` below is the path that read, decoded and tokenized the text whole (``sorted(set(text))``
and one encode per part); the stream is compared with it on texts whose tricky parts (a character
split between two reads, a CRLF split between two reads, a BOM, lone CRs) fall on chunk edges.
"""

import logging

import numpy as np
import pytest
from builders import build_tokenizer

from tinylm.errors import TinyLMError
from tinylm.tasks.data import data_identity
from tinylm.tasks.data_file import decode_text
from tinylm.tasks.text import corpus as corpus_module
from tinylm.tasks.text.corpus import SEPARATOR, Corpus
from tinylm.tasks.text.data import TextDataModule
from tinylm.tasks.text.tokens import BPE_CUT, bpe_pieces, tokenize, train_bpe
from tinylm.tokenizer import BPETokenizer

TRICKY = ("\ufeff第一回 甄士隐梦幻识通灵\r\n" "a\r\r\nb\rc 🙂🙂 ok\0\r\n" "“你道此书从何而来？”说起根由。\r\n"
          "The end, really. 'tis\r\n" * 3 + "尾\r")


def today(text: str, kind: str, val_fraction: float = 0.1, bpe_vocab_size: int = 300):
    """The whole-text path: split the characters, build the tokenizer, encode each part."""
    n_val = int(len(text) * val_fraction)
    train, val = text[: len(text) - n_val], text[len(text) - n_val :]
    tokenizer = build_tokenizer(kind, train if kind == "bpe" else text, bpe_vocab_size)
    return tokenizer, tokenizer.encode(train), tokenizer.encode(val)


def streamed(corpus: Corpus, kind: str, val_fraction: float = 0.1, bpe_vocab_size: int = 300):
    parts = ([], [])
    tokenizer, num_chars, val_chars = tokenize(lambda first: corpus.texts(report=first), kind, val_fraction,
                                               bpe_vocab_size, lambda *_: lambda part, ids: parts[part].extend(ids))
    return tokenizer, *parts


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_chunks_join_to_the_text_decode_text_reads(tmp_path, chunk_bytes):
    raw = TRICKY.encode("utf-8")
    path = write(tmp_path, "t.txt", raw)
    for repeat in (1, 3):
        chunks = list(Corpus(path, repeat=repeat, chunk_bytes=chunk_bytes).texts())
        assert "".join(chunks) == decode_text(raw, path) * repeat
        assert all(chunks)  # no empty chunk


@pytest.mark.parametrize("encoding", ["utf-16", "gbk", "utf-8-sig", "latin-1"])
def test_other_encodings_stream_as_they_decode_whole(tmp_path, encoding):
    text = {"gbk": "注意力\r\nab\r\n" * 20, "latin-1": "café\r\n" * 20}.get(encoding, "\ufeff注意力\r\nab\r\n" * 20)
    raw = text.encode(encoding)
    path = write(tmp_path, "t.txt", raw)
    assert "".join(Corpus(path, encoding=encoding, chunk_bytes=3).texts()) == decode_text(raw, path, encoding)


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
@pytest.mark.parametrize("chunk_bytes", [3, 50, 1 << 20])
def test_streamed_vocabulary_and_ids_are_todays(tmp_path, kind, chunk_bytes):
    raw = TRICKY.encode("utf-8")
    path = write(tmp_path, "t.txt", raw)
    want = today(decode_text(raw, path) * 2, kind)
    got = streamed(Corpus(path, repeat=2, chunk_bytes=chunk_bytes), kind)
    assert got[0].state() == want[0].state()
    assert got[1] == want[1] and got[2] == want[2]


def test_a_bad_byte_in_a_later_chunk_is_the_same_line(tmp_path):
    raw = ("第一行\n" * 50).encode() + b"\xff" + "后面\n".encode()
    path = write(tmp_path, "t.txt", raw)
    with pytest.raises(TinyLMError) as whole:
        decode_text(raw, path)
    with pytest.raises(TinyLMError) as stream:
        list(Corpus(path, chunk_bytes=7).texts())
    assert str(stream.value) == str(whole.value)
    assert "byte 500 (b'\\xff', line 51)" in str(stream.value)


def test_the_warning_is_said_once_and_as_before(tmp_path, caplog):
    raw = TRICKY.encode("utf-8")
    path = write(tmp_path, "t.txt", raw)
    with caplog.at_level(logging.WARNING):
        decode_text(raw, path)
        list(Corpus(path, repeat=3, chunk_bytes=5).texts(report=True))
        list(Corpus(path, repeat=3, chunk_bytes=5).texts())  # the second pass is quiet
    assert len(caplog.messages) == 2 and caplog.messages[0] == caplog.messages[1]
    assert "15 CRLF line endings" in caplog.messages[0] and "lone CR" in caplog.messages[0]


def test_the_data_module_gives_todays_numbers_with_tiny_chunks(tmp_path, monkeypatch):
    path = write(tmp_path, "t.txt", (TRICKY * 20).encode("utf-8"))
    modules = []
    for chunk_bytes in (1 << 24, 5):
        monkeypatch.setattr(corpus_module, "CHUNK_BYTES", chunk_bytes)
        dm = TextDataModule(path=str(path), block_size=8, batch_size=4, val_batches=2, repeat=2)
        dm.prepare()
        modules.append(dm)
    tokenizer, train, val = today(decode_text(path.read_bytes(), path) * 2, "char")
    for dm in modules:
        assert dm.tokenizer.itos == tokenizer.itos
        assert dm.train_ids.tolist() == train and dm.val_ids.tolist() == val
        assert dm.identity == data_identity(np.array(train), np.array(val))
        assert dm.val_offsets.tolist() == modules[0].val_offsets.tolist()


def test_bpe_pieces_cut_only_where_the_pre_tokenizer_cuts():
    from tokenizers import pre_tokenizers

    text = ("他说道。“好！”Then he said: no, never. x's 'tis 3.14, 一二三；ok?" * 40)
    pieces = list(bpe_pieces([text[:100], text[100:]], target=30))
    assert "".join(pieces) == text and len(pieces) > 5
    split = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    whole = [w for w, _ in split.pre_tokenize_str(text)]
    assert [w for piece in pieces for w, _ in split.pre_tokenize_str(piece)] == whole
    assert BPE_CUT.search("没有标点的文字") is None


def test_bpe_trained_and_encoded_in_pieces_is_the_whole_text_bpe(monkeypatch):
    from tinylm.tasks.text import tokens

    text = "\n".join(f"第{i}回 他说道：“好！”Then he said, no. It's {i * 7}." for i in range(300))
    monkeypatch.setattr(tokens, "BPE_PIECE_CHARS", 200)
    monkeypatch.setattr(tokens, "BPE_BATCH", 3)
    whole = BPETokenizer.train(text, 400)
    pieced = train_bpe([text], 400)
    assert pieced.json == whole.json
    assert np.concatenate(list(tokens.encode_stream(whole, [text]))).tolist() == whole.encode(text)


def test_many_files_join_sorted_with_the_separator(tmp_path):
    (tmp_path / "books").mkdir()
    for name, text in (("b.txt", "乙\r\n"), ("a.txt", "\ufeff甲"), ("c.md", "not read")):
        write(tmp_path / "books", name, text.encode())
    joined = "甲" + SEPARATOR + "乙\n"
    assert "".join(Corpus(tmp_path / "books").texts()) == joined
    assert "".join(Corpus(tmp_path / "books" / "*.txt", repeat=2).texts()) == joined * 2
    with pytest.raises(TinyLMError, match="matches no files"):
        Corpus(tmp_path / "books" / "*.text")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TinyLMError, match="is a directory without .txt files"):
        Corpus(tmp_path / "empty")
