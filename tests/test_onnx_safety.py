"""ONNX files that must not hurt: an export never damages the file it replaces (issue 23, items 1
and 12), a file never reads other files through external data (item 2), and metadata that lies or
a graph that fails is one error line (item 9)."""

from __future__ import annotations

import builtins
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import TINY_TEXT
from onnx import TensorProto, helper
from test_onnx import BLOCK, compose_quoted, export_cli, generate_cli, learned_export

from tinylm.errors import TinyLMError
from tinylm.onnx import export as onnx_export
from tinylm.onnx.export import export_onnx
from tinylm.onnx.external import TENSOR_PATHS, uses_external_data
from tinylm.onnx.runtime import load_onnx
from tinylm.tokenizer import CharTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
ONE_LINE = r"^[^\n]+$"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(checkpoint, its ONNX export, model, tokenizer): tests/test_onnx.py's export (a trace, made
    once per session), shared by every test; read it, never write next to it."""
    ckpt, good, model = learned_export(tmp_path_factory)
    return ckpt, good, model, CharTokenizer.from_text(TINY_TEXT)


@pytest.fixture
def quick_trace(exported, monkeypatch):
    """export_onnx without the trace (the same graph, read back): a list of the models traced."""
    traced = []
    monkeypatch.setattr(onnx_export, "trace", lambda model: traced.append(model) or onnx.load(str(exported[1])))
    return traced


# --------------------------------------------------------------------------------------------
# Item 1: a temporary file next to the target, checked, then renamed; a failure keeps the old file


class FullDisk:
    """A file on a disk that fills up a third of the way through the first write."""

    def __init__(self, file):
        self.file = file

    def write(self, data):
        self.file.write(data[: len(data) // 3])
        self.file.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


@pytest.mark.parametrize("failure", ["full disk", "no permission", "failed check"])
def test_a_failed_export_keeps_the_previous_file(exported, quick_trace, monkeypatch, tmp_path, failure):
    _, good, model, tokenizer = exported
    out = tmp_path / "model.onnx"
    out.write_bytes(good.read_bytes())
    os.utime(out, (0, 0))  # so the test tells the previous file from an identical new one
    before, writes, checked = out.read_bytes(), [], []
    real_open = builtins.open

    def failing_open(file, mode="r", *args, **kwargs):
        if Path(file).parent != tmp_path or "w" not in mode:
            return real_open(file, mode, *args, **kwargs)
        writes.append((Path(file), out.read_bytes() == before))  # kill -9 now would leave the target as it is
        if failure == "no permission":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return FullDisk(real_open(file, mode, *args, **kwargs))

    with monkeypatch.context() as patch, pytest.raises(TinyLMError, match=ONE_LINE) as info:
        if failure == "failed check":
            patch.setattr(onnx_export, "compare_logits", lambda model, path: checked.append(path) or 1.0)
        else:
            patch.setattr(builtins, "open", failing_open)
        export_onnx(model, tokenizer, out)
    message = str(info.value)
    assert out.read_bytes() == before and os.stat(out).st_mtime == 0
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left
    assert f"{out} is unchanged" in message
    if failure == "failed check":
        assert "failed its check, its logits are 1 from PyTorch's" in message
        assert [p.parent for p in checked] == [tmp_path] and checked[0] != out  # the temporary file was checked
    else:
        assert writes and all(path != out and intact for path, intact in writes)
        reason = "No space left on device" if failure == "full disk" else "Permission denied"
        assert f"could not write {out} ({reason})" in message
    # and with nothing failing, the new file replaces the old one
    assert export_onnx(model, tokenizer, out) == out and os.stat(out).st_mtime > 0
    assert list(tmp_path.iterdir()) == [out] and load_onnx(out).context_window == BLOCK


def test_half_files_of_killed_exports_are_removed_by_the_next_export(exported, quick_trace, tmp_path):
    _, _, model, tokenizer = exported
    out = tmp_path / "model.onnx"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = tmp_path / f"model.onnx.{gone.pid}.tmp"  # an export killed mid-write: its process is gone
    running = tmp_path / f"model.onnx.{os.getppid()}.tmp"  # an export still writing: its process runs
    other = tmp_path / "other.onnx.1.tmp"  # another file's
    for path in (killed, running, other):
        path.write_bytes(b"half an export")
    assert export_onnx(model, tokenizer, out) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, running.name, other.name])


# --------------------------------------------------------------------------------------------
# Item 12: an output folder that cannot be written is one line, before the trace


def test_an_unwritable_output_folder_is_one_line_before_the_trace(exported, quick_trace, monkeypatch, tmp_path):
    ckpt = exported[0]
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("a file where a folder should be\n")
    for out in (in_the_way / "model.onnx", in_the_way / "sub" / "model.onnx"):
        with pytest.raises(TinyLMError, match=ONE_LINE) as info:
            export_cli.run(compose_quoted("export", f"ckpt_path={ckpt}", f"out={out}"))
        assert str(info.value) == (f"cannot write {out}: {in_the_way} is a file, not a folder: "
                                   "choose another out=FILE.onnx")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_access = os.access  # root may write anywhere: a read-only folder as os.access reports it to others
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != read_only and real_access(path, mode))
    with pytest.raises(TinyLMError, match="the folder .*read-only is not writable: choose another out=FILE.onnx"):
        export_cli.run(compose_quoted("export", f"ckpt_path={ckpt}", f"out={read_only / 'new' / 'm.onnx'}"))
    assert quick_trace == [] and list(read_only.iterdir()) == []
    assert in_the_way.read_text() == "a file where a folder should be\n"


# --------------------------------------------------------------------------------------------
# Item 2: no external data


def echo_model(folder: Path, secret: bytes) -> Path:
    """A tinylm-looking ONNX file whose greedy continuation spells out ``secret.txt`` next to it:
    one initializer is that file, as ONNX external data, and the logits at position p pick its
    byte p + 1 (a byte tokenizer: ids are bytes)."""
    (folder / "secret.txt").write_bytes(secret)
    table = TensorProto(name="secret", data_type=TensorProto.UINT8, dims=[len(secret)],
                        data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "secret.txt"), ("offset", "0"), ("length", str(len(secret)))):
        table.external_data.add(key=key, value=value)
    node = helper.make_node
    nodes = [node("Shape", ["past_keys"], ["past"], start=3, end=4), node("Shape", ["input_ids"], ["bt"]),
             node("Gather", ["bt", "one"], ["t"]), node("Add", ["past", "t"], ["end"]),
             node("Add", ["past", "one"], ["start"]), node("Add", ["end", "one"], ["stop"]),
             node("Squeeze", ["start"], ["s0"]), node("Squeeze", ["stop"], ["s1"]), node("Squeeze", ["one"], ["d"]),
             node("Range", ["s0", "s1", "d"], ["next"]), node("Cast", ["secret"], ["bytes"], to=TensorProto.INT64),
             node("Gather", ["bytes", "next"], ["byte"]), node("OneHot", ["byte", "depth", "onoff"], ["hot"]),
             node("Concat", ["bt", "depth"], ["shape"], axis=0), node("Expand", ["hot", "shape"], ["logits"]),
             node("Unsqueeze", ["input_ids", "axes"], ["ids"]), node("Cast", ["ids"], ["new"], to=TensorProto.FLOAT),
             node("Concat", ["past_keys", "new"], ["present_keys"], axis=3),
             node("Concat", ["past_values", "new"], ["present_values"], axis=3)]
    past = [1, "batch", 1, "past", 1]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "echo", [value("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                        value("past_keys", TensorProto.FLOAT, past), value("past_values", TensorProto.FLOAT, past)],
        [value(name, TensorProto.FLOAT, None) for name in ("logits", "present_keys", "present_values")],
        [table, helper.make_tensor("one", TensorProto.INT64, [1], [1]),
         helper.make_tensor("depth", TensorProto.INT64, [1], [256]),
         helper.make_tensor("axes", TensorProto.INT64, [3], [0, 2, 4]),
         helper.make_tensor("onoff", TensorProto.FLOAT, [2], [0.0, 1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    config = {"vocab_size": 256, "arch": "gpt", "block_size": 64, "n_embd": 1, "num_heads": 1, "num_layers": 1,
              "dropout": 0.0, "pos_encoding": "learned", "attn_impl": "sdpa"}
    meta = {"format": 1, "version": "0.1.0", "model_config": config, "tokenizer": {"kind": "byte"},
            "global_step": 1, "num_params": 1, "context_window": 64}
    helper.set_model_props(model, {f"tinylm.{key}": json.dumps(value) for key, value in meta.items()})
    path = folder / "echo.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_a_file_that_reads_a_file_next_to_it_is_refused_before_a_session(monkeypatch, tmp_path, capsys):
    secret = b"-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjE"
    path = echo_model(tmp_path, secret)
    # ONNX Runtime itself reads the secret (the folder is the model's own), and greedy decoding spells it
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    empty = np.zeros((1, 1, 1, 0, 1), np.float32)
    logits = session.run(["logits"], {"input_ids": np.zeros((1, len(secret) - 1), np.int64),
                                      "past_keys": empty, "past_values": empty})[0]
    assert bytes(logits[0].argmax(-1).astype(np.uint8).tolist()) == secret[1:]

    overrides = [f"ckpt_path={path}", "prompt=-", "temperature=0", f"max_new_tokens={len(secret) - 1}"]
    with pytest.raises(TinyLMError, match=ONE_LINE) as info:
        generate_cli.run(compose_quoted("generate", *overrides))
    assert str(info.value) == (f"{path} keeps tensors in other files (ONNX external data), which tinylm never "
                               "writes and will not read: export a checkpoint with "
                               "`python export.py ckpt_path=<checkpoint>`")
    out, err = capsys.readouterr()
    assert "KEY" not in out + err + str(info.value)

    def no_session(*args, **kwargs):
        raise AssertionError("an InferenceSession was built")

    monkeypatch.setattr(onnxruntime, "InferenceSession", no_session)
    with pytest.raises(TinyLMError, match="ONNX external data"):
        load_onnx(path)


def external(name: str = "t", location: bool = True, flag: bool = True) -> TensorProto:
    """A tensor kept in another file: ``location`` an external_data entry, ``flag`` data_location=EXTERNAL."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[1],
                         data_location=TensorProto.EXTERNAL if flag else TensorProto.DEFAULT)
    if location:
        tensor.external_data.add(key="location", value="secret.txt")
    return tensor


