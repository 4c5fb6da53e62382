"""Run the comparisons of the reference experiment and write their answers to one folder.

    python -m tinylm.compare positions|tokenizers|rnn|tricks|all [--steps N] [--data PATH]
        [--max-chars N] [--bpe-vocab-size N] [--out DIR] [--rerun] [train.py overrides ...]

Each comparison trains a few variants of the same run (same data, seed, steps, batch and block),
one ``train.py`` process per variant, into ``<out>/<comparison>/<variant>/`` (an ordinary run
folder: metrics.json, TensorBoard events, checkpoints, so ``generate.py run_dir=...`` works on it):

- positions:  learned table | fixed sin/cos | rotary (rope)
- tokenizers: char | byte | BPE (``data.bpe_vocab_size``), compared in bits per character
- rnn:        the GPT | an LSTM | a GRU (``model=lstm``), val loss vs parameters vs tokens/s
- tricks:     constant learning rate | warmup + cosine decay | gradient clipping | both

A variant whose folder already holds a finished run with the same settings is read, not run
again, so an interrupted comparison continues where it stopped and a finished one only rebuilds
the report. Every comparison includes the reference run (learned, char, gpt, constant_lr are one
and the same training config): once trained, it is copied into the other comparisons' folders.

Then ``<out>/REPORT.md`` gets one table per comparison (a row per variant, built by
``tinylm.sweep_report`` from each run's metrics.json) and ``<out>/<comparison>/curves.png`` the
validation curves of its variants on one chart, read from the TensorBoard event files.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from tinylm.data import read_text
from tinylm.errors import TinyLMError
from tinylm.plotting import save_png
from tinylm.sweep_report import Job, markdown, read_job, split_overrides, table_rows

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = ROOT / "train.py"
CURVES_NAME, REPORT_NAME = "curves.png", "REPORT.md"


@dataclass
class Comparison:
    title: str
    metric: str  # the metric that decides (TensorBoard tag val/<metric>, metrics.json val_<metric>)
    variants: dict[str, list[str]]  # variant name -> its train.py overrides
    note: str


def comparisons(steps: int, bpe_vocab_size: int) -> dict[str, Comparison]:
    """Every comparison and its variants, for a budget of ``steps`` training steps."""
    warmup = max(1, steps // 10)
    schedule = [f"optim.warmup_steps={warmup}", f"optim.decay_steps={steps}"]
    clip = ["trainer.gradient_clip_val=1.0"]
    return {
        "positions": Comparison(
            "Position encodings", "loss",
            {p: [f"model.pos_encoding={p}"] for p in ("learned", "sinusoidal", "rope")},
            "learned: a trained (block_size, C) table; sinusoidal: fixed sin/cos added to the embeddings; "
            "rope: queries and keys rotated by their position inside attention. Only learned has position "
            "parameters.",
        ),
        "tokenizers": Comparison(
            "Tokenizers", "bpc",
            {"char": ["data.tokenizer=char"], "byte": ["data.tokenizer=byte"],
             "bpe": ["data.tokenizer=bpe", f"data.bpe_vocab_size={bpe_vocab_size}"]},
            "Per-token losses of different vocabularies are not comparable: compare val_bpc, the bits per "
            "character of the same validation text (validation bits / validation characters). Every run "
            "sees the same number of tokens per step; a BPE or char token covers more text than a byte.",
        ),
        "rnn": Comparison(
            "Transformer vs recurrent baseline", "loss",
            {"gpt": ["model=gpt"], "lstm": ["model=lstm"], "gru": ["model=lstm", "model.arch=gru"]},
            "Same LightningModule, data and callbacks; tokens_per_second is training throughput on this "
            "machine (validation and checkpoints included in the wall time).",
        ),
        "tricks": Comparison(
            "Training tricks", "loss",
            {"constant_lr": [], "warmup_cosine": schedule, "grad_clip": clip, "warmup_cosine_clip": schedule + clip},
            f"constant_lr is the reference schedule; warmup_cosine: linear warmup for {warmup} steps, then cosine "
            f"decay to 0.1 x lr at step {steps}; grad_clip: gradient norm clipped at 1.0.",
        ),
    }


# --------------------------------------------------------------------------------------------
# Running (or reusing) the variants


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The overrides a run folder was trained with (its .hydra/overrides.yaml), None if absent."""
    path = run_dir / ".hydra" / "overrides.yaml"
    return [str(o) for o in OmegaConf.load(path)] if path.exists() else None


def finished(run_dir: Path, overrides: list[str]) -> bool:
    """True when ``run_dir`` holds a completed run with exactly these overrides.

    A folder with a run of other settings, or that is no run folder, is refused rather than
    silently mixed into the report (or deleted).
    """
    if not run_dir.exists():
        return False
    saved = saved_overrides(run_dir)
    if saved is None:
        raise TinyLMError(f"{run_dir} is not a run folder (no .hydra/overrides.yaml): move it, or use another --out")
    if saved != overrides:
        raise TinyLMError(
            f"{run_dir} holds a run with other settings ({' '.join(saved)}): "
            "pass --rerun to replace it, or another --out"
        )
    metrics = run_dir / "metrics.json"
    return metrics.exists() and not json.loads(metrics.read_text()).get("interrupted")


