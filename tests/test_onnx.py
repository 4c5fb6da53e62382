"""Export to ONNX (export.py, tinylm.onnx.export) and sampling without PyTorch (generate.py, tinylm.onnx.runtime)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import builders
import numpy as np
import onnx
import pytest
import torch
from conftest import ROOT, TINY_TEXT, compose_config, entry_point, script_in_process

from tinylm.cli import quote_values
from tinylm.errors import TinyLMError
from tinylm.generation.sampling import keep_top_k, keep_top_p
from tinylm.generation.sampling import sample_next as torch_sample_next
from tinylm.models import build_model
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.gpt_checks import POS_ENCODINGS
from tinylm.onnx import export as onnx_export
from tinylm.onnx.export import export_onnx
from tinylm.onnx.runtime import keep_top_k as np_top_k
from tinylm.onnx.runtime import keep_top_p as np_top_p
from tinylm.onnx.runtime import load_onnx, sample_next
from tinylm.run_folder import shown_path
from tinylm.tokenizer import CharTokenizer

generate_cli, export_cli = entry_point("generate.py"), entry_point("export.py")
BLOCK = 8


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def trained_gpt(pos_encoding: str, tokenizer: CharTokenizer) -> GPT:
    """A tiny GPT trained in-process for a moment on TINY_TEXT (tests/builders.py)."""
    return builders.trained_gpt(tokenizer, TINY_TEXT, BLOCK, pos_encoding=pos_encoding)


def save_checkpoint(model, tokenizer, path: Path, step: int = 60) -> Path:
    """A checkpoint as train.py writes it: plain data only (see tinylm.checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "model_config": asdict(model.config), "tokenizer": tokenizer.state(), "global_step": step}, path)
    return path


def compose_quoted(name: str, *overrides: str):
    """generate.py's or export.py's config, with paths quoted for Hydra as the scripts do."""
    overrides = quote_values(quote_values(list(overrides), generate_cli.TEXT_KEYS, literal=True),
                             {*generate_cli.PATH_KEYS, *export_cli.PATH_KEYS})
    return compose_config(name, *overrides)


def learned_export(tmp_path_factory) -> tuple[Path, Path, GPT]:
    """(checkpoint, ONNX file, model) of the GPT with learned positions, exported by export.py
    in-process, found as the newest run's best checkpoint and written next to it (the defaults).
    A trace takes 10-20 s of CPU: made once per session for every worker and every file that reads
    it (tests/test_onnx_safety.py too); read it, never write next to it."""
    from conftest import shared_folder
    from filelock import FileLock

    tmp = shared_folder(tmp_path_factory, "onnx-learned")
    ckpt = tmp / "runs" / "2026-01-01_00-00-00" / "checkpoints" / "best-step=60.ckpt"
    with FileLock(str(tmp) + ".lock"):
        if not ckpt.with_suffix(".onnx").is_file():  # written last, renamed into place
            tokenizer = CharTokenizer.from_text(TINY_TEXT)
            save_checkpoint(trained_gpt("learned", tokenizer), tokenizer, ckpt)
            out = export_cli.run(compose_quoted("export", f"paths.log_dir={tmp}"))
            assert out == ckpt.with_suffix(".onnx")
    saved = torch.load(ckpt, weights_only=True)
    model = build_model(saved["model_config"])
    model.load_state_dict({k.removeprefix("model."): v for k, v in saved["state_dict"].items()})
    return ckpt, ckpt.with_suffix(".onnx"), model.eval()


# Each export traces the model with torch.export (several seconds): the quick run (-m 'not slow') exports one.
@pytest.fixture(scope="module", params=[p if p == "learned" else pytest.param(p, marks=pytest.mark.slow)
                                        for p in POS_ENCODINGS])
def exported(request, tmp_path_factory):
    """(checkpoint, ONNX file, model) per position encoding, exported by export.py in-process.

    The learned one is ``learned_export``; the others are named with ckpt_path and out.
    """
    if request.param == "learned":
        return learned_export(tmp_path_factory)
    tmp = tmp_path_factory.mktemp(request.param)
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    model = trained_gpt(request.param, tokenizer)
    ckpt = save_checkpoint(model, tokenizer, tmp / "model.ckpt")
    out = export_cli.run(compose_quoted("export", f"ckpt_path={ckpt}", f"out={tmp / 'exported' / 'm.onnx'}"))
    assert out == tmp / "exported" / "m.onnx"
    return ckpt, out, model


