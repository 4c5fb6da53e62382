"""tinylm's models in the ecosystem's formats (tinylm/interop, docs/interop.md): a GPT as a TransformerLens
HookedTransformer (the same logits and hook points, to 1e-4), ``export.py format=transformer_lens`` and
``tinylm.load_transformer_lens``, the Hugging Face layout that ``lm.save_pretrained`` writes and that
``tinylm.load``, the commands and the tab read back, and the one line for what cannot be converted or read.

TransformerLens is the ``interop`` extra (part of ``.[dev]``): its tests skip with one reason without it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import builders
import pytest
import torch
from builders import build_tokenizer
from conftest import ROOT, TINY_TEXT, entry_point, script_in_process

import tinylm
from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.run_folder import checkpoint_in_run

pytestmark = pytest.mark.usefixtures("one_thread")
needs_transformer_lens = pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None,
                                            reason='TransformerLens is not installed: pip install -e ".[interop]"')
export_cli = entry_point("export.py")
BLOCK = 16
TOLERANCE = 1e-4  # the issue's: logits and every shared hook point, float32
TEXT = TINY_TEXT[:BLOCK]


def trained_gpt(tokenizer, steps: int = 60, **options) -> GPT:
    """A tiny GPT with ``options`` trained in-process for a moment on TINY_TEXT: weights far from their init."""
    return builders.trained_gpt(tokenizer, TINY_TEXT, BLOCK, steps, **options)


def differences(model: GPT, hooked, ids: torch.Tensor) -> dict[str, float]:
    """The largest difference between tinylm's and TransformerLens's logits ("logits") and each hook point that
    tinylm has (every one must be there in TransformerLens too, of the same shape)."""
    with torch.no_grad():
        (logits, _), cache = model.run_with_cache(ids)
        theirs, their_cache = hooked.run_with_cache(ids)
    found = {"logits": (logits - theirs).abs().max().item()}
    for name, ours in cache.items():
        assert name in their_cache.cache_dict, f"TransformerLens has no hook point {name}"
        other = their_cache[name]
        assert other.shape == ours.shape, f"{name}: {tuple(ours.shape)} here, {tuple(other.shape)} there"
        shown = torch.isfinite(ours)  # the scores hidden by the causal mask are -inf in both
        assert torch.equal(shown, torch.isfinite(other)), name
        found[name] = (ours[shown] - other[shown]).abs().max().item()
    return found


OPTIONS = {
    "learned": {},
    "sinusoidal": {"pos_encoding": "sinusoidal"},
    "rope": {"pos_encoding": "rope"},
    "speedrun": {"norm": "rmsnorm", "qk_norm": True, "activation": "relu2", "logit_softcap": 15.0,
                 "tied_head": True},
    "rope-rmsnorm-qknorm": {"pos_encoding": "rope", "norm": "rmsnorm", "qk_norm": True},
}


@needs_transformer_lens
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_transformer_lens_gives_the_same_logits_and_hook_points(options):
    tokenizer = build_tokenizer("char", TINY_TEXT)
    model = trained_gpt(tokenizer, **options)
    hooked = tinylm.LM.from_model(model, tokenizer).to_transformer_lens()
    ids = torch.tensor([tokenizer.encode(TEXT)])
    found = differences(model, hooked, ids)
    assert len(found) == len(model.hook_points()) + 1  # every hook point compared, and the logits
    worst = max(found, key=found.get)
    assert found[worst] <= TOLERANCE, f"{worst} differs by {found[worst]:.2e}"
    # the positions TransformerLens holds are tinylm's: a learned table as it is, sin/cos as a fixed table
    if options.get("pos_encoding", "learned") != "rope":
        assert torch.equal(hooked.W_pos, model.position_embedding(torch.arange(BLOCK)))
    else:
        assert "hook_pos_embed" not in hooked.hook_dict or not found.get("hook_pos_embed")


@needs_transformer_lens
@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_transformer_lens_tokenizes_as_tinylm(kind):
    tokenizer = build_tokenizer(kind, TINY_TEXT * 8, bpe_vocab_size=300)
    # a context longer than the texts' bytes: TransformerLens's to_tokens cuts a text at n_ctx
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=128, n_embd=16, num_heads=2, num_layers=1))
    hooked = tinylm.LM.from_model(model, tokenizer).to_transformer_lens()
    for text in (TINY_TEXT, "可以 need.\n位置", " 自"):
        ids = hooked.to_tokens(text)
        assert ids.tolist() == [tokenizer.encode(text)], text  # no BOS: tinylm's models have none
        assert hooked.to_string(ids[0]) == text
    # <|endoftext|>, TransformerLens's padding and BOS, is id V: a row of zeros, so padded batches and a BOS run
    assert hooked.cfg.d_vocab == tokenizer.vocab_size + 1 and hooked.cfg.d_vocab_out == tokenizer.vocab_size
    assert not hooked.W_E[-1].any()
    short, long = "可以", TINY_TEXT[:20]
    padded = hooked([short, long])  # (2, T, V), the short text padded on the right with id V
    assert torch.allclose(padded[0, : len(tokenizer.encode(short))], hooked(short)[0], atol=1e-5)
    assert hooked(hooked.to_tokens(short, prepend_bos=True)).shape[1] == len(tokenizer.encode(short)) + 1


@needs_transformer_lens
def test_what_transformer_lens_cannot_hold_is_one_line(lstm_run):
    tokenizer = build_tokenizer("char", TINY_TEXT)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=BLOCK, n_embd=16, num_heads=2, num_layers=1,
                          qk_norm=True))
    with pytest.raises(TinyLMError) as refused:
        tinylm.LM.from_model(model, tokenizer).to_transformer_lens()
    assert "model.qk_norm=true with model.norm=layernorm" in str(refused.value) and "\n" not in str(refused.value)
    lstm = tinylm.load(lstm_run.path)
    with pytest.raises(TinyLMError, match="an lstm model has no TransformerLens twin"):
        lstm.to_transformer_lens()


    class GeluGPT(GPT):  # a model class of the program's own: its forward may be anything
        pass

    with pytest.raises(TinyLMError, match="a model class of your own \\(GeluGPT\\)"):
        tinylm.LM.from_model(GeluGPT(model.config), tokenizer).to_transformer_lens()
    done = script_in_process("export.py", f"run_dir={lstm_run.path}", "format=transformer_lens", check=False)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("export: ")]  # after its progress
    assert done.returncode == 1 and len(errors) == 1 and errors[0].startswith("error: ")
    assert "no TransformerLens twin" in errors[0]


@needs_transformer_lens
def test_export_py_writes_a_folder_transformer_lens_loads_back(gpt_run, tmp_path):
    out = tmp_path / "tl model"
    done = script_in_process("export.py", f"run_dir={gpt_run.path}", "format=transformer_lens", f"out={out}")
    assert "logits differ from tinylm's by at most" in done.stdout
    assert "tinylm.load_transformer_lens(" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    hooked = tinylm.load_transformer_lens(out)
    lm = tinylm.load(gpt_run.path)
    ids = lm.to_tokens(TEXT)
    assert torch.equal(hooked.to_tokens(TEXT), ids)
    found = differences(lm.model, hooked, ids)
    assert max(found.values()) <= TOLERANCE
    # an export again into the same folder replaces it; a folder of other files is refused
    script_in_process("export.py", f"run_dir={gpt_run.path}", "format=transformer_lens", f"out={out}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    (tmp_path / "other" / "config.json").write_text('{"mine": true}')  # a project's own config.json is no export
    done = script_in_process("export.py", f"run_dir={gpt_run.path}", "format=transformer_lens",
                             f"out={tmp_path / 'other'}", check=False)
    assert done.returncode == 1 and "holds other files" in done.stderr and done.stderr.count("\n") == 1
    assert (tmp_path / "other" / "config.json").read_text() == '{"mine": true}'
    with pytest.raises(TinyLMError, match="not a TransformerLens export of tinylm"):
        tinylm.load_transformer_lens(tmp_path / "other")
    # a damaged export is one line too, and the commands point at load_transformer_lens
    (out / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(TinyLMError, match="holds a damaged TransformerLens export"):
        tinylm.load_transformer_lens(out)
    done = script_in_process("generate.py", f"run_dir={out}", "prompt=自", check=False)
    assert done.returncode == 1 and "tinylm.load_transformer_lens(folder)" in done.stderr
    assert done.stderr.count("\n") == 1


# --------------------------------------------------------------------------------------------------------------
# The Hugging Face layout


def greedy(source) -> str:
    return tinylm.load(source).generate("自注意", max_new_tokens=12, temperature=0)


def test_save_pretrained_round_trips_in_a_new_process(gpt_run, tmp_path):
    lm = tinylm.load(gpt_run.path)
    folder = tmp_path / "saved model"
    lm.save_pretrained(folder)
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= {p.name for p in folder.iterdir()}
    config = json.loads((folder / "config.json").read_text())
    assert config["tinylm_format"] == 1 and config["model"]["arch"] == "gpt" and config["task"] == "text"
    expected = greedy(gpt_run.path)
    code = f"import tinylm; print(tinylm.load({str(folder)!r}).generate('自注意', max_new_tokens=12, temperature=0))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout == expected + "\n"
    reloaded = tinylm.LM.from_pretrained(folder)  # huggingface_hub's mixin, on a local folder
    assert reloaded.loaded.global_step == lm.loaded.global_step
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(reloaded.model.state_dict()[name], tensor), name


def test_a_tied_head_stays_tied_and_a_bpe_tokenizer_travels(tmp_path):
    tokenizer = build_tokenizer("bpe", TINY_TEXT * 8, bpe_vocab_size=300)
    model = trained_gpt(tokenizer, steps=5, tied_head=True)
    tinylm.LM.from_model(model, tokenizer).save_pretrained(tmp_path / "m")
    back = tinylm.load(tmp_path / "m")
    assert back.model.lm_head.weight is back.model.token_embedding.weight
    assert back.tokenizer.kind == "bpe" and back.tokenizer.encode(TINY_TEXT) == tokenizer.encode(TINY_TEXT)
    assert torch.equal(back.model.lm_head.weight, model.lm_head.weight)


def test_a_bpe_tokenizer_file_that_is_not_a_regular_file_is_one_line(tmp_path):
    """A FIFO in the place of tokenizer.json: refused at once, never read (a read would wait for a writer)."""
    tokenizer = build_tokenizer("bpe", TINY_TEXT * 8, bpe_vocab_size=300)
    tinylm.LM.from_model(trained_gpt(tokenizer, steps=1), tokenizer).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "tokenizer.json").unlink()
    os.mkfifo(tmp_path / "m" / "tokenizer.json")
    with pytest.raises(TinyLMError, match="tokenizer.json"):
        tinylm.load(tmp_path / "m")


def test_from_pretrained_of_a_missing_folder_is_one_line_without_the_network(tmp_path):
    with pytest.raises(TinyLMError, match="folder .*no_such_model does not exist"):
        tinylm.LM.from_pretrained(str(tmp_path / "no_such_model"))
    with pytest.raises(TinyLMError, match="folder no_such_model does not exist"):
        tinylm.LM.from_pretrained("no_such_model")


def test_the_commands_and_the_tab_read_a_saved_folder(gpt_run, tmp_path):
    lm = tinylm.load(gpt_run.path)
    folder = tmp_path / "outputs" / "saved"
    lm.save_pretrained(folder)
    args = ("prompt=自注意", "max_new_tokens=12", "temperature=0")
    saved = script_in_process("generate.py", f"run_dir={folder}", *args).stdout
    assert saved == script_in_process("generate.py", f"run_dir={gpt_run.path}", *args).stdout
    assert script_in_process("generate.py", f"ckpt_path={folder}", *args).stdout == saved
    text = tmp_path / "tiny.txt"
    text.write_text(TINY_TEXT * 3, encoding="utf-8")
    # data.repeat=1: evaluate.py reads a run's recorded data settings (its data.repeat=30), a saved folder has none
    scores = [json.loads(script_in_process("evaluate.py", f"run_dir={source}", f"data.path={text}", "split=all",
                                           "data.repeat=1").stdout.splitlines()[-1])
              for source in (folder, gpt_run.path)]
    assert scores[0]["loss"] == scores[1]["loss"]
    script_in_process("analyze.py", f"run_dir={folder}", "text=自注意力可以让序列")
    assert (folder / "model-analysis" / "REPORT.md").is_file()  # beside the weights, as beside a checkpoint
    shutil.rmtree(folder / "model-analysis")

    from tinylm.explorer.inprocess import client

    app, _ = client(tmp_path / "outputs")
    runs = json.loads(app.get("/data/plugin/tinylm/runs").get_data(as_text=True))
    assert [run["name"] for run in runs["runs"]] == ["saved"] and runs["skipped"] == []
    ours = json.loads(app.get("/data/plugin/tinylm/attention?run=saved&text=自注意").get_data(as_text=True))
    with torch.no_grad():
        _, cache = lm.run_with_cache("自注意")
    layers = len(lm.model.blocks)
    expected = torch.stack([cache["pattern", layer][0] for layer in range(layers)])  # (L, h, T, T)
    assert torch.allclose(torch.tensor(ours["attention"]), expected, atol=1e-6)


WROTE = "wrote"  # a tampering that wrote its file itself (else config.json is written with its changes)
TAMPERED = {
    "not JSON": lambda folder, config: (folder / "config.json").write_text("{not json") and WROTE,
    "wider model": lambda folder, config: config["model"].update(n_embd=32),
    "unknown option": lambda folder, config: config["model"].update(flash=True),
    "newer format": lambda folder, config: config.update(tinylm_format=2),
    "no format": lambda folder, config: config.pop("tinylm_format") and None,
    "a vocabulary too short": lambda folder, config: config["tokenizer"]["itos"].pop() and None,
    "unknown task": lambda folder, config: config.update(task="poetry"),
    "a path for the tokenizer": lambda folder, config: config.update(tokenizer={"kind": "bpe", "file": "/etc/passwd"}),
    "nested too deep": lambda folder, config: (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    and WROTE,
    "no weights": lambda folder, config: (folder / "model.safetensors").unlink() or WROTE,
    "truncated weights": lambda folder, config: (folder / "model.safetensors").write_bytes(
        (folder / "model.safetensors").read_bytes()[:100]) and WROTE,
}


@pytest.mark.parametrize("tamper", TAMPERED.values(), ids=TAMPERED.keys())
def test_a_tampered_saved_folder_is_one_error_line(gpt_run, tmp_path, tamper):
    original = tmp_path / "original"
    tinylm.load(gpt_run.path).save_pretrained(original)
    folder = tmp_path / "saved"
    shutil.copytree(original, folder)
    config = json.loads((folder / "config.json").read_text())
    if tamper(folder, config) != WROTE:
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(TinyLMError) as refused:
        load_model(checkpoint_in_run(folder).path)  # (checkpoint_in_run refuses a folder without weights)
    message = str(refused.value)
    assert "\n" not in message and str(folder) in message
    done = script_in_process("generate.py", f"run_dir={folder}", "prompt=自", "max_new_tokens=1", check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------------------------------------------
# docs/interop.md


GUIDE = ROOT / "docs" / "interop.md"
SHOWN_RUN = '"outputs/runs/2026-12-05_10-00-00"'  # the guide's run: a trained GPT's folder


@needs_transformer_lens
def test_the_guide_s_python_blocks_run_in_order(gpt_run, tmp_path, monkeypatch):
    """Every python block of docs/interop.md, in one namespace, in a folder of its own (its ``tl_model`` is the
    folder its bash block's export.py writes: made here by that command)."""
    monkeypatch.chdir(tmp_path)
    script_in_process("export.py", f"run_dir={gpt_run.path}", "format=transformer_lens",
                      f"out={tmp_path / 'outputs' / 'tl_model'}")
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3 and SHOWN_RUN in blocks[0]
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block.replace(SHOWN_RUN, repr(str(gpt_run.path))), f"docs/interop.md block {number}", "exec"),
             namespace)  # noqa: S102
    assert (tmp_path / "outputs" / "my_model" / "model.safetensors").is_file()
    with torch.no_grad():
        assert torch.allclose(namespace["model"](namespace["tokens"]), namespace["logits"])
