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

UNKNOWN_POLICIES = ("error", "skip")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_sampling(temperature=1.0, top_k=None, top_p=None, max_new_tokens=0, num_samples=1):
    """Raise one TinyLMError line for a sampling setting that makes no sense."""
    if not _is_number(temperature) or not temperature >= 0:  # NaN fails >= too
        raise TinyLMError(
            f"temperature={temperature!r} must be a number >= 0: "
            "use 0 for greedy, 1 for plain sampling"
        )
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise TinyLMError(f"top_k={top_k!r} must be an integer >= 1: or null to keep every token")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise TinyLMError(f"top_p={top_p!r} must be in (0, 1]: e.g. 0.9, or null to turn it off")
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise TinyLMError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 0")
    if not _is_int(num_samples) or num_samples < 1:
        raise TinyLMError(f"num_samples={num_samples!r} must be an integer >= 1")


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
