"""bench/tensorboard_screenshots.py: every TensorBoard tab of a real tiny run, and every view of the
tinylm tab, is shot with its content on it, the server is gone afterwards, and what stops it before
any browser starts is one error line."""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TINY_MODEL, run_train
from PIL import Image

sys.path.insert(0, str(ROOT / "bench"))

import tensorboard_screenshots  # noqa: E402
import tinylm_tab  # noqa: E402

SCRIPT = ROOT / "bench" / "tensorboard_screenshots.py"
HAS_CHROMIUM = any(shutil.which(name) for name in tensorboard_screenshots.CHROMIUM_NAMES)


def screenshots(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env)


def command_lines_naming(text: str) -> list[str]:
    """The command lines of the running processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        if text in line:
            found.append(line)
    return found


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_every_tab_of_a_tiny_run_is_shot_with_its_content(tmp_path):
    run = tmp_path / "run"
    run_train(run, *TINY_MODEL, "trainer.max_steps=20", "trainer.val_check_interval=10",
              "callbacks.attention_maps.every_n_steps=10", "callbacks.embedding_projector.every_n_steps=10",
              in_process=True)
    out = tmp_path / "shots"
    proc = screenshots(str(run), "--out", str(out), "--prefix", "tiny", "--width", "1000", "--height", "800")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    views = [view for view, _ in tinylm_tab.TEXT_VIEWS]  # the tinylm tab: one screenshot per view
    assert [r["tab"] for r in results] == [*tensorboard_screenshots.TABS[:-1], *["tinylm"] * len(views)]
    assert [r["view"] for r in results if r["tab"] == "tinylm"] == views
    assert results[-len(views)]["first_map_ms"] > 0
    for r in results:
        assert r["rendered"], r
        assert int(r["content"].split()[0]) > 0, r  # e.g. "5 images": counted in the page
        name = f"tinylm-{r['view']}" if r["tab"] == "tinylm" else r["tab"]
        assert Path(r["file"]) == out / f"tiny-{name}.png"
        with Image.open(r["file"]) as image:
            assert image.size == (r["width"], r["height"]) == (1000, 800)
    assert not command_lines_naming(str(run))  # TensorBoard (and its data server) stopped


def fake_path(tmp_path: Path, with_chromium: bool) -> dict:
    """An environment whose PATH is one folder, with a `chromium` in it that is never started or none."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if with_chromium:
        (bin_dir / "chromium").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "chromium").chmod(0o755)
    return {**os.environ, "PATH": str(bin_dir)}


def assert_one_error_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
    for word in words:
        assert word in proc.stderr


def test_without_chromium_it_says_what_to_install(tmp_path):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    proc = screenshots(str(tmp_path), "--out", str(tmp_path / "shots"), env=fake_path(tmp_path, with_chromium=False))
    assert_one_error_line(proc, "apt-get install chromium fonts-noto-cjk")
    assert not (tmp_path / "shots").exists()


@pytest.mark.parametrize("logdir", ["missing", "empty"])
def test_a_logdir_without_event_files_is_one_error_line(tmp_path, logdir):
    (tmp_path / "empty").mkdir()
    env = fake_path(tmp_path, with_chromium=True)
    proc = screenshots(str(tmp_path / logdir), "--out", str(tmp_path / "shots"), env=env)
    assert_one_error_line(proc, str(tmp_path / logdir))


def test_a_blank_picture_does_not_count_as_rendered():
    blank = io.BytesIO()
    Image.new("RGB", (200, 100), "white").save(blank, format="PNG")
    colours, busy = tensorboard_screenshots.picture_stats(blank.getvalue())
    assert (colours, busy) == (1, 0.0)
    assert colours < tensorboard_screenshots.MIN_COLOURS and busy < tensorboard_screenshots.MIN_BUSY


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CHROMIUM, reason="needs Chromium: apt-get install chromium fonts-noto-cjk")
def test_a_translation_run_is_shot_on_its_own_example_source(tmp_path):
    """A numbers_zh run as the experiment configures it (no TranslationMaps.source: its first validation pair's):
    the tab opens the Translation view on that source, and its screenshot shows the translation."""
    from conftest import train_in_process

    from tinylm.run_folder import PROBE_FILE

    run = tmp_path / "numbers"
    train_in_process(run, "experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
                     "model.encoder_layers=1", "model.decoder_layers=1", "trainer.max_steps=10",
                     "trainer.val_check_interval=10", "trainer.enable_progress_bar=false", "threads=1")
    source = (run / PROBE_FILE).read_text(encoding="utf-8")  # recorded by TranslationMaps
    assert source and len(source) <= 8
    out = tmp_path / "shots"
    proc = screenshots(str(run), "--out", str(out), "--prefix", "numbers", "--tabs", "tinylm", "--width", "1000",
                       "--height", "800")
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every view rendered
    assert [r["view"] for r in results] == ["translation"]
    assert int(results[0]["content"].split()[0]) > 0, results[0]
