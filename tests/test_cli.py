"""tinylm.cli: quoting command-line values for Hydra, and how entry points end."""

from __future__ import annotations

import gc

import pytest
from conftest import compose_config, entry_point

from tinylm.cli import EXIT_INTERRUPTED, few_collections, quote_values, run_command
from tinylm.errors import TinyLMError

TEXTS = [
    "我正在学习", "a b", "  outer spaces ", "a,b", "f(x)=[1]", "你好, world = 1", r"\n and \t",
    "it's", "'tis", "a\\", "a\\'b",
    "a${b}c", "${oc.env:HOME}", "\\${x}", "a\\\\${x}\\", "$${x}}", "${", "it's ${a}'",
]


@pytest.mark.parametrize("text", TEXTS)
def test_literal_values_read_back_exactly(text):
    """Any text (quotes, backslashes, ${...} interpolation syntax) reaches the config unchanged."""
    (override,) = quote_values([f"prompt={text}"], ["prompt"], literal=True)
    assert compose_config("generate", override).prompt == text  # reading the value resolves it: nothing changes


@pytest.mark.parametrize("path", ["/tmp/my dir/模型 v1/last.ckpt", "/a/b'c\\", r"C:\runs\n1", "runs/x=1,y(2)"])
def test_path_values_are_quoted_and_kept_as_written(path):
    quoted = quote_values([f"ckpt_path={path}", f"++run_dir={path}"], ["ckpt_path", "run_dir"])
    cfg = compose_config("generate", *quoted)
    assert cfg.ckpt_path == path and cfg.run_dir == path  # no \n unescaping for paths


def test_interpolations_still_work_in_paths_but_not_in_literal_text(monkeypatch):
    monkeypatch.setenv("TINYLM_ROOT", "/project")
    quoted = quote_values(["ckpt_path=${paths.log_dir}/my run/x.ckpt", "prompt=${paths.log_dir}"],
                          ["ckpt_path"])
    quoted = quote_values(quoted, ["prompt"], literal=True)
    cfg = compose_config("generate", *quoted)
    assert cfg.ckpt_path == "/project/outputs/my run/x.ckpt"
    assert cfg.prompt == "${paths.log_dir}"


def test_what_is_left_alone():
    argv = ["generate.py", "prompt='kept'", 'stop="x"', "stop=", "prompt=null", "ckpt_path=NULL",
            "top_k=5", "prompts=a b", "~run_dir", "--help"]
    assert quote_values(argv, ["prompt", "stop", "ckpt_path", "run_dir"], literal=True) == argv
    assert quote_values(["+prompt=a b", "++stop=我"], ["prompt", "stop"]) == ["+prompt='a b'", "++stop='我'"]
    cfg = compose_config("generate", *quote_values(["prompt=null", "stop=", "ckpt_path=null"],
                                                   ["prompt", "stop", "ckpt_path"]))
    assert cfg.prompt is None and cfg.stop == "" and cfg.ckpt_path is None
    assert compose_config("generate", "prompt='null'").prompt == "null"  # the word itself: quote it


def test_run_command_turns_errors_into_one_line_and_ctrl_c_into_130():
    def bad(cfg):
        raise TinyLMError("top_k=0 must be an integer >= 1")

    def interrupted(cfg):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as info:
        run_command(bad, None)
    assert info.value.code == "error: top_k=0 must be an integer >= 1"
    with pytest.raises(SystemExit) as info:
        run_command(interrupted, None)
    assert info.value.code == EXIT_INTERRUPTED
    seen = []
    run_command(seen.append, "cfg")
    assert seen == ["cfg"]


def test_an_import_that_imports_nothing_new_freezes_nothing():
    """A sweep's second job in the same process: its import of the training stack is a lookup, and freezing then
    would keep the first job's uncollected garbage for good. The collector is back on either way."""
    frozen = gc.get_freeze_count()
    with few_collections():
        assert not gc.isenabled()
        import tinylm.cli  # noqa: F401 (already imported)
    assert gc.get_freeze_count() == frozen and gc.isenabled()


def test_evaluate_takes_threads_as_the_other_commands_do(gpt_run, tiny_text_file, capsys):
    import torch

    evaluate = entry_point("evaluate.py")
    evaluate.run(compose_config("evaluate", f"run_dir='{gpt_run.path}'", f"data.path='{tiny_text_file}'",
                                "data.repeat=30", "threads=3"))
    assert torch.get_num_threads() == 3 and '"loss": ' in capsys.readouterr().out
    with pytest.raises(TinyLMError, match=r"^threads=0 must be an integer >= 1, or null$"):
        evaluate.run(compose_config("evaluate", "threads=0"))
