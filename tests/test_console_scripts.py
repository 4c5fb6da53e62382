"""`tinylm <command>` where tinylm is installed from its wheel (not a checkout): the commands, their Hydra configs
shipped inside the package, and run folders under the current folder; `python -m tinylm` in a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest
from conftest import ROOT, TINY_MODEL

from tinylm.commands import COMMANDS

SOURCES = ("tinylm", "hydra_plugins", "conf", "pyproject.toml", "setup.py", "README.md")  # what the wheel is built of


def tinylm_module(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinylm", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_tinylm_help_lists_every_command():
    proc = tinylm_module("--help")
    assert proc.returncode == 0, proc.stderr
    for name in [*COMMANDS, "compare"]:
        assert f"\n  {name} " in proc.stdout
    assert "`tinylm <command> --help`" in proc.stdout


def test_tinylm_without_a_known_command_is_one_error_line():
    proc = tinylm_module("trian", "model.n_embd=32")
    assert proc.returncode == 1
    assert proc.stderr == ("error: tinylm trian: no such command; choose one of train, generate, evaluate, analyze, "
                           "visualize, export, compare\n")
    bare = tinylm_module()
    assert bare.returncode == 1 and bare.stderr.startswith("usage: tinylm <command>")


def test_the_wheel_carries_every_config_file():
    """pyproject.toml's package data for tinylm.conf matches every YAML file of conf/ (a deeper group would
    be left out of the wheel without a word)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"]["tinylm.conf"] == "conf"
    patterns = setuptools["package-data"]["tinylm.conf"]
    configs = sorted(path.relative_to(ROOT / "conf").as_posix() for path in (ROOT / "conf").rglob("*.yaml"))
    assert configs and [c for c in configs if not any(fnmatch(c, p) and c.count("/") == p.count("/")
                                                      for p in patterns)] == []


def build_and_install(tmp_path: Path) -> Path:
    """The wheel built from a copy of the checkout's sources (nothing is written into the checkout), installed
    into ``tmp_path/site``; no download (the build uses the setuptools installed here)."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(src)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "wheel").glob("tinylm-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True,
                   capture_output=True, timeout=300)
    return tmp_path / "site"


@pytest.mark.slow  # builds and installs the wheel, trains in a process of its own
def test_an_installed_package_trains_and_samples_with_run_folders_under_the_current_folder(tmp_path):
    site = build_and_install(tmp_path)
    assert (site / "tinylm" / "conf" / "train.yaml").is_file() and (site / "hydra_plugins").is_dir()
    work = tmp_path / "work"
    work.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("TINYLM_ROOT", "PYTHONPATH")}
    env |= {"PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore"}
    where = subprocess.run([sys.executable, "-c", "import tinylm; print(tinylm.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).parent == site / "tinylm"  # the installed copy, not the checkout

    train = tinylm_module("train", "trainer.max_steps=2", "callbacks=minimal", "logger=none", *TINY_MODEL,
                          cwd=work, env=env)
    assert train.returncode == 0, train.stderr
    [run] = (work / "outputs" / "runs").iterdir()
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / ".hydra" / "config.yaml").is_file()

    script = site / "bin" / "tinylm"  # the console script of [project.scripts]
    sample = subprocess.run([str(script), "generate", "prompt=自注意", "max_new_tokens=3", "seed=1", "threads=1"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert sample.returncode == 0, sample.stderr
    assert sample.stdout.startswith("自注意") and f"checkpoint: outputs/runs/{run.name}/" in sample.stderr
    usage = subprocess.run([str(script), "train", "--help"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=300)
    assert usage.returncode == 0 and "== Configuration groups ==" in usage.stdout  # Hydra's help of train
    compare = subprocess.run([str(script), "compare", "--help"], cwd=work, env=env, capture_output=True, text=True,
                             timeout=300)
    assert compare.returncode == 0 and compare.stdout.startswith("usage: python -m tinylm.compare")
    assert sorted(p.name for p in work.iterdir()) == ["outputs"]
