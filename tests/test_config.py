"""Config validation (tinylm/training/config_checks.py): every user-facing value of the composed config is checked
before any data is read, each bad value is one line naming its key and the fix, all at once."""

import pytest
import torch
from conftest import ROOT, TINY_TEXT, compose
from hydra.errors import ConfigCompositionException

from tinylm.errors import TinyLMError
from tinylm.runs.job import main as train_main
from tinylm.training.config_checks import config_problems, validate

EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
DEBUGS = sorted(p.stem for p in (ROOT / "conf" / "debug").glob("*.yaml"))
GPUS = torch.cuda.device_count()
# the trainer presets that can run here: trainer=ddp takes 2 GPUs when there are any, else 2 CPU processes
TRAINERS = ["cpu", "ddp_sim", *(["ddp"] if GPUS != 1 else []), *(["gpu"] if GPUS else [])]
HANDLERS = "must be a decoding error handler: strict, replace, ignore or backslashreplace"

# override -> the one line config_problems gives for it
BAD = {
    "seed=-1": "seed=-1 must be an integer in [0, 4294967295]",
    "seed=abc": "seed='abc' must be an integer in [0, 4294967295]",
    "seed=4294967296": "seed=4294967296 must be an integer in [0, 4294967295]",
    "seed=1.5": "seed=1.5 must be an integer in [0, 4294967295]",
    "seed=true": "seed=True must be an integer in [0, 4294967295]",
    "threads=0": "threads=0 must be a positive integer or null",
    "optim.lr=abc": "optim.lr='abc' must be a positive number",
    "optim.weight_decay=abc": "optim.weight_decay='abc' must be a number >= 0",
    "optim.weight_decay=-0.1": "optim.weight_decay=-0.1 must be a number >= 0",
    "optim.warmup_steps=abc": "optim.warmup_steps='abc' must be an integer >= 0",
    "optim.warmup_steps=10.5": "optim.warmup_steps=10.5 must be an integer >= 0",
    "optim.decay_steps=-1": "optim.decay_steps=-1 must be an integer >= 0",
    "optim.betas=[0.9]": "optim.betas=[0.9] must be two numbers in [0, 1), e.g. [0.9, 0.99]",
    "optim.betas=[0.9,1.0]": "optim.betas=[0.9, 1.0] must be two numbers in [0, 1), e.g. [0.9, 0.99]",
    "optim.betas=0.9": "optim.betas=0.9 must be two numbers in [0, 1), e.g. [0.9, 0.99]",
    "optim.betas=[abc,0.99]": "optim.betas=['abc', 0.99] must be two numbers in [0, 1), e.g. [0.9, 0.99]",
    "optim.min_lr_ratio=abc": "optim.min_lr_ratio='abc' must be a number in [0, 1]",
    "optim.min_lr_ratio=1.5": "optim.min_lr_ratio=1.5 must be a number in [0, 1]",
    "trainer.gradient_clip_val=abc": "trainer.gradient_clip_val='abc' must be a number >= 0 or null",
    "trainer.gradient_clip_val=-1": "trainer.gradient_clip_val=-1 must be a number >= 0 or null",
    "trainer.max_steps=abc": "trainer.max_steps='abc' must be a positive integer",
    "trainer.val_check_interval=0.5": "trainer.val_check_interval=0.5 must be a positive integer",
    "trainer.log_every_n_steps=0": "trainer.log_every_n_steps=0 must be a positive integer",
    "trainer.check_val_every_n_epoch=0": "trainer.check_val_every_n_epoch=0 must be a positive integer or null",
    "trainer.num_sanity_val_steps=-2": "trainer.num_sanity_val_steps=-2 must be an integer >= -1",
    "trainer.accelerator=tpuu": "trainer.accelerator='tpuu' must be one of auto, gpu, cpu, cuda, mps, tpu",
    "trainer.devices=abc": "trainer.devices='abc' must be a positive integer or auto "
                           "(GPUs: also -1 for all, or [0, 1, ...])",
    "trainer.devices=0": "trainer.devices=0 must be a positive integer or auto (GPUs: also -1 for all, or [0, 1, ...])",
    "trainer.enable_progress_bar=abc": "trainer.enable_progress_bar='abc' must be one of true, false",
    "trainer.enable_model_summary=1": "trainer.enable_model_summary=1 must be one of true, false",
    "trainer.deterministic=abc": "trainer.deterministic='abc' must be one of true, false, warn or null",
    "+trainer.precision=17": "trainer.precision=17 must be one of 64, 32, 16, transformer-engine, "
                             "transformer-engine-float16, 16-true, 16-mixed, bf16-true, bf16-mixed, 32-true, "
                             "64-true, 64, 32, 16, bf16 or null",
    "+trainer.num_nodes=0": "trainer.num_nodes=0 must be a positive integer",
    "+trainer.strategy=ddpp": "trainer.strategy='ddpp' must be auto, a Lightning strategy name such as ddp, "
                              "or a _target_ entry",
    "+trainer.limit_val_batches=1.5": "trainer.limit_val_batches=1.5 must be a number of batches "
                                      "(an integer >= 0) or a fraction in [0, 1]",
    "+trainer.foo=1": "trainer.foo is not a Lightning Trainer argument train.py can pass on: remove it",
    "+trainer.callbacks=[]": "trainer.callbacks is not a Lightning Trainer argument train.py can pass on: remove it",
    "data.batch_size=abc": "data.batch_size='abc' must be a positive integer",
    "data.repeat=0": "data.repeat=0 must be a positive integer",
    "data.val_fraction=1": "data.val_fraction=1 must be a number in (0, 1)",
    "data.tokenizer=words": "data.tokenizer='words' must be one of char, byte, bpe",
    "data.bpe_vocab_size=abc": "data.bpe_vocab_size='abc' must be a positive integer",
    "data.max_mib=0": "data.max_mib=0 must be a positive number",
    "data.max_mib=abc": "data.max_mib='abc' must be a positive number",
    "data.max_mib=inf": "data.max_mib=inf must be a positive number",
    "data.path=[a,b]": "data.path=['a', 'b'] must be a file path or null",
    "data.url=[1]": "data.url=[1] must be a URL or null",
    "data.sha256=abc": "data.sha256='abc' must be the file's SHA-256 (64 hex digits) or null",
    "+data.foo=1": "data.foo is unknown: remove it (tinylm.tasks.text.data.TextDataModule takes path, tokenizer, "
                   "batch_size, val_fraction, val_batches, repeat, encoding, errors, url, sha256, "
                   "bpe_vocab_size, max_mib, cache_dir)",
    "+optim.eps=1e-8": "optim.eps is unknown: remove it (optim takes lr, weight_decay, betas, warmup_steps, "
                       "decay_steps, min_lr_ratio, decay)",
    # item 9: each of the two decoding keys is named by its own line
    "data.errors=foo": f"data.errors='foo' {HANDLERS}",
    "data.errors=xmlcharrefreplace": f"data.errors='xmlcharrefreplace' {HANDLERS}",
    "data.errors=surrogateescape": f"data.errors='surrogateescape' {HANDLERS}",  # lone surrogates: untokenizable
    "data.encoding=foo": "data.encoding='foo' must be a text encoding Python knows, e.g. utf-8, gbk or latin-1",
    "data.encoding=rot13": "data.encoding='rot13' must be a text encoding Python knows, e.g. utf-8, gbk or latin-1",
    # early stopping: off while patience is null, and its patience counts validations
    "callbacks.early_stopping.patience=0": "callbacks.early_stopping.patience=0 must be a positive integer or null",
    "callbacks.early_stopping.patience=-3": "callbacks.early_stopping.patience=-3 must be a positive integer or null",
    "callbacks.early_stopping.patience=2.5": "callbacks.early_stopping.patience=2.5 must be a positive integer or null",
    "callbacks.early_stopping.patience=abc": "callbacks.early_stopping.patience='abc' must be a positive integer "
                                             "or null",
    "callbacks.early_stopping.min_delta=-0.1": "callbacks.early_stopping.min_delta=-0.1 must be a number >= 0",
    "callbacks.early_stopping.monitor=loss/train": "callbacks.early_stopping.monitor='loss/train' must be one of "
                                                   "loss/val, loss/val_bpc",
    "callbacks.early_stopping.check_on_train_epoch_end=true": "callbacks.early_stopping.check_on_train_epoch_end=True "
                                                              "must be false: training is one endless epoch, so check "
                                                              "at each validation",
    "+callbacks.early_stopping.mode=max": "callbacks.early_stopping.mode is unknown: remove it (early stopping takes "
                                          "monitor, patience, min_delta, check_on_train_epoch_end)",
}


