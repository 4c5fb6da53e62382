"""A run's record (``.hydra/*.yaml``) and claim (``running.json``) are read by one bounded reader each: a FIFO,
a huge or a deeply nested file is as if it were not there, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import threading

import pytest

from tinylm.checkpoint import UNKNOWN_DATA, trained_on
from tinylm.run_folder import HYDRA_DIR, MARKER, choose_checkpoint, read_marker, small_record


def run_with_checkpoint(root, name: str):
    run = root / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / HYDRA_DIR).mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"not read here")
    return run


def finishes(call, seconds: float = 20.0):
    """``call()``'s answer, or a test failure when it is still blocked after ``seconds``."""
    answer = {}
    thread = threading.Thread(target=lambda: answer.setdefault("value", call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked on a FIFO"
    return answer["value"]


@pytest.mark.parametrize("kind", ["fifo", "nested", "huge", "binary"])
def test_a_record_that_cannot_be_read_is_none(tmp_path, kind):
    path = tmp_path / "hydra.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "nested":
        path.write_text("[" * 5000)  # yaml.safe_load recurses past Python's limit
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(64 << 20)
    else:
        path.write_bytes(b"\xff\xfe\x00 not UTF-8")
    assert finishes(lambda: small_record(path)) is None


def test_the_newest_run_is_chosen_past_a_record_that_is_a_fifo(tmp_path):
    """Choosing the newest run reads each run's hydra.yaml for its debug preset: a FIFO there holds up nothing."""
    run = run_with_checkpoint(tmp_path, "fifo")
    os.mkfifo(run / HYDRA_DIR / "hydra.yaml")
    chosen = finishes(lambda: choose_checkpoint(log_dir=tmp_path))
    assert chosen.path == run / "checkpoints" / "last.ckpt"


def test_a_nested_config_is_unknown_data_not_a_recursion_error(tmp_path):
    run = run_with_checkpoint(tmp_path, "nested")
    (run / HYDRA_DIR / "config.yaml").write_text("[" * 5000)
    assert trained_on(run) == UNKNOWN_DATA


def test_a_claim_that_is_a_fifo_or_too_big_is_no_claim(tmp_path):
    os.mkfifo(tmp_path / MARKER)
    assert finishes(lambda: read_marker(tmp_path)) is None
    os.unlink(tmp_path / MARKER)
    claim = {"pid": os.getpid(), "host": "here", "started": 1.0}
    (tmp_path / MARKER).write_text(json.dumps(claim))
    assert read_marker(tmp_path) == claim
    (tmp_path / MARKER).write_text(json.dumps({**claim, "padding": "x" * 5000}))
    assert read_marker(tmp_path) is None
