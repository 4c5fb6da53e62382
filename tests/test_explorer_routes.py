"""The tinylm TensorBoard plugin's routes, in-process (werkzeug's test client on TensorBoard's WSGI app) over
a logdir of tiny trained runs: the JSON's shapes and numbers against the project's own commands
(generate.py's greedy next character, analyze.py's ablation, the logit lens), the bad inputs, the
entry point."""

from __future__ import annotations

import json
import math
import os
import shutil
from argparse import Namespace
from importlib.metadata import entry_points
from urllib.parse import quote

import pytest
import torch
from conftest import TINY_MODEL, TINY_TEXT, compose_config, entry_point, train_in_process
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins import base_plugin

from tinylm.checkpoint import load_model
from tinylm.cli import quote_values
from tinylm.explorer import views
from tinylm.explorer.inprocess import client
from tinylm.explorer.models import Models
from tinylm.explorer.plugin import STATIC
from tinylm.run_folder import checkpoint_in_run

pytestmark = pytest.mark.usefixtures("one_thread")

PROBE = "自注意力可以让序列"  # the attention callback's default probe: characters of TINY_TEXT
TEXT = "自注意力可以让序列中的每个位置"
# a GPT like conftest's gpt_run, trained with TensorBoard, the attention maps and the head scores every 10 steps
TB_RUN = [*TINY_MODEL, "model.num_layers=2", "data.repeat=30", "optim.lr=0.01", "trainer.max_steps=20",
          "trainer.val_check_interval=10", "callbacks.attention_maps.every_n_steps=10",
          "callbacks.head_scores.every_n_steps=10", "~callbacks.sample_text", "~callbacks.next_token_probes",
          "~callbacks.embedding_projector"]
analyze = entry_point("analyze.py")
generate = entry_point("generate.py")


def command(script, name: str, *overrides: str):
    """``script.run`` on the overrides as its command line gives them (free text and paths quoted for Hydra)."""
    quoted = quote_values(quote_values(list(overrides), script.TEXT_KEYS, literal=True), script.PATH_KEYS)
    return script.run(compose_config(name, *quoted))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, gpt_run, lstm_run):
    """outputs/runs/{gpt,lstm,tb}: copies of the session's GPT and LSTM runs, and a GPT run with TensorBoard."""
    runs = tmp_path_factory.mktemp("explorer") / "outputs" / "runs"
    shutil.copytree(gpt_run.path, runs / "gpt")
    shutil.copytree(lstm_run.path, runs / "lstm")
    text = runs.parent / "tiny.txt"
    text.write_text(TINY_TEXT, encoding="utf-8")
    train_in_process(runs / "tb", *TB_RUN, f"data.path={text}")
    return runs


@pytest.fixture(scope="module")
def app(logdir):
    return client(logdir)


def get(app, route: str, **params):
    """GET /data/plugin/tinylm/<route>?params: (status, JSON)."""
    query = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
    response = app[0].get(f"/data/plugin/tinylm/{route}" + (f"?{query}" if query else ""))
    assert response.mimetype == "application/json"
    return response.status_code, json.loads(response.get_data(as_text=True))


def test_runs_lists_each_run_with_its_checkpoint_and_model(app, logdir):
    status, body = get(app, "runs")
    assert status == 200 and body["skipped"] == []
    runs = {run["name"]: run for run in body["runs"]}
    assert list(runs) == ["gpt", "lstm", "tb"]
    for name, run in runs.items():
        assert run["checkpoint"] == checkpoint_in_run(logdir / name).path.name
        assert run["task"] == "text" and run["block_size"] == 16
        assert run["text"] == ("Aadeilnostuy个中以位" if name == "gpt" else PROBE)  # gpt: callbacks=minimal
    gpt = runs["gpt"]
    assert (gpt["kind"], gpt["layers"], gpt["heads"], gpt["step"]) == ("decoder", 2, 2, 20)
    assert (runs["lstm"]["kind"], runs["lstm"]["layers"], runs["lstm"]["heads"]) == ("rnn", 0, 0)


def test_attention_rows_sum_to_one_with_nothing_above_the_diagonal(app):
    status, body = get(app, "attention", run="gpt", text=TEXT[:5])
    assert status == 200 and body["tokens"] == list(TEXT[:5]) and body["truncated"] is False
    weights = torch.tensor(body["attention"])  # (L, h, T, T)
    assert weights.shape == (2, 2, 5, 5)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 5), atol=1e-5)
    below = torch.ones(5, 5, dtype=torch.bool).tril()  # the key at or before the query
    assert torch.all(weights[..., ~below] == 0) and torch.all(weights[..., below] > 0)


