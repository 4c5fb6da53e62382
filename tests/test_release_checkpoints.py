"""Checkpoints written by an earlier release keep loading, generating the same text and resuming.

The fixtures were trained by release 0.1 (see tests/fixtures/release-0.1.json for how); they are
plain data, loaded with weights_only=True like any checkpoint.
"""

import json
import shutil

import pytest
import torch
from conftest import ROOT, TINY_MODEL, compose

from tinylm.checkpoint import load_model
from tinylm.generation.prompting import encode_prompt
from tinylm.generation.sampling import generate
from tinylm.runs.job import main as train_main

FIXTURES = ROOT / "tests" / "fixtures"
RELEASE = json.loads((FIXTURES / "release-0.1.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(RELEASE["greedy"]))
def test_an_earlier_release_checkpoint_generates_the_same_text(name):
    loaded = load_model(FIXTURES / name)
    prompt = encode_prompt(loaded.tokenizer, RELEASE["prompt"])
    ids = generate(loaded.model, torch.tensor([prompt]), RELEASE["max_new_tokens"], temperature=0)
    assert loaded.tokenizer.decode(ids[0].tolist()) == RELEASE["greedy"][name]


def test_an_earlier_release_checkpoint_resumes(tmp_path, tiny_text_file):
    ckpt = tmp_path / "last.ckpt"
    shutil.copy(FIXTURES / "release-0.1-gpt-rope.ckpt", ckpt)
    cfg = compose(*TINY_MODEL, "model.pos_encoding=rope", f"data.path={tiny_text_file}", "data.repeat=30",
                  "seed=5", "logger=none", "callbacks=minimal", "trainer.max_steps=62",
                  "trainer.val_check_interval=2", f"ckpt_path={ckpt}", output_dir=tmp_path / "run")
    train_main(cfg)
    resumed = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == 62
    # the same model; the config now names its architecture, which release 0.1 left implicit
    assert resumed["model_config"] == {"arch": "gpt", **torch.load(ckpt, weights_only=True)["model_config"]}
