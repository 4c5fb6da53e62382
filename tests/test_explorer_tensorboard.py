"""The tinylm plugin on a translation run (in-process), and inside a real ``tensorboard`` process, over HTTP."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
import torch
from conftest import TINY_MODEL, compose_config, entry_point, train_in_process

from tinylm.explorer.inprocess import client

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
generate = entry_point("generate.py")
SEQ2SEQ = ["experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
           "model.encoder_layers=1", "model.decoder_layers=2", "trainer.max_steps=30", "trainer.val_check_interval=30",
           "callbacks.translation_maps.source='三千零五'", "logger=none", "trainer.enable_progress_bar=false",
           "threads=1"]


def get(app, route: str, **params):
    query = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
    response = app.get(f"/data/plugin/tinylm/{route}?{query}")
    return response.status_code, json.loads(response.get_data(as_text=True))


def test_a_translation_run_gives_its_translation_and_cross_attention(tmp_path, capsys):
    train_in_process(tmp_path / "runs" / "numbers", *SEQ2SEQ)
    app, _ = client(tmp_path / "runs")
    _, listed = get(app, "runs")
    run = listed["runs"][0]
    assert (run["name"], run["kind"], run["task"], run["layers"], run["heads"], run["text"]) == (
        "numbers", "encoder-decoder", "translation", 2, 2, "三千零五")
    status, body = get(app, "translate", run="numbers", text="三千零五")
    assert status == 200 and body["source"] == list("三千零五") and body["target"][-1] == "end"
    weights = torch.tensor(body["cross_attention"])  # (L, h, target, source)
    assert weights.shape == (2, 2, len(body["target"]), 4)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    assert body["translation"] == "".join(body["target"][:-1])
    capsys.readouterr()
    generate.run(compose_config("generate", f"run_dir={tmp_path / 'runs' / 'numbers'}", "prompt='三千零五'",
                                "temperature=0"))
    assert capsys.readouterr().out == body["translation"] + "\n"  # generate.py's greedy translation
    assert get(app, "translate", run="numbers", text="三千\n十二")[0] == 400  # one line
    assert get(app, "translate", run="numbers", text="abc")[1]["error"].startswith("source line 1 has 3 character(s)")
    assert "translate route" in get(app, "attention", run="numbers", text="三千")[1]["error"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_real_tensorboard_serves_the_routes(tmp_path, gpt_run, tiny_text_file):
    """``tensorboard --logdir`` (its own process, its data server) answers the three routes of the issue, and
    keeps every logged step of the raw attention weights (12 here; TensorBoard's default sample is 10)."""
    runs = tmp_path / "outputs" / "runs"
    shutil.copytree(gpt_run.path, runs / "gpt")
    train_in_process(runs / "tb", *TINY_MODEL, "data.repeat=30", "trainer.max_steps=12",
                     "trainer.val_check_interval=12", "callbacks.attention_maps.weights_every_n_steps=1",
                     "~callbacks.sample_text", "~callbacks.next_token_probes", "~callbacks.head_scores",
                     "~callbacks.embedding_projector",
                     f"data.path={tiny_text_file}")
    port = free_port()
    tensorboard = Path(sys.executable).with_name("tensorboard")
    command = [str(tensorboard), "--logdir", str(runs.parent), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}/data"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                listing = fetch(f"{base}/plugins_listing")[1]
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.5)
        assert listing["tinylm"]["enabled"] is True
        status, listed = fetch(f"{base}/plugin/tinylm/runs")
        assert status == 200 and [run["name"] for run in listed["runs"]] == ["runs/gpt", "runs/tb"]
        status, attention = fetch(f"{base}/plugin/tinylm/attention?run=runs/gpt&text={quote('自注意力')}")
        assert status == 200 and torch.tensor(attention["attention"]).shape == (2, 2, 4, 4)
        status, predicted = fetch(f"{base}/plugin/tinylm/predict?run=runs/gpt&text={quote('自注意力')}&ablate=0.1")
        assert status == 200 and len(predicted["top"]) == 4 and predicted["ablated"] == ["0.1"]
        assert fetch(f"{base}/plugin/tinylm/predict?run=..%2Fx&text=a")[0] == 400
        status, long = fetch(f"{base}/plugin/tinylm/predict?run=runs/gpt&text={quote('自' * 4097)}")  # a 37 kB URL
        assert status == 400 and long["error"] == "text is 4097 characters long: send at most 4096"
        deadline = time.monotonic() + 60  # the data server reads the event files a few seconds after it starts
        while (steps := fetch(f"{base}/plugin/tinylm/training?run=runs/tb")[1]["steps"]) != list(range(1, 13)):
            assert time.monotonic() < deadline, steps
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)  # TensorBoard stops on Ctrl+C (it outlives a SIGTERM while serving)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