def without_paths(config: dict) -> dict:
    return {key: value for key, value in config.items() if key != "paths"}  # where a run is, not what


def training_config(overrides: list[str]) -> dict:
    """The train config these overrides compose to, as a run saves it (.hydra/config.yaml)."""
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return without_paths(OmegaConf.to_container(compose("train", overrides=overrides)))
    except HydraException as e:
        reason = " ".join(str(e).split())
        raise TinyLMError(f"the train.py overrides do not fit the config ({reason}): check their names") from None


def same_run_elsewhere(out: Path, config: dict) -> Path | None:
    """A finished run in any comparison folder under ``out`` trained with exactly ``config``."""
    for candidate in sorted(out.glob("*/*/.hydra/config.yaml")):
        run_dir = candidate.parent.parent
        done = (run_dir / "metrics.json").exists() and not json.loads((run_dir / "metrics.json").read_text()).get(
            "interrupted")
        if done and without_paths(OmegaConf.to_container(OmegaConf.load(candidate))) == config:
            return run_dir
    return None


def copy_run(source: Path, run_dir: Path, overrides: list[str]) -> None:
    """Reuse ``source`` (same config) as ``run_dir``, recording the overrides this variant asked for."""
    shutil.copytree(source, run_dir)
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")


def train(run_dir: Path, overrides: list[str]) -> str | None:
    """Run ``train.py`` into ``run_dir``; None on success, else its error line."""
    cmd = [sys.executable, str(TRAIN_SCRIPT), f"hydra.run.dir={run_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [f"exit code {proc.returncode}"])[-1]


def run_comparison(name: str, comparison: Comparison, out: Path, common: list[str], rerun: bool) -> list[str]:
    """Train every variant not already done; return the error lines of the ones that failed."""
    failures = []
    for variant, own in comparison.variants.items():
        run_dir = out / name / variant
        overrides = [*common, *own]
        if rerun and run_dir.exists():
            shutil.rmtree(run_dir)
        if finished(run_dir, overrides):
            print(f"{name}/{variant}: already run, reading it", flush=True)
            continue
        if run_dir.exists():  # an unfinished run of the same settings: start it afresh, no mixed logs
            shutil.rmtree(run_dir)
        twin = same_run_elsewhere(out, training_config(overrides))
        if twin is not None:
            copy_run(twin, run_dir, overrides)
            print(f"{name}/{variant}: the same training config as {twin.parent.name}/{twin.name}, copied", flush=True)
            continue
        print(f"{name}/{variant}: training ({' '.join(own) or 'reference settings'})", flush=True)
        error = train(run_dir, overrides)
        if error:
            print(f"{name}/{variant}: failed: {error}", file=sys.stderr, flush=True)
            failures.append(f"{name}/{variant}: {error}")
    return failures


# --------------------------------------------------------------------------------------------
# Reading the results


def scalar_curve(run_dir: Path, tag: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one scalar from a run's TensorBoard event files; empty if not logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder = run_dir / "tensorboard"
    if not folder.is_dir():
        return [], []
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    if tag not in events.Tags().get("scalars", []):
        return [], []
    points = sorted({e.step: e.value for e in events.Scalars(tag)}.items())  # a resumed run may repeat a step
    return [s for s, _ in points], [v for _, v in points]


def curves_figure(runs: dict[str, Path], tag: str, title: str) -> Figure | None:
    """The ``tag`` curve of every run on one chart; None when no run logged it."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    drawn = 0
    for variant, run_dir in runs.items():
        steps, values = scalar_curve(run_dir, tag)
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, label=f"{variant} ({values[-1]:.3f})")
            drawn += 1
    if not drawn:
        return None
    ax.set_xlabel("training step")
    ax.set_ylabel("validation bits per character" if tag == "val/bpc" else "validation loss (nats/token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(title="variant (last value)")
    return fig


def budget(run_dir: Path) -> str:
    """One line stating what every variant of a comparison was trained with, from a run's config."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return ""
    cfg = OmegaConf.load(path)
    data = cfg.data.path or "the embedded Chinese corpus"
    return (f"Budget per run: {cfg.trainer.max_steps} steps x batch {cfg.data.batch_size} x block "
            f"{cfg.model.block_size} tokens, lr {cfg.optim.lr:g}, seed {cfg.seed}; data: {data}.")


def best_line(jobs: list[Job], metric: str) -> str:
    key = f"val_{metric}"
    done = [j for j in jobs if j.metrics and math.isfinite(j.metrics.get(key, math.nan))]
    if not done:
        return ""
    best = min(done, key=lambda j: j.metrics[key])
    return f"Lowest {key}: **{best.name}** ({best.metrics[key]:.4f})."


def comparison_section(name: str, comparison: Comparison, out: Path) -> str:
    """The Markdown section of one comparison (and its curves.png), from its run folders."""
    runs = {v: out / name / v for v in comparison.variants if (out / name / v).is_dir()}
    if not runs:
        return ""
    jobs = [read_job(run_dir) for run_dir in runs.values()]
    swept, common = split_overrides(jobs)
    # variants in their own order, not ranked by val_loss (which tokenizers cannot be compared by)
    rows = sorted(table_rows(jobs, swept), key=lambda row: list(runs).index(row["job"]))
    rows = [{"variant": row["job"], **{k: v for k, v in row.items() if k not in ("rank", "job")}} for row in rows]
    table = markdown(rows, common, name).split("\n", 2)[2]  # drop the sweep title line
    lines = [f"## {comparison.title} (`{name}`)", "", comparison.note, "", budget(next(iter(runs.values()))),
             best_line(jobs, comparison.metric), "", table]
    fig = curves_figure(runs, f"val/{comparison.metric}", f"{comparison.title}: validation {comparison.metric}")
    if fig is not None:
        save_png(fig, out / name / CURVES_NAME)
        lines += [f"![{name} curves]({name}/{CURVES_NAME})", ""]
    return "\n".join(lines)


def write_report(out: Path, all_comparisons: dict[str, Comparison]) -> Path:
    """``<out>/REPORT.md`` with a section for every comparison found in ``out``."""
    sections = [s for name, c in all_comparisons.items() if (s := comparison_section(name, c, out))]
    if not sections:
        raise TinyLMError(f"no comparison runs in {out}: run e.g. `python -m tinylm.compare positions --out {out}`")
    path = out / REPORT_NAME
    path.write_text("# Comparisons\n\n" + "\n".join(sections), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Command line


def data_override(data: str | None, max_chars: int | None, out: Path) -> list[str]:
    """``data.path=...`` for the runs: the file itself, or a copy of its first ``max_chars`` characters."""
    if data is None and max_chars is None:
        return []
    if data is None:
        raise TinyLMError("--max-chars needs --data: the file to take the first characters of")
    path = Path(data).resolve()
    if max_chars is not None:
        text = read_text(path)[:max_chars]
        head = out / f"{path.stem}.first{max_chars}{path.suffix}"
        out.mkdir(parents=True, exist_ok=True)
        if not head.exists() or head.read_text(encoding="utf-8") != text:
            head.write_text(text, encoding="utf-8")
        path = head
    elif not path.is_file():
        raise TinyLMError(f"--data {data}: no such file (give a UTF-8 text file)")
    return [f"data.path={path}"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tinylm.compare",
        description="Train the variants of a comparison on the same data and budget, then write "
                    "REPORT.md (tables) and curves.png (validation curves) into --out.",
    )
    parser.add_argument("which", choices=["positions", "tokenizers", "rnn", "tricks", "all"])
    parser.add_argument("--steps", type=int, default=500, help="training steps per run (default 500)")
    parser.add_argument("--data", help="UTF-8 text file (default: the embedded Chinese corpus)")
    parser.add_argument("--max-chars", type=int, help="train on the first N characters of --data only")
    parser.add_argument("--bpe-vocab-size", type=int, default=512, help="BPE vocabulary (default 512)")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "compare"), help="report folder")
    parser.add_argument("--rerun", action="store_true", help="train again even where a run exists")
    parser.add_argument("overrides", nargs="*", help="train.py overrides for every run, e.g. model.n_embd=32")
    return parser.parse_intermixed_args(argv)  # overrides may come before or after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    try:
        if args.steps < 1 or (args.max_chars is not None and args.max_chars < 1):
            raise TinyLMError("--steps and --max-chars must be positive integers")
        if not TRAIN_SCRIPT.is_file():
            raise TinyLMError(f"{TRAIN_SCRIPT} not found: run from a tinylm checkout (pip install -e .)")
        common = [
            f"trainer.max_steps={args.steps}", f"trainer.val_check_interval={max(1, args.steps // 10)}",
            "trainer.enable_progress_bar=false", "callbacks=minimal",
            *data_override(args.data, args.max_chars, out), *args.overrides,
        ]
        all_comparisons = comparisons(args.steps, args.bpe_vocab_size)
        chosen = list(all_comparisons) if args.which == "all" else [args.which]
        failures = []
        for name in chosen:
            failures += run_comparison(name, all_comparisons[name], out, common, args.rerun)
        report = write_report(out, all_comparisons)
    except TinyLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to continue (finished runs are kept)", file=sys.stderr)
        return 130
    print(report.read_text(encoding="utf-8"))
    print(f"wrote {report}")
    if failures:
        print(f"error: {len(failures)} run(s) failed: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