def model_with(place: str, tensor: TensorProto) -> onnx.ModelProto:
    """A small model holding ``tensor`` in ``place``."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    inner = helper.make_graph([helper.make_node("Identity", ["t"], ["y"])], "inner", [], [out], [tensor])
    nodes, initializers, sparse, functions = [helper.make_node("Identity", ["x"], ["y"])], [], [], []
    if place == "initializer":
        initializers.append(tensor)
    elif place == "Constant node":
        nodes = [helper.make_node("Constant", [], ["y"], value=tensor)]
    elif place == "sparse initializer":
        indices = helper.make_tensor("i", TensorProto.INT64, [1], [0])
        sparse.append(helper.make_sparse_tensor(tensor, indices, [1]))
    elif place == "If subgraph":
        cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
        nodes = [helper.make_node("Constant", [], ["cond"], value=cond),
                 helper.make_node("If", ["cond"], ["y"], then_branch=inner, else_branch=inner)]
    elif place == "function":
        body = [helper.make_node("Constant", [], ["y"], value=tensor)]
        functions.append(helper.make_function("local", "f", [], ["y"], body, [helper.make_opsetid("", 17)]))
        nodes = [helper.make_node("f", [], ["y"], domain="local")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [out],
                              initializers, sparse_initializer=sparse)
    model = helper.make_model(graph, functions=functions, opset_imports=[helper.make_opsetid("", 17),
                                                                         helper.make_opsetid("local", 1)])
    if place == "training graph":
        model.training_info.add(initialization=inner)
    return model


@pytest.mark.parametrize("place", ["initializer", "Constant node", "sparse initializer", "If subgraph",
                                   "function", "training graph"])
def test_external_data_is_found_wherever_a_tensor_can_be(place, tmp_path, exported):
    for tensor in (external(), external(location=False), external(flag=False)):
        assert uses_external_data(model_with(place, tensor).SerializeToString()), place
    plain = helper.make_tensor("t", TensorProto.FLOAT, [1], [0.5])
    assert not uses_external_data(model_with(place, plain).SerializeToString())
    assert not uses_external_data(exported[1].read_bytes())
    path = tmp_path / "m.onnx"
    path.write_bytes(model_with(place, external()).SerializeToString())
    with pytest.raises(TinyLMError, match=ONE_LINE):
        load_onnx(path)


def test_every_field_that_can_hold_a_tensor_is_searched():
    """TENSOR_PATHS lists, per message, each field on the way from ModelProto to a TensorProto, as
    the installed onnx package's schema has them: a newer ONNX with another such field fails here."""

    def leads_to_tensor(message, seen=()):
        if message.name == "TensorProto":
            return True
        return any(f.message_type and f.message_type.name not in seen
                   and leads_to_tensor(f.message_type, (*seen, message.name)) for f in message.fields)

    expected, todo = {}, [onnx.ModelProto.DESCRIPTOR]
    while todo:
        message = todo.pop()
        if message.name in expected:
            continue
        fields = [f for f in message.fields if f.message_type and leads_to_tensor(f.message_type, (message.name,))]
        expected[message.name] = {f.number: f.message_type.name for f in fields}
        todo += [f.message_type for f in fields]
    assert TENSOR_PATHS == expected