@pytest.mark.parametrize("override", list(BAD))
def test_each_bad_value_is_one_line_naming_its_key(tmp_path, override):
    assert config_problems(compose(override, output_dir=tmp_path)) == [BAD[override]]


@pytest.mark.parametrize(
    "override",
    ["seed=0", "seed=4294967295", "optim.betas=[0,0.999]", "optim.min_lr_ratio=0", "optim.min_lr_ratio=1",
     "trainer.gradient_clip_val=0.5", "trainer.deterministic=warn", "trainer.devices=auto", "+trainer.precision=32",
     "+trainer.precision=bf16-mixed", "+trainer.limit_val_batches=0", "+trainer.accumulate_grad_batches=2",
     "data.max_mib=0.5", "data.errors=replace", "data.errors=backslashreplace", "data.encoding=gbk",
     "data.encoding=utf-16", "data.path=", "data.sha256=" + "ab" * 32, "ckpt_path=last", "threads=2",
     "callbacks.early_stopping.patience=3", "callbacks.early_stopping.min_delta=0.01",
     "callbacks.early_stopping.monitor=loss/val_bpc", "callbacks=minimal callbacks.early_stopping.patience=1",
     "callbacks=none", "callbacks.early_stopping=null"],
)
def test_good_values_pass(tmp_path, override):
    assert config_problems(compose(*override.split(), output_dir=tmp_path)) == []


