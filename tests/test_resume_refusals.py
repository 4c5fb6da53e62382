"""A resume refused before training: nothing built for a checkpoint that cannot be the run's model, and no
run folder left that the command made (a resume's from a checkpoint elsewhere too); a folder that was there
before stays. Weights that store fewer numbers than their shapes say are refused by every loader."""

from __future__ import annotations

import functools
import shutil

import pytest
import torch
from conftest import GPT_RUN, TINY_TEXT, compose, folder_listing, train_py

from tinylm.checkpoint import load_model
from tinylm.errors import TinyLMError
from tinylm.models import described
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.sizes import weights_problem
from tinylm.runs import folder, job
from tinylm.runs.resume import check_resume

RUN_MODEL = [o for o in GPT_RUN if o.startswith(("model.", "data.", "threads="))]  # the shared run's model and data


def runs_under(log_dir) -> list[str]:
    return sorted(p.name for p in (log_dir / "runs").iterdir()) if (log_dir / "runs").is_dir() else []


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def rewritten(gpt_run, path, weight) -> str:
    """The shared run's last checkpoint at ``path``, each weight ``weight(tensor)``: its config and vocabulary
    are a run's, its weights a crafted file's."""
    checkpoint = torch.load(gpt_run.path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["state_dict"] = {name: weight(t) for name, t in checkpoint["state_dict"].items()}
    torch.save(checkpoint, path)
    return str(path)


def one_weight(t: torch.Tensor) -> torch.Tensor:
    """Every weight's name, each of shape (1,)."""
    return torch.zeros(1)


def expanded(t: torch.Tensor) -> torch.Tensor:
    """The weight's shape, stored in one number (stride 0)."""
    return torch.zeros(1).expand(t.shape)


@pytest.fixture
def no_gpt_built(monkeypatch):
    @functools.wraps(GPT.__init__)  # its signature names its config class
    def refuse(self, *args, **kwargs):
        raise AssertionError("a GPT was built")

    monkeypatch.setattr(GPT, "__init__", refuse)


# --------------------------------------------------------------------------------------------
# Nothing built for a checkpoint that cannot be the run's model


@pytest.mark.parametrize(("weight", "reason"), [
    (one_weight, "size mismatch for token_embedding.weight: its state_dict holds (1,)"),
    (expanded, "its state_dict's token_embedding.weight stores 4 B for its shape"),
])
def test_a_resume_refuses_weights_that_cannot_be_the_model_before_building_it(gpt_run, tmp_path, text, no_gpt_built,
                                                                              weight, reason):
    ckpt = rewritten(gpt_run, tmp_path / "names.ckpt", weight)
    cfg = compose(*RUN_MODEL, f"data.path={text}", f"ckpt_path={ckpt}", output_dir=tmp_path / "run")
    with pytest.raises(TinyLMError) as info:
        job.run(cfg)
    assert str(info.value).startswith(f"checkpoint {ckpt} is not a valid tinylm checkpoint: {reason}")


def test_check_resume_compares_a_config_as_given_with_one_as_recorded(gpt_run):
    """The run's model.* (every option written out) and a checkpoint's (options at their default left out)."""
    saved = torch.load(gpt_run.path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert "norm" not in saved["model_config"]
    given = {**saved["model_config"], "norm": "layernorm", "tied_head": False, "_target_": "tinylm.models.gpt.GPT"}
    assert check_resume(gpt_run.path / "checkpoints" / "last.ckpt", given, saved["tokenizer"]) == 20
    with pytest.raises(TinyLMError, match=r"different model: norm='layernorm' \(config: 'rmsnorm'\); "):
        check_resume(gpt_run.path / "checkpoints" / "last.ckpt", {**given, "norm": "rmsnorm"}, saved["tokenizer"])


# --------------------------------------------------------------------------------------------
# Weights that store fewer numbers than their shapes say


def test_every_loader_refuses_expanded_weights_naming_one_before_building(gpt_run, tmp_path, monkeypatch):
    path = rewritten(gpt_run, tmp_path / "hollow.ckpt", expanded)

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"a {type(self).__name__} was built")

    monkeypatch.setattr(torch.nn.Module, "__init__", refuse)
    with pytest.raises(TinyLMError) as info:
        load_model(path)
    assert str(info.value) == (
        f"checkpoint {path} is not a valid tinylm checkpoint: its state_dict's token_embedding.weight stores 4 B "
        "for its shape (37, 16) of 2.3 KiB: its weights are not what their shapes say: use a checkpoint saved by "
        "tinylm's train.py")


def test_the_storage_check_takes_shared_and_user_models_weights():
    tied = GPT(GPTConfig(vocab_size=7, block_size=4, n_embd=8, num_heads=2, num_layers=1, tied_head=True))
    assert weights_problem(described(GPT, tied.config), tied.state_dict()) is None  # the head shares its storage
    own = {"_target_": "my_models.Net", "vocab_size": 7}
    assert weights_problem(own, {"w": torch.zeros(3, 2)}) is None
    assert weights_problem(own, {"w": torch.zeros(1).expand(3, 2)}) == (
        "its state_dict's w stores 4 B for its shape (3, 2) of 24 B: its weights are not what their shapes say")


# --------------------------------------------------------------------------------------------
# No run folder left by a refused resume that made one


@pytest.mark.parametrize(("change", "weight", "said"), [
    (["model.n_embd=32"], None, "was trained with a different model: n_embd=16 (config: 32)"),
    ([], one_weight, "is not a valid tinylm checkpoint: size mismatch for token_embedding.weight"),
])
def test_a_refused_resume_from_a_checkpoint_elsewhere_leaves_no_folder(gpt_run, tmp_path, text, change, weight, said):
    ckpt = tmp_path / "real.ckpt"
    if weight:
        rewritten(gpt_run, ckpt, weight)
    else:
        shutil.copy(gpt_run.path / "checkpoints" / "last.ckpt", ckpt)
    logs = tmp_path / "logs"
    done = train_py(f"ckpt_path={ckpt}", *RUN_MODEL, f"data.path={text}", *change, f"paths.log_dir={logs}",
                    check=False)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(f"error: checkpoint {ckpt} {said}")
    assert runs_under(logs) == []


def test_a_refused_resume_into_a_new_run_dir_removes_it_and_one_in_place_keeps_its_folder(gpt_run, tmp_path, text):
    new, ckpt = tmp_path / "new", tmp_path / "real.ckpt"
    shutil.copy(gpt_run.path / "checkpoints" / "last.ckpt", ckpt)
    done = train_py(f"ckpt_path={ckpt}", *RUN_MODEL, f"data.path={text}", "model.n_embd=32", f"hydra.run.dir={new}",
                    check=False)
    assert done.returncode == 1 and "different model" in done.stderr and not new.exists()
    run = tmp_path / "outputs" / "runs" / "2026-01-01_00-00-00"
    shutil.copytree(gpt_run.path, run)
    (run / "train.log").write_text("the run's log\n")  # as a run trained by train.py has
    before = folder_listing(run)
    done = train_py(f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=40", check=False)
    assert done.returncode == 1 and "data.path" in done.stderr.strip().splitlines()[-1]  # its text is gone
    assert folder_listing(run) == before


def test_a_resume_notes_the_new_run_dir_it_is_given(tmp_path, gpt_run):
    from tinylm.commands.train import check_command_line

    new = tmp_path / "new"
    check_command_line(["train.py", f"ckpt_path={gpt_run.path / 'checkpoints' / 'last.ckpt'}",
                        f"hydra.run.dir={new}"], in_sweep=False)
    new.mkdir()
    assert folder.discard_new_folder(new) and not new.exists()
