"""Shared test helpers: tiny texts, the composed train config, runs trained once per session and
shared by the tests that read them, and a way to run the real train.py into a temporary folder."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The tiny repeated text of the reference experiment: the model must learn to reproduce it.
TINY_TEXT = "自注意力可以让序列中的每个位置看到前面的所有位置。Attention is all you need.\n"

# Keep tests small: a tiny model, a few steps, no progress bar, one torch thread (a tiny model gains
# nothing from more; with a test worker per core, more threads than cores spin and slow every test).
TINY_MODEL = [
    "model.n_embd=16",
    "model.num_heads=2",
    "model.num_layers=1",
    "model.block_size=16",
    "data.batch_size=8",
    "data.val_batches=2",
    "trainer.enable_progress_bar=false",
    "threads=1",
]


def run_train(run_dir: Path, *overrides: str, timeout: int = 300, check: bool = True, in_process: bool = False):
    """Run `python train.py` with Hydra's run folder set to ``run_dir``; return the process (with
    ``in_process``: the same command in this process, ``train_py``)."""
    flags = [o for o in overrides if o.startswith("-")]  # e.g. -m must precede the overrides
    overrides = [o for o in overrides if not o.startswith("-")]
    args = [*flags, f"hydra.run.dir={run_dir}", *overrides]
    if in_process:
        return train_py(*args, check=check)
    cmd = [sys.executable, str(ROOT / "train.py"), *args]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@dataclass(frozen=True)
class Finished:
    """A command run by ``script_in_process``, as subprocess.run(text=True) reports a finished process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def train_py(*args: str, check: bool = True) -> Finished:
    """``python train.py ARGS`` in this process: its ``__main__`` block as the command runs it (argv
    quoting, resume planning, Hydra's app with its run folder, record, logs, sweeps and their
    launchers and sweepers), without a new Python importing torch and Lightning (about 5 s each).

    For what needs no process of its own; signals, exit codes seen by a shell, the process's own
    console and what it imports at start stay with ``run_train`` / ``subprocess``. An exception that
    escapes becomes its traceback on stderr and returncode 1, as Python prints it.
    """
    return script_in_process("train.py", *args, check=check)