@pytest.mark.parametrize("preset", [f"experiment={n}" for n in EXPERIMENTS] + [f"debug={n}" for n in DEBUGS]
                         + [f"trainer={n}" for n in TRAINERS])
def test_every_preset_passes(tmp_path, preset):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chinese_large.txt").write_text(TINY_TEXT, encoding="utf-8")  # that preset's: the user's own
    assert config_problems(compose(preset, f"paths.root_dir={tmp_path}", output_dir=tmp_path)) == []


@pytest.mark.skipif(GPUS > 0, reason="needs a machine without a CUDA GPU")
def test_gpu_trainer_without_a_gpu_is_one_line(tmp_path):
    assert config_problems(compose("trainer=gpu", output_dir=tmp_path)) == [
        "trainer.accelerator='gpu' is not available on this machine: use trainer=cpu, or trainer.accelerator=auto"]


@pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")
def test_more_devices_than_gpus_is_one_line(tmp_path):
    assert config_problems(compose("trainer=gpu", f"trainer.devices={GPUS + 1}", output_dir=tmp_path)) == [
        f"trainer.devices={GPUS + 1} but this machine has {GPUS} CUDA device(s): use trainer.devices={GPUS} or fewer"]


def test_every_problem_is_listed_at_once_on_one_line(tmp_path):
    cfg = compose("seed=-1", "optim.betas=[0.9]", "trainer.gradient_clip_val=abc", "data.errors=foo",
                  "data.encoding=foo", "model.num_heads=3", output_dir=tmp_path)
    with pytest.raises(TinyLMError) as info:
        validate(cfg)
    message = str(info.value)
    assert "\n" not in message and message.startswith("invalid config: model.n_embd=64 is not divisible")
    for key in ("seed=-1", "optim.betas=", "trainer.gradient_clip_val=", "data.errors='foo'", "data.encoding='foo'"):
        assert key in message


