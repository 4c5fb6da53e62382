"""The text side of generation, free of torch: shared by the PyTorch loop and ONNX Runtime.

- ``validate_sampling``: one clear line for a sampling setting that makes no sense.
- ``encode_prompt``: prompt text -> ids, dealing with characters outside the vocabulary.
- ``text_pieces``: a stream of new ids -> printable pieces (whole characters), ending at a stop string.

``tinylm.generation.sampling`` (PyTorch) and ``tinylm.onnx.runtime`` (numpy) each produce the ids; neither
owns the text, so ``generate.py`` on an ONNX file never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tinylm.errors import TinyLMError
from tinylm.tokenizer import Tokenizer, say_skipped, unknown_characters
from tinylm.values import Option, check_options, integer, nullable, number

UNKNOWN_POLICIES = ("error", "skip")


SAMPLING = (  # the sampling settings, as generate.py's options (tinylm.commands.options) and arguments
    Option("temperature", number(0, finite=False), ": use 0 for greedy, 1 for plain sampling"),
    Option("top_k", nullable(integer(1), ": or null to keep every token")),
    Option("top_p", nullable(number(0, 1, "(]", wanted="in (0, 1]"), ": e.g. 0.9, or null to turn it off")),
    Option("max_new_tokens", integer(0)),
    Option("num_samples", integer(1)),
)


def validate_sampling(temperature=1.0, top_k=None, top_p=None, max_new_tokens=0, num_samples=1):
    """Raise one TinyLMError line for a sampling setting that makes no sense."""
    check_options({"temperature": temperature, "top_k": top_k, "top_p": top_p, "max_new_tokens": max_new_tokens,
                   "num_samples": num_samples}, SAMPLING)


def encode_prompt(tokenizer: Tokenizer, prompt: str, unknown: str = "error") -> list[int]:
    """Prompt text -> ids, dealing with characters outside the vocabulary.

    ``unknown="error"`` refuses them, naming each one; ``"skip"`` drops them and says which on stderr. An empty prompt
    (or one left empty after skipping) starts from a newline when the vocabulary has one (as if
    at the start of a line of the corpus), else from token 0.
    """
    if unknown not in UNKNOWN_POLICIES:
        raise TinyLMError(f"unknown={unknown!r}: choose one of {', '.join(UNKNOWN_POLICIES)}")
    missing = tokenizer.unknown(prompt)
    if missing and unknown == "error":
        raise unknown_characters(tokenizer, "the prompt", missing, "remove them or pass unknown=skip")
    say_skipped(tokenizer, "the prompt", missing)
    prompt = "".join(ch for ch in prompt if ch not in missing)
    if prompt:
        return tokenizer.encode(prompt)
    return tokenizer.encode("\n") if not tokenizer.unknown("\n") else [0]


def text_pieces(tokenizer: Tokenizer, new_ids: Iterable[int], stop: str | None = None) -> Iterator[str]:
    """Yield the decoded text of ``new_ids`` piece by piece, as the ids arrive.

    Pieces are whole characters: with the byte tokenizer, the bytes of a half-finished UTF-8
    character are held back until it is complete. ``stop``: end right after this string appears
    in the text (it is included); no more ids are asked for after it.
    """
    pending: list[int] = []  # ids not fully shown yet
    shown = 0  # characters of decode_piece(pending) already yielded
    tail = ""  # the last len(stop) - 1 characters yielded, to find a stop string across pieces
    for next_id in new_ids:
        pending.append(next_id)
        decoded = tokenizer.decode_piece(pending)
        piece, shown = decoded[shown:], len(decoded)
        if decoded == tokenizer.decode(pending):  # nothing held back: start afresh
            pending, shown = [], 0
        if stop:
            window = tail + piece
            at = window.find(stop)
            if at >= 0:
                yield piece[: at + len(stop) - len(tail)]
                return
            tail = window[max(0, len(window) - len(stop) + 1) :] if len(stop) > 1 else ""
        if piece:
            yield piece
