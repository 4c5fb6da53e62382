"""Byte-level BPE (data.tokenizer=bpe) and bits per character for every tokenizer."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from builders import build_tokenizer
from conftest import TINY_MODEL, compose, compose_config, entry_point, train_in_process
from tokenizers import pre_tokenizers

from tinylm.checkpoint import load_model, read_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tasks.text.data import TextDataModule, encode_array
from tinylm.tokenizer import BPETokenizer, byte_symbols, tokenizer_from_state
from tinylm.training.config_checks import validate

ENGLISH = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
CHINESE = "自注意力可以让序列中的每个位置看到前面的所有位置。注意力机制是 Transformer 的核心。\n"
TRAINING_TEXT = (ENGLISH + CHINESE) * 30


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(TRAINING_TEXT, vocab_size=320)


def test_byte_symbols_are_the_byte_level_alphabet():
    symbols = byte_symbols()
    assert len(set(symbols)) == 256
    assert set(symbols) == set(pre_tokenizers.ByteLevel.alphabet())
    assert symbols[ord("A")] == "A" and symbols[ord(" ")] == "Ġ" and symbols[ord("\n")] == "Ċ"


@pytest.mark.parametrize(
    "text",
    [
        ENGLISH,
        CHINESE,
        "红楼梦 第一回\n甄士隐梦幻识通灵　贾雨村风尘怀闺秀",  # characters never seen in training
        "  leading spaces, tabs\t\tand\r\nCRLF, émoji 🙂, ½ ¬ \x00\x7f end  ",
        "".join(chr(c) for c in range(1, 0x800)) + "\u0800\uffff\U00010000\U0010ffff",  # every UTF-8 byte
        "",
    ],
)
def test_round_trip_any_text(bpe, text):
    ids = bpe.encode(text)
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert bpe.decode(ids) == text
    assert bpe.unknown(text) == []


def test_merges_shorten_the_training_text(bpe):
    assert bpe.vocab_size == 320
    english_ids, chinese_ids = bpe.encode(ENGLISH), bpe.encode(CHINESE)
    assert len(english_ids) < 0.6 * len(ENGLISH.encode())  # common English pieces merged
    assert len(chinese_ids) < 0.6 * len(CHINESE.encode())  # 3-byte Chinese characters merged
    assert len(bpe.encode("speak")) == 1  # a frequent word is one token
    assert len(bpe.encode("注意力")) < len("注意力".encode())


def test_state_is_plain_data_and_training_is_reproducible(bpe):
    state = bpe.state()
    assert state["kind"] == "bpe" and isinstance(state["json"], str)
    restored = tokenizer_from_state(state)
    assert restored.encode(TRAINING_TEXT) == bpe.encode(TRAINING_TEXT)
    assert restored.pieces == bpe.pieces
    assert BPETokenizer.train(TRAINING_TEXT, vocab_size=320).state() == state  # resume needs this


@pytest.mark.parametrize(("json", "message"), [
    ("{not json", "the BPE tokenizer's json cannot be read (key must be a string at line 1 column 2)"),
    (None, "the BPE tokenizer's json must be a string, not NoneType"),
])
def test_damaged_json_is_one_clear_value_error(json, message):
    with pytest.raises(ValueError) as info:
        tokenizer_from_state({"kind": "bpe", "json": json})
    assert str(info.value) == message


def test_decode_piece_holds_back_half_characters(bpe):
    ids = bpe.encode("梦")  # unseen: three single-byte tokens
    assert len(ids) == 3
    assert bpe.decode_piece(ids[:2]) == ""
    assert bpe.decode(ids[:2]) == "\ufffd"
    assert bpe.decode_piece(ids) == "梦"


def test_encode_array_matches_encode(bpe):
    assert encode_array(bpe, CHINESE + ENGLISH).tolist() == bpe.encode(CHINESE + ENGLISH)


def test_datamodule_learns_bpe_from_the_training_split_only(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(ENGLISH * 12 + "zq" * 54, encoding="utf-8")  # "zq" * 54 is the last 10%
    dm = TextDataModule(path=str(path), tokenizer="bpe", bpe_vocab_size=300, block_size=8, batch_size=4)
    dm.prepare()
    assert b"zq" not in dm.tokenizer.pieces  # the merges never saw the validation text
    assert b"zq" in BPETokenizer.train(path.read_text(encoding="utf-8"), 300).pieces  # they would have
    assert len(dm.val_ids) == 108  # so "zq" stays two tokens
    assert len(dm.tokenizer.encode(ENGLISH)) < 0.6 * len(ENGLISH)


# --------------------------------------------------------------------------------------------
# bits per character = validation bits / validation characters, for every tokenizer


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_bits_per_character_is_exact(tmp_path, kind):
    """A model that predicts uniformly spends log2(V) bits per token: over the validation text
    that is log2(V) x tokens / characters bits per character, whatever the tokenizer."""
    val_text = CHINESE * 4  # 196 characters: 140 Chinese (3 UTF-8 bytes each) and 56 ASCII
    assert (len(val_text), len(val_text.encode())) == (196, 476)
    path = tmp_path / "t.txt"
    path.write_text(((ENGLISH + CHINESE) * 20)[:1764] + val_text, encoding="utf-8")  # val_text: the last 10%
    dm = TextDataModule(path=str(path), tokenizer=kind, bpe_vocab_size=300, block_size=16, batch_size=4,
                        val_fraction=0.1)
    dm.prepare()
    tokens = len(dm.tokenizer.encode(val_text))
    assert torch.equal(dm.val_ids, torch.tensor(dm.tokenizer.encode(val_text), dtype=torch.int32))
    assert tokens == {"char": 196, "byte": 476}.get(kind, tokens)
    assert dm.val_chars_per_token == 196 / tokens

    V = dm.tokenizer.vocab_size
    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_embd=8, num_heads=2, num_layers=1)).eval()
    torch.nn.init.zeros_(model.lm_head.weight)  # uniform predictions: loss = ln V for every token
    with torch.no_grad():
        losses = [model(x, y)[1] for x, y in dm.val_dataloader()]
    loss = torch.stack(losses).mean().item()
    assert loss == pytest.approx(math.log(V), rel=1e-5)
    bpc = loss / math.log(2) / dm.val_chars_per_token  # what training logs as loss/val_bpc
    assert bpc == pytest.approx(math.log2(V) * tokens / 196, rel=1e-5)
    if kind == "byte":
        assert bpc == pytest.approx(8 * 476 / 196, rel=1e-5)  # 8 bits for each of 476 bytes


# --------------------------------------------------------------------------------------------
# through train.py and generate.py


@pytest.mark.slow
def test_bpe_checkpoint_alone_restores_the_tokenizer(tmp_path, capsys):
    text = tmp_path / "mixed.txt"
    text.write_text(TRAINING_TEXT, encoding="utf-8")
    run = tmp_path / "run"
    train_in_process(run, *TINY_MODEL, f"data.path={text}", "data.tokenizer=bpe", "data.bpe_vocab_size=320",
                     "trainer.max_steps=4", "trainer.val_check_interval=4", "logger=none", "callbacks=minimal")
    ckpt = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert checkpoint["tokenizer"]["kind"] == "bpe" and isinstance(checkpoint["tokenizer"]["json"], str)
    assert read_checkpoint(ckpt)["model_config"]["vocab_size"] == 320
    text.unlink()  # the checkpoint alone must be enough

    loaded = load_model(ckpt)
    assert isinstance(loaded.tokenizer, BPETokenizer) and loaded.tokenizer.vocab_size == 320
    expected = BPETokenizer.train(TRAINING_TEXT[: len(TRAINING_TEXT) - int(len(TRAINING_TEXT) * 0.1)], 320)
    assert loaded.tokenizer.encode(TRAINING_TEXT) == expected.encode(TRAINING_TEXT)

    capsys.readouterr()
    entry_point("generate.py").run(compose_config("generate", f"ckpt_path={ckpt}", "prompt='注意力 Speak'",
                                                  "max_new_tokens=12", "seed=1"))
    out, err = capsys.readouterr()
    assert out.startswith("注意力 Speak") and "vocabulary 320" in err
    shutil.rmtree(run)


def test_bad_bpe_vocab_size_is_one_error_line(tmp_path):
    with pytest.raises(TinyLMError) as info:
        validate(compose("data.tokenizer=bpe", "data.bpe_vocab_size=100", output_dir=tmp_path))
    assert "data.bpe_vocab_size=100 must be an integer >= 256" in str(info.value) and "\n" not in str(info.value)
    validate(compose("data.tokenizer=char", "data.bpe_vocab_size=100", output_dir=tmp_path))  # unused: fine


def test_build_tokenizer_knows_bpe():
    assert isinstance(build_tokenizer("bpe", TRAINING_TEXT, 300), BPETokenizer)
