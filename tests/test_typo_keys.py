"""A misspelled key or a config a group does not have is one line naming what is there, before Hydra runs
the command (``tinylm.precheck``): not Hydra's 6-10 lines, whose advice for a key is ``+model.num_layer=6``."""

from __future__ import annotations

import pytest
from conftest import ROOT, train_py

from tinylm.errors import TinyLMError
from tinylm.precheck import composed

GPT_KEYS = ("arch, block_size, n_embd, num_heads, num_layers, dropout, pos_encoding, attn_impl, norm, activation, "
            "qk_norm, logit_softcap, tied_head")


def refusal(config: str, *args: str) -> str:
    with pytest.raises(TinyLMError) as info:
        composed(config, [f"{config}.py", *args], ROOT / "conf")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_misspelled_key_suggests_the_key_and_lists_the_keys_there():
    assert refusal("train", "model.num_layer=6") == (
        f"model.num_layer is unknown: did you mean model.num_layers? (model=gpt has {GPT_KEYS})")


def test_a_key_of_another_model_names_the_chosen_model():
    assert refusal("train", "model=lstm", "model.num_heads=2") == (
        "model.num_heads is unknown: remove it (model=lstm has arch, block_size, n_embd, hidden_size, num_layers, "
        "dropout)")


def test_a_config_the_group_does_not_have_lists_the_choices():
    assert refusal("train", "model=transformer") == (
        "model=transformer is not a config of conf/model/: choose one of gpt, lstm, seq2seq")
    assert refusal("train", "model=lsmt").startswith(
        "model=lsmt is not a config of conf/model/: did you mean model=lstm? choose one of gpt, lstm, seq2seq")
    assert refusal("train", "hydra/launcher=jobib").startswith(
        "hydra/launcher=jobib is not a config of conf/hydra/launcher/: did you mean hydra/launcher=joblib?")


def test_every_bad_override_is_said_at_once():
    said = refusal("train", "modle.n_embd=32", "trainer.max_step=3", "experiment=nope", "seed=1")
    assert said.startswith("experiment=nope is not a config of conf/experiment/: choose one of chinese_large, ")
    assert "; modle is unknown: did you mean model? (the training config (conf/train.yaml) has seed, " in said
    assert "; trainer.max_step is unknown: did you mean trainer.max_steps? (trainer=default has " in said


def test_a_key_train_py_sets_itself_says_so():
    assert refusal("train", "model.vocab_size=80") == (
        "model.vocab_size is not a setting: train.py sets it from the data's vocabulary; remove it")


@pytest.mark.parametrize(("config", "override", "said"), [
    ("generate", "promt=你好", "promt is unknown: did you mean prompt? (the generate.py config (conf/generate.yaml) "
                               "has paths, ckpt_path, run_dir, prompt,"),
    ("analyze", "txt=你好", "txt is unknown: did you mean text? (the analyze.py config (conf/analyze.yaml) has "),
    ("evaluate", "data.pth=a.txt", "data.pth is unknown: did you mean data.path? (data has path, val_fraction, "),
    ("export", "ot=m.onnx", "ot is unknown: did you mean out? (the export.py config (conf/export.yaml) has "),
    ("visualize", "paths.log_dri=x", "paths.log_dir? (paths=default has root_dir, log_dir, cache_dir, output_dir)"),
])
def test_the_other_commands_say_a_misspelled_key_in_one_line(config, override, said):
    assert said in refusal(config, override)


def test_a_sweep_checks_its_first_job_and_every_config_a_group_sweep_names():
    assert refusal("train", "-m", "model.num_layer=1,2").startswith(
        "model.num_layer is unknown: did you mean model.num_layers?")
    assert refusal("train", "-m", "model=gpt,transformer", "model.n_embd=32,64") == (
        "model=transformer is not a config of conf/model/: choose one of gpt, lstm, seq2seq")
    assert composed("train", ["train.py", "-m", "seed=range(1,3)", "model.n_embd=32,64"], ROOT / "conf") is not None


def test_a_config_that_asks_for_a_sweep_itself_is_checked_as_one():
    """hparams_search=optuna sweeps without -m: its choice() is the first trial's value, not an ambiguity."""
    from tinylm.precheck import is_multirun

    args = ["train.py", "hparams_search=optuna", "optim.lr=choice(0.003,1e12,0)"]
    cfg = composed("train", args, ROOT / "conf")
    assert is_multirun(cfg) and cfg.optim.lr == 0.003
    assert refusal("train", *args[1:], "optim.lrr=0.1").startswith("optim.lrr is unknown: did you mean optim.lr?")


def test_hydras_own_flags_are_left_to_hydra_and_good_overrides_compose():
    assert composed("train", ["train.py", "--cfg", "job", "model.num_layer=6"], ROOT / "conf") is None
    cfg = composed("generate", ["generate.py", "prompt='a, b = 1'", "top_k=5"], ROOT / "conf")
    assert cfg.prompt == "a, b = 1" and cfg.top_k == 5 and "hydra" in cfg


def test_an_override_hydra_cannot_read_is_one_line():
    assert refusal("train", "model.num_layers=[1").startswith("cannot read model.num_layers=[1 (no viable alternative")
    assert refusal("train", "callbacks.sample_text.promts=你好").startswith(  # a key train.py does not quote
        "callbacks.sample_text.promts is unknown: did you mean callbacks.sample_text.prompts? (callbacks.sample_text "
        "has every_n_steps, prompts, ")
    assert refusal("train", "callbacks.sample_text.prompts=你好").endswith(
        ": quote the value, callbacks.sample_text.prompts='你好'")


def test_train_py_says_it_in_one_line_and_makes_no_run_folder(tmp_path):
    """The whole command line, in this process (its ``__main__``), as the user runs it."""
    done = train_py(f"paths.log_dir={tmp_path / 'outputs'}", "model.num_layer=6", check=False)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"error: invalid config: model.num_layer is unknown: did you mean model.num_layers? (model=gpt has {GPT_KEYS})"]
    assert not (tmp_path / "outputs").exists()
