"""Every refusal that needs no model answers before torch is imported: a misspelled key, a config a group does
not have, an offline download, no checkpoint or run to load, a missing file for a comparison. What a command
imports at start is the process's own, so each is a process (a second each, with no torch to import); a
refused train.py leaves no run folder. A refusal of what a checkpoint's output needs (an output folder, a
text) comes before it is loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, entry_point

from tinylm.errors import TinyLMError
from tinylm.tasks.data_file import download

HEAVY = ("torch", "lightning")
NO_RUN = "error: no run with checkpoints under {log_dir} (looked in runs/*/checkpoints, multirun/*/*/checkpoints)"
SHAKESPEARE = ["data=tinyshakespeare", "data.url=file:///nowhere/input.txt"]  # offline: nothing is downloaded
REFUSALS = {  # the command line -> how its one line starts
    "train-key": (["train.py", "model.num_layer=6"], "error: invalid config: model.num_layer is unknown: did you mean "
                                                     "model.num_layers?"),
    "train-group": (["train.py", "model=transformer"], "error: invalid config: model=transformer is not a config of "
                                                       "conf/model/: choose one of gpt, lstm, seq2seq"),
    "train-muon": (["train.py", "optim=muon", "model=lstm"],
                   "error: invalid config: optim=muon trains the weight matrices of residual blocks, and "
                   "model.arch=lstm has none: use optim=adamw, or a model with them (model=gpt or model=seq2seq)"),
    "train-offline": (["train.py", *SHAKESPEARE], "error: could not download file:///nowhere/input.txt ("),
    "train-resume": (["train.py", "ckpt_path=missing.ckpt"],
                     "error: checkpoint file {cwd}/missing.ckpt does not exist"),
    "train-sweep": (["train.py", "-m", "hydra.sweep.dir=last"],
                    "error: hydra.sweep.dir=last: there is no sweep under {log_dir}/multirun"),
    "generate": (["generate.py"], NO_RUN),
    "generate-key": (["generate.py", "promt=你好"], "error: promt is unknown: did you mean prompt?"),
    "analyze": (["analyze.py"], NO_RUN),
    "evaluate": (["evaluate.py"], NO_RUN),
    "export": (["export.py"], NO_RUN),
    "visualize": (["visualize.py"], NO_RUN),
    # a checkpoint file that is never read: what is wrong is said before it is loaded
    "visualize-out_dir": (["visualize.py", "ckpt_path=unread.ckpt", "out_dir=unread.ckpt/pngs"],
                          "error: cannot write the PNGs into "),
    "analyze-out_dir": (["analyze.py", "ckpt_path=unread.ckpt", "out_dir=unread.ckpt/results"],
                        "error: cannot write the PNGs into "),
    "evaluate-data": (["evaluate.py", "ckpt_path=unread.ckpt", "data.path=missing.txt"],
                      "error: data file not found: "),
    "compare": (["-m", "tinylm.compare", "positions", "--data", "missing.txt"], "error: --data missing.txt: no such "
                                                                                "file"),
}


@pytest.mark.parametrize("name", REFUSALS)
def test_a_refusal_that_needs_no_model_imports_no_torch(tmp_path, name):
    args, said = REFUSALS[name]
    (tmp_path / "unread.ckpt").write_bytes(b"")
    script = [str(ROOT / args[0])] if args[0].endswith(".py") else args[:2]
    options = args[1:] if args[0].endswith(".py") else [*args[2:], "--out", str(tmp_path / "compare")]
    if args[0].endswith(".py"):
        options += [f"paths.log_dir={tmp_path / 'outputs'}", f"paths.cache_dir={tmp_path / 'cache'}"]
    proc = subprocess.run([sys.executable, "-X", "importtime", *script, *options], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(said.format(log_dir=tmp_path / "outputs", cwd=tmp_path))
    assert not set(HEAVY) & imported
    assert not (tmp_path / "outputs" / "runs").exists() or not list((tmp_path / "outputs" / "runs").iterdir())


def test_offline_data_says_where_the_file_is_looked_for(tmp_path):
    dest = tmp_path / "cache" / "tinyshakespeare.txt"
    with pytest.raises(TinyLMError) as info:
        download("file:///nowhere/input.txt", dest, None)
    assert str(info.value) == (
        f"could not download file:///nowhere/input.txt (<urlopen error [Errno 2] No such file or directory: "
        f"'/nowhere/input.txt'>): save that file as {dest} (where data.path looks) and run the same command again, "
        "or pass data.path=FILE to train on another text")
    assert not list(dest.parent.iterdir())  # no half-written file


def test_a_data_set_put_where_it_is_looked_for_is_used_offline(tmp_path, capsys):
    """``data=tinyshakespeare`` with the file saved by hand at ``.cache/tinyshakespeare.txt``: nothing to download."""
    train = entry_point("train.py")
    (tmp_path / "tinyshakespeare.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n",
                                                   encoding="utf-8")
    train.check_command_line(["train.py", *SHAKESPEARE, f"paths.cache_dir={tmp_path}"], in_sweep=False)
    assert "downloading" not in capsys.readouterr().out
    with pytest.raises(TinyLMError, match=f"save that file as {Path(tmp_path) / 'tinyshakespeare.txt'}"):
        (tmp_path / "tinyshakespeare.txt").unlink()
        train.check_command_line(["train.py", *SHAKESPEARE, f"paths.cache_dir={tmp_path}"], in_sweep=False)