# --------------------------------------------------------------------------------------------
# Item 9: metadata that lies, a graph that fails at run time


def with_metadata(good: Path, out: Path, **changes) -> Path:
    """A copy of ``good`` with metadata keys (tinylm.<key>) replaced; model_config entries as config_<entry>."""
    proto = onnx.load(str(good))
    meta = {p.key.removeprefix("tinylm."): json.loads(p.value) for p in proto.metadata_props}
    for key, value in changes.items():
        if key.startswith("config_"):
            meta["model_config"][key.removeprefix("config_")] = value
        else:
            meta[key] = value
    del proto.metadata_props[:]
    helper.set_model_props(proto, {f"tinylm.{key}": json.dumps(value) for key, value in meta.items()})
    out.write_bytes(proto.SerializeToString())
    return out


V = CharTokenizer.from_text(TINY_TEXT).vocab_size
LIES = {
    "window 0": ({"context_window": 0}, "tinylm.context_window=0 must be a positive integer"),
    "window -1": ({"context_window": -1}, "tinylm.context_window=-1 must be a positive integer"),
    "window 10**9": ({"context_window": 10**9}, f"tinylm.context_window=1000000000 but the model config's "
                                                f"block_size={BLOCK}"),
    "window text": ({"context_window": "8"}, "tinylm.context_window='8' must be a positive integer"),
    "window true": ({"context_window": True}, "tinylm.context_window=True must be a positive integer"),
    "block_size": ({"config_block_size": 2 * BLOCK}, f"tinylm.context_window={BLOCK} but the model config's "
                                                     f"block_size={2 * BLOCK}"),
    "no layers": ({"config_num_layers": None}, "tinylm.model_config needs positive integers vocab_size, "),
    "layers": ({"config_num_layers": 3}, "the graph's past_keys have (layers, heads, head size) (2, 2, 8), the "
                                         "model config (3, 2, 8)"),
    "tokenizer": ({"tokenizer": {"kind": "char", "itos": ["a", "b"]}},
                  f"the tokenizer has 2 symbols, the model config's vocab_size={V}"),
    "vocab_size": ({"config_vocab_size": V + 1}, f"the tokenizer has {V} symbols, the model config's "
                                                 f"vocab_size={V + 1}"),
    "both vocabularies": ({"config_vocab_size": 256, "tokenizer": {"kind": "byte"}},
                          f"one step gives logits of shape (1, 1, {V}) and present_keys of shape (2, 1, 2, 1, 8), "
                          "not (1, 1, 256) and (2, 1, 2, 1, 8)"),
}