# --------------------------------------------------------------------------------------------
# The graph


def test_logits_equal_pytorch_with_and_without_past(exported):
    _, path, model = exported
    onnx_model = load_onnx(path)
    generator = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    # (batch, new positions, past positions): a prompt, one token after a past, a full window, several
    for batch, length, past in [(1, 1, 0), (3, 5, 0), (2, BLOCK, 0), (2, 1, 3), (3, 1, BLOCK - 1), (2, 4, 4)]:
        ids = torch.randint(vocab, (batch, length), generator=generator)
        keys = torch.randn(model.past_shape(batch, past), generator=generator)
        values = torch.randn(model.past_shape(batch, past), generator=generator)
        with torch.no_grad():
            expected = model.step(ids, keys, values)
        logits, present = onnx_model.run(ids.numpy(), (keys.numpy(), values.numpy()))
        for want, got in zip(expected, (logits, *present), strict=True):
            assert want.shape == got.shape
            assert np.abs(want.numpy() - got).max() < 1e-4, (batch, length, past)
    with torch.no_grad():  # and the step is the model: logits of a whole text, fed in two parts
        ids = torch.randint(vocab, (2, BLOCK), generator=generator)
        first, keys, values = model.step(ids[:, :3], *(torch.zeros(model.past_shape(2, 0)),) * 2)
        rest = model.step(ids[:, 3:], keys, values)[0]
        assert torch.allclose(torch.cat([first, rest], dim=1), model(ids)[0], atol=1e-5)


def test_the_file_passes_onnx_checker_and_carries_its_metadata(exported):
    ckpt, path, model = exported
    onnx.checker.check_model(str(path), full_check=True)
    proto = onnx.load(str(path))
    meta = {p.key: json.loads(p.value) for p in proto.metadata_props}
    saved = torch.load(ckpt, weights_only=True)
    assert meta["tinylm.model_config"] == saved["model_config"]
    assert meta["tinylm.tokenizer"] == saved["tokenizer"]
    assert (meta["tinylm.global_step"], meta["tinylm.context_window"], meta["tinylm.format"]) == (60, BLOCK, 1)
    assert meta["tinylm.num_params"] == model.num_params()
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    layers, heads, head_size = model.config.num_layers, model.config.num_heads, model.config.head_size
    assert dims == {"input_ids": ["batch", "sequence"], "past_keys": [layers, "batch", heads, "past", head_size],
                    "past_values": [layers, "batch", heads, "past", head_size]}
    loaded = load_onnx(path)
    assert loaded.tokenizer.state() == saved["tokenizer"] and loaded.config == saved["model_config"]
    assert path.stat().st_size < 2**20 and not list(path.parent.glob("*.data"))  # one small file


def test_an_export_that_does_not_match_pytorch_is_not_kept(exported, monkeypatch, tmp_path):
    _, path, model = exported
    tokenizer = load_onnx(path).tokenizer
    monkeypatch.setattr(onnx_export, "trace", lambda model: onnx.load(str(path)))  # the same graph, quickly
    out = tmp_path / "again.onnx"
    assert export_onnx(model, tokenizer, out) == out and out.is_file()
    before = out.read_bytes()
    monkeypatch.setattr(onnx_export, "TOLERANCE", -1.0)
    with pytest.raises(TinyLMError, match=r"failed its check, its logits are \S+ from PyTorch's .* so it was not "
                                          rf"kept \({re.escape(str(out))} is unchanged\)"):
        export_onnx(model, tokenizer, out)
    assert out.read_bytes() == before and list(tmp_path.iterdir()) == [out]  # the earlier export, as it was


# --------------------------------------------------------------------------------------------
# generate.py on the ONNX file


def generate_text(capsys, *overrides: str) -> tuple[str, str]:
    generate_cli.run(compose_quoted("generate", *overrides))
    return capsys.readouterr()


