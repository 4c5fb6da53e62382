"""The text the tinylm tab opens each run on (the ``runs`` route's ``text``), and TensorBoard's own names of
the runs, with a real ``tensorboard`` on 127.0.0.1: an English run and a Chinese run in one logdir, and a
run folder as earlier releases wrote it (no probe record, its events in ``tensorboard/``)."""

from __future__ import annotations

import shutil
import sys
import time
from urllib.parse import quote

import pytest
from conftest import ROOT, TINY_MODEL, train_in_process
from test_explorer_tensorboard import fetch, free_port

from tinylm.explorer.run_text import derived_text, vocabulary_text
from tinylm.run_folder import PROBE_FILE
from tinylm.tokenizer import CharTokenizer

sys.path.insert(0, str(ROOT / "bench"))

import tensorboard_screenshots as tb  # noqa: E402

ENGLISH = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
CHINESE = "自注意力可以让序列中的每个位置看到前面的所有位置。\n"
NUMBERS = ["experiment=numbers_zh", "data.demo_pairs=300", "model.n_embd=16", "model.num_heads=2",
           "model.encoder_layers=1", "model.decoder_layers=1", "trainer.max_steps=6", "trainer.val_check_interval=6",
           "trainer.enable_progress_bar=false", "threads=1"]
RUN = [*TINY_MODEL, "data.repeat=40", "trainer.max_steps=6", "trainer.val_check_interval=6",
       "callbacks.attention_maps.every_n_steps=3", "callbacks.attention_maps.weights_every_n_steps=3",
       "~callbacks.sample_text", "~callbacks.next_token_probes", "~callbacks.head_scores",
       "~callbacks.embedding_projector"]


def test_the_text_of_a_run_without_a_record_is_its_configured_probe_as_drawn_else_its_vocabulary():
    english = CharTokenizer.from_text(ENGLISH)
    assert derived_text(english, "自注意力 speak", "text", 16) == " speak"  # the known characters, as drawn
    assert derived_text(english, "自注意力可以让序列", "text", 16) == vocabulary_text(english, 16) == "ABCFSacdefhiklmn"
    numbers = CharTokenizer.from_text("三千零五3005")
    assert derived_text(numbers, "三千零五", "translation", 8) == "三千零五"
    assert derived_text(numbers, "三千零五三千零五三", "translation", 8) == "035三五千零"  # longer than its block
    assert not numbers.unknown(derived_text(numbers, None, "translation", 8))


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_each_run_opens_on_its_own_text_and_tensorboard_names_it_by_its_folder(tmp_path):
    logdir = tmp_path / "outputs"
    texts = {}
    for name, text in (("en", ENGLISH), ("zh", CHINESE)):
        texts[name] = tmp_path / f"{name}.txt"
        texts[name].write_text(text, encoding="utf-8")
        train_in_process(logdir / "runs" / name, *RUN, f"data.path={texts[name]}")
    train_in_process(logdir / "runs" / "numbers", *NUMBERS)
    assert (logdir / "runs" / "en" / PROBE_FILE).read_text(encoding="utf-8") == "First Citizen:"
    source = (logdir / "runs" / "numbers" / PROBE_FILE).read_text(encoding="utf-8")  # the first validation pair's
    for new, old in (("en", "old"), ("numbers", "old-numbers")):  # as earlier releases left them: no probe
        shutil.copytree(logdir / "runs" / new, logdir / "runs" / old)  # record, their events in tensorboard/
        (logdir / "runs" / old / PROBE_FILE).unlink()
        (logdir / "runs" / old / "tensorboard").mkdir()
        for events in (logdir / "runs" / old).glob("events.out.tfevents.*"):
            events.rename(logdir / "runs" / old / "tensorboard" / events.name)

    server = tb.TensorBoard(logdir, free_port(), tmp_path / "tensorboard.log")
    base = f"{server.url}/data"
    try:
        deadline = time.monotonic() + 120
        while True:  # every run's events loaded, the old one's logged probe among them
            try:
                status, listed = fetch(f"{base}/plugin/tinylm/runs")
                tb_runs = fetch(f"{base}/runs")[1]
                texts = {run["name"]: run["text"] for run in listed.get("runs", [])}
                if len(tb_runs) == 5 and (texts.get("runs/old"), texts.get("runs/old-numbers")) == (
                        "First Citizen:", source):
                    break
            except OSError:
                pass
            assert server.proc.poll() is None and time.monotonic() < deadline, tb.last_line(server.log)
            time.sleep(0.5)
        # TensorBoard's names: the run folders, nothing more (an earlier release's keeps its tensorboard/)
        assert sorted(tb_runs) == ["runs/en", "runs/numbers", "runs/old-numbers/tensorboard", "runs/old/tensorboard",
                                   "runs/zh"]
        assert fetch(f"{base}/plugins_listing")[1]["hparams"]["enabled"] is True
        assert texts == {"runs/en": "First Citizen:", "runs/numbers": source, "runs/old": "First Citizen:",
                         "runs/old-numbers": source, "runs/zh": "自注意力可以让序列"}
        for name in ("runs/numbers", "runs/old-numbers"):  # a translation run's example source translates
            status, translated = fetch(f"{base}/plugin/tinylm/translate?run={name}&text={quote(source)}")
            assert status == 200 and translated["source"] == list(source), translated
        for name in ("runs/en", "runs/old", "runs/zh"):  # a text run's text: predict answers on it
            status, predicted = fetch(f"{base}/plugin/tinylm/predict?run={name}&text={quote(texts[name])}")
            assert status == 200 and len(predicted["top"]) == len(texts[name]), predicted
            assert fetch(f"{base}/plugin/tinylm/training?run={name}")[1]["steps"] == [3, 6]
    finally:
        tb.stop(server.proc)