def test_a_head_switched_off_changes_the_attention_of_the_layers_after_it_only(app):
    clean = torch.tensor(get(app, "attention", run="gpt", text=TEXT)[1]["attention"])
    status, body = get(app, "attention", run="gpt", text=TEXT, ablate="0.1")
    off = torch.tensor(body["attention"])
    assert status == 200 and body["ablated"] == ["0.1"]
    assert torch.equal(off[0], clean[0]) and (off[1] - clean[1]).abs().max() > 1e-4


def test_a_long_text_is_cut_to_its_last_block(app):
    status, body = get(app, "attention", run="gpt", text=TEXT * 2)
    assert status == 200 and body["truncated"] is True and body["tokens"] == list((TEXT * 2)[-16:])
    assert torch.tensor(body["attention"]).shape == (2, 2, 16, 16)


@pytest.mark.parametrize("ablate", ["", "1.0"])
def test_predicts_top_1_is_greedy_generate_pys_next_character(app, logdir, capsys, ablate):
    for prompt in ("自注", "注意力可以", "Attention i"):
        status, body = get(app, "predict", run="gpt", text=prompt, ablate=ablate, k=3)
        assert status == 200 and len(body["top"]) == len(prompt) and body["ablated"] == ([ablate] if ablate else [])
        assert all(len(row) == 3 and row[0]["p"] >= row[1]["p"] >= row[2]["p"] for row in body["top"])
        capsys.readouterr()
        command(generate, "generate", f"run_dir={logdir / 'gpt'}", f"prompt={prompt}", "temperature=0",
                "max_new_tokens=1", f"ablate=[{ablate}]")
        nxt = body["top"][-1][0]["token"]
        assert capsys.readouterr().out == prompt + nxt + ("" if nxt == "\n" else "\n")


def test_switching_a_head_off_changes_the_loss_as_analyze_py_says(app, logdir, tmp_path, capsys):
    """The loss read off predict's full distributions (k = the vocabulary), with and without a head,
    against analyze.py's ablation_loss_delta for that head."""
    rows = command(analyze, "analyze", f"run_dir={logdir / 'gpt'}", f"text={TEXT}",
                   f"out_dir={tmp_path / 'analysis'}")["heads"]
    capsys.readouterr()

    def loss(ablate: str) -> float:
        status, body = get(app, "predict", run="gpt", text=TEXT, ablate=ablate, k=50)
        assert status == 200
        p = [{c["token"]: c["p"] for c in row} for row in body["top"]]
        return -sum(math.log(p[i][TEXT[i + 1]]) for i in range(len(TEXT) - 1)) / (len(TEXT) - 1)

    clean = loss("")
    for row in rows:
        delta = loss(f"{row['layer']}.{row['head']}") - clean
        assert abs(delta - row["ablation_loss_delta"]) < 2e-4, row
    assert max(abs(row["ablation_loss_delta"]) for row in rows) > 1e-3  # the heads do something


def test_the_lens_last_layer_is_predicts_answer(app):
    for ablate in ("", "0.1"):
        _, lens = get(app, "lens", run="gpt", text=TEXT, ablate=ablate)
        _, predicted = get(app, "predict", run="gpt", text=TEXT, ablate=ablate, k=1)
        assert lens["tokens"] == list(TEXT) and [layer["layer"] for layer in lens["layers"]] == [0, 1]
        last = lens["layers"][-1]
        assert last["top1"] == [row[0]["token"] for row in predicted["top"]]
        assert last["prob"] == pytest.approx([row[0]["p"] for row in predicted["top"]], abs=2e-6)
        assert math.isfinite(last["loss"])
    _, one = get(app, "lens", run="gpt", text="自")
    assert [layer["loss"] for layer in one["layers"]] == [None, None]  # no next token to score


