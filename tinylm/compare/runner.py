"""Training the variants of a comparison, one ``tinylm train`` process each, reusing every finished run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from tinylm.cli import TRAIN_PATH_KEYS, quote_values
from tinylm.compare.spec import Comparison
from tinylm.errors import TinyLMError
from tinylm.precheck import composed
from tinylm.run_folder import CONF_DIR, HYDRA_DIR, METRICS, use_project_root
from tinylm.runs.folder import original_overrides

TRAIN_COMMAND = [sys.executable, "-m", "tinylm", "train"]  # as train.py runs it, in a checkout or installed


def finished(run_dir: Path, overrides: list[str]) -> bool:
    """True when ``run_dir`` holds a completed run with exactly these overrides.

    A folder with a run of other settings, or that is no run folder, is refused rather than
    silently mixed into the report (or deleted).
    """
    if not run_dir.exists():
        return False
    saved = original_overrides(run_dir)
    if saved is None:
        raise TinyLMError(f"{run_dir} is not a run folder (no {HYDRA_DIR}/overrides.yaml): move it, "
                          "or use another --out")
    if saved != overrides:
        raise TinyLMError(
            f"{run_dir} holds a run with other settings ({' '.join(saved)}): "
            "pass --rerun to replace it, or another --out"
        )
    metrics = run_dir / METRICS
    return metrics.exists() and not json.loads(metrics.read_text()).get("interrupted")


def without_paths(config: dict) -> dict:
    return {key: value for key, value in config.items() if key != "paths"}  # where a run is, not what


def training_config(overrides: list[str]) -> dict:
    """The train config these overrides compose to, as a run records it (its config.yaml); one line for an
    override train.py would refuse (``tinylm.precheck``: a misspelled key, a config a group does not have)."""
    try:
        cfg = composed("train", ["tinylm train", *overrides], CONF_DIR)
    except TinyLMError as e:
        raise TinyLMError(f"the train.py overrides do not fit the config: {e}") from None
    return without_paths({key: value for key, value in OmegaConf.to_container(cfg).items() if key != "hydra"})


def same_run_elsewhere(out: Path, config: dict) -> Path | None:
    """A finished run in any comparison folder under ``out`` trained with exactly ``config``."""
    for candidate in sorted(out.glob(f"*/*/{HYDRA_DIR}/config.yaml")):
        run_dir = candidate.parent.parent
        done = (run_dir / METRICS).exists() and not json.loads((run_dir / METRICS).read_text()).get(
            "interrupted")
        if done and without_paths(OmegaConf.to_container(OmegaConf.load(candidate))) == config:
            return run_dir
    return None


def copy_run(source: Path, run_dir: Path, overrides: list[str]) -> None:
    """Reuse ``source`` (same config) as ``run_dir``, recording the overrides this variant asked for."""
    shutil.copytree(source, run_dir)
    OmegaConf.save(OmegaConf.create(overrides), run_dir / HYDRA_DIR / "overrides.yaml")


def train(run_dir: Path, overrides: list[str]) -> str | None:
    """Run ``train.py`` into ``run_dir``; None on success, else its error line."""
    cmd = [*TRAIN_COMMAND, f"hydra.run.dir={run_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=use_project_root(), capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [f"exit code {proc.returncode}"])[-1]


def run_variant(name: str, variant: str, run_dir: Path, overrides: list[str], out: Path, rerun: bool,
                what: str) -> str | None:
    """Train one variant into ``run_dir`` unless done (here or, with the same config, elsewhere under ``out``);
    its error line if it failed."""
    if rerun and run_dir.exists():
        shutil.rmtree(run_dir)
    if finished(run_dir, overrides):
        print(f"{name}/{variant}: already run, reading it", flush=True)
        return None
    if run_dir.exists():  # an unfinished run of the same settings: start it afresh, no mixed logs
        shutil.rmtree(run_dir)
    twin = same_run_elsewhere(out, training_config(overrides))
    if twin is not None:
        copy_run(twin, run_dir, overrides)
        print(f"{name}/{variant}: the same training config as {twin.parent.name}/{twin.name}, copied", flush=True)
        return None
    print(f"{name}/{variant}: training ({what or 'reference settings'})", flush=True)
    error = train(run_dir, overrides)
    if error:
        print(f"{name}/{variant}: failed: {error}", file=sys.stderr, flush=True)
        return f"{name}/{variant}: {error}"
    return None


def seed_dirs(out: Path, name: str, variant: str, seeds: int) -> list[Path]:
    """The run folders of a variant: ``<out>/<name>/<variant>``, or one ``seed<k>`` folder in it per seed."""
    base = out / name / variant
    return [base] if seeds == 1 else [base / f"seed{k}" for k in range(1, seeds + 1)]


def run_comparison(name: str, comparison: Comparison, out: Path, common: list[str], rerun: bool) -> list[str]:
    """Train every variant not already done (each seed of it), then the combination where the comparison
    asks for one; return the error lines of the runs that failed."""
    failures = []
    variants = dict(comparison.variants)
    for variant, own in variants.items():
        failures += train_seeds(name, variant, own, comparison.seeds, out, common, rerun)
    if comparison.combine and not failures:
        combined = combination(name, comparison, out)
        failures += train_seeds(name, "combined", combined, comparison.seeds, out, common, rerun)
    return failures


def train_seeds(name: str, variant: str, own: list[str], seeds: int, out: Path, common: list[str],
                rerun: bool) -> list[str]:
    failures = []
    for k, run_dir in enumerate(seed_dirs(out, name, variant, seeds), start=1):
        seed = [f"seed={k}"] if seeds > 1 else []
        overrides = quote_values([*common, *own, *seed], TRAIN_PATH_KEYS)  # as train.py records them
        label = variant if seeds == 1 else f"{variant}/seed{k}"
        error = run_variant(name, label, run_dir, overrides, out, rerun, " ".join([*own, *seed]))
        failures += [error] if error else []
    return failures


def combination(name: str, comparison: Comparison, out: Path) -> list[str]:
    """The overrides of every variant whose mean evaluate.py loss beat the first variant's (the baseline),
    better ones last (so of two that set the same key, the better wins)."""
    from tinylm.compare.scores import evaluate_run

    means = {}
    for variant in comparison.variants:
        losses = [evaluate_run(r)["loss"] for r in seed_dirs(out, name, variant, comparison.seeds)]
        means[variant] = sum(losses) / len(losses)
    baseline = means[next(iter(comparison.variants))]
    helping = sorted((v for v, m in means.items() if m < baseline), key=lambda v: -means[v])
    print(f"{name}/combined: {' + '.join(helping) or 'nothing beat the baseline: the baseline again'}", flush=True)
    return [o for v in helping for o in comparison.variants[v]]
