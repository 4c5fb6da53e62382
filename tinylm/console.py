"""What the commands print, free of torch: the same on PyTorch and ONNX Runtime.

``checkpoint_name`` is how every command names the checkpoint it uses: its path and why it was picked
(``tinylm.checkpoint.Chosen``); ``say_checkpoint`` says it on stderr; ``shown_path`` is how a path is shown;
``printable`` and ``unescape`` carry text to and from a terminal. ``print_samples`` streams ``num_samples``
continuations of the prompt to stdout, separated by a line ``---``, for ``generate.py``; ``Sampler`` is a
model ready to sample from, on either runtime (``tinylm.tasks.text.task`` builds the PyTorch one,
generate.py the ONNX one).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from tinylm.generation.prompting import encode_prompt
from tinylm.run_folder import shown_path
from tinylm.tokenizer import Tokenizer

ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # control characters but tab and newline


def unescape(text: str) -> str:
    """Turn the two-character sequences \\n, \\t and \\\\ into newline, tab and backslash."""
    return re.sub(r"\\([nt\\])", lambda m: ESCAPES[m.group(1)], text)


def printable(text: str) -> str:
    """``text`` for a terminal: control characters (ESC, CR, ...) shown as ``\\x1b`` instead of
    obeyed; newline and tab kept. A byte or BPE model can emit any of them."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Sampler(NamedTuple):
    """A model ready to sample from, on either runtime."""

    path: Path
    tokenizer: Tokenizer
    global_step: int | None
    num_params: int
    stream_text: Callable[..., Iterator[str]]  # (prompt_ids, max_new_tokens, stop=..., **sampling) -> pieces
    why: str = ""  # why this checkpoint (tinylm.checkpoint.Chosen.why)


def checkpoint_name(path: str | Path, why: str = "", *facts: str) -> str:
    """``<path> (<why>; <facts>)``: the checkpoint as every command names it."""
    details = "; ".join(filter(None, [why, ", ".join(facts)]))
    return f"{shown_path(path)} ({details})" if details else shown_path(path)


def say_checkpoint(path: Path, why: str, global_step: int | None, vocab_size: int, num_params: int,
                   seed: int | None = None) -> None:
    """On stderr, what generates or is drawn: the checkpoint, why it, its step, vocabulary and size, and the seed."""
    name = checkpoint_name(path, why, f"step {global_step}", f"vocabulary {vocab_size}", f"{num_params:,} parameters")
    print(f"checkpoint: {name}{'' if seed is None else f'; seed={seed}'}", file=sys.stderr)


def print_samples(cfg, model: Sampler, prompt: str, seed: int) -> None:
    """Stream ``cfg.num_samples`` continuations of ``prompt`` to stdout (conf/generate.yaml's options in ``cfg``)."""
    prompt_ids = encode_prompt(model.tokenizer, prompt, cfg.unknown)
    say_checkpoint(model.path, model.why, model.global_step, model.tokenizer.vocab_size, model.num_params, seed)

    stop = unescape(str(cfg.stop)) if cfg.stop not in (None, "") else None
    shown_prompt = model.tokenizer.decode(prompt_ids) if prompt else ""
    last = ""  # the last character written: a sample ends its line only if it did not already

    def write(text: str) -> None:
        nonlocal last
        if text:
            sys.stdout.write(printable(text))
            sys.stdout.flush()
            last = text[-1]

    for i in range(cfg.num_samples):
        if i:
            write(("" if last == "\n" else "\n") + "---\n")
        write(shown_prompt)
        for piece in model.stream_text(prompt_ids, cfg.max_new_tokens, stop=stop, temperature=cfg.temperature,
                                       top_k=cfg.top_k, top_p=cfg.top_p):
            write(piece)
    if last != "\n":
        write("\n")