def test_training_reads_back_the_probes_weights_at_each_logged_step(app, logdir):
    status, body = get(app, "training", run="tb")
    assert status == 200 and body["tokens"] == list(PROBE) and body["steps"] == [10, 20]
    weights = torch.tensor(body["attention"])  # (steps, L, h, T, T)
    assert weights.shape == (2, 2, 2, 9, 9)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 2, 9), atol=5e-3)
    assert torch.all(weights.triu(diagonal=1) == 0)
    # the last step's weights are those of the run's last checkpoint, in float16
    now = views.attention(load_model(logdir / "tb" / "checkpoints" / "last.ckpt"), PROBE)["attention"]
    assert torch.allclose(weights[-1], torch.tensor(now), atol=2e-3)
    assert get(app, "training", run="gpt")[1] == {"tokens": [], "steps": [], "attention": []}  # logger=none


def test_heads_reads_back_the_head_scores(app, logdir):
    status, body = get(app, "heads", run="tb")
    assert status == 200 and (body["layers"], body["heads"], body["steps"]) == (2, 2, [10, 20])
    events = EventAccumulator(str(logdir / "tb"), size_guidance={"scalars": 0}).Reload()
    for score in body["scores"]:
        for layer in range(2):
            for head in range(2):
                logged = [e.value for e in events.Scalars(f"probe_heads_layer{layer}/{score}_head{head}")]
                assert [body["values"][score][s][layer][head] for s in range(2)] == pytest.approx(logged, abs=1e-6)
    assert get(app, "heads", run="lstm")[1]["steps"] == []


BAD = [
    ("attention", {"run": "gpt", "text": "a" * 4097}, 400, "4097 characters"),
    ("predict", {"run": "gpt", "text": "自" * 4097}, 400, "at most 4096"),
    ("attention", {"run": "../x", "text": "自"}, 400, "not a run name"),
    ("attention", {"run": "/etc", "text": "自"}, 400, "not a run name"),
    ("predict", {"run": "gpt/../lstm", "text": "自"}, 400, "not a run name"),
    ("attention", {"run": "nope", "text": "自"}, 404, "no run 'nope'"),
    ("training", {"run": "gpt/checkpoints"}, 404, "no run"),
    ("attention", {"text": "自"}, 400, "run parameter is missing"),
    ("attention", {"run": "gpt"}, 400, "text parameter is missing"),
    ("attention", {"run": "gpt", "text": ""}, 400, "text is empty"),
    ("predict", {"run": "gpt", "text": "自注意力", "ablate": "9.9"}, 400, "no head 9.9"),
    ("predict", {"run": "gpt", "text": "自注意力", "ablate": "a.b"}, 400, "'a.b' is not layer.head"),
    ("predict", {"run": "gpt", "text": "自注意力", "ablate": "1"}, 400, "not layer.head"),
    ("predict", {"run": "gpt", "text": "自注意力", "k": "0"}, 400, "k='0'"),
    ("predict", {"run": "gpt", "text": "自注意力", "k": "x"}, 400, "k='x'"),
    ("predict", {"run": "gpt", "text": "自☃"}, 400, "'☃'"),
    ("attention", {"run": "lstm", "text": "自注意力"}, 400, "no attention"),
    ("lens", {"run": "lstm", "text": "自注意力"}, 400, "no residual stream"),
    ("predict", {"run": "lstm", "text": "自注意力", "ablate": "0.0"}, 400, "no attention heads"),
    ("translate", {"run": "gpt", "text": "三千"}, 400, "not on translation pairs"),
]


@pytest.mark.parametrize(("route", "params", "status", "message"), BAD)
def test_bad_inputs_get_one_line_of_json_and_never_a_500(app, route, params, status, message):
    code, body = get(app, route, **params)
    assert (code, list(body)) == (status, ["error"]) and message in body["error"] and "\n" not in body["error"]


