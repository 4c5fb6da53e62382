import pytest
from builders import build_tokenizer

from tinylm.tokenizer import (
    ByteTokenizer,
    CharTokenizer,
    tokenizer_from_state,
)

TEXTS = [
    "自注意力可以让序列中的每个位置看到前面的位置。",
    "Attention is all you need.\n",
    "emoji 🙂🚀 and 中文 mixed",
]


@pytest.mark.parametrize("text", TEXTS)
def test_char_round_trip(text):
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.itos == sorted(set(text))
    assert all(tok.stoi[ch] == i for i, ch in enumerate(tok.itos))


@pytest.mark.parametrize("text", TEXTS)
def test_byte_round_trip(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    assert max(ids) < 256 and tok.vocab_size == 256
    assert tok.decode(ids) == text


def test_state_is_plain_data_and_restores():
    tok = CharTokenizer.from_text("hello 世界")
    state = tok.state()
    assert state == {"kind": "char", "itos": sorted(set("hello 世界"))}
    again = tokenizer_from_state(state)
    assert again.encode("世界") == tok.encode("世界")
    assert tokenizer_from_state(ByteTokenizer().state()).encode("a") == [97]


def test_unknown_characters_are_named():
    tok = CharTokenizer.from_text("abc")
    assert tok.unknown("abxyx") == ["x", "y"]
    with pytest.raises(ValueError, match="'x' 'y'"):
        tok.encode("axy")


def test_build_tokenizer_rejects_unknown_kind():
    with pytest.raises(ValueError, match="choose one of char, byte"):
        build_tokenizer("bpe?", "abc")


@pytest.mark.parametrize(("state", "message"), [
    ("char", "the tokenizer must be a dict, not str"),
    ({"kind": "char", "itos": "abc"}, "the char tokenizer's itos is not a list of single characters"),
    ({"kind": "char", "itos": [1, 2]}, "the char tokenizer's itos is not a list of single characters"),
    ({"kind": "wordpiece"}, "unknown tokenizer kind 'wordpiece': expected one of char, byte, bpe"),
])
def test_damaged_states_are_one_clear_value_error(state, message):
    with pytest.raises(ValueError, match=r"^[^\n]+$") as info:
        tokenizer_from_state(state)
    assert str(info.value) == message