@pytest.mark.parametrize("lie", LIES)
def test_metadata_that_lies_is_refused_at_load(lie, exported, tmp_path):
    changes, problem = LIES[lie]
    path = with_metadata(exported[1], tmp_path / "lies.onnx", **changes)
    with pytest.raises(TinyLMError, match=ONE_LINE) as info:
        load_onnx(path)
    assert str(info.value).startswith(f"{path} has inconsistent metadata: {problem}")
    assert str(info.value).endswith(": the file was altered or damaged: export a checkpoint with "
                                    "`python export.py ckpt_path=<checkpoint>`")


def test_a_graph_that_fails_at_run_time_is_one_line(exported, tmp_path, capfd):
    # a window of 2 * BLOCK, in the metadata and the config alike: the graph's tables end at BLOCK
    path = with_metadata(exported[1], tmp_path / "long.onnx", context_window=2 * BLOCK, config_block_size=2 * BLOCK)
    assert load_onnx(path).context_window == 2 * BLOCK  # nothing at load tells
    with pytest.raises(TinyLMError, match=ONE_LINE) as info:
        generate_cli.run(compose_quoted("generate", f"ckpt_path={path}", "prompt='自'", "temperature=0",
                                        f"max_new_tokens={2 * BLOCK}"))
    assert str(info.value).startswith(f"ONNX Runtime failed to run {path} on input_ids of shape (1, 1) after "
                                      f"{BLOCK} earlier positions ([ONNXRuntimeError] ")
    assert str(info.value).endswith("): the file is damaged or its metadata is wrong: export a checkpoint with "
                                    "`python export.py ckpt_path=<checkpoint>`")
    out, err = capfd.readouterr()
    assert out.startswith("自") and len(out) == 1 + BLOCK  # the prompt, and the ids the graph could give
    assert err.splitlines()[0].startswith(f"checkpoint: {path} (step 60")
    assert len(err.splitlines()) == 1  # ONNX Runtime logs nothing of its own
