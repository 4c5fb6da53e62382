"""Where one ``python train.py`` run's wall time and peak memory go: train.py itself, instrumented.

    python bench/budget_probe.py OUT.json [train.py overrides...]

bench/bench_budget.py runs it as a child process (beside an uninstrumented train.py and nanoGPT's);
alone it trains exactly as ``python train.py OVERRIDES`` does and writes the budget to OUT.json.

Every second of the run is given to exactly one part (the innermost one running, on the main
thread): imports (every ``import``, lazy ones too: a callback's first heatmap imports matplotlib, so
those are named with the callback that pulled them in), building the data and the model, each
callback's hooks, the optimizer steps (forward, backward, AdamW), validation, checkpoint writes,
TensorBoard writes (the summaries' events; named with the callback that wrote them), Lightning's
own loop around them, and start-up (Hydra, config checks) as the rest. The peak RSS is given the
same way: each rise of the process's high-water mark goes to the part that was running (started by a
large process, the probe runs itself again from a small one: Linux keeps a parent's peak across exec). The
TensorBoard writer's own thread (serialising and CRC32C of each event) is timed apart: it runs
beside the main thread. The wrappers cost about 2 us a call, well under 1% of a run.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import atexit  # noqa: E402
import builtins  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

MAIN = threading.get_ident()
KINDS_OF_OWNER = ("imports", "TensorBoard writes")  # named with the callback running when they happen


class Budget:
    """Exclusive timing: a stack of parts; time and RSS rises go to the innermost part."""

    def __init__(self):
        self.stack = ["start-up (interpreter, Hydra, config checks, the rest)"]
        self.mark = STARTED  # the first lines of this file count as start-up
        self.rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.rss_kib: dict[str, int] = {}
        self.thread_seconds = 0.0
        self.lock = threading.Lock()

    def charge(self) -> None:
        now, rss = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        part = self.stack[-1]
        self.seconds[part] = self.seconds.get(part, 0.0) + now - self.mark
        if rss > self.rss:
            self.rss_kib[part] = self.rss_kib.get(part, 0) + rss - self.rss
            self.rss = rss
        self.mark = now

    def part(self, kind: str) -> str:
        if kind in KINDS_OF_OWNER:
            owners = [p for p in self.stack if p.startswith("callback ")]
            if owners:
                return f"{owners[-1]}: {kind}"
        return kind

    def wrap(self, kind: str, fn, skip_nested: bool = False):
        """fn, its time charged to ``kind`` (or to ``kind`` within a callback)."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if threading.get_ident() != MAIN or (skip_nested and self.stack[-1].endswith(kind)):
                return fn(*args, **kwargs)
            self.charge()
            name = self.part(kind)
            self.stack.append(name)
            self.calls[name] = self.calls.get(name, 0) + 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.charge()
                self.stack.pop()

        timed.__budget__ = True
        return timed

    def wrap_thread(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.thread_seconds += time.thread_time() - started

        return timed


BUDGET = Budget()
CALLBACKS: list = []  # the run's callbacks: the views' own counts of their calls go into the budget


def patch(owner, name: str, kind: str) -> None:
    fn = getattr(owner, name, None)
    if fn is not None and not getattr(fn, "__budget__", False):
        setattr(owner, name, BUDGET.wrap(kind, fn))


def patch_callbacks(trainer) -> None:
    """Every hook a callback overrides, timed as that callback (the two checkpoint callbacks by filename)."""
    from lightning.pytorch import Callback

    CALLBACKS.extend(trainer.callbacks)
    for callback in trainer.callbacks:
        cls = type(callback)
        name = cls.__name__
        if hasattr(callback, "filename") and callback.filename:
            name = f"{name}({callback.filename.split('-')[0]})"
        for attr in dir(cls):
            if (attr.startswith("on_") or attr in ("setup", "teardown")) and getattr(cls, attr) is not getattr(
                    Callback, attr, None):
                setattr(callback, attr, BUDGET.wrap(f"callback {name}", getattr(callback, attr)))


PATCHES = {
    "tinylm.runs.job": lambda m: [patch(m, "build_datamodule", "building (data, model)"),
                                  patch(m, "build_module", "building (data, model)")],
    "tinylm.training.module": lambda m: patch(m.LitLanguageModel, "optimizer_step",
                                              "steps (forward, backward, AdamW)"),
    "lightning.pytorch.loops.evaluation_loop": lambda m: patch(m._EvaluationLoop, "run", "validation"),
    "lightning.pytorch.trainer.trainer": lambda m: [patch(m.Trainer, "save_checkpoint", "checkpoint writes"),
                                                    patch(m.Trainer, "fit", "Lightning's loop and the batches")],
    "torch.utils.tensorboard.writer": lambda m: [patch(m.FileWriter, "add_event", "TensorBoard writes"),
                                                 patch(m.FileWriter, "flush", "TensorBoard writes")],
    "tensorboard.summary.writer.record_writer": lambda m: setattr(
        m.RecordWriter, "write", BUDGET.wrap_thread(m.RecordWriter.write)),
}


def check_patches() -> None:
    for name in [n for n in PATCHES if n in sys.modules]:
        PATCHES.pop(name)(sys.modules[name])


def timed_import(original):
    @functools.wraps(original)
    def importing(*args, **kwargs):
        if threading.get_ident() != MAIN or BUDGET.stack[-1].endswith("imports"):
            return original(*args, **kwargs)
        before = len(sys.modules)
        module = BUDGET.wrap("imports", original)(*args, **kwargs)
        if PATCHES and len(sys.modules) != before:
            check_patches()
        return module

    return importing


def write_budget(out: Path) -> None:
    BUDGET.charge()
    total = time.perf_counter() - STARTED
    result = {"total_seconds": total, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              "parts": {name: {"seconds": seconds, "calls": BUDGET.calls.get(name, 0),
                               "rss_kib": BUDGET.rss_kib.get(name, 0)} for name, seconds in BUDGET.seconds.items()},
              "tensorboard_thread_seconds": BUDGET.thread_seconds,
              # each view's inspections (PeriodicInspector.calls) and their time, as its log line says
              "views": {type(c).__name__: {"calls": c.calls, "seconds": c.seconds} for c in CALLBACKS
                        if hasattr(c, "calls") and hasattr(c, "seconds")}}
    out.write_text(json.dumps(result, indent=1))


def own_peak_kib() -> int:
    """This process's own peak RSS (VmHWM; Linux), unlike getrusage's, which keeps the parent's across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > own_peak_kib() + 100 * 1024:
        # started by a large process (a test runner with Lightning imported): getrusage would hide every rise
        # below its size, so the probe runs again as the child of this small process (a parent under 100 MiB,
        # bench_budget's, hides nothing: the first imports pass its size)
        sys.exit(subprocess.run([sys.executable, __file__, *sys.argv[1:]]).returncode)
    out = Path(sys.argv[1])
    atexit.register(write_budget, out)  # registered first: runs last
    builtins.__import__ = timed_import(builtins.__import__)
    importlib.import_module = timed_import(importlib.import_module)
    original_fit = None

    def watch_fit():  # the callbacks exist once the Trainer does: patched as fit starts
        nonlocal original_fit
        from lightning.pytorch import Trainer

        original_fit = Trainer.fit

        def fit(trainer, *args, **kwargs):
            patch_callbacks(trainer)
            return original_fit(trainer, *args, **kwargs)

        Trainer.fit = fit

    PATCHES["lightning.pytorch"] = lambda m: watch_fit()
    sys.argv = ["train.py", *sys.argv[2:]]
    from tinylm.commands import run_command

    run_command("train")


if __name__ == "__main__":
    main()