def test_greedy_text_is_the_checkpoints_past_block_size(exported, capsys):
    ckpt, path, _ = exported
    common = ["prompt='自注意'", "temperature=0", f"max_new_tokens={5 * BLOCK}", "num_samples=2", "seed=4"]
    want_out, want_err = generate_text(capsys, f"ckpt_path={ckpt}", *common)
    got_out, got_err = generate_text(capsys, f"ckpt_path={path}", *common)
    assert got_out == want_out and len(want_out) > 5 * BLOCK  # the window slid 30 times
    assert len(set(want_out)) >= 6  # a real continuation, not one character over and over
    assert got_err.replace(str(path), str(ckpt)) == want_err  # checkpoint: ... (step, vocabulary, parameters); seed
    assert generate_text(capsys, f"ckpt_path={path}", *common, "use_cache=false")[0] == want_out


def test_sampling_on_onnx_is_seeded_and_honours_every_option(exported, capsys):
    _, path, _ = exported
    options = [f"ckpt_path={path}", "prompt='自'", "max_new_tokens=30", "top_k=4", "top_p=0.9", "temperature=1.3"]
    first = generate_text(capsys, *options, "seed=5")[0]
    assert first == generate_text(capsys, *options, "seed=5")[0] != generate_text(capsys, *options, "seed=6")[0]
    assert set(first) <= set(TINY_TEXT) | {"\n"}
    stopped = generate_text(capsys, f"ckpt_path={path}", "prompt='自'", "temperature=0", "stop='意'",
                            "max_new_tokens=30")[0]
    assert stopped.endswith("意\n") and stopped.count("意") == 1


def test_generate_on_onnx_never_imports_torch(exported, tmp_path, capsys, monkeypatch):
    ckpt, path, _ = exported
    options = ["prompt=自注意", "temperature=0", "max_new_tokens=12"]
    expected = generate_text(capsys, f"ckpt_path={ckpt}", *options)[0]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "generate.py"), f"ckpt_path={path}",
                           *options],
                          capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "onnxruntime" in imported and "tinylm.onnx.runtime" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "lightning", "tinylm.generation.sampling")}
    assert "tinylm.checkpoint" not in imported and "tinylm.generation.sampling" not in imported
    (line,) = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    monkeypatch.chdir(tmp_path)
    shown = shown_path(path)  # as seen from the folder it ran in
    assert line.startswith(f"checkpoint: {shown} (step 60, vocabulary ")
    assert proc.stdout == expected and expected.startswith("自注意")
    assert list(tmp_path.iterdir()) == []  # no Hydra folders or logs


# --------------------------------------------------------------------------------------------
# The numpy sampler mirrors tinylm.generation.sampling.sample_next


def kept(logits) -> list[set[int]]:
    return [set(np.flatnonzero(np.isfinite(row)).tolist()) for row in np.asarray(logits)]


def test_numpy_sampler_filters_like_pytorch():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 9, generator=generator)
    logits[::5, 3] = logits[::5].max(dim=1).values  # ties at the top
    logits[1::5, :4] = 0.5  # ties in the middle
    for k in (1, 2, 3, 9, 50):
        assert kept(np_top_k(logits.numpy(), k)) == kept(keep_top_k(logits, k).numpy())
    for p in (0.01, 0.3, 0.5, 0.9, 1.0):
        assert kept(np_top_p(logits.numpy(), p)) == kept(keep_top_p(logits, p).numpy())
    # greedy: argmax, the first index wins a tie; a temperature too small to divide by is greedy too
    greedy = torch_sample_next(logits, temperature=0).numpy()
    assert np.array_equal(sample_next(logits.numpy(), temperature=0), greedy)
    rng = np.random.default_rng(0)
    ties = logits[:, 3] == logits.max(dim=1).values
    tiny = sample_next(logits.numpy(), temperature=1e-40, generator=rng)
    assert np.array_equal(tiny[~ties.numpy()], greedy[~ties.numpy()])


