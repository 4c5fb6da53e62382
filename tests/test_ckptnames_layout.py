"""visualize.py's attention PNGs keep the heads a near-square grid for short and long texts alike:
a text of 17 characters drew 4 heads as one 639 x 2782 px column, which TensorBoard's card (and
any viewer fitting the image to its window) shrinks by its height."""

from __future__ import annotations

import struct
from dataclasses import asdict
from pathlib import Path

import torch
from conftest import TINY_TEXT, compose_config, entry_point

from tinylm.cli import quote_values
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.tokenizer import CharTokenizer


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels, from the PNG's IHDR chunk."""
    return struct.unpack(">II", path.read_bytes()[16:24])


def visualize(ckpt: Path, text: str, out_dir: Path) -> list[tuple[int, int]]:
    (quoted,) = quote_values([f"text={text}"], ["text"], literal=True)  # as visualize.py quotes it
    written = entry_point("visualize.py").run(compose_config("visualize", f"ckpt_path={ckpt}", quoted,
                                                             f"out_dir={out_dir}"))
    return [png_size(png) for png in written]


def test_short_and_long_texts_of_the_shared_run_are_near_square(gpt_run, tmp_path):
    """2 heads, block_size 16: 3 and 16 characters, every layer's PNG between 1.4 : 1 and 1 : 2.5."""
    ckpt = next((gpt_run.path / "checkpoints").glob("best-*.ckpt"))
    for text in (TINY_TEXT[:3], TINY_TEXT[:16]):
        sizes = visualize(ckpt, text, tmp_path / str(len(text)))
        assert len(sizes) == 2  # one file per layer
        for width, height in sizes:
            assert 1 / 1.4 <= height / width <= 2.5, (text, width, height)


def test_a_17_character_text_draws_four_heads_as_a_2x2_grid(tmp_path):
    """The reported case: 4 heads (the default model's) and 17 characters, as a 2x2 grid."""
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_embd=16, num_heads=4, num_layers=1))
    ckpt = tmp_path / "four_heads.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "model_config": asdict(model.config), "tokenizer": tokenizer.state(), "global_step": 0}, ckpt)
    ((width, height),) = visualize(ckpt, TINY_TEXT[:17], tmp_path / "pngs")
    assert 1.1 <= height / width <= 1.5, (width, height)  # 975 x 1289 px here; a column was 639 x 2782
    ((width, height),) = visualize(ckpt, TINY_TEXT[:9], tmp_path / "default")
    assert (width, height) == (580, 907)  # the default probe's grid, as before