def script_in_process(script: str, *args: str, check: bool = True, cwd: Path | None = None) -> Finished:
    """``python ROOT/<script> ARGS`` (train.py, generate.py, ...) in this process, launched from ``cwd``
    (default: where the tests run); see ``train_py``."""
    import runpy
    import traceback

    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from tinylm.api.training import logging_state, restore_logging

    argv, threads = sys.argv, torch.get_num_threads()
    loggers = logging_state()
    signals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv, launched_from = [str(ROOT / script), *args], os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(ROOT / script), run_name="__main__")
            except SystemExit as e:  # as Python exits: a message goes to stderr, exit status 1
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
        os.chdir(launched_from)
        # Hydra's logging config of that run: its console and train.log handlers, and loggers it
        # disabled (hydra/job_logging=disabled disables every logger that exists)
        restore_logging(loggers)
        for signum, handler in signals.items():
            signal.signal(signum, handler)
        torch.set_num_threads(threads)
        HydraConfig.instance().cfg = None  # no later test runs "inside" that Hydra job
        GlobalHydra.instance().clear()
    done = Finished([str(ROOT / script), *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{script} failed ({code}):\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """A run with threads=1 in this process sets torch's process-wide thread count: the tests after it
    get the usual one (tests/test_bit_identity.py names the machine by it)."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    yield
    if threads is not None:
        torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """Tiny models decode fastest on one thread, and do not fight other processes for cores
    (on a busy machine extra threads spin). Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_text_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text(TINY_TEXT, encoding="utf-8")
    return path


def compose(*overrides: str, output_dir: Path):
    """The real composed train config (as `python train.py ...` would see it), outside Hydra's app, with its
    run folder at ``output_dir`` (``compose_config``)."""
    cfg = compose_config("train", "paths.output_dir=unset", *overrides)
    cfg.paths.output_dir = str(output_dir)
    return cfg


def compose_config(name: str, *overrides: str):
    """The composed config ``name`` (train, generate, visualize, ...) as its script would see it; every call
    gets a copy of its own.

    Hydra takes about 0.08 s to compose one (reading the YAML files, building the defaults list), and the
    tests compose hundreds that differ only in values. So Hydra composes ``name`` with the overrides that
    pick config groups (``model=lstm``, ``experiment=...``, a sweep, ``hydra...``) once per test process,
    and the overrides that set values (``model.n_embd=16``, ``+x=1``, ``~y``) are then applied to a copy by
    the code Hydra's own compose applies them with, after the groups: about 3 ms
    (tests/test_config.py checks that both give the same config)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    if any(o.key_or_group == "hydra.searchpath" for o in parsed):  # groups of other folders: all to Hydra
        return copy.deepcopy(_composed(name, tuple(overrides)))
    picks, values = [], []
    for override in parsed:
        (picks if _picks_a_group(override) else values).append(override)
    cfg = copy.deepcopy(_composed(name, tuple(o.input_line for o in picks)))
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return cfg


def _picks_a_group(override) -> bool:
    """Whether Hydra reads ``override`` while building the defaults list, not after (a dict given to a group,
    ``model={n_embd: 8}``, is a value, set in its turn among the others)."""
    if override.is_sweep_override() or override.is_hydra_override():
        return True
    return (ROOT / "conf" / override.key_or_group).is_dir() and not isinstance(override.value(), dict)


@functools.cache
def _composed(name: str, overrides: tuple[str, ...]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name=name, overrides=list(overrides))


def entry_point(script: str):
    """The module that ``ROOT/<script>`` (generate.py, visualize.py, ...) runs, ``tinylm.commands.<name>``, to call
    its ``run(cfg)`` in-process; run folders under the checkout, as the script puts them."""
    import importlib

    from tinylm.run_folder import use_project_root

    use_project_root()
    return importlib.import_module(f"tinylm.commands.{script.removesuffix('.py')}")


# --------------------------------------------------------------------------------------------
# Runs trained once per test session (in-process) and shared by every test that only needs
# "a trained run folder": read them, never write into them (copy first where a test writes).

# A 2-layer GPT (one attention map per layer) trained 20 steps on TINY_TEXT, checkpoints only.
GPT_RUN = [*TINY_MODEL, "model.num_layers=2", "data.repeat=30", "optim.lr=0.01", "trainer.max_steps=20",
           "trainer.val_check_interval=10", "callbacks=minimal", "logger=none", "threads=1"]
# An LSTM trained 30 steps with the default callbacks (attention maps included) and TensorBoard.
LSTM_RUN = ["model=lstm", "model.n_embd=16", "model.hidden_size=32", "model.num_layers=1", "model.block_size=16",
            "data.batch_size=8", "data.val_batches=2", "data.repeat=30", "optim.lr=0.01", "trainer.max_steps=30",
            "trainer.val_check_interval=15", "trainer.enable_progress_bar=false", "threads=1",
            "callbacks.attention_maps.every_n_steps=10", "callbacks.sample_text.every_n_steps=15",
            "callbacks.sample_text.max_new_tokens=8"]


@dataclass(frozen=True)
class SharedRun:
    """A finished run folder (``path``, under ``<log_dir>/runs/``, its text file deleted) and what its
    training printed and logged (``output``: the parameter table, the log lines at INFO and above)."""

    path: Path
    output: str

    @property
    def log_dir(self) -> Path:
        return self.path.parent.parent


def train_in_process(run: Path, *overrides: str) -> str:
    """Train ``run`` as train.py would (the run manager's job, without Hydra's app), writing the
    ``.hydra`` record Hydra writes; return what the training printed and logged."""
    import torch
    from omegaconf import OmegaConf

    from tinylm.runs.job import run as run_job

    cfg = compose(*overrides, output_dir=run)
    output, handler = io.StringIO(), logging.StreamHandler()
    handler.setStream(output)
    root, threads = logging.getLogger(), torch.get_num_threads()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            run_job(cfg)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        torch.set_num_threads(threads)
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), run / ".hydra" / "overrides.yaml")
    return output.getvalue()


def shared_folder(tmp_path_factory, name: str) -> Path:
    """``shared-runs/<name>`` in the session's temporary folder, the same for every xdist worker: make
    what goes in it under ``FileLock(<folder>.lock)`` (as pytest-xdist's docs show), once per session."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / "shared-runs" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shared_run(tmp_path_factory, name: str, overrides: list[str]) -> SharedRun:
    """The run ``name`` trained once per session; under xdist once for all workers (``shared_folder``)."""
    from filelock import FileLock

    folder = shared_folder(tmp_path_factory, name)
    run, done = folder / "outputs" / "runs" / "2026-01-01_00-00-00", folder / "output.txt"
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            text = folder / "tiny.txt"
            text.write_text(TINY_TEXT, encoding="utf-8")
            output = train_in_process(run, *overrides, f"data.path={text}")
            text.unlink()  # the checkpoint must be all a command needs
            done.write_text(output, encoding="utf-8")
    return SharedRun(run, done.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def gpt_run(tmp_path_factory) -> SharedRun:
    return shared_run(tmp_path_factory, "gpt", GPT_RUN)


@pytest.fixture(scope="session")
def lstm_run(tmp_path_factory) -> SharedRun:
    return shared_run(tmp_path_factory, "lstm", LSTM_RUN)


# --------------------------------------------------------------------------------------------
# The token caches of what the tests run go to the session's temporary folder, never the checkout's.

CHECKOUT_TOKEN_CACHE = ROOT / ".cache" / "tokens"


def folder_listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*"))


@pytest.fixture(scope="session", autouse=True)
def token_cache_in_tmp(tmp_path_factory):
    """data.cache_dir's default (TINYLM_TOKEN_CACHE) for every command the tests run, in this process and
    in the processes it starts; then the checkout's .cache/tokens must be as it was."""
    before = folder_listing(CHECKOUT_TOKEN_CACHE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINYLM_TOKEN_CACHE", str(tmp_path_factory.mktemp("token-cache")))
        yield
    assert folder_listing(CHECKOUT_TOKEN_CACHE) == before, f"a test wrote into {CHECKOUT_TOKEN_CACHE}"


# --------------------------------------------------------------------------------------------
# The longest tests start first. pytest-xdist's worksteal hands the tests out in collection order
# (idle workers then take half of the longest queue), so a long test collected late would run alone
# at the end of the suite; started first, the short ones fill the other workers meanwhile. Longest first.
STARTS_FIRST = (
    "test_slurm.py::test_srun_and_sbatch_jobs_make_one_run_folder_and_a_layout_lightning_cannot_use_is_one_line",
    "test_slurm.py::test_scontrol_requeue_saves_and_the_job_continues_from_its_last_checkpoint",
    "test_slurm.py::test_a_sweep_on_slurm_runs_each_job_as_two_ddp_tasks_and_ends_with_its_table",
    "test_seq2seq.py::test_the_numbers_demo_reaches_the_reported_accuracy",
    "test_resumable_sweeps.py::test_ctrl_c_stops_a_parallel_sweep_with_every_job_saved_and_a_rerun_finishes_it",
    "test_resumable_sweeps.py::test_parallel_jobs_keep_their_own_folders_results_errors_and_thread_share",
    "test_resumable_sweeps.py::test_a_killed_sweep_finishes_with_the_numbers_of_an_uninterrupted_one",
    "test_compare.py::test_all_comparisons_end_to_end_on_a_tiny_budget",
    "test_analysis_induction.py::test_a_two_layer_model_grows_a_previous_token_and_an_induction_head",
    "test_reliability.py::test_sigkill_then_resume_equals_an_uninterrupted_run",
    "test_sweeps.py::test_ddp_on_two_cpu_processes_shares_one_run_folder",
    "test_reliability.py::test_ctrl_c_saves_last_checkpoint_and_resume_last_continues",
)  # only tests without a module-scoped fixture: moved away from their module, it would be set up twice


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background by a shell script (``pytest &``) inherits Ctrl-C ignored, and so
    would every process it starts: the tests that press Ctrl-C on train.py or TensorBoard need a terminal's
    Ctrl-C. Python's own handler here becomes the default again in a child (exec resets caught signals).
    So such a suite stops on a Ctrl-C at its terminal, as one started in the foreground does."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: rank for rank, name in enumerate(STARTS_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.removeprefix("tests/"), len(first)))  # the rest as collected