def test_numpy_sampling_frequencies_follow_the_filtered_distribution():
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)).repeat(20_000, axis=0)
    rng = np.random.default_rng(0)
    counts = np.bincount(sample_next(logits, top_k=2, generator=rng), minlength=4) / 20_000
    assert counts[:2].sum() == 0 and counts[2:] == pytest.approx([3 / 7, 4 / 7], abs=0.015)
    counts = np.bincount(sample_next(logits, temperature=0.5, generator=rng), minlength=4) / 20_000
    sharp = np.array([0.1, 0.2, 0.3, 0.4]) ** 2
    assert counts == pytest.approx(sharp / sharp.sum(), abs=0.015)
    counts = np.bincount(sample_next(logits, top_p=0.5, generator=rng), minlength=4) / 20_000
    assert counts[:2].sum() == 0 and counts[2:] == pytest.approx([3 / 7, 4 / 7], abs=0.015)


# --------------------------------------------------------------------------------------------
# Bad input: one error line each


def generate_error(*overrides: str) -> str:
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        generate_cli.run(compose_quoted("generate", *overrides))
    return str(info.value)


def export_error(*overrides: str) -> str:
    with pytest.raises(TinyLMError, match=r"^[^\n]+$") as info:
        export_cli.run(compose_quoted("export", *overrides))
    return str(info.value)


def test_unreadable_onnx_files_are_one_line(exported, tmp_path):
    _, path, _ = exported
    assert "checkpoint file /no/such.onnx does not exist" in generate_error("ckpt_path=/no/such.onnx")
    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("not a model\n")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    for bad in (not_onnx, truncated):
        message = generate_error(f"ckpt_path={bad}")
        assert f"{bad} could not be read as an ONNX model" in message
        assert "corrupted, truncated or not ONNX" in message and "python export.py" in message
    foreign = tmp_path / "foreign.onnx"  # a valid ONNX model, not made by tinylm
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), foreign)
    assert "is not an ONNX model exported by tinylm (no tinylm metadata)" in generate_error(f"ckpt_path={foreign}")


def test_missing_extra_is_one_line_naming_the_install(exported, monkeypatch, tmp_path):
    ckpt, path, _ = exported
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    message = generate_error(f"ckpt_path={path}")
    assert message == 'sampling from an ONNX file needs onnxruntime: install it with pip install -e ".[onnx]"'
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    message = export_error(f"ckpt_path={ckpt}", f"out={tmp_path / 'x.onnx'}")
    assert message == 'exporting to ONNX needs onnxscript, onnxruntime: install them with pip install -e ".[onnx]"'


def test_export_refuses_bad_options_and_models(tmp_path):
    assert "checkpoint file /no/such.ckpt does not exist" in export_error("ckpt_path=/no/such.ckpt")
    assert f"no run with checkpoints under {tmp_path}" in export_error(f"paths.log_dir={tmp_path}")
    assert "out=model.bin must end in .onnx" in export_error("out=model.bin")
    (tmp_path / "folder.onnx").mkdir()
    assert f"out={tmp_path / 'folder.onnx'} is a directory" in export_error(f"out={tmp_path / 'folder.onnx'}")
    assert "is an ONNX file already: pass the .ckpt" in export_error("ckpt_path=m.onnx")
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    for arch in ("lstm", "gru"):
        rnn = build_model({"arch": arch, "vocab_size": tokenizer.vocab_size, "block_size": 8, "n_embd": 8,
                           "hidden_size": 8, "num_layers": 1, "dropout": 0.0})
        ckpt = save_checkpoint(rnn, tokenizer, tmp_path / f"{arch}.ckpt")
        message = export_error(f"ckpt_path={ckpt}")
        assert f"a model.arch={arch} model cannot be exported to ONNX: only the Transformer (model=gpt)" in message
    small = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=2, n_embd=8, num_heads=2, num_layers=1))
    with pytest.raises(TinyLMError, match="block_size=2 is too small to export to ONNX"):
        export_onnx(small, tokenizer, tmp_path / "small.onnx")
    assert not (tmp_path / "small.onnx").exists()


def test_export_py_help_shows_only_its_own_options(tmp_path):
    proc = script_in_process("export.py", "--help", check=False, cwd=tmp_path)  # the command, in this process
    assert proc.returncode == 0, proc.stderr
    for key in ("ckpt_path", "run_dir", "out", "paths.log_dir"):
        assert re.search(rf"^{re.escape(key)}=", proc.stdout, re.MULTILINE), key
    assert 'pip install -e ".[onnx]"' in proc.stdout and "model:" not in proc.stdout
    assert list(tmp_path.iterdir()) == []