def test_a_damaged_checkpoint_is_skipped_with_why_and_its_run_is_a_400(logdir, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(logdir / "gpt", runs / "gpt")
    shutil.copytree(logdir / "gpt", runs / "broken")
    checkpoint = checkpoint_in_run(runs / "broken").path
    checkpoint.write_bytes(checkpoint.read_bytes()[:1000])  # cut short, as while it is being written
    fresh = client(runs)
    status, body = get(fresh, "runs")
    assert status == 200 and [run["name"] for run in body["runs"]] == ["gpt"]
    (skipped,) = body["skipped"]
    assert skipped["name"] == "broken" and "corrupted or truncated" in skipped["error"]
    status, body = get(fresh, "predict", run="broken", text="自注")
    assert status == 400 and "corrupted or truncated" in body["error"]


def test_an_rnn_still_predicts(app):
    status, body = get(app, "predict", run="lstm", text="自注意力")
    assert status == 200 and len(body["top"]) == 4 and body["truncated"] is False


def test_the_model_is_loaded_once_and_again_when_its_checkpoint_changes(logdir, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(logdir / "gpt", runs / "gpt")
    fresh, plugin = client(runs)
    for _ in range(3):
        assert get((fresh, plugin), "predict", run="gpt", text="自注")[0] == 200
    assert plugin.models.loads == 1
    checkpoint = checkpoint_in_run(runs / "gpt").path
    os.utime(checkpoint, ns=(checkpoint.stat().st_atime_ns, checkpoint.stat().st_mtime_ns + 10**9))
    assert get((fresh, plugin), "attention", run="gpt", text="自注")[0] == 200
    assert plugin.models.loads == 2


def test_at_most_size_models_are_kept_the_least_recently_used_dropped(logdir):
    first, second = (checkpoint_in_run(logdir / name).path for name in ("gpt", "tb"))
    models = Models(size=1)
    assert models.get(first) is models.get(first) and models.loads == 1
    models.get(second)
    models.get(first)  # dropped when the second came in: read again
    assert models.loads == 3
    assert models.description(second)["layers"] == 2 and models.loads == 3  # a description outlives its model


def test_static_files_come_with_their_content_type_and_nothing_else_is_served(app):
    for path in [p for p in STATIC.rglob("*") if p.is_file()]:
        response = app[0].get("/data/plugin/tinylm/" + path.relative_to(STATIC).as_posix())
        assert response.status_code == 200 and response.get_data() == path.read_bytes()
        if path.suffix in (".js", ".css"):
            assert response.mimetype == {".js": "text/javascript", ".css": "text/css"}[path.suffix]
    for path in ("../plugin.py", "..%2Fplugin.py", "nothing.js", "%2E%2E/%2E%2E/pyproject.toml"):
        response = app[0].get("/data/plugin/tinylm/" + path)
        assert response.status_code == 404 and "error" in json.loads(response.get_data(as_text=True))


def test_the_entry_point_is_registered_and_tensorboard_lists_the_plugin(logdir):
    found = [ep for ep in entry_points(group="tensorboard_plugins") if ep.name == "tinylm"]
    assert [ep.value for ep in found] == ["tinylm.explorer.plugin:TinyLMLoader"]
    app, plugin = client(logdir)
    loader = found[0].load()()  # what TensorBoard makes of the entry point
    assert type(loader.load(base_plugin.TBContext(logdir=str(logdir)))) is type(plugin)
    flags = Namespace(samples_per_plugin={"images": 3})
    loader.fix_flags(flags)  # every step of the raw attention weights kept
    assert flags.samples_per_plugin == {"images": 3, "tinylm": 0}
    flags = Namespace(samples_per_plugin={"tinylm": 5})
    loader.fix_flags(flags)  # the user's number stays
    assert flags.samples_per_plugin == {"tinylm": 5}
    listing = json.loads(app.get("/data/plugins_listing").get_data(as_text=True))
    assert listing["tinylm"]["enabled"] is True
    assert listing["tinylm"]["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/tinylm/index.js"}


def test_a_logdir_without_tinylm_runs_leaves_the_plugin_off(tmp_path):
    (tmp_path / "other" / "checkpoints").mkdir(parents=True)  # neither .hydra/ nor event files
    wsgi, plugin = client(tmp_path)
    assert plugin.is_active() is False
    assert json.loads(wsgi.get("/data/plugins_listing").get_data(as_text=True))["tinylm"]["enabled"] is False
    assert get((wsgi, plugin), "runs") == (200, {"runs": [], "skipped": []})


def test_no_route_writes_anything(app, logdir):
    before = {p: p.stat().st_mtime_ns for p in logdir.rglob("*")}
    calls = [("runs", {}), ("attention", {"run": "gpt", "text": TEXT}), ("lens", {"run": "tb", "text": TEXT}),
             ("predict", {"run": "tb", "text": TEXT, "ablate": "0.0,1.1"}), ("training", {"run": "tb"}),
             ("heads", {"run": "tb"})]
    for route, params in calls:
        assert get(app, route, **params)[0] == 200
    assert {p: p.stat().st_mtime_ns for p in logdir.rglob("*")} == before
