"""generate.py ablate=[layer.head, ...]: generation with heads switched off, in-process."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import compose_config, entry_point

from tinylm.errors import TinyLMError

generate = entry_point("generate.py")
OPTIONS = ["prompt='自注意力'", "temperature=0", "max_new_tokens=12", "seed=1"]


def generated(capsys, ckpt, *overrides: str) -> str:
    capsys.readouterr()
    generate.run(compose_config("generate", f"ckpt_path='{ckpt}'", *OPTIONS, *overrides))
    return capsys.readouterr().out


def test_ablate_generates_as_the_model_whose_heads_write_nothing(gpt_run, tmp_path, capsys):
    ckpt = next((gpt_run.path / "checkpoints").glob("best-*.ckpt"))
    zeroed = tmp_path / "zeroed.ckpt"
    shutil.copy(ckpt, zeroed)
    checkpoint = torch.load(zeroed, weights_only=True)
    head_size = 16 // 2  # the run's n_embd / num_heads
    for layer, head in ((0, 1), (1, 0)):  # head h's output feeds columns h*hs .. (h+1)*hs of proj
        proj = checkpoint["state_dict"][f"model.blocks.{layer}.attn.proj.weight"]  # (C, C)
        proj[:, head * head_size:(head + 1) * head_size] = 0
    torch.save(checkpoint, zeroed)
    ablated = generated(capsys, ckpt, "ablate=[0.1,1.0]")
    assert ablated == generated(capsys, zeroed)
    assert generated(capsys, ckpt, "ablate=[0.1,1.0]", "use_cache=false") == ablated  # with and without the cache
    assert generated(capsys, ckpt, "ablate=[]") == generated(capsys, ckpt)


@pytest.mark.parametrize(("value", "message"), [
    ("[2.0]", "ablate: there is no head 2.0: the model has 2 layers of 2 self-attention heads, counted from 0"),
    ("[0.5]", "there is no head 0.5"),
    ("[3]", "ablate: 3 is not layer.head"),
    ("[abc]", "ablate: 'abc' is not layer.head"),
    ("['².0']", "ablate: '².0' is not layer.head"),  # '²'.isdigit() is true, int('²') fails
    ("['1.-1']", "ablate: '1.-1' is not layer.head"),
    ("0.1", "ablate=0.1 must be a list of layer.head"),
])
def test_bad_heads_are_one_error(gpt_run, capsys, value, message):
    ckpt = next((gpt_run.path / "checkpoints").glob("best-*.ckpt"))
    with pytest.raises(TinyLMError) as e:
        generated(capsys, ckpt, f"ablate={value}")
    assert message in str(e.value)


def test_an_lstm_has_no_heads_to_switch_off(lstm_run, capsys):
    ckpt = next((lstm_run.path / "checkpoints").glob("best-*.ckpt"))
    with pytest.raises(TinyLMError, match=r"no head 0\.0: the model has no attention heads \(an lstm model\)"):
        generated(capsys, ckpt, "ablate=[0.0]")
