"""The tinylm tab's ``runs`` route, in-process over copies of the session's GPT run (trained with
``callbacks=minimal``: no ``probe.txt``): a sweep job's ``label`` shows its swept settings as TensorBoard
names its events; a run with no recorded probe opens on its own probe rule applied to its data file (read
bounded, regular files only, no link); a run whose ``config.yaml`` the tab may not read says its data is
unknown."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from builders import build_tokenizer
from conftest import ROOT, TINY_TEXT
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tinylm.explorer.inprocess import client
from tinylm.explorer.run_text import derived_text, vocabulary_text
from tinylm.tasks.probe_text import OPENING_CHARS

sys.path.insert(0, str(ROOT / "bench"))

import tensorboard_screenshots as tb  # noqa: E402
import tinylm_tab as ui  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SWEEP = "multirun/2026-01-01_00-00-00"
SETTINGS = ["model.n_embd=16,model.num_layers=2", "model.n_embd=32,model.num_layers=2"]
OPENING = TINY_TEXT.splitlines()[0][:OPENING_CHARS]  # AttentionMaps' probe of a run with none configured
VOCABULARY = "Aadeilnostuy个中以位"  # today's last fallback: letters of the GPT run's vocabulary
SPARSE = 64 << 30


def copy(gpt_run, runs: Path, name: str, data_path: object = "unchanged") -> Path:
    """A copy of the GPT run at ``runs/name``, its recorded ``data.path`` set to ``data_path``."""
    run = Path(shutil.copytree(gpt_run.path, runs / name))
    if data_path != "unchanged":
        record = run / ".hydra" / "config.yaml"
        config = yaml.safe_load(record.read_text(encoding="utf-8"))
        config["data"]["path"] = data_path
        record.write_text(yaml.safe_dump(config), encoding="utf-8")
    return run


def events_file(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "events.out.tfevents.1.host").write_bytes(b"")


def runs_route(logdir: Path) -> dict:
    app, _ = client(logdir)
    response = app.get("/data/plugin/tinylm/runs")
    assert response.status_code == 200
    return {run["name"]: run for run in json.loads(response.get_data(as_text=True))["runs"]}


def test_a_sweep_jobs_label_shows_its_swept_settings_as_tensorboard_names_it(tmp_path, gpt_run):
    logdir = tmp_path / "outputs"
    for job, settings in enumerate(SETTINGS):
        events_file(copy(gpt_run, logdir / SWEEP, str(job)) / settings)
    events_file(copy(gpt_run, logdir / "runs", "plain"))  # its events in the run folder itself
    old = copy(gpt_run, logdir / "runs", "old")  # an earlier release's: its events in tensorboard/
    events_file(old / "tensorboard")
    listed = runs_route(logdir)
    assert list(listed) == ["multirun/2026-01-01_00-00-00/0", "multirun/2026-01-01_00-00-00/1", "runs/old",
                            "runs/plain"]  # the names the routes take, as before
    labels = {name: run["label"] for name, run in listed.items()}
    assert labels == {f"{SWEEP}/0": f"{SWEEP}/0/{SETTINGS[0]}", f"{SWEEP}/1": f"{SWEEP}/1/{SETTINGS[1]}",
                      "runs/old": "runs/old", "runs/plain": "runs/plain"}
    events = plugin_event_multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(logdir))
    assert {labels[f"{SWEEP}/0"], labels[f"{SWEEP}/1"]} <= set(events.Runs())  # TensorBoard's own names


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not any(shutil.which(name) for name in tb.CHROMIUM_NAMES),
                    reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_the_run_picker_shows_the_labels_and_sends_the_names(tmp_path, gpt_run):
    logdir = tmp_path / "outputs"
    for job, settings in enumerate(SETTINGS):
        events_file(copy(gpt_run, logdir / SWEEP, str(job)) / settings)
    server = tb.TensorBoard(logdir, tb.free_port(), tmp_path / "tensorboard.log")
    browser = None
    try:
        assert server.wait_for_data(0, ["tinylm"], timeout=90) == {"tinylm"}, tb.last_line(server.log)
        browser = tb.Chromium(tb.find_chromium(), str(tmp_path / "profile"), tmp_path / "chromium.log")
        page = browser.open(f"{server.url}/#tinylm", 1280, 800, timeout=60)
        ui.wait_for(browser, page, "$$('select.runs option').length === 2", "the run picker", timeout=60)
        shown = ui.tab(browser, page, "$$('select.runs option').map(o => [o.value, o.textContent])")
        assert shown == [[f"{SWEEP}/{job}", f"{SWEEP}/{job}/{settings}"] for job, settings in enumerate(SETTINGS)]
    finally:
        if browser is not None:
            browser.close()
        tb.stop(server.proc)


def test_a_run_without_a_probe_opens_on_its_probe_rule_applied_to_its_data_file(tmp_path, gpt_run, monkeypatch,
                                                                              tmp_path_factory):
    monkeypatch.chdir(tmp_path)  # the folder TensorBoard was started from: the tab reads data files below it
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "secret.txt"  # neither below it nor below the logdir
    elsewhere.write_text(TINY_TEXT * 500, encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.txt").write_text("\n\n" + TINY_TEXT * 500, encoding="utf-8")  # blank lines, then the opening
    (data / "mixed.txt").write_text("Hello 自注意力 world\n", encoding="utf-8")  # H, w, r: not in its vocabulary
    (data / "link.txt").symlink_to(data / "tiny.txt")
    os.mkfifo(data / "fifo.txt")
    logdir = tmp_path / "outputs"
    runs = logdir / "runs"
    copy(gpt_run, runs, "file", str(data / "tiny.txt"))
    relative = copy(gpt_run, runs, "relative", "data/tiny.txt")  # against the folder training was launched from
    (relative / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"cwd": str(tmp_path)}}}))
    copy(gpt_run, runs, "packaged", None)  # the corpus shipped in the package
    copy(gpt_run, runs, "mixed", str(data / "mixed.txt"))
    for name in ("link", "fifo"):
        copy(gpt_run, runs, name, str(data / f"{name}.txt"))
    copy(gpt_run, runs, "zero", "/dev/zero")
    copy(gpt_run, runs, "gone")  # its data file was deleted
    copy(gpt_run, runs, "folder", str(data))
    copy(gpt_run, runs, "elsewhere", str(elsewhere))
    texts = {name: run["text"] for name, run in runs_route(logdir).items()}
    assert texts == {"runs/file": OPENING, "runs/relative": OPENING, "runs/packaged": OPENING,
                     "runs/mixed": "ello 自注意力 old", "runs/link": VOCABULARY, "runs/fifo": VOCABULARY,
                     "runs/zero": VOCABULARY, "runs/gone": VOCABULARY, "runs/folder": VOCABULARY,
                     "runs/elsewhere": VOCABULARY}
    app, _ = client(logdir)
    response = app.get(f"/data/plugin/tinylm/predict?run=runs/file&text={quote(OPENING)}")
    assert response.status_code == 200


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_the_opening_comes_after_a_configured_probe_and_a_bpe_run_can_encode_it(kind):
    english = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    tokenizer = build_tokenizer(kind, english, 300)
    opening = "First Citizen:"
    assert derived_text(tokenizer, "自注意力可以让序列", "text", 16, opening) == (
        opening if kind == "char" else "自注意力可以让序列")  # a byte-level BPE knows every character
    assert derived_text(tokenizer, None, "text", 16, opening) == opening
    assert tokenizer.decode(tokenizer.encode(opening)) == opening and not tokenizer.unknown(opening)
    assert derived_text(tokenizer, None, "text", 16, None) == vocabulary_text(tokenizer, 16)


def test_a_run_whose_record_cannot_be_read_says_its_data_is_unknown(tmp_path, gpt_run):
    logdir = tmp_path / "outputs"
    runs = logdir / "runs"
    for name in ("zero", "fifo", "huge", "readable"):
        run = copy(gpt_run, runs, name)
        (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(
            {"hydra": {"runtime": {"choices": {"data": "corpus"}}}}), encoding="utf-8")
    (runs / "zero" / ".hydra" / "config.yaml").unlink()
    (runs / "zero" / ".hydra" / "config.yaml").symlink_to("/dev/zero")
    (runs / "fifo" / ".hydra" / "config.yaml").unlink()
    os.mkfifo(runs / "fifo" / ".hydra" / "config.yaml")
    with open(runs / "huge" / ".hydra" / "config.yaml", "wb") as f:
        f.truncate(SPARSE)
    app, _ = client(logdir)
    for name in ("zero", "fifo", "huge", "readable"):
        response = app.get(f"/data/plugin/tinylm/predict?run=runs/{name}&text=Z")
        error = json.loads(response.get_data(as_text=True))["error"]
        assert response.status_code == 400 and "outside the checkpoint's vocabulary" in error, error
        if name == "readable":
            assert "(trained on data.path=" in error, error
        else:
            assert "trained on unknown data" in error and "data=corpus" not in error, error
