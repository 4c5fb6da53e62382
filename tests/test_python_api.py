"""The Python API (``import tinylm``, docs/python.md): ``tinylm.load`` picks what the commands pick, ``lm.generate``
prints what generate.py prints, ``lm.score`` what evaluate.py scores, ``run_with_cache``'s logits are the forward's,
hooks are gone after an error, and ``tinylm.train`` is train.py in this process, twice in a row too."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import types
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from conftest import GPT_RUN, ROOT, TINY_TEXT, compose_config, entry_point, train_py

import tinylm
from tinylm.cli import quote_values
from tinylm.commands import checkpoint_from_config
from tinylm.errors import TinyLMError
from tinylm.models import build_model
from tinylm.run_folder import shown_path
from tinylm.tokenizer import CharTokenizer

generate_cli, evaluate_cli = entry_point("generate.py"), entry_point("evaluate.py")
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: the commands run with threads=1

TEXT = TINY_TEXT * 3  # longer than the shared run's block_size of 16


def quoted(cli, overrides) -> list[str]:
    """``overrides`` quoted for Hydra as the command quotes its command line (``tinylm.commands.launch``)."""
    text_keys = getattr(cli, "TEXT_KEYS", ())
    return quote_values(quote_values(list(overrides), text_keys, literal=True), cli.PATH_KEYS)


def generate_py(capsys, *overrides: str) -> str:
    """What ``python generate.py OVERRIDES`` prints on stdout, run in this process."""
    generate_cli.run(compose_config("generate", *quoted(generate_cli, overrides)))
    return capsys.readouterr().out


def evaluate_py(capsys, *overrides: str) -> dict:
    """The JSON line of ``python evaluate.py OVERRIDES``, run in this process."""
    evaluate_cli.run(compose_config("evaluate", *quoted(evaluate_cli, overrides)))
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def command_error(cli, name: str, *overrides: str) -> str:
    with pytest.raises(TinyLMError) as info:
        cli.run(compose_config(name, *quoted(cli, overrides)))
    return str(info.value)


def printed(text: str) -> str:
    """``text`` as generate.py prints one sample: a newline at its end unless it has one."""
    return text if text.endswith("\n") else text + "\n"


@pytest.fixture(scope="module")
def lm(gpt_run):
    return tinylm.load(gpt_run.path)


# --------------------------------------------------------------------------------------------
# import tinylm


def test_import_tinylm_imports_no_torch_and_its_names_come_on_first_use(tmp_path):
    program = ("import sys, tinylm; assert 'torch' not in sys.modules, 'torch imported'; "
               "assert 'hydra' not in sys.modules, 'hydra imported'; "
               "assert {'load', 'train', 'GPT', 'Tokenizer'} <= set(dir(tinylm))\n"
               "try: tinylm.train(['model.n_embd=65'])\n"
               "except tinylm.TinyLMError as e: print(e)\n"
               "assert 'torch' not in sys.modules, 'torch imported by a refused tinylm.train'\n"
               "import tinylm.checkpoint")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "TINYLM_ROOT": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("error: invalid config: model.n_embd=65 is not divisible by model.num_heads=4")
    from tinylm.models.gpt import GPT, GPTConfig
    from tinylm.models.rnn import RNNConfig, RNNLanguageModel
    from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig

    assert (tinylm.GPT, tinylm.GPTConfig, tinylm.RNNLanguageModel, tinylm.RNNConfig, tinylm.Seq2Seq,
            tinylm.Seq2SeqConfig, tinylm.Tokenizer) == (GPT, GPTConfig, RNNLanguageModel, RNNConfig, Seq2Seq,
                                                        Seq2SeqConfig, CharTokenizer)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        tinylm.nothing  # noqa: B018


def test_a_model_built_from_scratch_prints_its_architecture_and_runs_with_cache():
    tokenizer = tinylm.Tokenizer.from_text(TINY_TEXT)
    torch.manual_seed(0)
    model = tinylm.GPT(tinylm.GPTConfig(vocab_size=tokenizer.vocab_size, block_size=16, n_embd=16, num_heads=2,
                                        num_layers=2))
    assert "(attn): CausalSelfAttention(" in repr(model) and "HookPoint" not in repr(model)
    lm = tinylm.LM.from_model(model, tokenizer)
    logits, cache = lm.run_with_cache("自注意力")
    assert logits.shape == (1, 4, tokenizer.vocab_size)
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, 2, 4, 4) and cache["pattern", 1].shape == (1, 2, 4, 4)
    assert "a model built in this session" in repr(lm) and model.format_parameter_table() in repr(lm)


# --------------------------------------------------------------------------------------------
# tinylm.load: the checkpoint the commands choose


def test_load_none_picks_what_generate_py_picks(gpt_run, tmp_path, monkeypatch):
    """Two runs, the newer a sweep job's: both choose the sweep job's best checkpoint, for the same reason."""
    outputs = tmp_path / "outputs"
    shutil.copytree(gpt_run.path, outputs / "runs" / gpt_run.path.name)
    job = shutil.copytree(gpt_run.path, outputs / "multirun" / "2026-01-02_00-00-00" / "0")
    for checkpoint in (job / "checkpoints").iterdir():  # the newer run
        os.utime(checkpoint, (checkpoint.stat().st_atime + 60, checkpoint.stat().st_mtime + 60))
    monkeypatch.setenv("TINYLM_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    lm = tinylm.load()
    chosen = checkpoint_from_config(compose_config("generate"))
    assert (lm.loaded.path, lm.loaded.why) == tuple(chosen)
    assert "multirun" in str(lm.loaded.path) and lm.loaded.why == "the newest run's best checkpoint"
    assert tinylm.load(outputs / "multirun" / "2026-01-02_00-00-00" / "0").loaded.path == lm.loaded.path  # a job
    shutil.rmtree(outputs)
    message = command_error(generate_cli, "generate")  # no run with checkpoints
    with pytest.raises(TinyLMError) as info:
        tinylm.load()
    assert str(info.value) == message and message.startswith("no run with checkpoints under ")


def test_load_a_run_folder_a_file_and_what_is_neither(gpt_run, tmp_path, monkeypatch):
    lm = tinylm.load(gpt_run.path)
    assert lm.loaded.path.parent == gpt_run.path / "checkpoints" and lm.loaded.why == "run_dir's best checkpoint"
    assert tinylm.load(str(lm.loaded.path)).loaded.path == lm.loaded.path and lm.task == "text"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    for source, key in (("missing.ckpt", "ckpt_path"), ("empty", "run_dir")):
        with pytest.raises(TinyLMError) as info:
            tinylm.load(source)
        assert str(info.value) == command_error(generate_cli, "generate", f"{key}={source}")
    with pytest.raises(TinyLMError, match=r"^\S+model.onnx is an ONNX export, .*python generate.py ckpt_path="):
        tinylm.load("model.onnx")


def test_print_lm_shows_the_checkpoint_the_architecture_and_train_py_s_parameter_table(lm, gpt_run):
    shown = repr(lm)
    table = lm.model.format_parameter_table()
    assert table in gpt_run.output  # what train.py printed
    assert shown.startswith(f"tinylm.LM of {shown_path(lm.loaded.path)} (run_dir's best checkpoint; step 20, text task")
    assert repr(lm.model) in shown and shown.endswith(table)


# --------------------------------------------------------------------------------------------
# The commands' figures and texts


@pytest.mark.parametrize("settings", [
    {"temperature": 0.8, "top_k": 5, "top_p": 0.9, "seed": 3},
    {"temperature": 0, "stop": "\n"},
    {"seed": 1, "ablate": ["0.1", "1.0"], "use_cache": False},
    {"prompt": "", "seed": 2},
])
def test_generate_gives_the_text_of_generate_py(lm, gpt_run, capsys, settings):
    settings = {"prompt": "自注意力", "max_new_tokens": 40, **settings}
    overrides = [f"run_dir={gpt_run.path}", f"max_new_tokens={settings['max_new_tokens']}"]
    for key, value in settings.items():
        if key == "ablate":
            overrides.append(f"ablate=[{','.join(value)}]")
        elif key in ("prompt", "stop"):
            overrides.append(f"{key}=" + value.replace("\n", "\\n"))  # as typed in a shell: \n for a newline
        elif key != "max_new_tokens":
            overrides.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    assert printed(lm.generate(**settings)) == generate_py(capsys, *overrides)


def test_generate_is_the_same_with_the_same_seed_and_refuses_what_generate_py_refuses(lm, gpt_run):
    assert lm.generate("自", seed=5, max_new_tokens=20) == lm.generate("自", seed=5, max_new_tokens=20)
    assert lm.generate("自", ablate=[(0, 1)], seed=5) == lm.generate("自", ablate=["0.1"], seed=5)
    assert lm.generate("自", ablate="0.1", seed=5) == lm.generate("自", ablate=["0.1"], seed=5)
    assert lm.generate("自", ablate="0.1, 1.0", seed=5) == lm.generate("自", ablate=["0.1", "1.0"], seed=5)
    for settings, overrides in (({"prompt": "自Ω"}, ["prompt=自Ω"]), ({"temperature": -1}, ["temperature=-1"]),
                                ({"ablate": ["5.0"]}, ["ablate=[5.0]"])):
        with pytest.raises(TinyLMError) as info:
            lm.generate(**settings)
        assert str(info.value) == command_error(generate_cli, "generate", f"run_dir={gpt_run.path}", *overrides)


@pytest.mark.parametrize("stride", [None, 5])
def test_score_gives_the_figures_of_evaluate_py(lm, gpt_run, tmp_path, capsys, stride):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    result = evaluate_py(capsys, f"run_dir={gpt_run.path}", f"data.path={tmp_path / 'text.txt'}", "split=all",
                         "data.repeat=1",  # the run trained on its text repeated 30 times
                         *([f"stride={stride}"] if stride else []))
    assert lm.score(TEXT, stride=stride) == {"loss": result["loss"], "bits_per_char": result["bpc"],
                                             "tokens": result["tokens"]}


def test_score_of_a_text_within_one_window_and_what_cannot_be_scored(lm):
    text = TINY_TEXT[:10]
    scores = lm.score(text)
    ids = lm.to_tokens(text)[0]
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(lm.model(ids[None, :-1])[0][0], ids[1:])
    assert scores["tokens"] == 9 and scores["loss"] == pytest.approx(float(expected), rel=1e-6)
    for text, said in (("自", "1 token long"), ("", "empty"), ("自Ω注意", "outside the checkpoint's vocabulary")):
        with pytest.raises(TinyLMError, match=said):
            lm.score(text)


# --------------------------------------------------------------------------------------------
# Hook points


def test_run_with_cache_logits_equal_the_forward_and_the_cache_holds_every_hook_point(lm):
    ids = lm.to_tokens("自注意力可以")
    with torch.no_grad():
        expected = lm.model(ids)[0]
    logits, cache = lm.run_with_cache("自注意力可以")
    assert torch.equal(logits, expected) and logits.shape == (1, 6, lm.tokenizer.vocab_size)
    assert set(cache) == set(lm.hook_names) == set(lm.hook_points()) and list(cache)[0] == "hook_embed"
    assert {"hook_embed", "blocks.0.attn.hook_z", "blocks.1.hook_resid_post", "ln_final.hook_normalized"} <= set(cache)
    assert cache["blocks.0.attn.hook_q"].shape == (1, 6, 2, 8) and cache["blocks.0.mlp.hook_post"].shape == (1, 6, 64)
    assert torch.equal(lm.run_with_cache(ids)[0], expected)  # ids instead of a text
    assert torch.equal(lm.run_with_hooks(ids[0].tolist()), expected)
    _, some = lm.run_with_cache("自注意力可以", names_filter=lambda name: name.endswith("hook_pattern"))
    assert list(some) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]


def test_run_with_hooks_zeroing_a_head_through_hook_z_is_generate_py_s_ablation(lm):
    from tinylm.analysis.hooks import heads_switched_off

    def zero_head_1(z, hook):  # (batch, pos, head, d_head)
        z = z.clone()
        z[:, :, 1] = 0
        return z

    logits = lm.run_with_hooks("自注意力可以", fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
    with heads_switched_off(lm.model, ["0.1"]), torch.no_grad():
        ablated = lm.model(lm.to_tokens("自注意力可以"))[0]
    assert torch.allclose(logits, ablated, atol=1e-6) and not torch.equal(logits, lm.run_with_hooks("自注意力可以"))
    assert torch.equal(lm.run_with_hooks("自注意力可以", fwd_hooks=[("hook_embed", lambda x, hook: None)]),
                       lm.run_with_cache("自注意力可以")[0])


def test_run_with_hooks_removes_its_hooks_after_an_error(lm):
    def broken(tensor, hook):
        raise RuntimeError("a broken hook")

    before = lm.run_with_hooks("自注意力")
    with pytest.raises(RuntimeError, match="a broken hook"):
        lm.run_with_hooks("自注意力", fwd_hooks=[("hook_embed", lambda x, hook: x * 0), ("blocks.1.hook_resid_mid",
                                                                                       broken)])
    assert not any(point.active for point in lm.hook_points().values())
    assert torch.equal(lm.run_with_hooks("自注意力"), before)
    with pytest.raises(TinyLMError, match="no hook point 'blocks.0.attn.hook_patern': did you mean "):
        lm.run_with_hooks("自注意力", fwd_hooks=[("blocks.0.attn.hook_patern", broken)])


def test_a_text_the_model_cannot_read_at_once_is_one_line(lm):
    with pytest.raises(TinyLMError, match=f"text is {len(TEXT)} tokens long but the model sees at most block_size=16"):
        lm.run_with_cache(TEXT)
    with pytest.raises(TinyLMError, match=r"^text has 1 character\(s\) outside the checkpoint's vocabulary: 'Ω'"):
        lm.run_with_hooks("自Ω")
    with pytest.raises(TinyLMError, match="target= is an encoder-decoder's"):
        lm.run_with_cache("自", target="注")


def test_an_rnn_reads_a_text_of_any_length():
    tokenizer = CharTokenizer.from_text(TINY_TEXT)
    model = build_model({"arch": "lstm", "vocab_size": tokenizer.vocab_size, "block_size": 8, "n_embd": 8,
                         "hidden_size": 16})
    lm = tinylm.LM.from_model(model, tokenizer)
    logits, cache = lm.run_with_cache(TEXT)
    assert logits.shape == (1, len(TEXT), tokenizer.vocab_size) and list(cache) == ["hook_embed", "hook_rnn_out"]


# --------------------------------------------------------------------------------------------
# A translation checkpoint


@pytest.fixture(scope="module")
def translation(tmp_path_factory):
    from tinylm.tasks.translation.data import SPECIAL

    tokenizer = CharTokenizer([*SPECIAL.values(), *"0123456789一二三四五六七八九十百千万零"])
    torch.manual_seed(0)
    model = build_model({"arch": "seq2seq", "vocab_size": tokenizer.vocab_size, "block_size": 12, "n_embd": 16,
                         "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0}).eval()
    path = tmp_path_factory.mktemp("translation") / "seq2seq.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "model_config": asdict(model.config), "tokenizer": tokenizer.state(), "global_step": 3,
                "hyper_parameters": {"task": "translation"}}, path)
    return path


def test_a_translation_checkpoint_translates_as_generate_py_and_refuses_score(translation, capsys):
    lm = tinylm.load(translation)
    assert lm.task == "translation"
    for settings in ({"temperature": 0}, {"seed": 4}, {"beam_size": 3}):
        overrides = [f"{key}={value}" for key, value in settings.items()]
        expected = generate_py(capsys, f"ckpt_path={translation}", "prompt='三千零五\\n十二'", *overrides)
        assert printed(lm.generate("三千零五\n十二", **settings)) == expected
    assert lm.translate("三千零五") == lm.generate("三千零五", temperature=0)
    with pytest.raises(TinyLMError, match="translates source<TAB>target pairs, and lm.score scores a text"):
        lm.score("三千零五")
    with pytest.raises(TinyLMError, match="nothing to translate"):
        lm.generate("")


def test_a_translation_checkpoint_runs_with_cache_on_a_source_and_its_translation(translation):
    from tinylm.models.seq2seq import BEGIN_ID

    lm = tinylm.load(translation)
    logits, cache = lm.run_with_cache("三千零五", target="3005")
    src, tgt = lm.inputs("三千零五", "3005")
    assert tgt[0].tolist() == [BEGIN_ID, *lm.tokenizer.encode("3005")]
    with torch.no_grad():
        assert torch.equal(logits, lm.model(src, tgt)[0]) and logits.shape == (1, 5, lm.tokenizer.vocab_size)
    assert cache["decoder.0.cross_attn.hook_pattern"].shape == (1, 2, 5, 4)
    greedy = lm.translate("三千零五")
    assert lm.run_with_cache("三千零五")[0].shape[1] == 1 + min(len(greedy), 11)  # BEGIN + its own translation


def test_show_hands_the_checkpoint_to_the_standalone_views(lm, translation, monkeypatch):
    import types

    calls = []
    fake = types.ModuleType("tinylm.explorer.standalone")
    for name in ("text_view", "heads_view", "translation_view"):
        setattr(fake, name, lambda *args, name=name, **kw: calls.append((name, args, kw)) or name)
    monkeypatch.setitem(sys.modules, "tinylm.explorer.standalone", fake)
    import tinylm.explorer

    monkeypatch.setattr(tinylm.explorer, "standalone", fake, raising=False)
    assert lm.show("自注意力", layer=1) == "text_view" and lm.show_heads() == "heads_view"
    assert tinylm.load(translation).show("三千") == "translation_view"
    with pytest.raises(TinyLMError, match=r"^show: a translation model's view takes only the source text, not ablate"):
        tinylm.load(translation).show("三千", ablate=["0.0"])
    assert calls[0] == ("text_view", (lm.loaded, "自注意力"), {"layer": 1}) and calls[1][1] == (lm.loaded,)


# --------------------------------------------------------------------------------------------
# tinylm.train


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder of its own (TINYLM_ROOT) holding the tiny text, as the current folder."""
    (tmp_path / "tiny.txt").write_text(TINY_TEXT, encoding="utf-8")
    monkeypatch.setenv("TINYLM_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


TRAIN = [*(o for o in GPT_RUN if not o.startswith("trainer.max_steps")), "trainer.max_steps=10", "data.path=tiny.txt"]


def test_train_twice_in_one_process_each_run_in_its_folder_logged_once(project):
    from hydra.core.global_hydra import GlobalHydra

    handlers, argv = logging.getLogger().handlers[:], sys.argv[:]
    torch.set_num_threads(2)  # the runs' threads=1 is theirs
    first = tinylm.train(TRAIN)
    second = tinylm.train(TRAIN)  # the same settings, maybe in the same second: a folder of its own all the same
    assert first.run_dir.parent == project / "outputs" / "runs" and second.run_dir.parent == first.run_dir.parent
    assert first.run_dir != second.run_dir and torch.get_num_threads() == 2
    for run in (first, second):
        assert run.metrics == json.loads((run.run_dir / "metrics.json").read_text()) and run.metrics["steps"] == 10
        log = (run.run_dir / "train.log").read_text(encoding="utf-8")
        assert log.count("final val loss") == 1, log
    assert logging.getLogger().handlers == handlers and sys.argv == argv
    assert not GlobalHydra.instance().is_initialized()
    lm = second.load()
    assert lm.loaded.path.parent == second.run_dir / "checkpoints" and lm.loaded.global_step == 10
    assert isinstance(lm.generate("自", max_new_tokens=5, seed=1), str)


@pytest.mark.parametrize("override", ["model.n_embd=65", "model.num_layer=2", "trainer.max_steps=-1"])
def test_a_bad_override_is_the_error_line_of_train_py_and_makes_no_folder(project, override):
    with pytest.raises(TinyLMError) as info:
        tinylm.train([*TRAIN, override])
    said = train_py(*TRAIN, override, check=False)
    assert said.returncode == 1 and said.stderr.strip() == str(info.value)
    assert not (project / "outputs" / "runs").exists() or not any((project / "outputs" / "runs").iterdir())


def test_train_refuses_a_sweep_and_ctrl_c_is_keyboard_interrupt(project, monkeypatch):
    for override in ("-m", "hparams_search=optuna"):
        with pytest.raises(TinyLMError, match="python train.py"):
            tinylm.train([*TRAIN, override])
    from tinylm.runs import job

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "prepare", interrupted)  # Ctrl-C while the run is set up
    argv = sys.argv[:]
    with pytest.raises(KeyboardInterrupt):
        tinylm.train(TRAIN)
    assert sys.argv == argv and not any((project / "outputs" / "runs").iterdir())