@pytest.mark.parametrize("override", ["seed=-1", "optim.warmup_steps=abc", "optim.betas=[0.9]",
                                      "trainer.gradient_clip_val=abc", "data.errors=foo"])
def test_main_reports_bad_values_before_reading_data(tmp_path, override):
    """One error line and a non-zero exit, naming the bad value and the data file that does not exist: nothing
    was read or made."""
    missing = tmp_path / "missing.txt"
    cfg = compose(override, f"data.path={missing}", "logger=none", output_dir=tmp_path / "run")
    with pytest.raises(SystemExit) as info:
        train_main(cfg)
    message = str(info.value)
    assert message == (f"error: invalid config: {BAD[override]}; data file not found: {missing} (set data.path to "
                       "an existing text file)")
    assert not (tmp_path / "run").exists()


def test_data_block_size_is_gone(tmp_path):
    """The context length is model.block_size; data.block_size was accepted and ignored."""
    assert "block_size" not in compose(output_dir=tmp_path).data
    with pytest.raises(ConfigCompositionException, match="data.block_size"):
        compose("data.block_size=64", output_dir=tmp_path)
    assert config_problems(compose("+data.block_size=64", output_dir=tmp_path)) == [
        "data.block_size is not a setting: train.py sets it from model.block_size; remove it"]


@pytest.mark.parametrize(("name", "overrides"), [
    ("train", ["model.n_embd=32", "optim.betas=[0.9,0.95]", "data.url=[1]", "+trainer.precision=32"]),
    ("train", ["experiment=numbers_zh", "trainer.max_steps=300", "seed=7", "~callbacks.attention_maps"]),
    ("train", ["model=lstm", "callbacks=minimal", "callbacks.early_stopping.patience=1", "++seed=3"]),
    ("train", ["data=pairs", "model=seq2seq", "hydra.run.dir=/tmp/x", "paths.output_dir=unset"]),
    ("generate", ["prompt='a, b = 1'", "stop=", "ckpt_path=null", "+top_k=5"]),
    ("visualize", ["text='你好'", "out_dir=a b"]),
    ("train", ["model.n_embd=8", "model={n_embd:16}", "model.num_heads=2"]),  # a dict to a group: a value, in turn
    ("train", ["debug=fast", "~logger", "+model@extra=lstm"]),
])
def test_the_tests_compose_as_hydra_does(name, overrides):
    """conftest.compose_config composes the config groups once and sets values on a copy: the same config,
    and the same error, as Hydra's compose with every override."""
    from conftest import compose_config
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        expected = hydra_compose(name, overrides=overrides)
        with pytest.raises(ConfigCompositionException) as hydras:
            hydra_compose(name, overrides=[*overrides, "model.no_such_key=1"])
    cfg = compose_config(name, *overrides)
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(expected)
    assert OmegaConf.is_struct(cfg) and OmegaConf.is_struct(expected)
    with pytest.raises(ConfigCompositionException) as ours:
        compose_config(name, *overrides, "model.no_such_key=1")
    assert str(ours.value) == str(hydras.value)
    cfg.ckpt_path = "changed"  # a copy of its own
    assert compose_config(name, *overrides).ckpt_path != "changed"


def test_the_tests_compose_a_group_of_another_search_path_as_hydra_does(tmp_path):
    from conftest import compose_config
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    (tmp_path / "conf" / "newgroup").mkdir(parents=True)
    (tmp_path / "conf" / "newgroup" / "a.yaml").write_text("x: 1\n", encoding="utf-8")
    overrides = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "+newgroup=a", "seed=3"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        expected = hydra_compose("train", overrides=overrides)
    assert compose_config("train", *overrides) == expected and expected.newgroup.x == 1