def test_train_in_a_notebook_draws_no_progress_bar_unless_asked(project, monkeypatch):
    """A notebook cell prints the bar's terminal escapes as they come: there the bar is off by default."""
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    settings = [o for o in TRAIN if not o.startswith("trainer.enable_progress_bar=")]
    quiet = tinylm.train(settings)
    asked = tinylm.train([*settings, "trainer.enable_progress_bar=true"])
    assert "trainer.enable_progress_bar=false" in (quiet.run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "trainer.enable_progress_bar=false" not in (asked.run_dir / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow
def test_train_refuses_a_resume_that_would_continue_a_sweep(project):
    """ckpt_path=last of an optuna sweep's job brings back hparams_search=optuna: a sweep, not one Run."""
    sweep = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hparams_search=optuna",
                            "hydra.sweeper.n_trials=1", *TRAIN[:-2], "trainer.max_steps=2", "data.path=tiny.txt"],
                           cwd=project, capture_output=True, text=True, env={**os.environ, "TINYLM_ROOT": str(project)})
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    jobs = sorted((project / "outputs" / "multirun").rglob("last.ckpt"))
    with pytest.raises(TinyLMError) as info:
        tinylm.train(["ckpt_path=last", "trainer.max_steps=4"])
    assert str(info.value).startswith("error: this resume continues a sweep (hparams_search=optuna)")
    assert sorted((project / "outputs" / "multirun").rglob("last.ckpt")) == jobs  # nothing trained


# --------------------------------------------------------------------------------------------
# docs/python.md


GUIDE = ROOT / "docs" / "python.md"
SHOWN_NUMBERS_RUN = '"outputs/runs/2026-12-02_06-00-00"'  # the guide's experiment=numbers_zh run


def guide_blocks(page: Path = GUIDE) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


def test_the_guide_s_python_blocks_compile_and_name_the_api_as_it_is():
    blocks = guide_blocks()
    assert len(blocks) >= 8 and any(SHOWN_NUMBERS_RUN in block for block in blocks)
    for number, block in enumerate([*blocks, *guide_blocks(ROOT / "README.md")], 1):
        compile(block, f"python block {number}", "exec")
    names = set(re.findall(r"\btinylm\.(\w+)", GUIDE.read_text(encoding="utf-8")))
    assert {name for name in names if not hasattr(tinylm, name)} <= {"explorer", "TinyLMError"} | {"api"}


@pytest.mark.slow
def test_the_guide_s_python_blocks_run_in_order(translation, project):
    """Every block of docs/python.md, in one namespace, in a project holding a short run on the shipped corpus
    (the guide's numbers_zh run: the random translation checkpoint); its training block trains for real."""
    tinylm.train(["model.num_layers=2", "trainer.max_steps=20", "callbacks=minimal", "logger=none", "threads=1"])
    namespace: dict = {}
    for number, block in enumerate(guide_blocks(), 1):
        code = compile(block.replace(SHOWN_NUMBERS_RUN, f'"{translation}"'), f"docs/python.md block {number}", "exec")
        exec(code, namespace)  # noqa: S102
    assert (project / "view.html").is_file() and namespace["run"].metrics["steps"] == 200
    (readme,) = [block for block in guide_blocks(ROOT / "README.md") if "tinylm.load" in block]
    exec(compile(readme, "README.md's python block", "exec"), {})  # noqa: S102
